"""
One partition's answer read out of a Fetch response frame by hand, the
records left where they were received.

A Fetch response is megabytes of records around a few dozen bytes of
fields.  The general decoder (the bounds walk, then kio) copies the records
out into C{bytes} of their own; a reader that decodes them at once (the
Spark source) needs only where they are.  L{readFetchPartition} reads the
fields of Fetch v4-v17 (Kafka's C{FetchResponse.json}) with C{struct} and
returns the records as a slice of the frame: a C{memoryview} that keeps the
received buffer alive, no copy made.

A frame that does not parse (a count or length past its end, a bad varint)
raises L{MalformedFetchResponse}: the caller treats it as the general
decoder's failure, a broken connection.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from kafkatwist.protocol.header import MalformedHeader, readUnsignedVarint, skipTaggedFields

__all__ = ["FIRST_VERSION", "FetchPartitionAnswer", "MalformedFetchResponse", "readFetchPartition"]

#: the oldest version read here (record batches, magic 2, need v4)
FIRST_VERSION = 4
#: the newest Fetch version whose layout this module knows
LAST_VERSION = 17

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I16_I32 = struct.Struct(">hi")
#: partition_index, error_code, high_watermark, last_stable_offset
_PARTITION_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")


class MalformedFetchResponse(ValueError):
    """
    A Fetch response frame that does not parse.
    """


class FetchPartitionAnswer(NamedTuple):
    """
    What a Fetch response says about one partition.

    @ivar records: the record bytes, a C{memoryview} into the frame (C{None}
        if the broker sent null).
    @ivar abortedTransactions: C{(producerId, firstOffset)} pairs, C{()} if
        none or null.
    """

    error: int
    highWatermark: int
    lastStableOffset: int
    logStartOffset: int
    abortedTransactions: tuple
    records: memoryview | None


def _length(frame, offset: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    if flexible:
        n, offset = readUnsignedVarint(frame, offset)
        return n - 1, offset
    (n,) = legacy.unpack_from(frame, offset)
    return n, offset + legacy.size


def readFetchPartition(
    frame: memoryview, version: int, topic: str | None, topicId: uuid.UUID | None, partition: int
) -> tuple[int, FetchPartitionAnswer | None]:
    """
    Find C{partition} of the topic named C{topic} (Fetch v4-v12) or with id
    C{topicId} (v13+) in a Fetch response.

    @param frame: the response frame after its size prefix (correlation id
        first), as L{BrokerConnection.requestFrame} returns it.
    @return: the response's top-level error (v7+; else 0) and the
        partition's answer, C{None} if the response does not list it (a
        top-level error answers with no topics).
    @raise MalformedFetchResponse: if the frame does not parse.
    """
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Fetch v{version} responses are not read here")
    try:
        return _read(frame, version, topic, topicId, partition)
    except (struct.error, IndexError, MalformedHeader) as e:
        raise MalformedFetchResponse(f"Fetch v{version} response: {e}") from None


def _read(frame, version, topic, topicId, partition):
    flexible = version >= 12
    byId = version >= 13
    end = len(frame)
    offset = 4  # the correlation id
    if flexible:
        offset = skipTaggedFields(frame, offset)  # response header v1
    offset += 4  # throttle_time_ms
    topLevelError = 0
    if version >= 7:
        topLevelError, _session = _I16_I32.unpack_from(frame, offset)
        offset += 6
    wantedName = None if topic is None else topic.encode("utf-8")
    wantedId = None if topicId is None else topicId.bytes
    topics, offset = _length(frame, offset, flexible, _I32)
    for _ in range(max(topics, 0)):
        if byId:
            name = bytes(frame[offset : offset + 16])
            if len(name) != 16:
                raise MalformedFetchResponse("topic id past the end of the frame")
            offset += 16
            wanted = name == wantedId
        else:
            size, offset = _length(frame, offset, flexible, _I16)
            if size < 0 or offset + size > end:
                raise MalformedFetchResponse("topic name past the end of the frame")
            wanted = frame[offset : offset + size] == wantedName
            offset += size
        partitions, offset = _length(frame, offset, flexible, _I32)
        for _ in range(max(partitions, 0)):
            index, error, highWatermark, lastStable = _PARTITION_HEAD.unpack_from(frame, offset)
            offset += _PARTITION_HEAD.size
            logStart = -1
            if version >= 5:
                (logStart,) = _I64.unpack_from(frame, offset)
                offset += 8
            count, offset = _length(frame, offset, flexible, _I32)
            aborted = []
            for _ in range(max(count, 0)):
                aborted.append(_ABORTED.unpack_from(frame, offset))
                offset += 16
                if flexible:
                    offset = skipTaggedFields(frame, offset)
            if version >= 11:
                offset += 4  # preferred_read_replica
            size, offset = _length(frame, offset, flexible, _I32)
            if size < -1 or offset + max(size, 0) > end:
                raise MalformedFetchResponse("records past the end of the frame")
            records = None if size < 0 else frame[offset : offset + size]
            offset += max(size, 0)
            if flexible:
                offset = skipTaggedFields(frame, offset)
            if wanted and index == partition:
                return topLevelError, FetchPartitionAnswer(
                    error, highWatermark, lastStable, logStart, tuple(aborted), records
                )
        if flexible:
            offset = skipTaggedFields(frame, offset)
    if offset > end:
        raise MalformedFetchResponse("fields past the end of the frame")
    return topLevelError, None
