"""
The Produce request and response, by hand: the broker's hottest path.

The request decoder reads the few fields around the record sets and hands
each partition's records on as a zero-copy C{memoryview} of the frame (kio's
reader copies each record set into new C{bytes}); the response encoder packs
the partition results straight into bytes, without building entities.  Both
cover v0-v12, flexible versions (v9+) included, and are checked against kio
in C{tests/unit/test_produce_codec.py}.

Layouts.  Request: [transactional_id (v3+)] acks int16, timeout int32,
topic_data [name, partition_data [index int32, records]].  Response:
responses [name, partition_responses [index int32, error_code int16,
base_offset int64, log_append_time int64 (v2+), log_start_offset int64
(v5+), record_errors [batch_index int32, message] and error_message
(v8+)]], throttle_time int32 (v1+).  From v9: compact arrays, strings and
bytes, and tagged fields after every struct.
"""

from __future__ import annotations

import struct

from kafkatwist.protocol.codec import EncodedResponse, MalformedRequest
# MalformedHeader is a ValueError: decodeProduceRequest turns it into MalformedRequest.
from kafkatwist.protocol.header import (
    INT16 as _I16,
    INT32 as _I32,
    readLength,
    skipTaggedFields,
    writeLength,
    writeString,
)

MIN_VERSION = 0
MAX_VERSION = 12
FLEXIBLE_FROM = 9

_ACKS_TIMEOUT = struct.Struct(">hi")
_V0 = struct.Struct(">ihq")
_V2 = struct.Struct(">ihqq")
_V5 = struct.Struct(">ihqqq")


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records) -> None:
        self.index = index
        self.records = records


class TopicProduceData:
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partitionData: list) -> None:
        self.name = name
        self.partition_data = partitionData


class ProduceRequest:
    """
    The fields of a Produce request the broker uses, under kio's names so a
    handler reads it as it reads kio's entity.

    @ivar topic_data: L{TopicProduceData}s; each partition's C{records} is
        a read-only C{memoryview} of the request frame, or C{None}.
    """

    __slots__ = ("transactional_id", "acks", "timeout_ms", "topic_data")

    def __init__(self, transactionalId, acks: int, timeoutMs: int, topicData: list) -> None:
        self.transactional_id = transactionalId
        self.acks = acks
        self.timeout_ms = timeoutMs
        self.topic_data = topicData

    @property
    def timeout(self):
        import datetime

        return datetime.timedelta(milliseconds=self.timeout_ms)


def decodeProduceRequest(version: int, frame, offset: int) -> ProduceRequest:
    """
    @param frame: the request frame (after the size prefix).
    @param offset: where the body starts.
    @raise MalformedRequest: if the body does not parse.
    """
    try:
        return _decode(version, memoryview(frame), offset)
    except MalformedRequest:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, ValueError) as e:
        raise MalformedRequest(f"{type(e).__name__}: {e}") from e


def _decode(version: int, view: memoryview, offset: int) -> ProduceRequest:
    end = len(view)
    flexible = version >= FLEXIBLE_FROM
    unpackI32 = _I32.unpack_from
    transactionalId = None
    if version >= 3:
        n, offset = readLength(view, offset, flexible, _I16)
        if n >= 0:
            if offset + n > end:
                raise MalformedRequest("transactional_id runs past the end")
            transactionalId = str(view[offset : offset + n], "utf-8")
            offset += n
        elif n != -1:
            raise MalformedRequest(f"transactional_id length {n}")
    acks, timeoutMs = _ACKS_TIMEOUT.unpack_from(view, offset)
    offset += 6
    topicCount, offset = readLength(view, offset, flexible, _I32)
    if topicCount < 0:
        raise MalformedRequest("topic_data is null")
    # Counts are bounded by the bytes left before anything loops on them:
    # the smallest topic is an empty name and an empty partition array.
    if topicCount * (3 if flexible else 6) > end - offset:
        raise MalformedRequest(f"{topicCount} topics cannot fit in {end - offset} bytes")
    topics = []
    for _ in range(topicCount):
        n, offset = readLength(view, offset, flexible, _I16)
        if n < 0 or offset + n > end:
            raise MalformedRequest(f"topic name length {n}")
        name = str(view[offset : offset + n], "utf-8")
        offset += n
        partitionCount, offset = readLength(view, offset, flexible, _I32)
        if partitionCount < 0:
            raise MalformedRequest("partition_data is null")
        if partitionCount * (6 if flexible else 8) > end - offset:
            raise MalformedRequest(f"{partitionCount} partitions cannot fit in {end - offset} bytes")
        partitions = []
        for _ in range(partitionCount):
            (index,) = unpackI32(view, offset)
            offset += 4
            n, offset = readLength(view, offset, flexible, _I32)
            if n < 0:
                if n != -1:
                    raise MalformedRequest(f"records length {n}")
                records = None
            else:
                if offset + n > end:
                    raise MalformedRequest("records run past the end of the frame")
                records = view[offset : offset + n]
                offset += n
            if flexible:
                offset = skipTaggedFields(view, offset)
            partitions.append(PartitionProduceData(index, records))
        if flexible:
            offset = skipTaggedFields(view, offset)
        topics.append(TopicProduceData(name, partitions))
    if flexible:
        offset = skipTaggedFields(view, offset)
    if offset > end:
        raise MalformedRequest("the request runs past the end of the frame")
    return ProduceRequest(transactionalId, acks, timeoutMs, topics)


def encodeProduceResponse(version: int, results, throttleMs: int = 0) -> EncodedResponse:
    """
    @param results: C{[(topic, [(index, errorCode, baseOffset, logAppendTime,
        logStartOffset, errorMessage or None, recordErrors), ...]), ...]};
        C{recordErrors} are C{(batch index, message or None)} (KIP-467).
    """
    flexible = version >= FLEXIBLE_FROM
    out = bytearray()
    writeLength(out, len(results), flexible, _I32)
    for name, partitions in results:
        writeString(out, name, flexible)
        writeLength(out, len(partitions), flexible, _I32)
        for index, error, base, appendTime, start, message, recordErrors in partitions:
            if version >= 5:
                out += _V5.pack(index, error, base, appendTime, start)
            elif version >= 2:
                out += _V2.pack(index, error, base, appendTime)
            else:
                out += _V0.pack(index, error, base)
            if version >= 8:
                writeLength(out, len(recordErrors), flexible, _I32)
                for batchIndex, recordMessage in recordErrors:
                    out += _I32.pack(batchIndex)
                    writeString(out, recordMessage, flexible)
                    if flexible:
                        out.append(0)
                writeString(out, message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    if version >= 1:
        out += _I32.pack(throttleMs)
    if flexible:
        out.append(0)
    body = bytes(out)
    return EncodedResponse([body], len(body))
