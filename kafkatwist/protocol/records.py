"""
Kafka record batches (magic 2, KIP-98), encoded and decoded in full: the
codec the project's own client and the tests use.  The broker's hot path does
not decode records; it validates batch headers opaquely (see
L{kafkatwist.protocol.batch}).

Layout of one batch (big-endian)::

    baseOffset            int64
    batchLength           int32   bytes after this field
    partitionLeaderEpoch  int32
    magic                 int8    == 2
    crc                   uint32  CRC-32C of everything from attributes on
    attributes            int16   compression (bits 0-2), timestamp type (3),
                                  transactional (4), control (5)
    lastOffsetDelta       int32
    baseTimestamp         int64
    maxTimestamp          int64
    producerId            int64
    producerEpoch         int16
    baseSequence          int32
    recordCount           int32
    records               (compressed as a whole when compression != none)

and of one record (varints are zigzag-encoded)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value,
    headerCount varint, [keyLength varint, key (UTF-8), valueLength varint, value]

Compression lives in L{kafkatwist.protocol.compression}, the header layout
in L{kafkatwist.protocol.batch}: one definition of each.  Decoding is
bounded: a payload may not decompress past a limit (by default
L{DEFAULT_DECOMPRESSION_LIMIT}; L{decompressionLimit} of the topic's
C{message.max.bytes} for stored batches), and anything that does not decode
raises L{CorruptRecordError}, which the broker answers as CORRUPT_MESSAGE.

Pure Python, no I/O.  Records are read by the one record walker,
L{kafkatwist.protocol.recordwalk.walkRecords}, which checks every length.
"""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from crc32c import crc32c

from kafkatwist.protocol.batch import (
    ATTRIBUTES_AT,
    CODEC_MASK,
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_AT,
    PREFIX,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    packBatch,
)
from kafkatwist.protocol.compression import (
    COMPRESSION_CODECS,
    DEFAULT_DECOMPRESSION_LIMIT,
    CorruptRecordError,
    DecompressionLimitExceeded,
    UnsupportedCompression,
    codecId,
    compress,
    decompress,
    decompressionLimit,
)
from kafkatwist.protocol.recordwalk import decodeHeaders, walkRecords
from kafkatwist.protocol.varint import readVarint, zigzagVarint

__all__ = [
    "BATCH_HEADER_SIZE",
    "COMPRESSION_CODECS",
    "DEFAULT_DECOMPRESSION_LIMIT",
    "CorruptRecordError",
    "CrcMismatchError",
    "DecompressionLimitExceeded",
    "Record",
    "RecordBatch",
    "UnsupportedCompression",
    "buildBatch",
    "compress",
    "controlRecord",
    "decodeBatches",
    "decodeHeaders",
    "decompress",
    "decompressionLimit",
    "readVarint",
    "zigzagVarint",
]

#: baseOffset .. recordCount
BATCH_HEADER_SIZE = HEADER_SIZE


class CrcMismatchError(CorruptRecordError):
    """
    A batch's stored CRC-32C does not match its contents.

    @ivar baseOffset: the batch's base offset.
    @ivar expected: the CRC stored in the batch.
    @ivar actual: the CRC computed over the batch.
    """

    def __init__(self, baseOffset: int, expected: int, actual: int) -> None:
        self.baseOffset = baseOffset
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"CRC mismatch in batch at offset {baseOffset}: "
            f"stored 0x{expected:08x}, computed 0x{actual:08x}"
        )


@dataclass(slots=True)
class Record:
    """
    One record.

    @ivar offset: absolute offset (on decode).  On encode it is ignored
        unless L{buildBatch} is asked to C{useRecordOffsets}.
    @ivar timestamp: milliseconds since the epoch; C{None} on encode means
        "now".  For a batch with log-append time, decode reports the batch's
        maxTimestamp for every record, as Kafka consumers do.
    @ivar key: the key, or C{None}.
    @ivar value: the value, or C{None} (a tombstone).
    @ivar headers: (key, value) pairs; keys are text, values bytes or C{None}.
    """

    offset: int = 0
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


@dataclass(slots=True)
class RecordBatch:
    """
    One decoded batch: its header fields and its records.

    @ivar records: the records, decompressed and decoded; empty if
        L{decodeBatches} was told not to decode records.
    @ivar crc: the CRC-32C stored in the batch.
    @ivar sizeInBytes: the whole batch's size on the wire.
    """

    baseOffset: int
    partitionLeaderEpoch: int
    attributes: int
    lastOffsetDelta: int
    baseTimestamp: int
    maxTimestamp: int
    producerId: int
    producerEpoch: int
    baseSequence: int
    records: list[Record]
    recordCount: int = 0
    crc: int = 0
    sizeInBytes: int = 0
    magic: int = 2

    @property
    def compression(self) -> str:
        """
        The codec name: C{'none'}, C{'gzip'}, C{'snappy'}, C{'lz4'} or C{'zstd'}.
        """
        codecId = self.attributes & CODEC_MASK
        return COMPRESSION_CODECS.get(codecId, f"unknown({codecId})")

    @property
    def timestampType(self) -> int:
        """
        0 for create time, 1 for log-append time.
        """
        return (self.attributes & TIMESTAMP_TYPE_BIT) >> 3

    @property
    def isTransactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def isControl(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def lastOffset(self) -> int:
        return self.baseOffset + self.lastOffsetDelta

    @property
    def nextOffset(self) -> int:
        """
        The offset a consumer fetches after this batch.
        """
        return self.baseOffset + self.lastOffsetDelta + 1


# -- encoding ----------------------------------------------------------------

_MINUS_ONE = zigzagVarint(-1)
_EMPTY_HEADERS = zigzagVarint(0)


def _encodeRecords(
    records: list[Record], baseOffset: int, baseTimestamp: int, useRecordOffsets: bool, now: int
) -> bytes:
    out = bytearray()
    zz = zigzagVarint
    for index, record in enumerate(records):
        offsetDelta = record.offset - baseOffset if useRecordOffsets else index
        timestamp = now if record.timestamp is None else record.timestamp
        body = bytearray(b"\x00")  # record attributes: unused, always 0
        body += zz(timestamp - baseTimestamp)
        body += zz(offsetDelta)
        key = record.key
        if key is None:
            body += _MINUS_ONE
        else:
            body += zz(len(key))
            body += key
        value = record.value
        if value is None:
            body += _MINUS_ONE
        else:
            body += zz(len(value))
            body += value
        headers = record.headers
        if not headers:
            body += _EMPTY_HEADERS
        else:
            body += zz(len(headers))
            for headerKey, headerValue in headers:
                rawKey = headerKey.encode("utf-8") if isinstance(headerKey, str) else headerKey
                body += zz(len(rawKey))
                body += rawKey
                if headerValue is None:
                    body += _MINUS_ONE
                else:
                    body += zz(len(headerValue))
                    body += headerValue
        out += zz(len(body))
        out += body
    return bytes(out)


def buildBatch(
    records: Iterable[Record],
    compression: str | int = "none",
    baseOffset: int = 0,
    producerId: int = -1,
    producerEpoch: int = -1,
    baseSequence: int = -1,
    timestampType: int = 0,
    partitionLeaderEpoch: int = -1,
    isTransactional: bool = False,
    isControl: bool = False,
    useRecordOffsets: bool = False,
    maxTimestamp: int | None = None,
) -> bytes:
    """
    Encode one magic 2 batch, CRC included.

    @param records: the records; at least one.  Their offset deltas are their
        positions (0, 1, 2...) as a producer writes them, unless
        C{useRecordOffsets}, when they are C{record.offset - baseOffset}
        (for compacted-looking batches with gaps).  The batch's base
        timestamp is the first record's, as in the Java client.
    @param compression: C{'none'}, C{'gzip'}, C{'snappy'}, C{'lz4'},
        C{'zstd'}, or the codec id.
    @param timestampType: 0 create time, 1 log-append time.
    @param maxTimestamp: override the batch's maxTimestamp (a broker sets it
        to the append time for log-append-time topics); by default the
        largest record timestamp.
    @raise ValueError: for an empty batch or offsets that go backwards.
    """
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    codec = codecId(compression)
    now = int(time.time() * 1000)
    timestamps = [now if r.timestamp is None else r.timestamp for r in records]
    baseTimestamp = timestamps[0]
    if maxTimestamp is None:
        maxTimestamp = max(timestamps)
    if useRecordOffsets:
        deltas = [r.offset - baseOffset for r in records]
        if deltas[0] < 0 or any(b <= a for a, b in zip(deltas, deltas[1:])):
            raise ValueError("record offsets must increase from baseOffset")
        lastOffsetDelta = deltas[-1]
    else:
        lastOffsetDelta = len(records) - 1
    payload = _encodeRecords(records, baseOffset, baseTimestamp, useRecordOffsets, now)
    if codec:
        payload = compress(codec, payload)
    attributes = codec | ((timestampType & 1) << 3)
    if isTransactional:
        attributes |= TRANSACTIONAL_BIT
    if isControl:
        attributes |= CONTROL_BIT
    return bytes(
        packBatch(
            baseOffset, partitionLeaderEpoch, attributes, lastOffsetDelta, baseTimestamp,
            maxTimestamp, producerId, producerEpoch, baseSequence, len(records), payload,
        )
    )


def controlRecord(commit: bool, coordinatorEpoch: int = 0, timestamp: int | None = None) -> Record:
    """
    A transaction marker record (for a batch built with C{isControl=True,
    isTransactional=True}): key is version 0 and type (0 abort, 1 commit),
    value is version 0 and the coordinator epoch.
    """
    return Record(
        timestamp=timestamp,
        key=struct.pack(">hh", 0, 1 if commit else 0),
        value=struct.pack(">hi", 0, coordinatorEpoch),
    )


# -- decoding ----------------------------------------------------------------


def decodeBatches(
    buf,
    checkCrc: bool = True,
    decodeRecords: bool = True,
    maxDecompressedBytes: int = DEFAULT_DECOMPRESSION_LIMIT,
) -> Iterator[RecordBatch]:
    """
    Decode the record batches in C{buf} (the C{records} field of a Fetch
    response, or a log segment's bytes), one at a time.

    A trailing partial batch -- what a broker sends when a batch does not fit
    the fetch's size limit -- is skipped silently, as Kafka consumers do.

    @param checkCrc: verify each batch's CRC-32C (cheap: hardware CRC).
    @param decodeRecords: decompress and decode records; if false, only the
        headers are read and C{records} is empty.
    @param maxDecompressedBytes: the most one batch's records may inflate
        to (stored batches: L{decompressionLimit} of the topic's
        C{message.max.bytes}).
    @raise CrcMismatchError: if C{checkCrc} and a batch's CRC is wrong.
    @raise DecompressionLimitExceeded: for a batch inflating past the limit.
    @raise CorruptRecordError: for a batch that cannot be decoded (a magic
        other than 2, lengths or a record count that do not add up, bad
        compression).  Nothing else escapes, whatever the bytes.
    """
    view = memoryview(buf)
    if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
    end = len(view)
    pos = 0
    unpackHeader = HEADER.unpack_from
    while end - pos >= LOG_OVERHEAD:
        baseOffset, batchLength = PREFIX.unpack_from(view, pos)
        batchEnd = pos + LOG_OVERHEAD + batchLength
        if batchEnd > end:
            return  # partial batch: the fetch size cut it off
        if batchLength < MAGIC_AT + 1 - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch at offset {baseOffset} has length {batchLength}")
        magic = view[pos + MAGIC_AT]
        if magic != 2:
            raise CorruptRecordError(
                f"batch at offset {baseOffset} has magic {magic}; only magic 2 is supported"
            )
        if batchLength < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"batch at offset {baseOffset} has length {batchLength}, "
                f"shorter than a batch header"
            )
        (
            _,
            _,
            partitionLeaderEpoch,
            _,
            storedCrc,
            attributes,
            lastOffsetDelta,
            baseTimestamp,
            maxTimestamp,
            producerId,
            producerEpoch,
            baseSequence,
            recordCount,
        ) = unpackHeader(view, pos)
        if checkCrc:
            actual = crc32c(view[pos + ATTRIBUTES_AT : batchEnd])
            if actual != storedCrc:
                raise CrcMismatchError(baseOffset, storedCrc, actual)
        if recordCount < 0:
            raise CorruptRecordError(f"batch at offset {baseOffset} has {recordCount} records")
        records: list[Record] = []
        if decodeRecords and recordCount:
            codec = attributes & CODEC_MASK
            payload = view[pos + BATCH_HEADER_SIZE : batchEnd]
            if codec:
                data = decompress(codec, payload, maxDecompressedBytes)
            else:
                data = payload.tobytes()
            if recordCount * 7 > len(data):
                raise CorruptRecordError(
                    f"batch at offset {baseOffset} declares {recordCount} records "
                    f"in {len(data)} bytes"
                )
            timestampOverride = maxTimestamp if attributes & TIMESTAMP_TYPE_BIT else None
            records = _decodeRecords(
                data, recordCount, baseOffset, baseTimestamp, timestampOverride
            )
        yield RecordBatch(
            baseOffset,
            partitionLeaderEpoch,
            attributes,
            lastOffsetDelta,
            baseTimestamp,
            maxTimestamp,
            producerId,
            producerEpoch,
            baseSequence,
            records,
            recordCount,
            storedCrc,
            batchEnd - pos,
            magic,
        )
        pos = batchEnd


def _decodeRecords(
    data: bytes, count: int, baseOffset: int, baseTimestamp: int, timestampOverride: int | None
) -> list[Record]:
    """
    The records of one batch, walked by L{walkRecords} (which checks every
    length).  C{data} is C{bytes}: slicing copies the key and value out,
    which the caller keeps anyway.
    """
    out: list[Record] = []
    append = out.append
    new = Record
    for _, _, timestampDelta, _, offsetDelta, keyAt, keySize, valueAt, valueSize, headersAt, headerCount in walkRecords(
        data, count
    ):
        append(
            new(
                baseOffset + offsetDelta,
                baseTimestamp + timestampDelta if timestampOverride is None else timestampOverride,
                None if keySize < 0 else data[keyAt : keyAt + keySize],
                None if valueSize < 0 else data[valueAt : valueAt + valueSize],
                decodeHeaders(data, headersAt, headerCount)[0] if headerCount else [],
            )
        )
    return out
