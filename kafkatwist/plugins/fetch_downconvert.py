"""
Fetch v0-3: the answer in message format v0 (Fetch v0-1) or v1 (v2-3),
down-converted from the stored record batches, as Kafka 3.x answers
consumers from before 0.11 (C{KafkaApis.maybeConvertFetchedData}).

Only these requests pay for it: the fetch reads the same regions as for
v4+, and this module reads them into memory (on the handler thread that
encodes the answer), converts them (L{kafkatwist.protocol.convert}) and
encodes the response; v4+ keep their zero-copy path untouched.

Sizes.  v0-2 have no response limit and a hard per-partition limit
(C{partition_max_bytes}): converted messages are cut at that limit on a
message boundary; a first message larger than the limit is sent cut short,
as brokers of that era did, so the client reports its fetch size too small
(Kafka 3.x sends nothing there and the old client polls the same offset
forever).  v3 (KIP-74) sends the converted messages up to the size of the
region read, and always the first message whole.  A zstd batch cannot be
carried by the old formats: UNSUPPORTED_COMPRESSION_TYPE if it comes first,
otherwise the answer stops before it.
"""

from __future__ import annotations

import struct

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.region import readRecords
from kafkatwist.log.stored import (
    StoredBatchError,
    decodeStoredBatches,
    decompressedLimit,
    reportCorrupt,
)
from kafkatwist.protocol.codec import EncodedResponse, chunkLength
from kafkatwist.protocol.convert import downConvert
from kafkatwist.protocol.header import INT32, writeString

__all__ = ["LEGACY_MAX_VERSION", "encodeDownConverted"]

#: the highest Fetch version whose records are v0/v1 message sets
LEGACY_MAX_VERSION = 3
#: KIP-74 (a response limit, and one batch beyond the limits) from v3
HARD_LIMIT_MAX_VERSION = 2

_PARTITION_HEAD = struct.Struct(">ihq")


def encodeDownConverted(version: int, plan, topics) -> EncodedResponse:
    """
    @param plan: the fetch's C{(topic, [wanted partition])} list (each with
        C{offset}, C{maxBytes}, C{log}).
    @param topics: what the fetch read, C{(topic, [PartitionData])}, in
        the same order; its file regions are read and closed here.
    """
    magic = 0 if version <= 1 else 1
    hard = version <= HARD_LIMIT_MAX_VERSION
    out = bytearray()
    if version >= 1:
        out += INT32.pack(0)  # throttle_time_ms
    out += INT32.pack(len(topics))
    errors: dict[int, int] = {0: 1}  # (Kafka's top-level error: NONE before v7)
    for (_, wanted), (topic, partitions) in zip(plan, topics):
        writeString(out, topic, False)
        out += INT32.pack(len(partitions))
        for w, p in zip(wanted, partitions):
            error = p.errorCode
            records = b""
            if error == ErrorCode.none:
                records, error = _converted(w, p, magic, hard)
            out += _PARTITION_HEAD.pack(p.partition, error, p.highWatermark)
            errors[int(error)] = errors.get(int(error), 0) + 1
            out += INT32.pack(len(records))
            out += records
    body = bytes(out)
    return EncodedResponse([body], len(body), errors)


def _converted(wanted, partition, magic: int, hard: bool) -> tuple[bytes, int]:
    records = partition.records
    log = wanted.log
    if log is not None and not log.config.messageDownconversionEnable:
        # The topic's message.downconversion.enable=false: Kafka's answer to
        # a consumer that would need it.
        close = getattr(records, "close", None)
        if close is not None:
            close()
        return b"", ErrorCode.unsupported_version
    size = chunkLength(records)
    data = readRecords(records) if size else b""
    if hard and not data and partition.highWatermark > wanted.offset and log is not None:
        # The first batch is larger than partition_max_bytes (the read
        # gives whole batches only): read it anyway, for its cut-short
        # first message.  (highWatermark is what the read saw: an answer
        # of offsets alone, built where no disk is read, never gets here.)
        try:
            data = readRecords(log.read(wanted.offset, wanted.maxBytes, True).records)
        except KafkaError as e:
            return b"", e.code
    if not data:
        return b"", ErrorCode.none
    limit = wanted.maxBytes if hard else size
    maxDecompressed = decompressedLimit(log.config.maxMessageBytes)
    out = bytearray()
    try:
        entries = downConvert(
            data,
            magic,
            wanted.offset,
            lambda d: decodeStoredBatches(d, maxDecompressedBytes=maxDecompressed),
        )
        for entry in entries:
            if len(out) + len(entry) > limit:
                if not out:
                    out += entry[:limit] if hard else entry
                break
            out += entry
    except StoredBatchError as e:
        reportCorrupt(log.topic, log.partition, e, "Fetch down-conversion")
        if not out:
            return b"", e.code
    except KafkaError as e:
        if not out:
            return b"", e.code
    return bytes(out), ErrorCode.none
