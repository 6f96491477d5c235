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

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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
    "validateTopicConfigs",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
DEFAULT_MAX_BROKER_PARTITIONS = 10000


class ConfigSource(enum.IntEnum):
    """
    DescribeConfigs' C{config_source} values.
    """

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class ConfigType(enum.IntEnum):
    """
    DescribeConfigs' C{config_type} values (v3+).
    """

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """
    One effective configuration value and where it came from.
    """

    name: str
    value: str
    source: ConfigSource
    configType: ConfigType
    brokerKey: str
    readOnly: bool = False
    isSensitive: bool = False

    @property
    def isDefault(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


def _invalid(key: str, why: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, f"{key}: {why}")


def _number(low: int, high: int) -> Callable[[str, Any], int]:
    def parse(key: str, value: Any) -> int:
        if isinstance(value, bool):
            raise _invalid(key, f"expected an integer, got {value!r}")
        try:
            number = int(str(value).strip())
        except ValueError:
            raise _invalid(key, f"expected an integer, got {value!r}") from None
        if not low <= number <= high:
            raise _invalid(key, f"{number} is outside [{low}, {high}]")
        return number

    return parse


def _ratio(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise _invalid(key, f"expected a number, got {value!r}")
    try:
        number = float(str(value).strip())
    except ValueError:
        raise _invalid(key, f"expected a number, got {value!r}") from None
    if not 0.0 <= number <= 1.0:
        raise _invalid(key, f"{number} is outside [0, 1]")
    return number


def _choice(*allowed: str) -> Callable[[str, Any], str]:
    def parse(key: str, value: Any) -> str:
        text = str(value).strip()
        if text not in allowed:
            raise _invalid(key, f"{text!r} is not one of {', '.join(allowed)}")
        return text

    return parse


def _listOf(*allowed: str) -> Callable[[str, Any], tuple[str, ...]]:
    def parse(key: str, value: Any) -> tuple[str, ...]:
        items = value if isinstance(value, (list, tuple)) else str(value).split(",")
        items = tuple(str(item).strip().lower() for item in items if str(item).strip())
        if not items:
            raise _invalid(key, "must not be empty")
        for item in items:
            if item not in allowed:
                raise _invalid(key, f"{item!r} is not one of {', '.join(allowed)}")
        return tuple(dict.fromkeys(items))

    return parse


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """
    A topic config key: its broker-level synonym, type, Kafka's default and
    parser (which validates).
    """

    name: str
    brokerKey: str
    configType: ConfigType
    default: Any
    parse: Callable[[str, Any], Any]


def _defs(*defs: ConfigDef) -> dict[str, ConfigDef]:
    return {d.name: d for d in defs}


TOPIC_CONFIGS: dict[str, ConfigDef] = _defs(
    ConfigDef(
        "retention.ms",
        "log.retention.ms",
        ConfigType.LONG,
        7 * 24 * 3600 * 1000,
        _number(-1, INT64_MAX),
    ),
    ConfigDef(
        "retention.bytes", "log.retention.bytes", ConfigType.LONG, -1, _number(-1, INT64_MAX)
    ),
    ConfigDef(
        "segment.bytes", "log.segment.bytes", ConfigType.INT, 1024**3, _number(14, INT32_MAX)
    ),
    ConfigDef(
        "segment.ms", "log.roll.ms", ConfigType.LONG, 7 * 24 * 3600 * 1000, _number(1, INT64_MAX)
    ),
    ConfigDef(
        "segment.index.bytes",
        "log.index.size.max.bytes",
        ConfigType.INT,
        10 * 1024 * 1024,
        _number(4, INT32_MAX),
    ),
    ConfigDef(
        "index.interval.bytes",
        "log.index.interval.bytes",
        ConfigType.INT,
        4096,
        _number(0, INT32_MAX),
    ),
    ConfigDef(
        "cleanup.policy",
        "log.cleanup.policy",
        ConfigType.LIST,
        ("delete",),
        _listOf("delete", "compact"),
    ),
    ConfigDef(
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        ConfigType.LONG,
        24 * 3600 * 1000,
        _number(0, INT64_MAX),
    ),
    ConfigDef(
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        ConfigType.LONG,
        0,
        _number(0, INT64_MAX),
    ),
    ConfigDef(
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        ConfigType.LONG,
        INT64_MAX,
        _number(1, INT64_MAX),
    ),
    ConfigDef(
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        ConfigType.DOUBLE,
        0.5,
        _ratio,
    ),
    ConfigDef(
        "message.timestamp.type",
        "log.message.timestamp.type",
        ConfigType.STRING,
        "CreateTime",
        _choice("CreateTime", "LogAppendTime"),
    ),
    ConfigDef(
        "max.message.bytes", "message.max.bytes", ConfigType.INT, 1048588, _number(0, INT32_MAX)
    ),
    ConfigDef(
        "flush.messages",
        "log.flush.interval.messages",
        ConfigType.LONG,
        INT64_MAX,
        _number(1, INT64_MAX),
    ),
    ConfigDef(
        "flush.ms", "log.flush.interval.ms", ConfigType.LONG, INT64_MAX, _number(0, INT64_MAX)
    ),
    ConfigDef(
        "min.insync.replicas", "min.insync.replicas", ConfigType.INT, 1, _number(1, INT32_MAX)
    ),
    ConfigDef(
        "compression.type",
        "compression.type",
        ConfigType.STRING,
        "producer",
        _choice("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
)

_BY_BROKER_KEY = {d.brokerKey: d for d in TOPIC_CONFIGS.values()}

# Kafka's coarser broker synonyms, lowest precedence first.
_COARSE_SYNONYMS = {
    "log.retention.hours": ("log.retention.ms", 3600 * 1000),
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
    "log.roll.hours": ("log.roll.ms", 3600 * 1000),
}


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


class BrokerLogDefaults:
    """
    The broker-level half of log configuration: the C{log.*} settings a
    topic inherits.

    @ivar values: topic key -> typed value.
    @ivar sources: topic key -> L{ConfigSource} (STATIC_BROKER_CONFIG when
        the broker set it, DEFAULT_CONFIG otherwise).
    @ivar numPartitions: C{num.partitions}, for CreateTopics with -1.
    """

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        settings = dict(settings or {})
        self.values: dict[str, Any] = {d.name: d.default for d in TOPIC_CONFIGS.values()}
        self.sources: dict[str, ConfigSource] = {
            d.name: ConfigSource.DEFAULT_CONFIG for d in TOPIC_CONFIGS.values()
        }
        for coarse, (fine, factor) in _COARSE_SYNONYMS.items():
            if coarse in settings and fine not in settings:
                settings[fine] = _number(-1, INT64_MAX)(coarse, settings[coarse]) * factor
        for brokerKey, value in settings.items():
            definition = _BY_BROKER_KEY.get(brokerKey)
            if definition is None:
                continue
            self.values[definition.name] = definition.parse(brokerKey, value)
            self.sources[definition.name] = ConfigSource.STATIC_BROKER_CONFIG
        self.numPartitions = _number(1, INT32_MAX)(
            "num.partitions", settings.get("num.partitions", 1)
        )
        self.maxBrokerPartitions = _number(1, INT32_MAX)(
            "max.broker.partitions",
            settings.get("max.broker.partitions", DEFAULT_MAX_BROKER_PARTITIONS),
        )


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
            raise _invalid(key, "unknown topic config")
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
            raise _invalid(key, "unknown topic config")
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
