"""
Compaction at the level of one record batch: which records a cleaning pass
keeps, and the batch it writes in place of the original (Kafka's
C{MemoryRecords.filterTo} with the log cleaner's record filter).  Also the
produce-time rule that a compacted topic takes only records with a key.

Rules, as Kafka's cleaner applies them:

  - a record at or below the map's latest offset is kept only if it is the
    latest for its key (the map holds a hash of every key of the dirty
    section); records above it were not mapped and are all kept;
  - a record without a key is dropped (the produce path refuses them, but a
    topic may have been switched to compaction);
  - a tombstone (null value) that is kept marks its batch with a delete
    horizon, C{now + delete.retention.ms}, the first time the cleaner
    rewrites it (KIP-534: attribute bit 6 set, the horizon stored as the
    batch's base timestamp, record timestamp deltas rebased on it so every
    record keeps its timestamp); a later pass after the horizon drops it;
  - a batch keeps its base offset and last offset delta however many records
    it loses, so offsets never move and the producer's sequence range is
    intact;
  - a batch that loses every record is dropped, unless it is the last batch
    of its producer (kept as an empty header: the idempotent producer's
    state survives a restart that rebuilds it from the log) or the last
    batch of the cleaned range;
  - a batch that keeps every record and needs no horizon is copied
    byte for byte;
  - transactions (Kafka's C{CleanedTransactionMetadata}): a batch of an
    aborted transaction (L{AbortedBatches}, from the aborted-transaction
    indexes) is neither mapped nor kept -- it must not hide an older
    committed value of its key -- except as the empty last batch of its
    producer.  Markers (L{TransactionCleaning}): an ABORT marker stays
    while any batch of its transaction is left, a COMMIT marker while any
    batch of its transaction was seen by the pass; then it is removable:
    the first pass that finds it so gives it a delete horizon (as a
    tombstone's), a pass after the horizon drops it -- unless it is the
    last batch of its producer (it carries the producer's latest epoch) or
    of the cleaned range.  An aborted transaction whose data is gone leaves
    the aborted-transaction index with it (L{TransactionCleaning.gone}): an
    entry whose marker is gone would make a read_committed consumer drop
    the producer's later, committed batches.  The cleaned range never
    reaches the last stable offset, so every transaction in it is
    complete.

Pure functions, no I/O.
"""

from __future__ import annotations

import struct
from bisect import bisect_right

from crc32c import crc32c

from kafkatwist.log.offsetmap import keyHash
from kafkatwist.protocol.batch import (
    CODEC_MASK,
    CONTROL_BIT,
    DELETE_HORIZON_BIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    packBatch,
)
from kafkatwist.log.stored import inflate
from kafkatwist.protocol.markers import ABORT, COMMIT
from kafkatwist.protocol.recordwalk import walkRecords
from kafkatwist.protocol.records import compress, zigzagVarint

__all__ = [
    "DELETE_HORIZON_BIT",
    "AbortedBatches",
    "BatchFilter",
    "Retained",
    "TransactionCleaning",
    "batchPayload",
    "deleteHorizon",
    "mapRecords",
    "recordsOf",
]

_INT64_MAX = 2**63 - 1


def deleteHorizon(attributes: int, baseTimestamp: int) -> int | None:
    """
    @return: the batch's delete horizon, or C{None} if it has none.
    """
    return baseTimestamp if attributes & DELETE_HORIZON_BIT else None


def batchPayload(view, position: int, size: int, attributes: int, limit: int):
    """
    The records of the batch at C{position} (C{size} bytes), decompressed
    into at most C{limit} bytes.

    @raise CorruptRecordError: the records do not decompress, or inflate
        past C{limit}.
    """
    payload = view[position + HEADER_SIZE : position + size]
    codec = attributes & CODEC_MASK
    return inflate(codec, payload, limit) if codec else payload


def recordsOf(data, count: int, lastOffsetDelta: int) -> list[tuple]:
    """
    Walk C{count} records in C{data} (a batch's decompressed records) with
    L{walkRecords}, which checks them.

    @return: per record C{(start, end, timestampDelta, offsetDelta, key,
        isTombstone, deltaEnd)}: its byte range, deltas, key (C{None} if
        absent) and where its timestamp delta ends (to rebase it).
    @raise CorruptRecordError: a record does not parse, offset deltas do
        not increase within C{[0, lastOffsetDelta]}, or the data has bytes
        after the last record.
    """
    return [
        (
            start,
            end,
            timestampDelta,
            offsetDelta,
            None if keySize < 0 else bytes(data[keyAt : keyAt + keySize]),
            valueSize < 0,
            deltaEnd,
        )
        for start, end, timestampDelta, deltaEnd, offsetDelta, keyAt, keySize, _, valueSize, _, _ in walkRecords(
            data, count, lastOffsetDelta
        )
    ]


def mapRecords(
    data,
    count: int,
    baseOffset: int,
    lastOffsetDelta: int,
    fromOffset: int,
    entries: dict,
    capacity: int,
) -> bool:
    """
    Put the keys of a batch's records at or after C{fromOffset} into the
    dedupe map C{entries} (key hash -> offset), stopping when it holds
    C{capacity} entries.

    This is the cleaner's hottest loop (every record of the dirty section
    goes through it once).  The walk checks what the filter relies on:
    offset deltas increase and stay within the batch.

    @return: whether the map filled up before the batch was done.
    @raise CorruptRecordError: malformed records.
    """
    for _, _, _, _, delta, keyAt, keySize, _, _, _, _ in walkRecords(data, count, lastOffsetDelta):
        if keySize >= 0 and baseOffset + delta >= fromOffset:
            if len(entries) >= capacity:
                return True
            key = bytes(data[keyAt : keyAt + keySize])
            entries[(hash(key) << 32) ^ crc32c(key)] = baseOffset + delta
    return False


class Retained:
    """
    What the filter made of one batch.

    @ivar data: the bytes to write (the original batch, a rewritten one, an
        empty header), or C{None} if the batch is dropped.
    @ivar records: records kept.
    @ivar maxTimestamp: the written batch's max timestamp.
    @ivar horizon: the written batch's delete horizon, or C{None}.
    """

    __slots__ = ("data", "horizon", "maxTimestamp", "records")

    def __init__(self, data, records: int, maxTimestamp: int, horizon: int | None) -> None:
        self.data = data
        self.records = records
        self.maxTimestamp = maxTimestamp
        self.horizon = horizon


_DROPPED = Retained(None, 0, -1, None)


class AbortedBatches:
    """
    Which transactional batches belong to aborted transactions.

    @param aborted: C{(producerId, firstOffset, lastOffset)} of the aborted
        transactions (from the aborted-transaction indexes).
    """

    def __init__(self, aborted=()) -> None:
        byProducer: dict[int, list[tuple[int, int]]] = {}
        for producerId, first, last in aborted:
            byProducer.setdefault(producerId, []).append((first, last))
        for ranges in byProducer.values():
            ranges.sort()
        self._byProducer = byProducer

    def __bool__(self) -> bool:
        return bool(self._byProducer)

    def contains(self, attributes: int, producerId: int, baseOffset: int) -> bool:
        """
        Whether the data batch with this header is in an aborted
        transaction.
        """
        if not attributes & TRANSACTIONAL_BIT or attributes & CONTROL_BIT:
            return False
        ranges = self._byProducer.get(producerId)
        if not ranges:
            return False
        i = bisect_right(ranges, (baseOffset, _INT64_MAX)) - 1
        return i >= 0 and ranges[i][0] <= baseOffset <= ranges[i][1]


class TransactionCleaning:
    """
    What one pass learns about transactions, batch by batch in offset
    order across all its groups (Kafka's C{CleanedTransactionMetadata}):
    whether a marker is removable.

    @param aborted: C{(producerId, firstOffset, lastOffset)} of the aborted
        transactions that may have data in the cleaned range.
    @ivar gone: C{(producerId, markerOffset)} of the aborted transactions
        whose data the pass found gone: their index entries go (collected
        per cleaned segment; the caller empties it).
    """

    def __init__(self, aborted=()) -> None:
        self._pending = sorted(aborted, key=lambda t: t[1])
        self._next = 0
        #: producer id -> [whether a batch of its aborted transaction was seen]
        self._ongoingAborted: dict[int, list] = {}
        #: producers with a (not aborted) transactional batch since their last marker
        self._ongoingCommitted: set[int] = set()
        self.gone: list[tuple[int, int]] = []

    def _consumeUpTo(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= offset:
            self._ongoingAborted.setdefault(pending[self._next][0], [False])
            self._next += 1

    def onBatch(self, producerId: int, lastOffset: int) -> None:
        """
        A transactional data batch (kept or not) was read.
        """
        self._consumeUpTo(lastOffset)
        seen = self._ongoingAborted.get(producerId)
        if seen is not None:
            seen[0] = True
        else:
            self._ongoingCommitted.add(producerId)

    def onMarker(self, producerId: int, offset: int, controlType: int | None) -> bool:
        """
        A control batch was read (C{controlType} C{None}: it has no record).

        @return: whether it may go (once its delete horizon has passed).
        """
        self._consumeUpTo(offset)
        if controlType is None:
            # Cleaned empty already: nothing for a reader in it.
            return True
        if controlType == ABORT:
            seen = self._ongoingAborted.pop(producerId, None)
            if seen is not None and seen[0]:
                return False
            self.gone.append((producerId, offset))
            return True
        if controlType == COMMIT:
            if producerId in self._ongoingCommitted:
                self._ongoingCommitted.discard(producerId)
                return False
            return True
        return False


class BatchFilter:
    """
    The record filter of one cleaning pass.

    @param entries: the dedupe map (key hash -> latest offset).
    @param latestOffset: the map's latest offset; records above are kept.
    @param firstDirty: where the dirty section starts: a record at or after
        it was mapped, so it is live exactly if the map points at it.
    @param nowMs: the pass's time, for delete horizons.
    @param deleteRetentionMs: C{delete.retention.ms}.
    @param producerLastOffsets: producer id -> last offset of its last
        batch, for the producers the partition knows.
    @param upperBound: the end of the cleanable range; the batch ending
        there is kept even if empty.
    @param maxDecompressedBytes: how far a batch may inflate.
    @param aborted: the aborted transactions' batches (L{AbortedBatches}).
    @param transactions: the pass's L{TransactionCleaning}.
    @param producerEpochs: producer id -> epoch of the producers the
        partition knows with no data batch since their last epoch bump:
        their marker of that epoch is their last batch, and stays.
    """

    def __init__(
        self,
        entries: dict,
        latestOffset: int,
        firstDirty: int,
        nowMs: int,
        deleteRetentionMs: int,
        producerLastOffsets: dict,
        upperBound: int,
        maxDecompressedBytes: int,
        aborted: AbortedBatches | None = None,
        transactions: TransactionCleaning | None = None,
        producerEpochs: dict | None = None,
    ) -> None:
        self.aborted = aborted if aborted else None
        self.transactions = transactions if transactions is not None else TransactionCleaning()
        self.producerEpochs = producerEpochs or {}
        self.entries = entries
        self.latestOffset = latestOffset
        self.firstDirty = firstDirty
        self.nowMs = nowMs
        self.deleteRetentionMs = deleteRetentionMs
        self.producerLastOffsets = producerLastOffsets
        self.upperBound = upperBound
        self.maxDecompressedBytes = maxDecompressedBytes
        # Offsets the map points at: a dirty record is live if its offset
        # is one of them, which spares hashing its key.
        self.live = set(entries.values())

    def filter(self, view, position: int, header: tuple) -> Retained:
        """
        Filter the batch at C{position} of C{view}, whose unpacked
        L{HEADER} is C{header}.

        @raise CorruptRecordError: the batch's records are malformed.
        """
        baseOffset = header[0]
        if header[5] & TRANSACTIONAL_BIT and not header[5] & CONTROL_BIT:
            self.transactions.onBatch(header[9], baseOffset + header[6])
        if (
            not header[6]
            and baseOffset not in self.live
            and self.firstDirty <= baseOffset <= self.latestOffset
            and header[12] == 1
            and not header[5] & (CONTROL_BIT | DELETE_HORIZON_BIT)
        ):
            # The commonest batch of all (one record, superseded): quickly.
            return self._empty(header, baseOffset)
        (
            baseOffset,
            batchLength,
            _,
            _,
            _,
            attributes,
            lastOffsetDelta,
            baseTimestamp,
            maxTimestamp,
            producerId,
            _,
            _,
            count,
        ) = header
        size = LOG_OVERHEAD + batchLength
        original = view[position : position + size]
        if attributes & CONTROL_BIT:
            return self._marker(header, view, position, size, original)
        lastOffset = baseOffset + lastOffsetDelta
        if self.aborted is not None and self.aborted.contains(attributes, producerId, baseOffset):
            return self._empty(header, lastOffset)
        horizon = deleteHorizon(attributes, baseTimestamp)
        data = None
        if (
            baseOffset >= self.firstDirty
            and lastOffset <= self.latestOffset
            and count == lastOffsetDelta + 1
            and horizon is None
        ):
            # A batch as produced, wholly mapped: dead unless the map
            # points into it.
            live = self.live
            if lastOffsetDelta == 0:
                if baseOffset not in live:
                    return self._empty(header, lastOffset)
            elif not any(offset in live for offset in range(baseOffset, lastOffset + 1)):
                return self._empty(header, lastOffset)
            else:
                data = batchPayload(view, position, size, attributes, self.maxDecompressedBytes)
                dense = self._denseLive(header, original, data)
                if dense is not None:
                    return dense
        if data is None:
            data = batchPayload(view, position, size, attributes, self.maxDecompressedBytes)
        records = recordsOf(data, count, lastOffsetDelta)
        kept = []
        tombstones = False
        latestOffset, firstDirty = self.latestOffset, self.firstDirty
        live, entries = self.live, self.entries
        nowMs = self.nowMs
        for record in records:
            offset = baseOffset + record[3]
            key = record[4]
            if offset > latestOffset:
                keep = True
            elif key is None:
                keep = False
            elif offset >= firstDirty:
                keep = offset in live
            else:
                keep = keyHash(key) not in entries
            if keep and record[5]:
                if horizon is not None and nowMs >= horizon:
                    keep = False
                else:
                    tombstones = True
            if keep:
                kept.append(record)
        if not kept:
            return self._empty(header, lastOffset)
        if len(kept) == count and (horizon is not None or not tombstones):
            return Retained(original, count, maxTimestamp, horizon)
        if horizon is None and tombstones:
            horizon = self.nowMs + self.deleteRetentionMs
        return self._rewrite(header, data, kept, horizon)

    def _marker(self, header: tuple, view, position: int, size: int, original) -> Retained:
        """
        Keep a control batch, give it its delete horizon, or drop it.
        """
        baseOffset, attributes, lastOffsetDelta = header[0], header[5], header[6]
        baseTimestamp, maxTimestamp, producerId, count = header[7], header[8], header[9], header[12]
        lastOffset = baseOffset + lastOffsetDelta
        horizon = deleteHorizon(attributes, baseTimestamp)
        records = None
        controlType = None
        if count:
            data = batchPayload(view, position, size, attributes, self.maxDecompressedBytes)
            records = recordsOf(data, count, lastOffsetDelta)
            key = records[0][4]
            if key is not None and len(key) >= 4:
                controlType = struct.unpack_from(">h", key, 2)[0]
            else:
                # Not a marker this broker can read: keep it as it is.
                controlType = -1
        removable = self.transactions.onMarker(producerId, lastOffset, controlType)
        if (
            not removable
            or lastOffset + 1 == self.upperBound
            or self.producerEpochs.get(producerId) == header[10]
        ):
            return Retained(original, count, maxTimestamp, horizon)
        if not count or (horizon is not None and self.nowMs >= horizon):
            return _DROPPED
        if horizon is not None:
            return Retained(original, count, maxTimestamp, horizon)
        assert records is not None  # count is not 0
        return self._rewrite(header, data, records, self.nowMs + self.deleteRetentionMs)

    def _denseLive(self, header: tuple, original, data) -> Retained | None:
        """
        Filter a wholly mapped batch as it was produced by the live offsets
        alone: its record offset deltas are 0, 1, 2... (mapping checked
        they increase within the batch, and there are as many records as
        offsets), so a record is kept if its offset is live, and only kept
        records are parsed beyond their length.

        @return: what is kept, or C{None} if a kept record is a tombstone
            (the general path then gives the batch its delete horizon).
        """
        baseOffset, count = header[0], header[12]
        live = self.live
        kept = []
        for start, end, timestampDelta, deltaEnd, delta, _, _, _, valueSize, _, _ in walkRecords(
            data, count, header[6]
        ):
            if baseOffset + delta in live:
                if valueSize < 0:
                    return None
                kept.append((start, end, timestampDelta, delta, None, False, deltaEnd))
        if len(kept) == count:
            return Retained(original, count, header[8], None)
        return self._rewrite(header, data, kept, None)

    def _empty(self, header: tuple, lastOffset: int) -> Retained:
        producerId = header[9]
        if lastOffset + 1 == self.upperBound or (
            producerId >= 0 and self.producerLastOffsets.get(producerId) == lastOffset
        ):
            return Retained(emptyBatch(header), 0, header[8], None)
        return _DROPPED

    @staticmethod
    def _rewrite(header: tuple, data, kept: list, horizon: int | None) -> Retained:
        (
            baseOffset,
            _,
            leaderEpoch,
            magic,
            _,
            attributes,
            lastOffsetDelta,
            baseTimestamp,
            maxTimestamp,
            producerId,
            producerEpoch,
            baseSequence,
            _,
        ) = header
        newBase = baseTimestamp if horizon is None else horizon
        parts = []
        largest = -1
        if newBase == baseTimestamp:
            for start, end, timestampDelta, *_ in kept:
                parts.append(data[start:end])
                if timestampDelta > largest:
                    largest = timestampDelta
        else:
            # The base timestamp becomes the horizon: rebase every delta so
            # that each record keeps its own timestamp.
            shift = baseTimestamp - newBase
            for start, end, timestampDelta, _, _, _, deltaEnd in kept:
                lengthEnd = start + 1
                while data[lengthEnd - 1] & 0x80:
                    lengthEnd += 1
                body = b"".join(
                    (
                        data[lengthEnd : lengthEnd + 1],
                        zigzagVarint(timestampDelta + shift),
                        data[deltaEnd:end],
                    )
                )
                parts.append(zigzagVarint(len(body)))
                parts.append(body)
                if timestampDelta > largest:
                    largest = timestampDelta
        records = b"".join(parts)
        codec = attributes & CODEC_MASK
        if codec:
            records = compress(codec, records)
        if not attributes & TIMESTAMP_TYPE_BIT:
            maxTimestamp = baseTimestamp + largest
        if horizon is not None:
            attributes |= DELETE_HORIZON_BIT
        batch = packBatch(
            baseOffset, leaderEpoch, attributes, lastOffsetDelta, newBase, maxTimestamp,
            producerId, producerEpoch, baseSequence, len(kept), records, magic,
        )
        return Retained(batch, len(kept), maxTimestamp, horizon)


def emptyBatch(header: tuple) -> bytearray:
    """
    The header-only batch Kafka keeps for a batch that lost every record
    but must stay (C{DefaultRecordBatch.writeEmptyHeader}): same offsets and
    producer fields, no records, no compression, base timestamp -1, the
    original max timestamp.
    """
    (
        baseOffset,
        _,
        leaderEpoch,
        magic,
        _,
        attributes,
        lastOffsetDelta,
        _,
        maxTimestamp,
        producerId,
        producerEpoch,
        baseSequence,
        _,
    ) = header
    attributes &= TIMESTAMP_TYPE_BIT | TRANSACTIONAL_BIT | CONTROL_BIT
    batch = packBatch(
        baseOffset, leaderEpoch, attributes, lastOffsetDelta, -1, maxTimestamp,
        producerId, producerEpoch, baseSequence, 0, magic=magic,
    )
    return batch
