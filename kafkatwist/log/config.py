"""
Topic-level log configuration: Kafka's keys, validation and defaults.

A topic stores only its explicit overrides (strings, as a client sent them);
every other key falls back to the broker's C{log.*} setting, and failing
that to Kafka's default.  L{LogConfig} is the typed, resolved view a partition
log reads on every append; L{describeTopicConfig} is the same resolution
with the source of each value, for DescribeConfigs.

C{cleanup.policy=compact} hands the topic to the log cleaner
(L{kafkatwist.log.cleaner}), which the C{*.compaction.lag.ms},
C{min.cleanable.dirty.ratio} and C{delete.retention.ms} keys steer.
C{compression.type} is stored and reported; the broker keeps what the
producer sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kafkatwist.config import (
    KEYS,
    TOPIC_KEYS,
    UNSUPPORTED_TOPIC_KEYS,
    ConfigError,
    ConfigSource,
    ConfigType,
    TopicKey,
)
from kafkatwist.errors import ErrorCode, KafkaError

__all__ = [
    "TOPIC_CONFIGS",
    "BrokerLogDefaults",
    "ConfigDef",
    "ConfigEntry",
    "ConfigSource",
    "ConfigType",
    "LogConfig",
    "applyConfigChanges",
    "checkCombination",
    "describeTopicConfig",
    "unknownTopicConfig",
    "validateTopicConfigs",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """
    One effective configuration value and where it came from.
    """

    name: str
    value: str
    source: ConfigSource
    configType: ConfigType
    brokerKey: str | None
    readOnly: bool = False
    isSensitive: bool = False

    @property
    def isDefault(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


def _invalid(key: str, why: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, f"{key}: {why}")


def _unknown(key: str) -> KafkaError:
    why = UNSUPPORTED_TOPIC_KEYS.get(key)
    return _invalid(key, why or "unknown topic config")


def unknownTopicConfig(key: str) -> KafkaError:
    """
    The admin APIs' answer to a topic config kafkatwist does not have:
    Kafka's words, or why a Kafka 3.x key is refused here.
    """
    why = UNSUPPORTED_TOPIC_KEYS.get(key)
    if why:
        return _invalid(key, why)
    return KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {key}")


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """
    A topic config key as the log uses it, derived from the registry's
    L{TopicKey} (L{kafkatwist.config.TOPIC_KEYS}): its broker-level
    synonym, type, Kafka's default and validator.
    """

    name: str
    brokerKey: str | None
    configType: ConfigType
    default: Any
    topicKey: TopicKey

    def parse(self, key: str, value: Any) -> Any:
        """
        Validate C{value} (text, or a typed value as the broker's settings
        hold it).

        @raise KafkaError: INVALID_CONFIG naming C{key}.
        """
        if value is None:
            raise _invalid(key, "a value is required")
        if isinstance(value, bool):
            raise _invalid(key, f"expected a {self.configType.name.lower()}, got {value!r}")
        try:
            return self.topicKey.parse(key, _text(value))
        except ConfigError as e:
            raise _invalid(key, e.why) from None


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    k.name: ConfigDef(k.name, k.synonyms[0][0] if k.synonyms else None, k.type, k.default, k)
    for k in TOPIC_KEYS.values()
}


def _brokerValue(settings: Mapping[str, Any], name: str) -> Any:
    """
    Broker key C{name} from C{settings} (text or typed), validated; its
    registry default when absent.

    @raise KafkaError: INVALID_CONFIG.
    """
    key = KEYS[name]
    value = settings.get(name)
    if value is None:
        return key.defaultValue()
    if isinstance(value, bool) and key.type != ConfigType.BOOLEAN:
        raise _invalid(name, f"expected a {key.type.name.lower()}, got {value!r}")
    try:
        return key.parse(name, _text(value))
    except ConfigError as e:
        raise _invalid(name, e.why) from None


class BrokerLogDefaults:
    """
    The broker-level half of log configuration: the C{log.*} settings a
    topic inherits, resolved through each topic key's synonyms.

    @param settings: broker key -> value (text or typed); the keys of the
        registry's topic keys and C{num.partitions},
        C{max.broker.partitions} are read, others ignored.
    @ivar values: topic key -> typed value.
    @ivar sources: topic key -> L{ConfigSource} (STATIC_BROKER_CONFIG when
        the broker set one of its synonyms, DEFAULT_CONFIG otherwise).
    @ivar numPartitions: C{num.partitions}, for CreateTopics with -1.
    @ivar maxBrokerPartitions: C{max.broker.partitions}.
    """

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        self.values: dict[str, Any] = {}
        self.sources: dict[str, ConfigSource] = {}
        for name, topicKey in TOPIC_KEYS.items():
            given = {
                synonym: _brokerValue(settings, synonym)
                for synonym, _ in topicKey.synonyms
                if settings.get(synonym) is not None
            }
            self.values[name] = topicKey.inherit(
                lambda synonym: given[synonym] if synonym in given else KEYS[synonym].defaultValue()
            )
            self.sources[name] = (
                ConfigSource.STATIC_BROKER_CONFIG if given else ConfigSource.DEFAULT_CONFIG
            )
        self.numPartitions = _brokerValue(settings, "num.partitions")
        self.maxBrokerPartitions = _brokerValue(settings, "max.broker.partitions")


def validateTopicConfigs(configs: Mapping[str, Any]) -> dict[str, str]:
    """
    Check topic overrides, each on its own (L{checkCombination} checks the
    keys that constrain each other, once broker defaults are known).

    @return: the overrides as strings (what is stored and reported).
    @raise KafkaError: INVALID_CONFIG naming the first bad key.
    """
    normalised = {}
    for key, value in configs.items():
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise _unknown(key)
        if value is None:
            raise _invalid(key, "a value is required")
        definition.parse(key, value)
        normalised[key] = _text(value).strip()
    return normalised


_OPS = {0: "SET", 1: "DELETE", 2: "APPEND", 3: "SUBTRACT"}


def applyConfigChanges(
    overrides: Mapping[str, str], changes, defaults: BrokerLogDefaults
) -> dict[str, str]:
    """
    Apply IncrementalAlterConfigs operations to a topic's overrides.

    @param changes: iterable of C{(key, op, value)}; C{op} is 'SET',
        'DELETE', 'APPEND', 'SUBTRACT' or their wire numbers 0-3.
    @return: the new overrides (validated); C{overrides} is not modified.
    @raise KafkaError: INVALID_CONFIG, or INVALID_REQUEST for APPEND/SUBTRACT
        on a key that is not a list.
    """
    result = dict(overrides)
    for key, op, value in changes:
        op = _OPS.get(op, op) if isinstance(op, int) else str(op).upper()
        definition = TOPIC_CONFIGS.get(key)
        if definition is None:
            raise _unknown(key)
        if op == "SET":
            result[key] = value
        elif op == "DELETE":
            result.pop(key, None)
        elif op in ("APPEND", "SUBTRACT"):
            if definition.configType != ConfigType.LIST:
                raise KafkaError(
                    ErrorCode.invalid_request, f"{key}: {op} is only allowed on list configs"
                )
            current = list(
                definition.parse(key, result[key]) if key in result else defaults.values[key]
            )
            items = [item.strip().lower() for item in _text(value).split(",") if item.strip()]
            if op == "APPEND":
                current += [item for item in items if item not in current]
            else:
                current = [item for item in current if item not in items]
            result[key] = ",".join(current)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"{key}: unknown operation {op!r}")
    return validateTopicConfigs(result)


@dataclass(frozen=True, slots=True)
class LogConfig:
    """
    A partition log's resolved, typed configuration.  Immutable: altering a
    topic swaps the object, so an append reads one consistent set.
    """

    retentionMs: int
    retentionBytes: int
    segmentBytes: int
    segmentMs: int
    segmentIndexBytes: int
    indexIntervalBytes: int
    cleanupPolicy: tuple[str, ...]
    messageTimestampType: str
    maxMessageBytes: int
    flushMessages: int
    flushMs: int
    minInsyncReplicas: int
    compressionType: str
    deleteRetentionMs: int = 24 * 3600 * 1000
    minCompactionLagMs: int = 0
    maxCompactionLagMs: int = INT64_MAX
    minCleanableDirtyRatio: float = 0.5
    messageDownconversionEnable: bool = True
    #: how far CreateTime timestamps may be behind / ahead of the broker's
    #: clock (Kafka's rule: the deprecated difference key when unset)
    messageTimestampBeforeMaxMs: int = INT64_MAX
    messageTimestampAfterMaxMs: int = INT64_MAX
    segmentJitterMs: int = 0
    #: the replicas named for replication throttling (C{partition:broker}
    #: items, or C{*}; L{kafkatwist.replication.quota.throttles})
    leaderThrottledReplicas: tuple[str, ...] = ()
    followerThrottledReplicas: tuple[str, ...] = ()
    # Derived once from the fields above (not settings): what every append
    # reads, as plain attributes.
    #: L{logAppendTime}
    appendTime: bool = field(init=False, repr=False, compare=False)
    #: L{rollMs}
    rollAfterMs: int = field(init=False, repr=False, compare=False)
    #: whether a client's records are checked one by one whatever their
    #: batches claim (L{kafkatwist.log.recordchecks}): compacted, or a
    #: CreateTime topic with a timestamp bound
    recordChecks: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        appendTime = self.messageTimestampType == "LogAppendTime"
        object.__setattr__(self, "appendTime", appendTime)
        object.__setattr__(self, "rollAfterMs", self.rollMs)
        object.__setattr__(
            self,
            "recordChecks",
            self.compacts
            or (
                not appendTime
                and (
                    self.messageTimestampBeforeMaxMs < INT64_MAX
                    or self.messageTimestampAfterMaxMs < INT64_MAX
                )
            ),
        )

    @classmethod
    def resolve(cls, overrides: Mapping[str, str], defaults: BrokerLogDefaults) -> LogConfig:
        values = dict(defaults.values)
        for key, value in overrides.items():
            values[key] = TOPIC_CONFIGS[key].parse(key, value)
        return cls(
            retentionMs=values["retention.ms"],
            retentionBytes=values["retention.bytes"],
            segmentBytes=values["segment.bytes"],
            segmentMs=values["segment.ms"],
            segmentIndexBytes=values["segment.index.bytes"],
            indexIntervalBytes=values["index.interval.bytes"],
            cleanupPolicy=tuple(values["cleanup.policy"]),
            messageTimestampType=values["message.timestamp.type"],
            maxMessageBytes=values["max.message.bytes"],
            flushMessages=values["flush.messages"],
            flushMs=values["flush.ms"],
            minInsyncReplicas=values["min.insync.replicas"],
            compressionType=values["compression.type"],
            deleteRetentionMs=values["delete.retention.ms"],
            minCompactionLagMs=values["min.compaction.lag.ms"],
            maxCompactionLagMs=values["max.compaction.lag.ms"],
            minCleanableDirtyRatio=values["min.cleanable.dirty.ratio"],
            messageDownconversionEnable=values["message.downconversion.enable"],
            messageTimestampBeforeMaxMs=_orDifference(values, "message.timestamp.before.max.ms"),
            messageTimestampAfterMaxMs=_orDifference(values, "message.timestamp.after.max.ms"),
            segmentJitterMs=values["segment.jitter.ms"],
            leaderThrottledReplicas=tuple(values["leader.replication.throttled.replicas"]),
            followerThrottledReplicas=tuple(values["follower.replication.throttled.replicas"]),
        )

    @property
    def logAppendTime(self) -> bool:
        return self.messageTimestampType == "LogAppendTime"

    @property
    def deletes(self) -> bool:
        """
        Whether retention may delete segments (C{delete} in the policy).
        """
        return "delete" in self.cleanupPolicy

    @property
    def compacts(self) -> bool:
        """
        Whether the log cleaner compacts the log (C{compact} in the policy).
        """
        return "compact" in self.cleanupPolicy

    @property
    def rollMs(self) -> int:
        """
        The age at which the active segment rolls: C{segment.ms}, or
        C{max.compaction.lag.ms} if compacted and sooner (Kafka's rule: the
        cleaner never touches the active segment, so it must roll for the
        lag to be met).
        """
        if self.compacts:
            return min(self.segmentMs, self.maxCompactionLagMs)
        return self.segmentMs


def _orDifference(values: Mapping[str, Any], key: str) -> int:
    value = values[key]
    return values["message.timestamp.difference.max.ms"] if value == INT64_MAX else value


def checkCombination(config: LogConfig) -> None:
    """
    Kafka's checks across keys, for a topic being created or altered.

    @raise KafkaError: INVALID_CONFIG.
    """
    if config.minCompactionLagMs > config.maxCompactionLagMs:
        raise _invalid(
            "min.compaction.lag.ms",
            f"conflict topic config setting min.compaction.lag.ms ({config.minCompactionLagMs}) "
            f"> max.compaction.lag.ms ({config.maxCompactionLagMs})",
        )


def describeTopicConfig(
    overrides: Mapping[str, str], defaults: BrokerLogDefaults
) -> dict[str, ConfigEntry]:
    """
    The effective configuration of a topic, every key with its source.
    """
    entries = {}
    for name, definition in TOPIC_CONFIGS.items():
        if name in overrides:
            value, source = overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG
        else:
            value, source = _text(defaults.values[name]), defaults.sources[name]
        entries[name] = ConfigEntry(
            name, value, source, definition.configType, definition.brokerKey
        )
    return entries
