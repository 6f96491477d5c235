"""
Parsing and validation of the data source's options.

Options follow Spark's own Kafka source (C{format("kafka")}) name for name,
so that a job switches to C{format("kafkatwist")} and keeps its options.
Everything is checked when the query is defined -- C{load()}, C{save()},
C{start()} -- and a problem raises L{OptionError} whose message names the
option, instead of surfacing later as a failed task on an executor.

The results are small frozen dataclasses: they are pickled into every
input partition and writer Spark ships to executors.
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ConnectionConfig",
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "OptionError",
    "SinkConfig",
    "SourceConfig",
    "Subscription",
    "TopicPartition",
    "parseSinkOptions",
    "parseSourceOptions",
]

#: Spark's markers in offset JSON: -2 is the earliest offset, -1 the latest
EARLIEST = -2
LATEST = -1

#: (topic, partition)
TopicPartition = tuple[str, int]


class ConfigurationError(Exception):
    """
    A mistake in how a query is set up (an option, a topic that does not
    exist): its message is the whole story, and Spark shows it without a
    traceback (see L{oneLineErrors}).
    """


_HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"
#: whether this process set SPARK_HIDE_TRACEBACK (for one error)
_hidden = False


def oneLineErrors(function):
    """
    Decorate the data source's planning methods, which Spark runs in a
    Python worker and whose exceptions it reports with the worker's
    traceback: a L{ConfigurationError} is reported as its one line
    (pyspark's worker leaves the traceback out while
    C{SPARK_HIDE_TRACEBACK} is set, which this sets for that one error and
    unsets at the next planning call in the same worker).
    """

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        global _hidden
        if _hidden:
            os.environ.pop(_HIDE_TRACEBACK, None)
            _hidden = False
        try:
            return function(*args, **kwargs)
        except ConfigurationError:
            if not os.environ.get(_HIDE_TRACEBACK):
                os.environ[_HIDE_TRACEBACK] = "1"
                _hidden = True
            raise

    return wrapper


class OptionError(ValueError, ConfigurationError):
    """
    A data source option is missing, malformed or in conflict with another.

    @ivar option: the name of the offending option (as Spark spells it).
    """

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


# -- value types -------------------------------------------------------------


@dataclass(frozen=True)
class ConnectionConfig:
    """
    How to reach the cluster: what L{KafkaWireClient} needs, from the
    C{kafka.*} options.  Hashable, so executors can share one client per
    distinct configuration.

    @ivar cafile: PEM CA bundle (C{kafka.ssl.truststore.location}).
    @ivar caPem: PEM CA text (C{kafka.ssl.truststore.certificates}).
    @ivar certfile: PEM client certificate chain, possibly with its key
        (C{kafka.ssl.keystore.location}).
    @ivar keyfile: PEM key for C{certfile}, if kept apart.
    @ivar certPem: PEM client chain text
        (C{kafka.ssl.keystore.certificate.chain}).
    @ivar keyPem: PEM key text (C{kafka.ssl.keystore.key}).
    @ivar keyPassword: the key's passphrase (C{kafka.ssl.key.password}).
    @ivar checkHostname: verify the broker certificate names the host
        (C{kafka.ssl.endpoint.identification.algorithm} is C{https}).
    @ivar timeout: seconds per request (C{kafka.request.timeout.ms}).
    """

    bootstrapServers: str
    securityProtocol: str = "PLAINTEXT"
    cafile: str | None = None
    caPem: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    certPem: str | None = None
    keyPem: str | None = None
    keyPassword: str | None = field(default=None, repr=False)
    checkHostname: bool = True
    clientId: str = "kafkatwist-spark"
    timeout: float = 30.0


@dataclass(frozen=True)
class Subscription:
    """
    Which partitions to read: exactly one of C{subscribe} (topic names),
    C{subscribePattern} (a regular expression matched against whole topic
    names) or C{assign} (explicit partitions).

    @ivar kind: C{'subscribe'}, C{'subscribePattern'} or C{'assign'}.
    """

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.assigned)


@dataclass(frozen=True)
class OffsetSpec:
    """
    Where reading starts or ends.

    @ivar kind: C{'earliest'}, C{'latest'}, C{'offsets'} (C{offsets} maps
        partitions to offsets, -2/-1 meaning earliest/latest),
        C{'timestamps'} (C{timestamps} maps partitions to epoch ms), or
        C{'timestamp'} (C{timestamp}: one epoch ms for every partition).
    @ivar option: the option this came from, for error messages.
    """

    kind: str
    option: str
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    timestamps: tuple[tuple[TopicPartition, int], ...] = ()
    timestamp: int | None = None

    def offsetMap(self) -> dict[TopicPartition, int]:
        return dict(self.offsets)

    def timestampMap(self) -> dict[TopicPartition, int]:
        return dict(self.timestamps)


@dataclass(frozen=True)
class SourceConfig:
    """
    Everything the source needs, validated.

    @ivar startingByTimestampStrategy: what to do when no record is at or
        after a starting timestamp: C{'error'} fails the query, C{'latest'}
        starts from the latest offset.
    @ivar fetchMaxBytes: the per-partition byte limit of each Fetch
        (C{kafka.max.partition.fetch.bytes}).
    @ivar fetchRetries: how often a failed request is repeated, on the
        driver and on executors (C{fetchOffset.numRetries}).
    @ivar fetchRetryIntervalMs: the pause before the first retry; doubled
        for each further one (C{fetchOffset.retryIntervalMs}).
    """

    connection: ConnectionConfig
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    streaming: bool
    failOnDataLoss: bool = True
    includeHeaders: bool = False
    minPartitions: int | None = None
    maxRecordsPerPartition: int | None = None
    maxOffsetsPerTrigger: int | None = None
    startingByTimestampStrategy: str = "error"
    fetchMaxBytes: int = 4 << 20
    fetchRetries: int = 3
    fetchRetryIntervalMs: int = 10
    #: C{kafka.isolation.level=read_committed}: read up to the last stable
    #: offset and leave out aborted transactions' records
    readCommitted: bool = False


@dataclass(frozen=True)
class SinkConfig:
    """
    Everything the sink needs, validated.

    @ivar topic: the C{topic} option: every row goes there, whatever its
        C{topic} column says.
    @ivar acks: 0, 1 or -1 (all in-sync replicas).
    @ivar batchBytes: roughly how many bytes of records go into one
        Produce request per partition.
    """

    connection: ConnectionConfig
    topic: str | None = None
    acks: int = -1
    compression: str = "none"
    batchBytes: int = 1 << 20
    retries: int = 3
    retryBackoffMs: int = 100
    requestTimeoutMs: int = 30_000
    #: C{kafka.transactional.id}: the exactly-once mode's prefix of each
    #: task's transactional id (C{None}: at-least-once)
    transactionalIdPrefix: str | None = None
    #: C{kafka.transaction.timeout.ms}
    transactionTimeoutMs: int = 60_000
    #: C{kafka.enable.idempotence} (default: with acks=all, as Kafka's
    #: producer): each task writes with a producer id and sequence numbers,
    #: so a batch resent after a leader change or a lost connection is not
    #: written twice
    idempotent: bool = False
    #: C{commitLogTopic}: where the streaming exactly-once sink records
    #: which micro-batch's transactions its driver is committing
    commitLogTopic: str | None = None


# -- option names ------------------------------------------------------------

BOOTSTRAP = "kafka.bootstrap.servers"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribePattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_BY_TIMESTAMP = "startingOffsetsByTimestamp"
ENDING_BY_TIMESTAMP = "endingOffsetsByTimestamp"
STARTING_TIMESTAMP = "startingTimestamp"
ENDING_TIMESTAMP = "endingTimestamp"
STARTING_STRATEGY = "startingOffsetsByTimestampStrategy"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
INCLUDE_HEADERS = "includeHeaders"
MIN_PARTITIONS = "minPartitions"
MAX_RECORDS_PER_PARTITION = "maxRecordsPerPartition"
MAX_OFFSETS_PER_TRIGGER = "maxOffsetsPerTrigger"
MIN_OFFSETS_PER_TRIGGER = "minOffsetsPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
POLL_TIMEOUT = "kafkaConsumer.pollTimeoutMs"
FETCH_RETRIES = "fetchOffset.numRetries"
FETCH_RETRY_INTERVAL = "fetchOffset.retryIntervalMs"
GROUP_ID_PREFIX = "groupIdPrefix"
TOPIC = "topic"

SECURITY_PROTOCOL = "kafka.security.protocol"
TRUSTSTORE_LOCATION = "kafka.ssl.truststore.location"
TRUSTSTORE_TYPE = "kafka.ssl.truststore.type"
TRUSTSTORE_CERTIFICATES = "kafka.ssl.truststore.certificates"
TRUSTSTORE_PASSWORD = "kafka.ssl.truststore.password"
KEYSTORE_LOCATION = "kafka.ssl.keystore.location"
KEYSTORE_TYPE = "kafka.ssl.keystore.type"
KEYSTORE_CHAIN = "kafka.ssl.keystore.certificate.chain"
KEYSTORE_KEY = "kafka.ssl.keystore.key"
KEYSTORE_PASSWORD = "kafka.ssl.keystore.password"
KEY_PASSWORD = "kafka.ssl.key.password"
ENDPOINT_IDENTIFICATION = "kafka.ssl.endpoint.identification.algorithm"
# librdkafka's names, which Python Kafka users often know better
CA_LOCATION = "kafka.ssl.ca.location"
CERTIFICATE_LOCATION = "kafka.ssl.certificate.location"
KEY_LOCATION = "kafka.ssl.key.location"

REQUEST_TIMEOUT = "kafka.request.timeout.ms"
CLIENT_ID = "kafka.client.id"
MAX_PARTITION_FETCH_BYTES = "kafka.max.partition.fetch.bytes"
ISOLATION_LEVEL = "kafka.isolation.level"
ACKS = "kafka.acks"
COMPRESSION = "kafka.compression.type"
BATCH_SIZE = "kafka.batch.size"
RETRIES = "kafka.retries"
RETRY_BACKOFF = "kafka.retry.backoff.ms"
TRANSACTIONAL_ID = "kafka.transactional.id"
IDEMPOTENCE = "kafka.enable.idempotence"
TRANSACTION_TIMEOUT = "kafka.transaction.timeout.ms"
COMMIT_LOG_TOPIC = "commitLogTopic"
#: the commit log's name, unless C{commitLogTopic} gives one
COMMIT_LOG_PREFIX = "kafkatwist-sink-commits."

_CONNECTION_OPTIONS = (
    BOOTSTRAP, SECURITY_PROTOCOL, TRUSTSTORE_LOCATION, TRUSTSTORE_TYPE, TRUSTSTORE_CERTIFICATES,
    TRUSTSTORE_PASSWORD, KEYSTORE_LOCATION, KEYSTORE_TYPE, KEYSTORE_CHAIN, KEYSTORE_KEY,
    KEYSTORE_PASSWORD, KEY_PASSWORD, ENDPOINT_IDENTIFICATION, CA_LOCATION, CERTIFICATE_LOCATION,
    KEY_LOCATION, REQUEST_TIMEOUT, CLIENT_ID,
)
_SOURCE_OPTIONS = _CONNECTION_OPTIONS + (
    SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN, STARTING_OFFSETS, ENDING_OFFSETS, STARTING_BY_TIMESTAMP,
    ENDING_BY_TIMESTAMP, STARTING_TIMESTAMP, ENDING_TIMESTAMP, STARTING_STRATEGY,
    FAIL_ON_DATA_LOSS, INCLUDE_HEADERS, MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION,
    MAX_OFFSETS_PER_TRIGGER, MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, POLL_TIMEOUT,
    FETCH_RETRIES, FETCH_RETRY_INTERVAL, GROUP_ID_PREFIX, MAX_PARTITION_FETCH_BYTES,
    ISOLATION_LEVEL, "kafka.group.id",
)
_SINK_OPTIONS = _CONNECTION_OPTIONS + (
    TOPIC, ACKS, COMPRESSION, BATCH_SIZE, RETRIES, RETRY_BACKOFF, TRANSACTIONAL_ID,
    TRANSACTION_TIMEOUT, COMMIT_LOG_TOPIC,
)

#: Kafka client settings Spark's Kafka source refuses, and why; same here.
_REFUSED_CONSUMER = {
    "kafka.auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' instead"
    ),
    "kafka.key.deserializer": "keys are always read as bytes; cast or decode them in the query",
    "kafka.value.deserializer": (
        "values are always read as bytes; cast or decode them in the query"
    ),
    "kafka.enable.auto.commit": "the source does not commit offsets; Spark checkpoints them",
    "kafka.interceptor.classes": "interceptors are Java classes; the source has none",
}
_REFUSED_PRODUCER = {
    "kafka.key.serializer": "keys are written as bytes; cast them to string or binary instead",
    "kafka.value.serializer": "values are written as bytes; cast them to string or binary instead",
    "kafka.interceptor.classes": "interceptors are Java classes; the sink has none",
}

_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


# -- small parsers -----------------------------------------------------------


class _Options:
    """
    Read access to Spark's case-insensitive options, reporting problems with
    the option's canonical spelling.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        # Spark hands over a case-insensitive dict; a plain dict (tests,
        # direct use) is folded the same way.
        self._values = {str(k).lower(): v for k, v in dict(options).items()}

    def has(self, name: str) -> bool:
        return name.lower() in self._values

    def get(self, name: str) -> str | None:
        value = self._values.get(name.lower())
        return None if value is None else str(value)

    def keys(self):
        return self._values.keys()

    def text(self, name: str, default: str | None = None) -> str | None:
        value = self.get(name)
        if value is None:
            return default
        return value.strip()

    def boolean(self, name: str, default: bool) -> bool:
        value = self.text(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        raise OptionError(name, f"option '{name}' must be 'true' or 'false', not {value!r}")

    def integer(self, name: str, default: int | None = None, minimum: int | None = 1) -> int | None:
        value = self.text(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise OptionError(
                name, f"option '{name}' must be an integer, not {value!r}"
            ) from None
        if minimum is not None and number < minimum:
            what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise OptionError(name, f"option '{name}' must be {what}, not {value!r}")
        return number


def _checkTypos(options: _Options, known: tuple[str, ...], what: str) -> None:
    """
    Refuse an unknown option that is a near miss of a known one: Spark
    ignores unknown options, so C{startingOffset} (no s) would otherwise
    silently read from the default offsets.  Unrelated unknown options pass,
    as in Spark -- writers put their own (C{checkpointLocation}, C{path})
    into the same map.
    """
    lowered = {k.lower(): k for k in known}
    for key in options.keys():
        if key in lowered:
            continue
        if key.startswith("kafka."):
            # Other Kafka client settings tune the Java client and mean
            # nothing here; Spark passes them through without checking.
            candidates = [k for k in lowered if k.startswith("kafka.")]
        else:
            candidates = [k for k in lowered if not k.startswith("kafka.")]
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.85)
        if close:
            raise OptionError(
                lowered[close[0]],
                f"unknown {what} option '{key}': did you mean '{lowered[close[0]]}'?",
            )


def _parseTopics(options: _Options) -> Subscription:
    given = [name for name in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN) if options.has(name)]
    if not given:
        raise OptionError(
            SUBSCRIBE,
            "one of the options 'subscribe', 'subscribePattern' or 'assign' must be set "
            "to say which topics to read",
        )
    if len(given) > 1:
        raise OptionError(
            given[1],
            f"only one of 'subscribe', 'subscribePattern' and 'assign' may be set, "
            f"but {' and '.join(repr(g) for g in given)} are",
        )
    kind = given[0]
    raw = options.get(kind) or ""
    if kind == SUBSCRIBE:
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError(SUBSCRIBE, f"option 'subscribe' names no topics: {raw!r}")
        for topic in topics:
            _checkTopicName(SUBSCRIBE, topic)
        return Subscription(SUBSCRIBE, topics=topics)
    if kind == SUBSCRIBE_PATTERN:
        pattern = raw.strip()
        if not pattern:
            raise OptionError(SUBSCRIBE_PATTERN, "option 'subscribePattern' is empty")
        try:
            re.compile(pattern)
        except re.error as e:
            raise OptionError(
                SUBSCRIBE_PATTERN,
                f"option 'subscribePattern' is not a valid regular expression ({e}): {pattern!r}",
            ) from None
        return Subscription(SUBSCRIBE_PATTERN, pattern=pattern)
    assigned = _parsePartitionList(ASSIGN, raw)
    if not assigned:
        raise OptionError(ASSIGN, f"option 'assign' names no partitions: {raw!r}")
    return Subscription(ASSIGN, assigned=tuple(sorted(assigned)))


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def _checkTopicName(option: str, topic: str) -> None:
    if not _TOPIC_NAME.fullmatch(topic):
        raise OptionError(
            option,
            f"option '{option}' has an invalid topic name {topic!r} (Kafka topic names are 1-249 "
            f"characters of ASCII letters, digits, '.', '_' and '-')",
        )


def _loadJson(option: str, raw: str, example: str):
    try:
        return json.loads(raw)
    except ValueError as e:
        raise OptionError(
            option, f"option '{option}' is not valid JSON ({e}): {raw!r}; expected e.g. {example}"
        ) from None


def _parsePartitionList(option: str, raw: str) -> list[TopicPartition]:
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    parsed = _loadJson(option, raw, example)
    if not isinstance(parsed, dict):
        raise OptionError(option, f"option '{option}' must be a JSON object like {example}")
    result = []
    for topic, partitions in parsed.items():
        _checkTopicName(option, topic)
        if not isinstance(partitions, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions
        ):
            raise OptionError(
                option,
                f"option '{option}' must map each topic to a list of partition numbers, "
                f"like {example}; {topic!r} maps to {partitions!r}",
            )
        result.extend((topic, p) for p in partitions)
    if len(set(result)) != len(result):
        raise OptionError(option, f"option '{option}' names a partition twice: {raw!r}")
    return result


def _parsePartitionMap(
    option: str, raw: str, example: str, minimum: int, what: str
) -> tuple[tuple[TopicPartition, int], ...]:
    parsed = _loadJson(option, raw, example)
    if not isinstance(parsed, dict) or not parsed:
        raise OptionError(
            option, f"option '{option}' must be a non-empty JSON object like {example}"
        )
    result = []
    for topic, partitions in parsed.items():
        _checkTopicName(option, topic)
        if not isinstance(partitions, dict) or not partitions:
            raise OptionError(
                option,
                f"option '{option}' must map each topic to an object of partition: {what}, "
                f"like {example}; {topic!r} maps to {partitions!r}",
            )
        for partition, value in partitions.items():
            try:
                number = int(partition)
            except ValueError:
                number = -1
            if number < 0 or str(number) != str(partition).strip():
                raise OptionError(
                    option,
                    f"option '{option}' has {partition!r} as a partition of {topic!r}; "
                    f"partitions are numbers >= 0",
                )
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise OptionError(
                    option,
                    f"option '{option}' gives {topic}-{number} the {what} {value!r}; "
                    f"expected an integer >= {minimum}",
                )
            result.append(((topic, number), value))
    return tuple(sorted(result))


def _parseOffsets(options: _Options, starting: bool, streaming: bool) -> OffsetSpec | None:
    """
    Resolve the starting (or ending) position.  As in Spark, a global
    timestamp wins over per-partition timestamps, which win over offsets.
    """
    if starting:
        offsetsName, byTimestampName, timestampName = (
            STARTING_OFFSETS, STARTING_BY_TIMESTAMP, STARTING_TIMESTAMP,
        )
    else:
        offsetsName, byTimestampName, timestampName = (
            ENDING_OFFSETS, ENDING_BY_TIMESTAMP, ENDING_TIMESTAMP,
        )
    if not starting and streaming:
        for name in (offsetsName, byTimestampName, timestampName):
            if options.has(name):
                raise OptionError(
                    name,
                    f"option '{name}' is not valid in streaming queries: a stream has no end "
                    f"(use Trigger.AvailableNow to stop at the offsets available at start)",
                )
        return None

    timestamp = options.text(timestampName)
    if timestamp is not None:
        try:
            ms = int(timestamp)
        except ValueError:
            raise OptionError(
                timestampName,
                f"option '{timestampName}' must be a timestamp in milliseconds since the epoch, "
                f"not {timestamp!r}",
            ) from None
        if ms < 0:
            raise OptionError(
                timestampName, f"option '{timestampName}' must not be negative: {timestamp!r}"
            )
        return OffsetSpec("timestamp", timestampName, timestamp=ms)

    byTimestamp = options.text(byTimestampName)
    if byTimestamp is not None:
        example = '{"topicA":{"0":1700000000000,"1":1700000000000}}'
        timestamps = _parsePartitionMap(
            byTimestampName, byTimestamp, example, 0, "timestamp (ms since the epoch)"
        )
        return OffsetSpec("timestamps", byTimestampName, timestamps=timestamps)

    offsets = options.text(offsetsName)
    default = "earliest" if starting and not streaming else "latest"
    value = (offsets or default).strip()
    lowered = value.lower()
    if lowered in ("earliest", "latest"):
        if not streaming and starting and lowered == "latest":
            raise OptionError(
                offsetsName,
                "option 'startingOffsets' can not be 'latest' for batch queries: "
                "there would be nothing to read",
            )
        if not streaming and not starting and lowered == "earliest":
            raise OptionError(
                offsetsName,
                "option 'endingOffsets' can not be 'earliest' for batch queries: "
                "there would be nothing to read",
            )
        return OffsetSpec(lowered, offsetsName)
    if not value.startswith("{"):
        raise OptionError(
            offsetsName,
            f"option '{offsetsName}' must be 'earliest', 'latest' or a JSON object like "
            f'{{"topicA":{{"0":23,"1":-1}}}}, not {value!r}',
        )
    example = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    parsed = _parsePartitionMap(
        offsetsName, value, example, EARLIEST, "offset (-2 earliest, -1 latest)"
    )
    if not streaming:
        forbidden = LATEST if starting else EARLIEST
        for (topic, partition), offset in parsed:
            if offset == forbidden:
                raise OptionError(
                    offsetsName,
                    f"option '{offsetsName}' gives {topic}-{partition} the offset {offset} "
                    f"({'latest' if forbidden == LATEST else 'earliest'}), which is not allowed "
                    f"{'to start' if starting else 'to end'} a batch query",
                )
    return OffsetSpec("offsets", offsetsName, offsets=parsed)


def _parseConnection(options: _Options, forSink: bool) -> ConnectionConfig:
    bootstrap = options.text(BOOTSTRAP)
    if not bootstrap:
        raise OptionError(
            BOOTSTRAP,
            "option 'kafka.bootstrap.servers' must be set to the broker addresses, "
            "e.g. 'host1:9092,host2:9092'",
        )
    for address in bootstrap.split(","):
        address = address.strip()
        host, sep, port = address.rpartition(":")
        if not address or not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(
                BOOTSTRAP,
                f"option 'kafka.bootstrap.servers' has {address!r}, which is not host:port",
            )

    refused = _REFUSED_PRODUCER if forSink else _REFUSED_CONSUMER
    for name, why in refused.items():
        if options.has(name):
            raise OptionError(name, f"option '{name}' is not supported: {why}")

    protocol = (options.text(SECURITY_PROTOCOL) or "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL"):
        raise OptionError(
            SECURITY_PROTOCOL,
            f"option 'kafka.security.protocol' must be PLAINTEXT or SSL, not {protocol!r} "
            f"(SASL is not supported)",
        )

    timeoutMs = options.integer(REQUEST_TIMEOUT, 30_000)
    clientId = options.text(CLIENT_ID) or "kafkatwist-spark"
    sslOptions = [
        name
        for name in (
            TRUSTSTORE_LOCATION, TRUSTSTORE_CERTIFICATES, KEYSTORE_LOCATION, KEYSTORE_CHAIN,
            KEYSTORE_KEY, KEY_PASSWORD, CA_LOCATION, CERTIFICATE_LOCATION, KEY_LOCATION,
        )
        if options.has(name)
    ]
    if protocol == "PLAINTEXT":
        if sslOptions:
            raise OptionError(
                sslOptions[0],
                f"option '{sslOptions[0]}' is set but 'kafka.security.protocol' is PLAINTEXT; "
                f"set kafka.security.protocol=SSL to connect over TLS",
            )
        return ConnectionConfig(bootstrap, "PLAINTEXT", clientId=clientId, timeout=timeoutMs / 1000)

    for typeName in (TRUSTSTORE_TYPE, KEYSTORE_TYPE):
        storeType = options.text(typeName)
        if storeType is not None and storeType.upper() != "PEM":
            raise OptionError(
                typeName,
                f"option '{typeName}' is {storeType!r}, but only PEM stores are supported: "
                f"convert the store to PEM (e.g. with keytool/openssl) and set {typeName}=PEM",
            )
    if options.has(TRUSTSTORE_PASSWORD) and (
        options.has(TRUSTSTORE_LOCATION) or options.has(TRUSTSTORE_CERTIFICATES)
    ):
        raise OptionError(
            TRUSTSTORE_PASSWORD,
            "option 'kafka.ssl.truststore.password' can not be used with a PEM trust store "
            "(PEM certificates are not encrypted); remove it",
        )
    if options.has(KEYSTORE_PASSWORD):
        raise OptionError(
            KEYSTORE_PASSWORD,
            "option 'kafka.ssl.keystore.password' can not be used with a PEM key store; "
            "put the private key's passphrase in 'kafka.ssl.key.password'",
        )

    def oneOf(*names: str) -> tuple[str | None, str | None]:
        present = [n for n in names if options.has(n)]
        if len(present) > 1:
            raise OptionError(
                present[1],
                f"options {' and '.join(repr(n) for n in present)} say the same thing; "
                f"set only one",
            )
        if not present:
            return None, None
        value = options.text(present[0])
        if not value:
            raise OptionError(present[0], f"option '{present[0]}' is empty")
        return present[0], value

    caName, caValue = oneOf(TRUSTSTORE_LOCATION, CA_LOCATION, TRUSTSTORE_CERTIFICATES)
    certName, certValue = oneOf(KEYSTORE_LOCATION, CERTIFICATE_LOCATION, KEYSTORE_CHAIN)
    keyName, keyValue = oneOf(KEY_LOCATION, KEYSTORE_KEY)
    if keyName is not None and certName is None:
        raise OptionError(
            keyName,
            f"option '{keyName}' gives a private key but no client certificate; set "
            f"'kafka.ssl.keystore.location' (or 'kafka.ssl.certificate.location') too",
        )
    if certName == KEYSTORE_CHAIN and keyName != KEYSTORE_KEY:
        raise OptionError(
            KEYSTORE_KEY,
            "option 'kafka.ssl.keystore.certificate.chain' needs 'kafka.ssl.keystore.key' "
            "(the PEM private key) too",
        )
    if keyName == KEYSTORE_KEY and certName != KEYSTORE_CHAIN:
        raise OptionError(
            KEYSTORE_KEY,
            "option 'kafka.ssl.keystore.key' goes with 'kafka.ssl.keystore.certificate.chain'",
        )
    for name, value in ((caName, caValue), (certName, certValue), (keyName, keyValue)):
        if name in (TRUSTSTORE_CERTIFICATES, KEYSTORE_CHAIN, KEYSTORE_KEY):
            if "-----BEGIN" not in value:
                raise OptionError(
                    name, f"option '{name}' must hold PEM text ('-----BEGIN ...'), not a path"
                )

    algorithm = options.get(ENDPOINT_IDENTIFICATION)
    algorithm = "https" if algorithm is None else algorithm.strip().lower()
    if algorithm not in ("https", ""):
        raise OptionError(
            ENDPOINT_IDENTIFICATION,
            f"option '{ENDPOINT_IDENTIFICATION}' must be 'https' (check the broker's host name) "
            f"or empty (do not), not {algorithm!r}",
        )
    return ConnectionConfig(
        bootstrap,
        "SSL",
        cafile=caValue if caName in (TRUSTSTORE_LOCATION, CA_LOCATION) else None,
        caPem=caValue if caName == TRUSTSTORE_CERTIFICATES else None,
        certfile=certValue if certName in (KEYSTORE_LOCATION, CERTIFICATE_LOCATION) else None,
        keyfile=keyValue if keyName == KEY_LOCATION else None,
        certPem=certValue if certName == KEYSTORE_CHAIN else None,
        keyPem=keyValue if keyName == KEYSTORE_KEY else None,
        keyPassword=options.get(KEY_PASSWORD),
        checkHostname=algorithm == "https",
        clientId=clientId,
        timeout=timeoutMs / 1000,
    )


# -- entry points --------------------------------------------------------------


def parseSourceOptions(options: Mapping[str, str], streaming: bool) -> SourceConfig:
    """
    Validate the options of a read (C{spark.read}) or a stream
    (C{spark.readStream}).

    @raise OptionError: naming the first option that is missing, malformed or
        in conflict with another.
    """
    opts = _Options(options)
    _checkTypos(opts, _SOURCE_OPTIONS, "source")
    connection = _parseConnection(opts, forSink=False)
    subscription = _parseTopics(opts)
    starting = _parseOffsets(opts, starting=True, streaming=streaming)
    ending = _parseOffsets(opts, starting=False, streaming=streaming)

    strategy = (opts.text(STARTING_STRATEGY) or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError(
            STARTING_STRATEGY,
            f"option '{STARTING_STRATEGY}' must be 'error' or 'latest', not {strategy!r}",
        )

    maxOffsets = opts.integer(MAX_OFFSETS_PER_TRIGGER)
    if not streaming and maxOffsets is not None:
        raise OptionError(
            MAX_OFFSETS_PER_TRIGGER,
            "option 'maxOffsetsPerTrigger' only applies to streaming queries "
            "(spark.readStream); a batch read reads its whole offset range",
        )
    for name in (MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY):
        if opts.has(name):
            raise OptionError(
                name,
                f"option '{name}' is not supported by kafkatwist; "
                f"use 'maxOffsetsPerTrigger' and the trigger interval to pace the stream",
            )

    isolation = (opts.text(ISOLATION_LEVEL) or "read_uncommitted").lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise OptionError(
            ISOLATION_LEVEL,
            f"option '{ISOLATION_LEVEL}' must be 'read_uncommitted' (the default) or "
            f"'read_committed', not {isolation!r}",
        )

    # Kafka's consumer fetches 1 MiB per partition, but it keeps fetches in
    # flight while the application works; this reader fetches then decodes,
    # so larger fetches (fewer round trips) pay off: 4 MiB unless told.
    fetchMaxBytes = opts.integer(MAX_PARTITION_FETCH_BYTES, 4 << 20)
    # Spark's executor poll timeout: checked for compatibility; here each
    # request is bounded by kafka.request.timeout.ms instead.
    opts.integer(POLL_TIMEOUT, 120_000)
    return SourceConfig(
        connection=connection,
        subscription=subscription,
        starting=starting,
        ending=ending,
        streaming=streaming,
        failOnDataLoss=opts.boolean(FAIL_ON_DATA_LOSS, True),
        includeHeaders=opts.boolean(INCLUDE_HEADERS, False),
        minPartitions=opts.integer(MIN_PARTITIONS),
        maxRecordsPerPartition=opts.integer(MAX_RECORDS_PER_PARTITION),
        maxOffsetsPerTrigger=maxOffsets,
        startingByTimestampStrategy=strategy,
        fetchMaxBytes=fetchMaxBytes,
        fetchRetries=opts.integer(FETCH_RETRIES, 3, minimum=0),
        fetchRetryIntervalMs=opts.integer(FETCH_RETRY_INTERVAL, 10, minimum=0),
        readCommitted=isolation == "read_committed",
    )


def parseSinkOptions(options: Mapping[str, str]) -> SinkConfig:
    """
    Validate the options of a write (C{df.write}) or a streaming write
    (C{df.writeStream}).  Columns are checked separately, against the
    schema (see L{kafkatwist_spark.writer.checkSinkSchema}).

    @raise OptionError: naming the first bad option.
    """
    opts = _Options(options)
    _checkTypos(opts, _SINK_OPTIONS, "sink")
    connection = _parseConnection(opts, forSink=True)
    for name in (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN):
        if opts.has(name):
            raise OptionError(
                name,
                f"option '{name}' is for reading; to write, use the 'topic' option "
                f"or a 'topic' column",
            )
    topic = opts.text(TOPIC)
    if topic is not None:
        if not topic:
            raise OptionError(TOPIC, "option 'topic' is empty")
        _checkTopicName(TOPIC, topic)

    acksText = (opts.text(ACKS) or "all").lower()
    acksByName = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if acksText not in acksByName:
        raise OptionError(ACKS, f"option 'kafka.acks' must be all, -1, 0 or 1, not {acksText!r}")
    compression = (opts.text(COMPRESSION) or "none").lower()
    if compression not in _COMPRESSIONS:
        raise OptionError(
            COMPRESSION,
            f"option 'kafka.compression.type' must be one of {', '.join(_COMPRESSIONS)}, "
            f"not {compression!r}",
        )
    idempotent = opts.boolean(IDEMPOTENCE, acksByName[acksText] == -1)
    if idempotent and acksByName[acksText] != -1:
        raise OptionError(
            IDEMPOTENCE,
            "option 'kafka.enable.idempotence' needs 'kafka.acks' all (as Kafka's producer)",
        )
    prefix = opts.text(TRANSACTIONAL_ID)
    commitLog = opts.text(COMMIT_LOG_TOPIC)
    if prefix is not None:
        if not prefix:
            raise OptionError(TRANSACTIONAL_ID, "option 'kafka.transactional.id' is empty")
        if acksByName[acksText] != -1:
            raise OptionError(
                ACKS,
                "option 'kafka.acks' must be all with 'kafka.transactional.id' "
                "(transactions need every write acknowledged)",
            )
        if commitLog is None:
            commitLog = COMMIT_LOG_PREFIX + prefix
            if not _TOPIC_NAME.fullmatch(commitLog):
                raise OptionError(
                    COMMIT_LOG_TOPIC,
                    f"'kafka.transactional.id' {prefix!r} does not make a topic name for the "
                    f"sink's commit log ({commitLog!r}); set option 'commitLogTopic'",
                )
        else:
            _checkTopicName(COMMIT_LOG_TOPIC, commitLog)
    elif commitLog is not None:
        raise OptionError(
            COMMIT_LOG_TOPIC, "option 'commitLogTopic' needs 'kafka.transactional.id'"
        )
    return SinkConfig(
        transactionalIdPrefix=prefix,
        idempotent=idempotent or prefix is not None,
        commitLogTopic=commitLog,
        transactionTimeoutMs=opts.integer(TRANSACTION_TIMEOUT, 60_000, minimum=1),
        connection=connection,
        topic=topic,
        acks=acksByName[acksText],
        compression=compression,
        # Kafka's batch.size (16 KiB) is tuned for a producer that keeps
        # many batches in flight; this one sends a request at a time, so it
        # defaults to a megabyte and takes batch.size only when told.
        batchBytes=opts.integer(BATCH_SIZE, 1 << 20),
        retries=opts.integer(RETRIES, 3, minimum=0),
        retryBackoffMs=opts.integer(RETRY_BACKOFF, 100, minimum=0),
        requestTimeoutMs=opts.integer(REQUEST_TIMEOUT, 30_000),
    )

