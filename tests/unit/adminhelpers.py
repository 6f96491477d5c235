"""
Admin handlers driven in process: a broker of fake services whose log manager is built
from its config as the daemon builds it, a request passed through the codec both ways
(L{call}, L{req}), and the admin requests several test modules send.
"""

from __future__ import annotations

import io
import uuid
from dataclasses import dataclass

from kio.serial import entity_reader, entity_writer

from kafkatwist.config import BrokerConfig
from kafkatwist.log import MemoryLogManager
from kafkatwist.plugins import admin, admin_configs
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.entities import make, nested
from tests.fakeservices import FakeServices


NODE = 1
ZERO = uuid.UUID(int=0)


@dataclass
class FakeContext:
    apiKey: int
    apiVersion: int
    correlationId: int = 1
    clientId: str = "test"
    listenerName: str = "PLAINTEXT"
    principal: str = "User:ANONYMOUS"
    securityProtocol: str = "PLAINTEXT"
    clientAddress: tuple = ("127.0.0.1", 50000)
    connectionId: str = "127.0.0.1:9092-127.0.0.1:50000-0"
    clock: object = None


class FakePurgatory:
    def __init__(self):
        self.checked = []

    def checkAndComplete(self, key):
        self.checked.append(key)
        return 0


def makeBroker(path=None, **settings):
    """
    A broker whose log manager is built from its config as the daemon
    builds it.
    """
    from kafkatwist.service import brokerLogDefaults

    from kafkatwist.config.dynamic import DynamicBrokerConfig
    from kafkatwist.server.reconfigure import LogDefaults

    config = BrokerConfig({"node.id": str(NODE), **{k: str(v) for k, v in settings.items()}})
    broker = FakeServices(
        config,
        logManager=MemoryLogManager(brokerLogDefaults(config)),
        fetchPurgatory=FakePurgatory(),
        dynamicConfig=DynamicBrokerConfig(config, path),
    )
    broker.dynamicConfig.load()
    broker.logManager.setBrokerDefaults(brokerLogDefaults(broker.dynamicConfig.current))
    broker.dynamicConfig.addReconfigurable(LogDefaults(broker))
    return broker


def roundTrip(entity):
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    decoded, _ = entity_reader(type(entity))(memoryview(buffer.getvalue()), 0)
    return decoded


def call(handlerClass, broker, version, **values):
    """
    Build the request of C{version} from C{values} (nested entities made by
    the caller through L{req}), pass it through the codec, handle it, and
    return the response as a client would decode it.
    """
    handler = handlerClass(broker)
    assert handler.minVersion <= version <= handler.maxVersion
    request = roundTrip(make(requestType(handler.apiKey, version), **values))
    response = handler.handle(FakeContext(handler.apiKey, version), request)
    assert type(response) is responseType(handler.apiKey, version)
    return roundTrip(response)


def req(apiKey, version, entity, /, **values):
    """
    A nested request entity, e.g. C{req(19, 7, "CreatableTopic", ...)}.
    """
    return make(nested(requestType(apiKey, version), entity), **values)


def createTopic(broker, name, partitions=1, version=7, configs=None, rf=1, validateOnly=False,
                assignments=()):
    topic = req(
        19, version, "CreatableTopic",
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        assignments=tuple(assignments),
        configs=tuple(
            req(19, version, "CreatableTopicConfig", name=k, value=v)
            for k, v in (configs or {}).items()
        ),
    )
    response = call(admin.CreateTopicsHandler, broker, version, topics=(topic,),
                    validate_only=validateOnly)
    [result] = response.topics
    return result


def describe(broker, resources, version=4, synonyms=False, documentation=False):
    Resource = nested(requestType(32, version), "DescribeConfigsResource")
    return call(
        admin_configs.DescribeConfigsHandler, broker, version,
        resources=tuple(
            Resource(resource_type=t, resource_name=n, configuration_keys=keys)
            for t, n, keys in resources),
        include_synonyms=synonyms, include_documentation=documentation,
    ).results


def alter(broker, resources, version=1, validateOnly=False):
    Resource = nested(requestType(44, version), "AlterConfigsResource")
    Config = nested(requestType(44, version), "AlterableConfig")
    return call(
        admin_configs.IncrementalAlterConfigsHandler, broker, version,
        resources=tuple(
            Resource(resource_type=t, resource_name=n, configs=tuple(
                Config(name=k, config_operation=op, value=v) for k, op, v in changes))
            for t, n, changes in resources),
        validate_only=validateOnly,
    ).responses


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def metadata(broker, handler, names, version=12):
    from kio.serial import entity_reader

    from kafkatwist.protocol.apis import METADATA
    from kafkatwist.protocol.entities import make

    topics = None if names is None else tuple(
        req(METADATA, version, "MetadataRequestTopic", name=n, topic_id=None) for n in names
    )
    request = roundTrip(make(
        requestType(METADATA, version), topics=topics, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    ))
    answer = handler.handleOnNetworkThread(FakeContext(METADATA, version), request)
    decoded, _ = entity_reader(responseType(METADATA, version))(memoryview(b"".join(answer.chunks)), 0)
    return {t.name: (t.error_code, len(t.partitions)) for t in decoded.topics}
