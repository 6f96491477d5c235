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
#: a v9+ partition answered without record errors or message: its fields,
#: an empty compact array, a null compact string, no tagged fields
_V9_PLAIN = struct.Struct(">ihqqqBBB")


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
    if version >= FLEXIBLE_FROM:
        return _decodeFlexible(version, view, offset)
    end = len(view)
    unpackI32 = _I32.unpack_from
    transactionalId = None
    if version >= 3:
        n, offset = readLength(view, offset, False, _I16)
        if n >= 0:
            if offset + n > end:
                raise MalformedRequest("transactional_id runs past the end")
            transactionalId = str(view[offset : offset + n], "utf-8")
            offset += n
        elif n != -1:
            raise MalformedRequest(f"transactional_id length {n}")
    acks, timeoutMs = _ACKS_TIMEOUT.unpack_from(view, offset)
    offset += 6
    topicCount, offset = readLength(view, offset, False, _I32)
    if topicCount < 0:
        raise MalformedRequest("topic_data is null")
    # Counts are bounded by the bytes left before anything loops on them:
    # the smallest topic is an empty name and an empty partition array.
    if topicCount * 6 > end - offset:
        raise MalformedRequest(f"{topicCount} topics cannot fit in {end - offset} bytes")
    topics = []
    for _ in range(topicCount):
        n, offset = readLength(view, offset, False, _I16)
        if n < 0 or offset + n > end:
            raise MalformedRequest(f"topic name length {n}")
        name = str(view[offset : offset + n], "utf-8")
        offset += n
        partitionCount, offset = readLength(view, offset, False, _I32)
        if partitionCount < 0:
            raise MalformedRequest("partition_data is null")
        if partitionCount * 8 > end - offset:
            raise MalformedRequest(f"{partitionCount} partitions cannot fit in {end - offset} bytes")
        partitions = []
        for _ in range(partitionCount):
            (index,) = unpackI32(view, offset)
            offset += 4
            n, offset = readLength(view, offset, False, _I32)
            if n < 0:
                if n != -1:
                    raise MalformedRequest(f"records length {n}")
                records = None
            else:
                if offset + n > end:
                    raise MalformedRequest("records run past the end of the frame")
                records = view[offset : offset + n]
                offset += n
            partitions.append(PartitionProduceData(index, records))
        topics.append(TopicProduceData(name, partitions))
    if offset > end:
        raise MalformedRequest("the request runs past the end of the frame")
    return ProduceRequest(transactionalId, acks, timeoutMs, topics)


def _decodeFlexible(version: int, view: memoryview, offset: int) -> ProduceRequest:
    # v9+: compact lengths (varint of length + 1) and tagged fields.  A
    # producer's lengths and counts are nearly always below 127, one byte
    # each, and its tagged fields empty: those are read inline, anything
    # longer by the general readers (the hottest decoder of the broker).
    end = len(view)
    unpackI32 = _I32.unpack_from
    transactionalId = None
    b = view[offset]
    if b < 0x80:
        n = b - 1
        offset += 1
    else:
        n, offset = readLength(view, offset, True, _I16)
    if n >= 0:
        if offset + n > end:
            raise MalformedRequest("transactional_id runs past the end")
        transactionalId = str(view[offset : offset + n], "utf-8")
        offset += n
    elif n != -1:
        raise MalformedRequest(f"transactional_id length {n}")
    acks, timeoutMs = _ACKS_TIMEOUT.unpack_from(view, offset)
    offset += 6
    b = view[offset]
    if b < 0x80:
        topicCount = b - 1
        offset += 1
    else:
        topicCount, offset = readLength(view, offset, True, _I32)
    if topicCount < 0:
        raise MalformedRequest("topic_data is null")
    # Counts are bounded by the bytes left before anything loops on them:
    # the smallest topic is an empty name and an empty partition array.
    if topicCount * 3 > end - offset:
        raise MalformedRequest(f"{topicCount} topics cannot fit in {end - offset} bytes")
    topics = []
    for _ in range(topicCount):
        b = view[offset]
        if b < 0x80:
            n = b - 1
            offset += 1
        else:
            n, offset = readLength(view, offset, True, _I16)
        if n < 0 or offset + n > end:
            raise MalformedRequest(f"topic name length {n}")
        name = str(view[offset : offset + n], "utf-8")
        offset += n
        b = view[offset]
        if b < 0x80:
            partitionCount = b - 1
            offset += 1
        else:
            partitionCount, offset = readLength(view, offset, True, _I32)
        if partitionCount < 0:
            raise MalformedRequest("partition_data is null")
        if partitionCount * 6 > end - offset:
            raise MalformedRequest(f"{partitionCount} partitions cannot fit in {end - offset} bytes")
        partitions = []
        for _ in range(partitionCount):
            (index,) = unpackI32(view, offset)
            offset += 4
            # A small record set takes two bytes (below 16 KiB).
            b = view[offset]
            if b < 0x80:
                n = b - 1
                offset += 1
            else:
                b2 = view[offset + 1]
                if b2 < 0x80:
                    n = ((b & 0x7F) | (b2 << 7)) - 1
                    offset += 2
                else:
                    n, offset = readLength(view, offset, True, _I32)
            if n < 0:
                if n != -1:
                    raise MalformedRequest(f"records length {n}")
                records = None
            else:
                if offset + n > end:
                    raise MalformedRequest("records run past the end of the frame")
                records = view[offset : offset + n]
                offset += n
            if view[offset] == 0:
                offset += 1
            else:
                offset = skipTaggedFields(view, offset)
            partitions.append(PartitionProduceData(index, records))
        if view[offset] == 0:
            offset += 1
        else:
            offset = skipTaggedFields(view, offset)
        topics.append(TopicProduceData(name, partitions))
    if offset < end and view[offset] == 0:
        offset += 1
    else:
        offset = skipTaggedFields(view, offset)
    if offset > end:
        raise MalformedRequest("the request runs past the end of the frame")
    return ProduceRequest(transactionalId, acks, timeoutMs, topics)


def produceErrorCounts(results) -> dict[int, int]:
    # Kafka's ProduceResponse.errorCounts: each partition by its error.
    counts: dict[int, int] = {}
    for _, partitions in results:
        for partition in partitions:
            code = int(partition[1])
            counts[code] = counts.get(code, 0) + 1
    return counts


def encodeProduceResponse(version: int, results, throttleMs: int = 0) -> EncodedResponse:
    """
    @param results: C{[(topic, [(index, errorCode, baseOffset, logAppendTime,
        logStartOffset, errorMessage or None, recordErrors), ...]), ...]};
        C{recordErrors} are C{(batch index, message or None)} (KIP-467).
    """
    if version >= FLEXIBLE_FROM:
        return _encodeFlexible(results, throttleMs)
    out = bytearray()
    out += _I32.pack(len(results))
    for name, partitions in results:
        writeString(out, name, False)
        out += _I32.pack(len(partitions))
        for index, error, base, appendTime, start, message, recordErrors in partitions:
            if version >= 5:
                out += _V5.pack(index, error, base, appendTime, start)
            elif version >= 2:
                out += _V2.pack(index, error, base, appendTime)
            else:
                out += _V0.pack(index, error, base)
            if version >= 8:
                out += _I32.pack(len(recordErrors))
                for batchIndex, recordMessage in recordErrors:
                    out += _I32.pack(batchIndex)
                    writeString(out, recordMessage, False)
                writeString(out, message, False)
    if version >= 1:
        out += _I32.pack(throttleMs)
    body = bytes(out)
    return EncodedResponse([body], len(body), produceErrorCounts(results))


def _encodeFlexible(results, throttleMs: int) -> EncodedResponse:
    # v9+, with the one-byte compact lengths of the usual answer written
    # inline (see encodeProduceResponse).
    out = bytearray()
    n = len(results) + 1
    if n < 0x80:
        out.append(n)
    else:
        writeLength(out, n - 1, True, _I32)
    plain = _V9_PLAIN.pack
    for name, partitions in results:
        raw = name.encode("utf-8")
        n = len(raw) + 1
        if n < 0x80:
            out.append(n)
        else:
            writeLength(out, n - 1, True, _I16)
        out += raw
        n = len(partitions) + 1
        if n < 0x80:
            out.append(n)
        else:
            writeLength(out, n - 1, True, _I32)
        for index, error, base, appendTime, start, message, recordErrors in partitions:
            if message is None and not recordErrors:
                out += plain(index, error, base, appendTime, start, 1, 0, 0)
                continue
            out += _V5.pack(index, error, base, appendTime, start)
            writeLength(out, len(recordErrors), True, _I32)
            for batchIndex, recordMessage in recordErrors:
                out += _I32.pack(batchIndex)
                writeString(out, recordMessage, True)
                out.append(0)
            writeString(out, message, True)
            out.append(0)
        out.append(0)
    out += _I32.pack(throttleMs)
    out.append(0)
    body = bytes(out)
    return EncodedResponse([body], len(body), produceErrorCounts(results))


# -- the commonest request, read and answered in one piece --------------------

#: where a record batch's magic byte and its attributes' low byte are
_TRANSACTIONAL_BIT = 0x10
#: the smallest record batch (its header)
_BATCH_HEADER_SIZE = 61

_SMALL_TAIL = ">BihqqqBBBBiB"
#: null transactional id, acks, timeout, topic count, topic name length
_SMALL_HEAD = struct.Struct(">BhiBB")
#: partition count, index, the first byte of the record set's length
_SMALL_PARTITION = struct.Struct(">BiB")
#: the partition's, the topic's and the request's (empty) tagged fields
_NO_TAGS = b"\x00\x00\x00"
#: a batch's length (at 8), magic (at 16) and attributes' low byte (at 22)
_BATCH_START = struct.Struct(">8xi4xB5xB")
_smallAnswers: dict = {}


def readSmallProduce(version: int, frame, offset: int):
    """
    Recognise the commonest Produce request: v9+, a null transactional id,
    one topic (a name of 1-126 bytes) of one partition whose record set
    (of a one- or two-byte compact length: below 16 KiB) is one record
    batch (magic 2) that is not transactional, and no tagged fields -- the
    whole frame, nothing after it.

    @param frame: the request frame (after the size prefix).
    @param offset: where the body starts.
    @return: C{(acks, topic, partition, start, end)} (the records are
        C{frame[start:end]}), or C{None} for any other request, malformed
        ones included (the general decoder says what is wrong with those).
    """
    if version < FLEXIBLE_FROM:
        return None
    size = len(frame)
    try:
        transactionalId, acks, _, topics, n = _SMALL_HEAD.unpack_from(frame, offset)
        if transactionalId or topics != 2 or n < 2 or n > 127:
            return None
        at = offset + 8 + n
        name = str(frame[offset + 9 : at], "utf-8")
        partitions, index, b = _SMALL_PARTITION.unpack_from(frame, at)
        if partitions != 2:
            return None
        at += 6
        if b < 0x80:
            n = b - 1
        else:
            b2 = frame[at]
            if b2 >= 0x80:
                return None
            n = ((b & 0x7F) | (b2 << 7)) - 1
            at += 1
        end = at + n
        if n < _BATCH_HEADER_SIZE or end + 3 != size or frame[end:] != _NO_TAGS:
            return None
        length, magic, attributes = _BATCH_START.unpack_from(frame, at)
        # one batch, the whole record set (Kafka refuses a second one)
        if length + 12 != n or magic != 2 or attributes & _TRANSACTIONAL_BIT:
            return None
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    return acks, name, index, at, end


def encodeSmallProduceAnswer(
    correlationId: int, topic: str, partition: int, baseOffset: int, logAppendTime: int,
    logStartOffset: int, throttleMs: int,
) -> list:
    """
    The whole response frame (size prefix, header v1, body) of a v9+
    Produce of one partition answered without error: what
    L{encodeProduceResponse} and the response header give, packed at once
    from a layout kept per topic name.

    @return: the chunks to write (one).
    """
    layout = _smallAnswers.get(topic)
    if layout is None:
        raw = topic.encode("utf-8")
        if len(raw) > 126:
            raise ValueError("topic name too long for the one-byte layout")
        shape = struct.Struct(f">iiBBB{len(raw)}s" + _SMALL_TAIL[1:])
        layout = (shape.pack, shape.size - 4, len(raw) + 1, raw)
        if len(_smallAnswers) < 10_000:
            _smallAnswers[topic] = layout
    pack, size, n, raw = layout
    return [
        pack(
            size, correlationId, 0, 2, n, raw, 2, partition, 0, baseOffset, logAppendTime,
            logStartOffset, 1, 0, 0, 0, throttleMs, 0,
        )
    ]
