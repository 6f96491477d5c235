"""
Example drop-in: a new API, DescribeLogSizes (ApiKey 10000), that Kafka does
not define, answering the broker's per-partition log sizes and offsets.

What it shows:

  - defining request and response schemas in C{kio}'s dataclass conventions
    and registering them with L{registerSchema}, so the broker decodes the
    request and encodes the answer like any Kafka API;
  - that ApiVersions is derived from the registered handlers: a broker with
    this plugin advertises ApiKey 10000, v0, and clients that negotiate
    versions (the project's wire client, any Kafka client) see it; Kafka
    clients ignore keys they do not know;
  - the client side: L{describeLogSizes} sends the request with the wire
    client's generic L{KafkaWireClient.call
    <kafkatwist.client.KafkaWireClient.call>}, after importing this module
    registered the same schemas in the client's process.

The wire format (v0, flexible: compact strings and arrays, tagged fields)::

    DescribeLogSizesRequest  => [topics]           null array: every topic
      topics                 => name [partitions]  empty partitions: all
    DescribeLogSizesResponse => throttle_time_ms [topics]
      topics                 => name error_code [partitions]
      partitions             => partition_index error_code size_bytes
                                log_start_offset log_end_offset

Pick ApiKeys for private APIs far above Kafka's (which are below 100), so a
future Kafka API never collides; L{registerSchema} refuses Kafka's own keys.
"""

# No "from __future__ import annotations" here: kio reads the field types of
# these dataclasses at runtime, so the annotations must be real types.

import datetime
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta, i64

from kafkatwist.errors import KafkaError
from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import registerSchema

DESCRIBE_LOG_SIZES = 10000
#: in the style of kio's names for Kafka's APIs, so log lines read alike
API_NAME = "describe_log_sizes"

_ZERO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


# ---------------------------------------------------------------------------
# Schemas.  Every entity, nested ones included, carries the same class
# variables kio's generated classes do: what kind of entity it is, the API
# key and version, whether the version is flexible, and its header schema
# (request header v2 / response header v1 for flexible versions).


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSizesRequestTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_LOG_SIZES)
    __header_schema__: ClassVar[type] = RequestHeader
    name: str = field(metadata={"kafka_type": "string"})
    """The topic."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partitions to describe; empty for all of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogSizesRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_LOG_SIZES)
    __header_schema__: ClassVar[type] = RequestHeader
    topics: tuple[LogSizesRequestTopic, ...] | None = None
    """The topics to describe, or null for every topic."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSizesPartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_LOG_SIZES)
    __header_schema__: ClassVar[type] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    size_bytes: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    """Bytes on disk over all the partition's segments."""
    log_start_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))
    log_end_offset: i64 = field(metadata={"kafka_type": "int64"}, default=i64(-1))


@dataclass(frozen=True, slots=True, kw_only=True)
class LogSizesTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_LOG_SIZES)
    __header_schema__: ClassVar[type] = ResponseHeader
    name: str = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    partitions: tuple[LogSizesPartition, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeLogSizesResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(DESCRIBE_LOG_SIZES)
    __header_schema__: ClassVar[type] = ResponseHeader
    throttle_time: i32Timedelta = field(
        metadata={"kafka_type": "timedelta_i32"}, default=_ZERO_THROTTLE
    )
    topics: tuple[LogSizesTopic, ...] = ()


# At import: the broker imports drop-ins while discovering plugins, before
# any request is decoded, and a client imports this module to get
# describeLogSizes.  Registering the same classes again is harmless (a
# module imported once); different classes for the same version are refused.
registerSchema(DESCRIBE_LOG_SIZES, API_NAME, 0, DescribeLogSizesRequest, DescribeLogSizesResponse)


# ---------------------------------------------------------------------------
# The broker side


class DescribeLogSizesHandler(Handler):
    """
    Answers from the log manager.  Everything it reads is thread-safe (the
    log manager and partition logs may be used from any handler thread) and
    nothing waits, so it answers at once, in the handler thread.
    """

    apiKey = DESCRIBE_LOG_SIZES
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        logManager = self.broker.logManager
        known = logManager.topics()
        if request.topics is None:
            wanted = [(name, ()) for name in sorted(known)]
        else:
            wanted = [(t.name, t.partitions) for t in request.topics]
        topics = []
        for name, partitions in wanted:
            info = known.get(name)
            if info is None:
                topics.append(
                    LogSizesTopic(name=name, error_code=ErrorCode.unknown_topic_or_partition)
                )
                continue
            indexes = partitions or range(info.numPartitions)
            topics.append(
                LogSizesTopic(
                    name=name,
                    error_code=ErrorCode.none,
                    partitions=tuple(self._partition(logManager, name, i) for i in indexes),
                )
            )
        return DescribeLogSizesResponse(topics=tuple(topics))

    @staticmethod
    def _partition(logManager, topic, index):
        log = logManager.getLog(topic, index)
        if log is None:
            return LogSizesPartition(
                partition_index=i32(index), error_code=ErrorCode.unknown_topic_or_partition
            )
        return LogSizesPartition(
            partition_index=i32(index),
            error_code=ErrorCode.none,
            size_bytes=i64(log.size),
            log_start_offset=i64(log.logStartOffset),
            log_end_offset=i64(log.logEndOffset),
        )


logSizes = HandlerPlugin("example.log_sizes", DESCRIBE_LOG_SIZES, DescribeLogSizesHandler)


# ---------------------------------------------------------------------------
# The client side


@dataclass(frozen=True)
class LogSize:
    """
    One partition's log, as L{describeLogSizes} reports it.
    """

    sizeBytes: int
    logStartOffset: int
    logEndOffset: int


def describeLogSizes(client, topics=None, nodeId=None):
    """
    Ask a broker for its log sizes.

    @param client: a L{kafkatwist.client.KafkaWireClient}.
    @param topics: C{None} for every topic, or an iterable of topic names
        (all their partitions) or of C{(topic, [partition, ...])} pairs.
    @param nodeId: the broker to ask (default: any); each broker answers for
        the logs it holds.
    @return: C{{topic: {partition: LogSize}}}.
    @raise kafkatwist.errors.KafkaError: UNSUPPORTED_VERSION if the broker
        does not serve DescribeLogSizes (the plugin is not loaded), or the
        first topic's or partition's error.
    """
    requested = None
    if topics is not None:
        requested = tuple(
            LogSizesRequestTopic(name=t)
            if isinstance(t, str)
            else LogSizesRequestTopic(name=t[0], partitions=tuple(i32(p) for p in t[1]))
            for t in topics
        )

    def build(version, cls):
        return cls(topics=requested)

    _, response = client.call(DESCRIBE_LOG_SIZES, build, nodeId=nodeId)
    result = {}
    for topic in response.topics:
        if topic.error_code != ErrorCode.none:
            raise KafkaError(topic.error_code, topic.name)
        sizes = result.setdefault(topic.name, {})
        for p in topic.partitions:
            if p.error_code != ErrorCode.none:
                raise KafkaError(p.error_code, f"{topic.name}-{p.partition_index}")
            sizes[int(p.partition_index)] = LogSize(
                int(p.size_bytes), int(p.log_start_offset), int(p.log_end_offset)
            )
    return result
