"""
A small blocking Kafka client built on kafkatwist's own protocol code, for
the Spark connector and for tests.  See L{KafkaWireClient}.
"""

from kafkatwist.client.client import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    BrokerMetadata,
    ClusterMetadata,
    FetchResult,
    KafkaWireClient,
    RawFetchResult,
    TopicMetadata,
)
from kafkatwist.client.connection import (
    BrokerConnection,
    KafkaConnectionError,
    TLSSettings,
    TLSVerificationError,
)

__all__ = [
    "BrokerConnection",
    "BrokerMetadata",
    "ClusterMetadata",
    "EARLIEST",
    "FetchResult",
    "KafkaConnectionError",
    "KafkaWireClient",
    "LATEST",
    "MAX_TIMESTAMP",
    "RawFetchResult",
    "TLSSettings",
    "TLSVerificationError",
    "TopicMetadata",
]
