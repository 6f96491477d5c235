"""
Decoding batches read back from the log, without trusting them.

The hot paths never decode a stored batch: Produce checks batch headers and
CRCs, Fetch sends file regions.  The few readers that do decode records
(ListOffsets by timestamp, loading group state) read bytes that passed those
checks once, but a disk, an operator or a bug may have changed them since,
and a CRC-valid batch may still hold a payload that does not decode or that
inflates without bound (a 262 KB zstd batch of zeros is 8 GiB).  Here each
batch is checked again (header, CRC-32C, record count) and decompressed
into at most C{maxDecompressedBytes}, and any failure is one
L{StoredBatchError} (CORRUPT_MESSAGE) naming the batch's offset, which
L{reportCorrupt} logs once per place.

This is the log's own bounded wrapper around
L{kafkatwist.protocol.records}; it is meant to give way to the bounded,
validating decoder that module is getting.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

import cramjam
import lz4.frame
import zstandard

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.throttle import storageLog
from kafkatwist.protocol.batch import HEADER_SIZE, LOG_OVERHEAD, batchError, compressionCodec
from kafkatwist.protocol.records import CorruptRecordError, RecordBatch, decodeBatches

__all__ = [
    "StoredBatchError",
    "decodeStoredBatches",
    "decompressedLimit",
    "inflate",
    "reportCorrupt",
]

#: the least a decoder is allowed to inflate a batch to
MIN_DECOMPRESSED_BYTES = 64 * 1024 * 1024
#: a batch may inflate to this many times the topic's max.message.bytes
DECOMPRESSION_FACTOR = 64

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_AT = 8
_ATTRIBUTES = struct.Struct(">h")
_ATTRIBUTES_AT = 21
_CODEC_MASK = 0x07
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_BLOCK_LENGTH = struct.Struct(">i")


class StoredBatchError(KafkaError):
    """
    A stored batch that does not decode.

    @ivar offset: the batch's base offset (as stored), or C{None} if not
        even the header is readable.
    @ivar reason: why.
    """

    def __init__(self, offset: int | None, reason: str) -> None:
        self.offset = offset
        self.reason = reason
        where = f"batch at offset {offset}" if offset is not None else "batch"
        super().__init__(ErrorCode.corrupt_message, f"stored {where} is corrupt: {reason}")


def decompressedLimit(maxMessageBytes: int) -> int:
    """
    How far a batch of a topic with C{max.message.bytes} may inflate.
    """
    return max(MIN_DECOMPRESSED_BYTES, DECOMPRESSION_FACTOR * maxMessageBytes)


def decodeStoredBatches(data, *, maxDecompressedBytes: int) -> Iterator[RecordBatch]:
    """
    Decode the whole batches of C{data} (a log read), checking each.

    @raise StoredBatchError: at the first batch that is damaged or inflates
        past C{maxDecompressedBytes}; the batches before it were yielded.
    """
    view = memoryview(data).cast("B")
    end = len(view)
    position = 0
    while position < end:
        # Stored data: the cleaner may have removed records from a batch.
        header, error = batchError(view, position, end - position, cleaned=True)
        if error is not None:
            raise StoredBatchError(
                header.baseOffset if header is not None else None, error.message or str(error)
            )
        batchEnd = position + header.size
        codec = compressionCodec(header.attributes)
        try:
            if codec:
                records = _decompress(
                    codec, view[position + HEADER_SIZE : batchEnd], maxDecompressedBytes
                )
                plain = bytearray(view[position : position + HEADER_SIZE])
                _BATCH_LENGTH.pack_into(
                    plain, _BATCH_LENGTH_AT, HEADER_SIZE - LOG_OVERHEAD + len(records)
                )
                _ATTRIBUTES.pack_into(plain, _ATTRIBUTES_AT, header.attributes & ~_CODEC_MASK)
                plain += records
            else:
                plain = view[position:batchEnd]
            [batch] = decodeBatches(plain, checkCrc=False)
        except (CorruptRecordError, ValueError) as e:
            raise StoredBatchError(header.baseOffset, str(e)) from None
        batch.attributes = header.attributes
        batch.sizeInBytes = header.size
        yield batch
        position = batchEnd


def reportCorrupt(topic: str, partition: int, error: StoredBatchError, what: str) -> None:
    """
    Log C{error} once per partition and offset.
    """
    storageLog.once(
        ("corrupt-batch", topic, partition, error.offset),
        "{topic}-{partition} offset {offset}: {what} failed, the stored batch is corrupt: "
        "{reason}",
        topic=topic,
        partition=partition,
        offset=error.offset,
        what=what,
        reason=error.reason,
    )


# -- bounded decompression -----------------------------------------------------------


class _TooLarge(CorruptRecordError):
    pass


def _tooLarge(limit: int) -> _TooLarge:
    return _TooLarge(f"records inflate past {limit} bytes")


def inflate(codec: int, data, limit: int) -> bytes:
    """
    Decompress a batch's records (C{codec} 1-4) into at most C{limit}
    bytes.

    @raise CorruptRecordError: they do not decompress, or inflate past
        C{limit}.
    """
    return _decompress(codec, data, limit)


def _decompress(codec: int, data, limit: int) -> bytes:
    try:
        if codec == 1:
            return _gunzip(bytes(data), limit)
        if codec == 2:
            return _unsnappy(bytes(data), limit)
        if codec == 3:
            return _unlz4(bytes(data), limit)
        if codec == 4:
            return _unzstd(bytes(data), limit)
    except CorruptRecordError:
        raise
    except Exception as e:
        raise CorruptRecordError(f"cannot decompress codec {codec} records: {e}") from None
    raise CorruptRecordError(f"unknown compression codec {codec}")


def _gunzip(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:
        d = zlib.decompressobj(47)
        chunk = d.decompress(data, limit + 1 - len(out))
        while True:
            out += chunk
            if len(out) > limit:
                raise _tooLarge(limit)
            if not d.unconsumed_tail:
                break
            chunk = d.decompress(d.unconsumed_tail, limit + 1 - len(out))
        out += d.flush()
        if len(out) > limit:
            raise _tooLarge(limit)
        if not d.eof:
            raise CorruptRecordError("truncated gzip stream")
        data = d.unused_data
    return bytes(out)


def _snappyLength(block: bytes) -> int:
    # A raw snappy block starts with its uncompressed length (a varint).
    value = shift = 0
    for i, byte in enumerate(block[:5]):
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise CorruptRecordError("bad snappy length")


def _unsnappy(data: bytes, limit: int) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        if _snappyLength(data) > limit:
            raise _tooLarge(limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    position = _XERIAL_HEADER_SIZE
    while position < len(data):
        if position + 4 > len(data):
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if size < 0 or position + size > len(data):
            raise CorruptRecordError("truncated xerial snappy block")
        block = data[position : position + size]
        if len(out) + _snappyLength(block) > limit:
            raise _tooLarge(limit)
        out += cramjam.snappy.decompress_raw(block)
        position += size
    return bytes(out)


def _unlz4(data: bytes, limit: int) -> bytes:
    out = bytearray()
    while data:
        d = lz4.frame.LZ4FrameDecompressor()
        out += d.decompress(data, max_length=limit + 1 - len(out))
        if len(out) > limit:
            raise _tooLarge(limit)
        if not d.eof:
            raise CorruptRecordError("truncated lz4 frame")
        data = d.unused_data
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    # A streaming frame need not carry its content size: read at most one
    # byte past the limit, whatever the frames claim.
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    out = reader.read(limit + 1)
    if len(out) > limit:
        raise _tooLarge(limit)
    return out
