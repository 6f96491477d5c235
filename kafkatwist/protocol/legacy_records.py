"""
Message formats v0 and v1 (Kafka before 0.11; C{LegacyRecord} in Kafka's
clients): read, checked and written.  The broker stores only record batches
(magic 2); these are the formats old producers send and old consumers read,
converted at the edges by L{kafkatwist.protocol.convert}.

A message set is log entries one after the other, no count::

    offset int64 | message_size int32 (bytes that follow) | message

    message v0: crc uint32 | magic int8 = 0 | attributes int8 |
                key_length int32 (-1: null) | key | value_length int32 | value
    message v1: crc uint32 | magic int8 = 1 | attributes int8 | timestamp int64 |
                key_length int32 | key | value_length int32 | value

The CRC is CRC-32 (zlib's, not CRC-32C) of everything after it.  Attributes:
bits 0-2 the codec (0 none, 1 gzip, 2 snappy, 3 lz4; zstd never exists in
these formats), bit 3 (v1) the timestamp type.  A compressed set is one
wrapper message whose value is the compressed inner message set: in v0 the
inner offsets are absolute and the wrapper's is the last inner one's; in v1
(KIP-31) the inner offsets are relative (0..n-1) and the wrapper carries the
absolute offset of the last.

LZ4 in magic 0 is "broken-framed": clients of that era computed the frame
descriptor's checksum over the LZ4 magic number too.  Kafka ignores that
checksum when reading magic 0 and writes the broken one when writing it
(C{Lz4Compression}, librdkafka's C{rd_kafka_lz4_compress}): so does this
module.

Every length is checked against the bytes present before it is used, and
decompression is bounded.  Errors are Kafka's, in Kafka's order
(C{ByteBufferLogInputStream.nextBatchSize}, then the record's own checks):
CORRUPT_MESSAGE for sizes, magic, CRC; INVALID_RECORD for what is well
formed but not allowed.  Pure functions, no I/O.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol.batch import (
    CODEC_MASK,
    COMPRESSION_LZ4,
    COMPRESSION_ZSTD,
    LOG_OVERHEAD,
    MAGIC_AT,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
)
from kafkatwist.protocol.compression import (
    CorruptRecordError,
    compress,
    decompress,
)

__all__ = [
    "LOG_OVERHEAD",
    "LegacyMessage",
    "compressInner",
    "MAGIC_AT",
    "NO_TIMESTAMP",
    "TIMESTAMP_TYPE_BIT",
    "decompressWrapper",
    "encodeMessage",
    "messageSize",
    "readMessageSet",
]

# An entry starts as a v2 batch does (offset, then size: LOG_OVERHEAD bytes;
# the magic byte at MAGIC_AT), and its attributes hold the codec and the
# timestamp type in the same bits.

#: crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V0 = 14
#: ... and the timestamp
RECORD_OVERHEAD_V1 = 22

_ENTRY_HEAD = struct.Struct(">qi")
_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_HEAD_V0 = struct.Struct(">Ibb")
_HEAD_V1 = struct.Struct(">Ibbq")


class LegacyMessage(NamedTuple):
    """
    One v0/v1 message, checked.

    @ivar timestamp: C{NO_TIMESTAMP} in v0.
    @ivar key: C{bytes} or C{None}.
    @ivar value: C{bytes} or C{None}.
    """

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def logAppendTime(self) -> bool:
        """
        Whether a v1 message says its timestamp is the log-append time.
        """
        return self.magic > 0 and bool(self.attributes & TIMESTAMP_TYPE_BIT)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def readMessageSet(
    buf, magic: int, *, maxEntryBytes: int | None = None, inner: bool = False
) -> list[LegacyMessage]:
    """
    Read and check every entry of a v0/v1 message set.

    @param buf: the set (any buffer).
    @param magic: the format all entries must have (the first entry's for a
        produce request; the wrapper's for an inner set).
    @param maxEntryBytes: the topic's C{max.message.bytes}: an entry larger
        than this is MESSAGE_TOO_LARGE.
    @param inner: the set is a wrapper's inner set, whose messages may not
        be compressed themselves.
    @raise KafkaError: CORRUPT_MESSAGE (truncated or undersized entries, a
        magic that is no format, CRC mismatch, fields not filling the
        message), INVALID_RECORD (formats mixed, a compressed inner
        message, a zstd message), MESSAGE_TOO_LARGE.
    """
    view = memoryview(buf).cast("B")
    end = len(view)
    position = 0
    messages = []
    while position < end:
        available = end - position
        if available < LOG_OVERHEAD:
            raise _corrupt(f"{available} trailing bytes at {position}")
        offset, size = _ENTRY_HEAD.unpack_from(view, position)
        if size < RECORD_OVERHEAD_V0:
            raise _corrupt(f"message size {size} at {position} is below the minimum {RECORD_OVERHEAD_V0}")
        if maxEntryBytes is not None and LOG_OVERHEAD + size > maxEntryBytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"message of {LOG_OVERHEAD + size} bytes exceeds max.message.bytes {maxEntryBytes}",
            )
        if available <= MAGIC_AT:
            raise _corrupt(f"truncated message at {position}")
        found = view[position + MAGIC_AT]
        if found > 2:
            raise _corrupt(f"unknown magic {found} at {position}")
        if found != magic:
            raise _invalid(
                f"message at {position} has magic {found}, the set's first has {magic}"
            )
        stop = position + LOG_OVERHEAD + size
        if stop > end:
            raise _corrupt(f"message at {position} claims {size} bytes, {available - LOG_OVERHEAD} remain")
        messages.append(_readMessage(view, position, offset, size, magic, inner))
        position = stop
    return messages


def _readMessage(view, position: int, offset: int, size: int, magic: int, inner: bool):
    start = position + LOG_OVERHEAD
    stop = start + size
    if magic == 0:
        crc, _, attributes = _HEAD_V0.unpack_from(view, start)
        timestamp = NO_TIMESTAMP
        at = start + 6
    else:
        if size < RECORD_OVERHEAD_V1:
            raise _corrupt(f"message size {size} at {position} is below the v1 minimum {RECORD_OVERHEAD_V1}")
        crc, _, attributes, timestamp = _HEAD_V1.unpack_from(view, start)
        at = start + 14
    actual = zlib.crc32(view[start + 4 : stop])
    if actual != crc:
        raise _corrupt(f"CRC mismatch at {position}: stored {crc:#010x}, computed {actual:#010x}")
    codec = attributes & CODEC_MASK
    if codec == COMPRESSION_ZSTD:
        raise _invalid(f"zstd is not allowed in message format v{magic}")
    if codec > COMPRESSION_ZSTD:
        raise _corrupt(f"unknown compression codec {codec} at {position}")
    if inner and codec:
        raise _invalid("inner messages must not be compressed")
    if timestamp < NO_TIMESTAMP:
        raise KafkaError(ErrorCode.invalid_timestamp, f"invalid negative timestamp {timestamp} at {position}")
    key, at = _sizedBytes(view, at, stop, position, "key")
    value, at = _sizedBytes(view, at, stop, position, "value")
    if at != stop:
        raise _corrupt(f"message at {position} has {stop - at} bytes after its value")
    return LegacyMessage(offset, magic, attributes, timestamp, key, value)


def _sizedBytes(view, at: int, stop: int, position: int, what: str):
    if at + 4 > stop:
        raise _corrupt(f"message at {position}: {what} length runs past its end")
    (n,) = _INT32.unpack_from(view, at)
    at += 4
    if n == -1:
        return None, at
    if n < 0 or at + n > stop:
        raise _corrupt(f"message at {position}: {what} length {n} runs past its end")
    return bytes(view[at : at + n]), at + n


def decompressWrapper(wrapper: LegacyMessage, limit: int) -> list[LegacyMessage]:
    """
    The inner messages of a compressed wrapper, checked (Kafka's
    C{DeepRecordsIterator}): same magic as the wrapper, not compressed, at
    least one.  With a LogAppendTime v1 wrapper, every inner message
    carries the wrapper's timestamp, as Kafka's iterator reports it.

    @param limit: the most bytes the inner set may inflate to.
    """
    if wrapper.value is None:
        raise _invalid("compressed message with a null value")
    data = wrapper.value
    if wrapper.codec == COMPRESSION_LZ4 and wrapper.magic == 0:
        data = fixLz4HeaderChecksum(data)
    try:
        inflated = decompress(wrapper.codec, data, limit)
    except CorruptRecordError as e:
        raise _corrupt(f"compressed message: {e}") from None
    messages = readMessageSet(inflated, wrapper.magic, inner=True)
    if not messages:
        raise _invalid("compressed message with no inner messages")
    if wrapper.logAppendTime:
        messages = [m._replace(timestamp=wrapper.timestamp) for m in messages]
    return messages


def messageSize(magic: int, key: bytes | None, value: bytes | None) -> int:
    """
    Bytes one log entry of C{magic} takes, offset and size included.
    """
    size = LOG_OVERHEAD + (RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1)
    return size + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)


def encodeMessage(
    offset: int, magic: int, attributes: int, timestamp: int, key, value
) -> bytes:
    """
    One log entry, CRC included.  C{timestamp} is left out in v0.
    """
    body = bytearray()
    body += b"\x00\x00\x00\x00"
    body.append(magic)
    body.append(attributes & 0xFF)
    if magic > 0:
        body += _INT64.pack(timestamp)
    for part in (key, value):
        if part is None:
            body += b"\xff\xff\xff\xff"
        else:
            body += _INT32.pack(len(part))
            body += part
    _CRC.pack_into(body, 0, zlib.crc32(memoryview(body)[4:]))
    return _ENTRY_HEAD.pack(offset, len(body)) + bytes(body)


def compressInner(codec: int, magic: int, innerSet: bytes) -> bytes:
    """
    A wrapper's value: C{innerSet} compressed as a client of message format
    C{magic} writes it (LZ4 magic 0 with the broken checksum).
    """
    data = compress(codec, innerSet)
    if codec == COMPRESSION_LZ4 and magic == 0:
        data = _setLz4HeaderChecksum(data, broken=True)
    return data


# -- the LZ4 frame descriptor checksum ---------------------------------------

_LZ4_MAGIC = b"\x04\x22\x4d\x18"


def _lz4DescriptorEnd(data) -> int:
    """
    Where the header checksum byte sits: after the magic, FLG, BD and the
    optional content size (FLG bit 3) and dictionary id (FLG bit 0).
    """
    if len(data) < 7 or bytes(data[:4]) != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame")
    flags = data[4]
    end = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if end >= len(data):
        raise CorruptRecordError("truncated LZ4 frame header")
    return end


def _setLz4HeaderChecksum(data, *, broken: bool) -> bytes:
    end = _lz4DescriptorEnd(data)
    out = bytearray(data)
    covered = bytes(out[0 if broken else 4 : end])
    out[end] = (xxh32(covered) >> 8) & 0xFF
    return bytes(out)


def fixLz4HeaderChecksum(data) -> bytes:
    """
    A magic 0 LZ4 frame with its descriptor checksum made right, whatever
    it was (Kafka ignores it for magic 0), so a standard decoder reads it.
    """
    try:
        return _setLz4HeaderChecksum(data, broken=False)
    except CorruptRecordError as e:
        raise _corrupt(f"compressed message: {e}") from None


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """
    XXH32 (for LZ4 frame descriptors, a few bytes: plain Python will do).
    """
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            for i in range(4):
                (lane,) = struct.unpack_from("<I", data, pos)
                v[i] = (_rotl((v[i] + lane * _P2) & _M32, 13) * _P1) & _M32
                pos += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (word,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + word * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h

