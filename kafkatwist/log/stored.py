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
from collections.abc import Iterator

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.throttle import storageLog
from kafkatwist.protocol.batch import (
    ATTRIBUTES_AT,
    CODEC_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    batchError,
    compressionCodec,
)
from kafkatwist.protocol.compression import decompress, decompressionLimit
from kafkatwist.protocol.records import CorruptRecordError, RecordBatch, decodeBatches

__all__ = [
    "StoredBatchError",
    "decodeStoredBatches",
    "decompressedLimit",
    "inflate",
    "reportCorrupt",
]

_BATCH_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")


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


# How far a stored batch may inflate, and inflating it: the produce path's
# bound and decoders (one definition, in protocol.compression).
decompressedLimit = decompressionLimit


def inflate(codec: int, data, limit: int) -> bytes:
    """
    Decompress a batch's records (C{codec} 1-4) into at most C{limit}
    bytes.

    @raise CorruptRecordError: they do not decompress, or inflate past
        C{limit}.
    """
    return decompress(codec, data, limit)


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
                records = decompress(
                    codec, view[position + HEADER_SIZE : batchEnd], maxDecompressedBytes
                )
                plain = bytearray(view[position : position + HEADER_SIZE])
                _BATCH_LENGTH.pack_into(
                    plain, LOG_OVERHEAD - 4, HEADER_SIZE - LOG_OVERHEAD + len(records)  # batchLength
                )
                _ATTRIBUTES.pack_into(plain, ATTRIBUTES_AT, header.attributes & ~CODEC_MASK)
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
