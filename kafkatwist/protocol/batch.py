"""
Record batch (magic 2) headers, handled without decoding records.

The broker keeps produced batches opaque: it checks the 61-byte header and
the CRC-32C, walks the records' length prefixes to check that the batch
holds the records its header declares (decompressing, within a bound, when
compressed), assigns offsets by rewriting C{baseOffset}, and for
C{LogAppendTime} topics stamps C{maxTimestamp}.  Keys, values and headers
are never decoded.

Header layout (big-endian)::

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
    magic int8 | crc uint32 | attributes int16 | lastOffsetDelta int32 |
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 |
    producerEpoch int16 | baseSequence int32 | recordsCount int32

C{batchLength} counts the bytes after itself, so a batch spans
C{12 + batchLength} bytes; the CRC covers everything from C{attributes} on.

Pure functions only: no I/O, no Twisted.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    CorruptRecordError,
    decompress,
    decompressionLimit,
)
from kafkatwist.protocol.recordwalk import MIN_RECORD_SIZE, skipRecords

__all__ = [
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "TIMESTAMP_CREATE_TIME",
    "TIMESTAMP_LOG_APPEND_TIME",
    "AssignedBatch",
    "BatchHeader",
    "ValidBatch",
    "assignOffsets",
    "batchError",
    "compressionCodec",
    "isControl",
    "isTransactional",
    "iterBatchHeaders",
    "packBatch",
    "readHeader",
    "recordsError",
    "timestampType",
    "transactionalProducer",
    "validateRecordSet",
]

# The one definition of the layout: everything that reads or writes batch
# headers (records.py, the log's segments) takes it from here.
_FORMAT = ">qiibIhiqqqhii"
HEADER = struct.Struct(_FORMAT)
HEADER_SIZE = HEADER.size  # 61
#: the header up to maxTimestamp: what a scan of offsets and times reads
SCAN_HEADER = struct.Struct(_FORMAT[:10])
#: baseOffset + batchLength: the part not counted by batchLength.
LOG_OVERHEAD = 12
#: baseOffset + batchLength, read together
PREFIX = struct.Struct(_FORMAT[:3])
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
#: baseOffset, batchLength and partitionLeaderEpoch, written together
_ASSIGN = struct.Struct(">qii")
# NamedTuple construction without its Python-level __new__ (hot path).
_newTuple = tuple.__new__
#: record sets up to this size are checked without a memoryview over them
_SMALL_SET = 4096

# Field positions inside a batch.
BASE_OFFSET_AT = 0
BATCH_LENGTH_AT = 8
LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
#: where the CRC-covered part begins
ATTRIBUTES_AT = 21
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
#: the producer id and epoch, read together (at L{PRODUCER_ID_AT})
PRODUCER = struct.Struct(">qh")
#: the producer id alone
PRODUCER_ID = struct.Struct(">q")
#: the CRC (at L{CRC_AT}), over everything from L{ATTRIBUTES_AT} on
CRC = struct.Struct(">I")

NO_TIMESTAMP = -1

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1

CODEC_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
#: KIP-534: the batch's base timestamp is its delete horizon
DELETE_HORIZON_BIT = 0x40


class BatchHeader(NamedTuple):
    """
    The decoded fixed header of one batch.
    """

    baseOffset: int
    batchLength: int
    partitionLeaderEpoch: int
    magic: int
    crc: int
    attributes: int
    lastOffsetDelta: int
    baseTimestamp: int
    maxTimestamp: int
    producerId: int
    producerEpoch: int
    baseSequence: int
    recordsCount: int

    @property
    def size(self) -> int:
        """
        Bytes the whole batch spans.
        """
        return LOG_OVERHEAD + self.batchLength

    @property
    def lastOffset(self) -> int:
        return self.baseOffset + self.lastOffsetDelta


class ValidBatch(NamedTuple):
    """
    One batch of a validated record set: where it is and its header.
    """

    position: int
    header: BatchHeader


def compressionCodec(attributes: int) -> int:
    """
    @return: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    """
    return attributes & CODEC_MASK


def timestampType(attributes: int) -> int:
    """
    @return: L{TIMESTAMP_CREATE_TIME} or L{TIMESTAMP_LOG_APPEND_TIME}.
    """
    return 1 if attributes & TIMESTAMP_TYPE_BIT else 0


def isTransactional(attributes: int) -> bool:
    return bool(attributes & TRANSACTIONAL_BIT)


def isControl(attributes: int) -> bool:
    return bool(attributes & CONTROL_BIT)


def transactionalProducer(records):
    """
    C{(producerId, epoch)} if the record set's first batch is
    transactional, else C{None}.
    """
    if records is None or len(records) < HEADER_SIZE or records[MAGIC_AT] != 2:
        # Old message formats (v0, v1) know no transactions.
        return None
    (attributes,) = _INT16.unpack_from(records, ATTRIBUTES_AT)
    if not attributes & TRANSACTIONAL_BIT:
        return None
    return PRODUCER.unpack_from(records, PRODUCER_ID_AT)


def packBatch(
    baseOffset: int,
    partitionLeaderEpoch: int,
    attributes: int,
    lastOffsetDelta: int,
    baseTimestamp: int,
    maxTimestamp: int,
    producerId: int,
    producerEpoch: int,
    baseSequence: int,
    recordsCount: int,
    records=b"",
    magic: int = 2,
) -> bytearray:
    """
    A whole batch: the header of these fields, then C{records} (the
    records as stored, compressed already if the attributes say so), its
    length and CRC-32C computed.
    """
    batch = bytearray(
        HEADER.pack(
            baseOffset,
            HEADER_SIZE - LOG_OVERHEAD + len(records),
            partitionLeaderEpoch,
            magic,
            0,  # the CRC, below
            attributes,
            lastOffsetDelta,
            baseTimestamp,
            maxTimestamp,
            producerId,
            producerEpoch,
            baseSequence,
            recordsCount,
        )
    )
    crc = crc32c(records, crc32c(memoryview(batch)[ATTRIBUTES_AT:]))
    CRC.pack_into(batch, CRC_AT, crc)
    batch += records
    return batch


def readHeader(buf, position: int = 0) -> BatchHeader:
    """
    Decode the header of the batch starting at C{position}.

    @raise struct.error: fewer than L{HEADER_SIZE} bytes are available.
    """
    return BatchHeader._make(HEADER.unpack_from(buf, position))


def iterBatchHeaders(buf, position: int = 0, end: int | None = None) -> Iterator[ValidBatch]:
    """
    Walk the batches of C{buf} without checking them.

    Stops before a batch that does not fit completely before C{end}, so a
    truncated tail is silently left out; callers that care compare the last
    batch's end with C{end}.
    """
    if end is None:
        end = len(buf)
    unpack = HEADER.unpack_from
    while position + HEADER_SIZE <= end:
        header = BatchHeader._make(unpack(buf, position))
        size = LOG_OVERHEAD + header.batchLength
        if header.batchLength < HEADER_SIZE - LOG_OVERHEAD or position + size > end:
            return
        yield ValidBatch(position, header)
        position += size


def batchError(
    view: memoryview | bytes | bytearray, position: int, available: int, *, cleaned: bool = False
) -> tuple[BatchHeader | None, KafkaError | None]:
    """
    Check the batch at C{position} of C{view}, with C{available} bytes from
    C{position} to the end of the data.

    @param cleaned: the batch comes from a log, where the cleaner may have
        removed records (fewer than C{lastOffsetDelta + 1}, or none: an
        empty batch kept for its producer's sequence numbers).
    @return: C{(header, None)} if the batch is sound, else C{(header or None,
        error)}.  Returning the error rather than raising lets recovery stop
        at the first bad batch cheaply.
    """
    if available < LOG_OVERHEAD:
        return None, KafkaError(
            ErrorCode.corrupt_message, f"{available} trailing bytes at {position}"
        )
    # The magic first: a v0/v1 message sits where a batch would, with its
    # magic at the same place, but is shorter than a v2 header; it is
    # refused as the old format it is, not as a damaged batch.
    if available > MAGIC_AT:
        magic = view[position + MAGIC_AT]
        if magic != 2:
            code = (
                ErrorCode.unsupported_for_message_format
                if magic in (0, 1)
                else ErrorCode.corrupt_message
            )
            return None, KafkaError(code, f"magic {magic} at {position}, only 2 is supported")
    if available < HEADER_SIZE:
        return None, KafkaError(ErrorCode.corrupt_message, f"truncated batch header at {position}")
    header = BatchHeader._make(HEADER.unpack_from(view, position))
    size = LOG_OVERHEAD + header.batchLength
    if header.batchLength < HEADER_SIZE - LOG_OVERHEAD:
        return header, KafkaError(
            ErrorCode.corrupt_message, f"batchLength {header.batchLength} too small at {position}"
        )
    if size > available:
        return header, KafkaError(
            ErrorCode.corrupt_message,
            f"batch at {position} claims {size} bytes, {available} available",
        )
    actual = crc32c(view[position + ATTRIBUTES_AT : position + size])
    if actual != header.crc:
        return header, KafkaError(
            ErrorCode.corrupt_message,
            f"CRC mismatch at {position}: stored {header.crc:#010x}, computed {actual:#010x}",
        )
    count, delta = header.recordsCount, header.lastOffsetDelta
    if cleaned:
        badCount = delta < 0 or not 0 <= count <= delta + 1
    else:
        badCount = count < 1 or delta != count - 1
    if badCount:
        return header, KafkaError(
            ErrorCode.invalid_record,
            f"recordsCount {header.recordsCount} does not match lastOffsetDelta "
            f"{header.lastOffsetDelta} at {position}",
        )
    if header.attributes & CODEC_MASK > COMPRESSION_ZSTD:
        return header, KafkaError(
            ErrorCode.corrupt_message,
            f"unknown compression codec {header.attributes & CODEC_MASK}",
        )
    return header, None


def validateRecordSet(
    buf, *, maxBatchBytes: int | None = None, allowControl: bool = False
) -> list[ValidBatch]:
    """
    Validate one produce request's record set for one partition.

    @param buf: the concatenated batches.
    @param maxBatchBytes: the topic's C{max.message.bytes}; a batch larger
        than this is refused with MESSAGE_TOO_LARGE.
    @param allowControl: whether control batches are accepted (only the
        broker itself writes them; clients may not).
    @return: the batches, in order.
    @raise KafkaError: CORRUPT_MESSAGE (lengths, CRC, unknown magic or
        codec, a payload that does not decompress or inflates past
        L{decompressionLimit}), UNSUPPORTED_FOR_MESSAGE_FORMAT (magic 0/1),
        INVALID_RECORD (count, records that do not add up to it, empty set,
        control batch from a client), MESSAGE_TOO_LARGE.
    """
    end = len(buf)
    if end == 0:
        raise KafkaError(ErrorCode.invalid_record, "empty record set")
    view: memoryview | bytes | bytearray
    walked: memoryview | bytes | bytearray
    if type(buf) is bytearray or type(buf) is bytes:
        # Strided slices of bytes and bytearrays are twice as fast as a view's.
        walked = buf
        # A small record set is read (and its CRC's part sliced, a copy of
        # at most this much) without a memoryview, which costs more.
        view = buf if end <= _SMALL_SET else memoryview(buf).cast("B")
    else:
        walked = view = memoryview(buf).cast("B")
    limit = None
    unpack = HEADER.unpack_from
    batches = []
    position = 0
    # Every produce's path: the checks of L{batchError} inline, each read
    # once; a batch failing any of them is handed to batchError, the one
    # place that says why.
    while position < end:
        available = end - position
        if available < HEADER_SIZE or view[position + MAGIC_AT] != 2:
            raise _refusal(view, position, available)
        fields = unpack(view, position)
        size = LOG_OVERHEAD + fields[1]
        count = fields[12]
        attributes = fields[5]
        if (
            size < HEADER_SIZE
            or size > available
            or crc32c(view[position + ATTRIBUTES_AT : position + size]) != fields[4]
            or count < 1
            or fields[6] != count - 1
            or attributes & CODEC_MASK > COMPRESSION_ZSTD
        ):
            raise _refusal(view, position, available)
        header = _newTuple(BatchHeader, fields)
        if maxBatchBytes is not None and size > maxBatchBytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds max.message.bytes {maxBatchBytes}",
            )
        if attributes & CONTROL_BIT and not allowControl:
            raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
        if attributes & CODEC_MASK or walked is not buf:
            if limit is None:
                limit = decompressionLimit(maxBatchBytes)
            error = recordsError(view, position, header, limit, walked)
            if error is not None:
                raise error
        else:
            # Uncompressed records walked in place (recordsError's checks,
            # inline); recordsError says why they do not add up.
            start = position + HEADER_SIZE
            try:
                sound = count * MIN_RECORD_SIZE <= size - HEADER_SIZE and skipRecords(
                    buf, start, position + size, count
                ) == fields[6]
            except CorruptRecordError:
                sound = False
            if not sound:
                error = recordsError(view, position, header, decompressionLimit(maxBatchBytes), walked)
                if error is not None:
                    raise error
        batches.append(_newTuple(ValidBatch, (position, header)))
        position += size
    return batches


def _refusal(view: memoryview | bytes | bytearray, position: int, available: int) -> KafkaError:
    """
    Why L{batchError} refuses the batch at C{position} (which a check of
    L{validateRecordSet} failed).
    """
    _, error = batchError(view, position, available)
    if error is None:  # the checks above and batchError's are the same
        error = KafkaError(ErrorCode.corrupt_message, f"unsound batch at {position}")
    return error


def recordsError(
    view, position: int, header: BatchHeader, limit: int, walked=None
) -> KafkaError | None:
    """
    Check that the batch at C{position} holds what its header says: exactly
    C{recordsCount} records filling its payload (decompressed, at most
    C{limit} bytes), the last of them at offset delta C{lastOffsetDelta}.
    Consumers iterate C{recordsCount} records and trust the deltas, so a
    batch that lies is refused here (Kafka's log validator does the same)
    rather than stored and served.

    Records are walked by their length prefixes only; keys, values and
    headers are not looked at.

    @param walked: the same bytes as C{view} (a bytes or bytearray), walked
        instead of it when the records are not compressed.
    @return: INVALID_RECORD for records that do not add up, CORRUPT_MESSAGE
        for a payload that does not decompress (or inflates past C{limit}),
        else C{None}.
    """
    start = position + HEADER_SIZE
    end = position + LOG_OVERHEAD + header[1]
    codec = header[5] & CODEC_MASK
    if codec:
        try:
            data = decompress(codec, view[start:end], limit)
        except CorruptRecordError as e:
            return KafkaError(ErrorCode.corrupt_message, f"batch at {position}: {e}")
        start, end = 0, len(data)
    elif walked is not None:
        data = walked
    else:
        # The walk needs bytes' strided slices and lstrip.
        data = bytes(view[start:end])
        start, end = 0, len(data)
    if type(data) is memoryview:
        data = bytes(data)
    count = header[12]
    if count * MIN_RECORD_SIZE > end - start:
        return KafkaError(
            ErrorCode.invalid_record,
            f"batch at {position} declares {count} records in {end - start} bytes",
        )
    try:
        lastDelta = skipRecords(data, start, end, count)
        if lastDelta != header[6]:
            raise CorruptRecordError(
                f"last record has offset delta {lastDelta}, the header {header.lastOffsetDelta}"
            )
    except CorruptRecordError as e:
        return KafkaError(ErrorCode.invalid_record, f"batch at {position}: {e}")
    return None


#: the length walk, under its former name (tests compare it with a reference)
_walkRecords = skipRecords


class AssignedBatch(NamedTuple):
    """
    Where a batch landed after offset assignment: what the index needs.
    """

    position: int
    size: int
    baseOffset: int
    lastOffset: int
    maxTimestamp: int
    #: the offset reported for C{maxTimestamp}: the batch's last offset
    #: (batch-level, like Kafka's shallow offset of max timestamp; exact
    #: when records are stamped in order, as producers do).
    offsetOfMaxTimestamp: int


def assignOffsets(
    buf: bytearray,
    batches: list[ValidBatch],
    baseOffset: int,
    *,
    logAppendTime: int | None = None,
    leaderEpoch: int | None = None,
) -> list[AssignedBatch]:
    """
    Give C{batches} consecutive offsets from C{baseOffset}, in place.

    @param buf: the record set (mutable) the batches were validated from.
    @param logAppendTime: if not C{None}, stamp every batch as LogAppendTime
        with this C{maxTimestamp} and recompute its CRC.
    @param leaderEpoch: if not C{None}, written to C{partitionLeaderEpoch}
        (outside the CRC, like Kafka).
    @return: one L{AssignedBatch} per batch.
    """
    assign = _ASSIGN.pack_into
    view = None
    assigned = []
    nextOffset = baseOffset
    for position, header in batches:
        batchLength = header[1]
        lastOffset = nextOffset + header[6]
        if leaderEpoch is not None:
            # batchLength rewritten as it is: one call for both fields
            assign(buf, position, nextOffset, batchLength, leaderEpoch)
        else:
            _INT64.pack_into(buf, position + BASE_OFFSET_AT, nextOffset)
        size = LOG_OVERHEAD + batchLength
        if logAppendTime is not None:
            if view is None:
                view = memoryview(buf).cast("B")
            _INT16.pack_into(
                view, position + ATTRIBUTES_AT, header.attributes | TIMESTAMP_TYPE_BIT
            )
            _INT64.pack_into(view, position + MAX_TIMESTAMP_AT, logAppendTime)
            _UINT32.pack_into(
                view, position + CRC_AT, crc32c(view[position + ATTRIBUTES_AT : position + size])
            )
            maxTimestamp = logAppendTime
        else:
            maxTimestamp = header[8]
        assigned.append(
            _newTuple(AssignedBatch, (position, size, nextOffset, lastOffset, maxTimestamp, lastOffset))
        )
        nextOffset = lastOffset + 1
    return assigned
