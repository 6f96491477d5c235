"""
Configuration admin APIs: DescribeConfigs, IncrementalAlterConfigs and the
legacy AlterConfigs, over topic and broker resources.

Where values come from, as DescribeConfigs reports it (C{config_source}),
highest precedence first:

  - C{DYNAMIC_TOPIC_CONFIG}: a topic override (CreateTopics configs,
    IncrementalAlterConfigs);
  - C{DYNAMIC_BROKER_CONFIG}: a dynamic config of this broker (a BROKER
    resource named by its id);
  - C{DYNAMIC_DEFAULT_BROKER_CONFIG}: a cluster-wide dynamic default (the
    BROKER resource C{""});
  - C{STATIC_BROKER_CONFIG}: set in C{server.properties} or with
    C{--override} (the broker's C{BrokerConfig.explicit} keys);
  - C{DEFAULT_CONFIG}: none of these.

Altering a BROKER resource goes to L{kafkatwist.config.dynamic}: the keys
the registry marks dynamic are stored and applied at once, the others are
refused with INVALID_REQUEST and Kafka's "Cannot update these configs
dynamically".

The topic entry's source is worked out here from the broker's explicit
keys, not taken from the log manager: the daemon hands the log manager every
C{log.*} value (set or not), so the log alone cannot tell a value set in
C{server.properties} from Kafka's default.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import dropwhile

from kafkatwist.config import KEYS as BROKER_KEYS
from kafkatwist.config import TOPIC_KEYS, keySpec, listenerKey
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.log.config import (
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    LogConfig,
    applyConfigChanges,
    checkCombination,
    describeTopicConfig,
    unknownTopicConfig,
)
from kafkatwist.log.topics import validateTopicName
from kafkatwist.plugins.clusterwrites import ClusterWrites
from kafkatwist.protocol.apis import (
    ALTER_CONFIGS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    responseType,
)
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType

__all__ = [
    "ALTER_CONFIGS",
    "BROKER",
    "BROKER_LOGGER",
    "DESCRIBE_CONFIGS",
    "INCREMENTAL_ALTER_CONFIGS",
    "TOPIC",
    "ConfigDescription",
    "describeBroker",
    "describeTopic",
    "describeTopicEntries",
]


#: resource types (Kafka's C{ConfigResource.Type})
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
_RESOURCE_TYPE_NAMES = {
    TOPIC: "TOPIC",
    BROKER: "BROKER",
    BROKER_LOGGER: "BROKER_LOGGER",
    16: "CLIENT_METRICS",
    32: "GROUP",
}

#: IncrementalAlterConfigs' config_operation ids
_OPERATIONS = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}

#: Kafka's broker synonym groups, highest precedence first
#: (C{DynamicBrokerConfig.brokerConfigSynonyms}): the registry's topic keys
#: inheriting from more than one broker key.
_GROUP_OF = {
    name: group
    for group in (
        tuple(name for name, _ in topicKey.synonyms) for topicKey in TOPIC_KEYS.values()
    )
    if len(group) > 1
    for name in group
}


@dataclass(frozen=True, slots=True)
class ConfigDescription:
    """
    One config entry as DescribeConfigs (and CreateTopics v5+) reports it.

    @ivar synonyms: C{(name, value, source)} in precedence order; the first
        one is where the value comes from.
    """

    name: str
    value: str | None
    source: int
    configType: int
    readOnly: bool
    isSensitive: bool
    documentation: str | None
    synonyms: tuple[tuple[str, str | None, int], ...] = field(default=())


def _layers(broker) -> list:
    """
    Where broker values come from, highest precedence first: the broker's
    L{kafkatwist.config.dynamic.DynamicBrokerConfig} layers, or for a broker
    without one its static settings and the registry's defaults.
    """
    dynamic = broker.dynamicConfig
    if dynamic is not None:
        return dynamic.layers()
    config = broker.config
    explicit = frozenset(getattr(config, "explicit", ())) if config is not None else frozenset()
    raw = dict(getattr(config, "raw", {})) if config is not None else {}
    defaults = {name: key.default for name, key in BROKER_KEYS.items() if key.default is not None}
    return [
        ({name: raw[name] for name in explicit if name in raw}, ConfigSource.STATIC_BROKER_CONFIG),
        (defaults, ConfigSource.DEFAULT_CONFIG),
    ]


def _synonyms(layers, group, sensitive: bool = False) -> list[tuple[str, str | None, int]]:
    """
    Kafka's synonym list of a broker key's group: each layer in precedence
    order, the group's keys finest first within it.
    """
    return [
        (name, None if sensitive else layer[name], int(source))
        for layer, source in layers
        for name in group
        if name in layer
    ]


def describeTopic(broker, name: str) -> list[ConfigDescription]:
    """
    Every config of topic C{name}, effective values with their sources and
    synonyms.

    Synonyms list the topic override, then each broker key that would supply
    the value (finest first) per source: dynamic per broker, dynamic
    cluster default, static, default.  Kafka drops the coarser broker
    synonyms (C{log.retention.hours}) from a topic entry, so it reports
    C{retention.ms} as DEFAULT_CONFIG even when the broker sets
    C{log.retention.hours}; here that case says where the value does come
    from.

    In a cluster the topic's overrides are ZooKeeper's (this broker may
    hold no replica of it).

    @raise KafkaError: UNKNOWN_TOPIC_OR_PARTITION.
    """
    cluster = broker.cluster
    if cluster is not None:
        image = cluster.image
        if name not in image.topics or name in image.deleting:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        return describeTopicEntries(
            broker, describeTopicConfig(image.configs.get(name, {}), broker.logManager.brokerDefaults)
        )
    return describeTopicEntries(broker, broker.logManager.describeTopicConfig(name))


def describeTopicEntries(broker, entries) -> list[ConfigDescription]:
    """
    L{describeTopic} from the log's view of a topic's configs (key ->
    L{kafkatwist.log.ConfigEntry}), also for a topic not created yet.
    """
    layers = _layers(broker)
    result = []
    for key in sorted(entries):
        entry = entries[key]
        definition = TOPIC_CONFIGS.get(key)
        brokerKey = definition.brokerKey if definition else entry.brokerKey
        group = _GROUP_OF.get(brokerKey, (brokerKey,))
        synonyms = []
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG:
            synonyms.append((key, entry.value, int(ConfigSource.DYNAMIC_TOPIC_CONFIG)))
        synonyms += _synonyms(layers, group)
        source = synonyms[0][2] if synonyms else int(ConfigSource.DEFAULT_CONFIG)
        result.append(
            ConfigDescription(
                name=key,
                value=entry.value,
                source=source,
                configType=int(entry.configType),
                readOnly=False,
                isSensitive=False,
                documentation=TOPIC_KEYS[key].doc if key in TOPIC_KEYS else None,
                synonyms=tuple(synonyms),
            )
        )
    return result


def describeBroker(broker, perBroker: bool = True) -> list[ConfigDescription]:
    """
    The broker configs as Kafka describes a broker resource, sensitive
    values hidden, dynamic keys writable: for this broker's id every key
    kafkatwist knows (and the listeners' own SSL keys that are set); for
    the cluster default (C{""}) only the dynamic defaults set.

    Synonyms follow Kafka's rule exactly: the synonym group per source
    (dynamic per broker, dynamic default, static, default), dropping those
    before the first entry for the key itself (so C{log.retention.hours}
    shows only its own entries).
    """
    layers = _layers(broker)
    if perBroker:
        names = set(BROKER_KEYS)
        names.update(name for layer, _ in layers for name in layer if listenerKey(name))
    else:
        layers = [(l, s) for l, s in layers if s != ConfigSource.DYNAMIC_BROKER_CONFIG]
        names = {
            name
            for layer, source in layers
            if source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            for name in layer
        }
    result = []
    for name in sorted(names):
        spec = keySpec(name)
        sensitive = spec is not None and spec.sensitive
        group = _GROUP_OF.get(name, (name,))
        synonyms = tuple(
            dropwhile(lambda item: item[0] != name, _synonyms(layers, group, sensitive))
        )
        own = [(layer[name], source) for layer, source in layers if name in layer]
        text, source = own[0] if own else (None, ConfigSource.DEFAULT_CONFIG)
        result.append(
            ConfigDescription(
                name=name,
                value=None if sensitive else text,
                source=int(source),
                configType=int(spec.type if spec is not None else ConfigType.STRING),
                readOnly=spec is None or not spec.dynamic,
                isSensitive=sensitive,
                documentation=spec.doc if spec is not None else None,
                synonyms=synonyms,
            )
        )
    return result


def _resourceTypeName(resourceType: int) -> str:
    return _RESOURCE_TYPE_NAMES.get(resourceType, str(resourceType))


def checkBrokerResource(broker, resourceName: str) -> bool:
    """
    Kafka's rule for a broker resource's name: empty means the cluster-wide
    default configs, otherwise it must be this broker's id.

    @return: C{True} for this broker, C{False} for the cluster defaults.
    @raise KafkaError: INVALID_REQUEST for anything else.
    """
    if not resourceName:
        return False
    try:
        nodeId = int(resourceName)
    except ValueError:
        raise KafkaError(
            ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resourceName}"
        ) from None
    if nodeId != broker.nodeId:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {broker.nodeId} or empty string, "
            f"but received {resourceName}",
        )
    return True


def _unsupportedType(resourceType: int) -> KafkaError:
    if resourceType == BROKER_LOGGER:
        why = "kafkatwist has no dynamic log levels"
    else:
        why = "kafkatwist configures topics and brokers only"
    return KafkaError(
        ErrorCode.invalid_request,
        f"Unsupported resource type {_resourceTypeName(resourceType)}: {why}",
    )


#: what each config resource type is authorized on, and the code of a refusal
_CONFIG_AUTHORIZATION = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
}


def checkConfigAccess(handler: Handler, context, resource, operation: AclOperation) -> None:
    """
    Kafka's rule: DESCRIBE_CONFIGS or ALTER_CONFIGS on the topic for a topic
    resource, on the cluster for a broker one.

    @raise KafkaError: TOPIC_ or CLUSTER_AUTHORIZATION_FAILED.
    """
    rule = _CONFIG_AUTHORIZATION.get(resource.resource_type)
    if rule is None:
        return
    resourceType, code, message = rule
    name = resource.resource_name if resourceType == ResourceType.TOPIC else CLUSTER_NAME
    if not handler.allowed(context, operation, resourceType, name):
        raise KafkaError(code, message)


class DescribeConfigsHandler(Handler):
    """
    DescribeConfigs v0-4: topic and broker resources; v0 flags defaults
    (is_default) where v1+ name each value's source, synonyms from v1 when
    asked, config types from v3, documentation from v3 when asked.
    """

    apiKey = DESCRIBE_CONFIGS
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        cls = responseType(DESCRIBE_CONFIGS, context.apiVersion)
        Result = nested(cls, "DescribeConfigsResult")
        Entry = nested(cls, "DescribeConfigsResourceResult")
        includeSynonyms = bool(getattr(request, "include_synonyms", False))
        # v0 has no synonyms (nor their schema).
        Synonym = nested(cls, "DescribeConfigsSynonym") if includeSynonyms else None
        includeDocs = bool(getattr(request, "include_documentation", False))
        results = []
        for resource in request.resources:
            try:
                checkConfigAccess(self, context, resource, AclOperation.DESCRIBE_CONFIGS)
                described = self._describe(resource)
            except KafkaError as e:
                results.append(
                    make(
                        Result,
                        error_code=e.code,
                        error_message=e.message or e.code.name,
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                        configs=(),
                    )
                )
                continue
            wanted = resource.configuration_keys
            if wanted:
                # null or empty: everything (Kafka's ConfigHelper does the same)
                keys = set(wanted)
                described = [d for d in described if d.name in keys]
            configs = tuple(
                make(
                    Entry,
                    name=d.name,
                    value=d.value,
                    read_only=d.readOnly,
                    is_default=d.source == ConfigSource.DEFAULT_CONFIG,
                    config_source=d.source,
                    is_sensitive=d.isSensitive,
                    synonyms=tuple(
                        Synonym(name=n, value=v, source=s) for n, v, s in d.synonyms
                    )
                    if includeSynonyms
                    else (),
                    config_type=d.configType,
                    documentation=d.documentation if includeDocs else None,
                )
                for d in described
            )
            results.append(
                make(
                    Result,
                    error_code=ErrorCode.none,
                    error_message=None,
                    resource_type=resource.resource_type,
                    resource_name=resource.resource_name,
                    configs=configs,
                )
            )
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))

    def _describe(self, resource) -> list[ConfigDescription]:
        resourceType, name = resource.resource_type, resource.resource_name
        if resourceType == TOPIC:
            validateTopicName(name)
            return describeTopic(self.broker, name)
        if resourceType == BROKER:
            return describeBroker(self.broker, checkBrokerResource(self.broker, name))
        raise _unsupportedType(resourceType)


class _AlterConfigsBase(Handler):
    """
    What both alter APIs share: per-resource errors, broker resources
    refused, topic changes through L{ILogManager.alterTopicConfigs}.
    """

    def handle(self, context, request):
        cls = responseType(self.apiKey, context.apiVersion)
        Response = nested(cls, "AlterConfigsResourceResponse")
        validateOnly = bool(request.validate_only)
        responses = []
        writes = ClusterWrites(self.broker, context)

        def answer(resource, error, slot=None):
            code, message = ErrorCode.none, None
            if error is not None:
                code, message = error.code, error.message or error.code.name
            response = make(
                Response,
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
            if slot is None:
                responses.append(response)
            else:
                responses[slot] = response

        for resource in request.resources:
            try:
                checkConfigAccess(self, context, resource, AclOperation.ALTER_CONFIGS)
                write = self._alter(resource, validateOnly)
            except KafkaError as e:
                answer(resource, e)
                continue
            if write is not None:
                # ZooKeeper's answer goes in its place; no handler thread
                # waits for it.
                method, args = write
                writes.add(
                    method, *args,
                    then=lambda result, error, resource=resource, slot=len(responses): answer(
                        resource, error, slot
                    ),
                )
                responses.append(None)
                continue
            answer(resource, None)
        if not writes:
            return make(cls, throttle_time=NO_THROTTLE, responses=tuple(responses))
        return writes.run(lambda respondLater: make(cls, throttle_time=NO_THROTTLE, responses=tuple(responses)))

    def _alter(self, resource, validateOnly: bool):
        """
        Check and make the change; in a cluster, a topic's is a ZooKeeper
        write, returned as C{(method, args)} for the caller to make.
        """
        resourceType, name = resource.resource_type, resource.resource_name
        names = [c.name for c in resource.configs]
        if resourceType == BROKER:
            perBroker = checkBrokerResource(self.broker, name)
            if len(set(names)) != len(names):
                raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
            dynamic = self.broker.dynamicConfig

            def change(layer):
                return self._brokerLayer(dynamic.current, layer, resource.configs)

            # Kafka's code for a refused broker config is INVALID_REQUEST
            # (KAFKA-13609), whatever the reason.
            if dynamic.remote is None or validateOnly:
                dynamic.alter(perBroker, change, validateOnly=validateOnly)
                return None
            # In a cluster: written to ZooKeeper, answered once stored and
            # applied (or refused); no handler thread waits for it.
            return _storeBrokerLayer, (dynamic, perBroker, change)
        if resourceType != TOPIC:
            raise _unsupportedType(resourceType)
        if not name:
            raise KafkaError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        validateTopicName(name)
        if len(set(names)) != len(names):
            raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        changes = self._changes(name, resource.configs)
        logManager = self.broker.logManager
        cluster = self.broker.cluster
        if cluster is not None:
            return self._alterInCluster(cluster, name, changes, validateOnly)
        # Unknown topic before config errors: the more useful answer.
        logManager.describeTopicConfig(name)
        logManager.alterTopicConfigs(name, changes, validateOnly=validateOnly)
        return None

    def _alterInCluster(self, cluster, name, changes, validateOnly: bool):
        """
        A topic's overrides live in ZooKeeper's C{/config/topics/<t>}: the
        new set is checked as the log would, written there, and every broker
        hosting a replica applies it (it watches the znode).
        """
        image = cluster.image
        if name not in image.topics or name in image.deleting:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
        defaults = self.broker.logManager.brokerDefaults
        overrides = applyConfigChanges(image.configs.get(name, {}), changes, defaults)
        checkCombination(LogConfig.resolve(overrides, defaults))
        if validateOnly:
            return None
        return cluster.setTopicConfigs, (name, {k: str(v) for k, v in overrides.items()})

    def _changes(self, topic: str, configs) -> list[tuple[str, str, str | None]]:
        raise NotImplementedError

    def _brokerLayer(self, current, layer: dict[str, str], configs) -> dict[str, str]:
        """
        A broker resource's dynamic layer (key -> text) after the request.
        """
        raise NotImplementedError


class IncrementalAlterConfigsHandler(_AlterConfigsBase):
    """
    IncrementalAlterConfigs v0-1: SET, DELETE, APPEND, SUBTRACT on topic
    configs; broker configs are static and refused.
    """

    apiKey = INCREMENTAL_ALTER_CONFIGS
    minVersion = 0
    maxVersion = 1

    def _changes(self, topic, configs):
        changes = []
        nulls = []
        for config in configs:
            op = _OPERATIONS.get(config.config_operation)
            if op is None:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Unknown operation type {config.config_operation} for {config.name}",
                )
            if op != "DELETE" and config.value is None:
                nulls.append(config.name)
                continue
            definition = TOPIC_CONFIGS.get(config.name)
            if definition is None:
                raise unknownTopicConfig(config.name)
            if op in ("APPEND", "SUBTRACT") and definition.configType != ConfigType.LIST:
                # Kafka's code and words; the log itself says INVALID_REQUEST.
                raise KafkaError(
                    ErrorCode.invalid_config,
                    f"Can't {op} to key {config.name} because its type is not LIST.",
                )
            changes.append((config.name, op, config.value))
        _refuseNulls(nulls)
        return changes

    def _brokerLayer(self, current, layer, configs):
        nulls = []
        for config in configs:
            op = _OPERATIONS.get(config.config_operation)
            if op is None:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    f"Unknown operation type {config.config_operation} for {config.name}",
                )
            if op == "DELETE":
                layer.pop(config.name, None)
                continue
            if config.value is None:
                nulls.append(config.name)
                continue
            if op == "SET":
                layer[config.name] = config.value
                continue
            spec = keySpec(config.name)
            if spec is None or spec.type != ConfigType.LIST:
                raise KafkaError(
                    ErrorCode.invalid_config,
                    f"Can't {op} to key {config.name} because its type is not LIST.",
                )
            items = [item for item in (current.get(config.name) or ()) if item]
            if config.name in layer:
                items = [item.strip() for item in layer[config.name].split(",") if item.strip()]
            given = [item.strip() for item in config.value.split(",") if item.strip()]
            if op == "APPEND":
                items += [item for item in given if item not in items]
            else:
                items = [item for item in items if item not in given]
            layer[config.name] = ",".join(items)
        _refuseNulls(nulls)
        return layer


class AlterConfigsHandler(_AlterConfigsBase):
    """
    The legacy AlterConfigs v0-2 (aiokafka's C{alter_configs} uses it): the
    given configs replace the topic's overrides, every other key reverts to
    its default.
    """

    apiKey = ALTER_CONFIGS
    minVersion = 0
    maxVersion = 2

    def _brokerLayer(self, current, layer, configs):
        # The given configs are the whole layer.
        _refuseNulls([c.name for c in configs if c.value is None])
        return {c.name: c.value for c in configs}

    def _changes(self, topic, configs):
        _refuseNulls([c.name for c in configs if c.value is None])
        for config in configs:
            if config.name not in TOPIC_CONFIGS:
                raise unknownTopicConfig(config.name)
        cluster = self.broker.cluster
        if cluster is not None:
            overrides = cluster.image.configs.get(topic, {})
        else:
            current = self.broker.logManager.topics().get(topic)
            overrides = current.configs if current is not None else {}
        given = {c.name for c in configs}
        changes = [(key, "DELETE", None) for key in overrides if key not in given]
        changes += [(c.name, "SET", c.value) for c in configs]
        return changes


def _storeBrokerLayer(dynamic, perBroker: bool, change, onDone) -> None:
    """
    A cluster broker's dynamic config change as a ZooKeeper write of
    L{ClusterWrites}: C{onDone(None, error)}.
    """
    dynamic.alter(perBroker, change, onStored=lambda error: onDone(None, error))


def _refuseNulls(nulls: list[str]) -> None:
    if nulls:
        raise KafkaError(
            ErrorCode.invalid_request, f"Null value not supported for : {', '.join(nulls)}"
        )


describeConfigs = HandlerPlugin(
    "builtin.describe_configs", DESCRIBE_CONFIGS, DescribeConfigsHandler, priority=0
)
incrementalAlterConfigs = HandlerPlugin(
    "builtin.incremental_alter_configs",
    INCREMENTAL_ALTER_CONFIGS,
    IncrementalAlterConfigsHandler,
    priority=0,
)
alterConfigs = HandlerPlugin(
    "builtin.alter_configs", ALTER_CONFIGS, AlterConfigsHandler, priority=0
)
