"""
The built-in authorizer, selected by Kafka's class name
(C{authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer}).
"""

from kafkatwist.security.authorizer import STANDARD_AUTHORIZER, StandardAuthorizer
from kafkatwist.security.plugin import AuthorizerPlugin

standardAuthorizer = AuthorizerPlugin(STANDARD_AUTHORIZER, lambda broker: StandardAuthorizer.fromConfig(broker.config))
