"""
Idempotent producer state of one partition: Kafka's C{ProducerStateManager}
and C{ProducerAppendInfo} rules, from batch headers only.

Per producer id the partition keeps the producer epoch and the metadata
(first and last sequence, first and last offset, max timestamp) of its last
five batches.  On append from a client, for every batch carrying a producer
id (in this order, as Kafka does):

  - a batch whose epoch equals the producer's and whose sequence range is
    exactly one of the five cached ones is a duplicate (a retry): nothing is
    appended and the original offsets are returned;
  - an epoch older than the producer's is INVALID_PRODUCER_EPOCH;
  - a newer epoch must start at sequence 0 (an epoch bump resets the
    sequence), else OUT_OF_ORDER_SEQUENCE_NUMBER;
  - the same epoch must continue at the last sequence + 1 (wrapping after
    2**31 - 1), else OUT_OF_ORDER_SEQUENCE_NUMBER -- which is also what a
    retry of a batch older than the five cached ones gets;
  - a producer the partition does not know is accepted at any sequence
    (Kafka since 2.5, KIP-360: its state may have been removed by
    retention or expiry).

A producer's state expires once its last batch's max timestamp is
C{producer.id.expiration.ms} old (Kafka's rule, default one day).

Snapshots: L{encodeSnapshot} / L{decodeSnapshot} give a compact checksummed
form of the whole state at an offset; the on-disk log writes one as
C{<offset, 20 digits>.snapshot} next to the segments when it rolls and when
it closes, and recovery loads the newest usable snapshot and replays the
batch headers after it (L{ProducerStateManager.replay}).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

from kafkatwist.errors import ErrorCode, KafkaError

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CorruptSnapshot",
    "ProducerStateEntry",
    "ProducerStateManager",
    "decodeSnapshot",
    "encodeSnapshot",
    "lastSequence",
    "producerIdExpirationMs",
]

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
_INT32_MAX = 2**31 - 1
_CONTROL_BIT = 0x20
# NamedTuple construction without its Python-level __new__ (hot path).
_newTuple = tuple.__new__


class BatchMetadata(NamedTuple):
    """
    One appended batch of a producer, as the duplicate check needs it.
    """

    firstSeq: int
    lastSeq: int
    firstOffset: int
    lastOffset: int
    maxTimestamp: int


def lastSequence(baseSequence: int, lastOffsetDelta: int) -> int:
    """
    The sequence of a batch's last record (sequences wrap to 0 after
    2**31 - 1, like Kafka's C{DefaultRecordBatch.incrementSequence}).
    """
    if baseSequence > _INT32_MAX - lastOffsetDelta:
        return lastOffsetDelta - (_INT32_MAX - baseSequence) - 1
    return baseSequence + lastOffsetDelta


class ProducerStateEntry:
    """
    One producer's state in one partition.

    @ivar batches: the last L{NUM_BATCHES_TO_RETAIN} batches, oldest first.
    @ivar lastTimestamp: max timestamp of the last batch (for expiry).
    """

    __slots__ = ("batches", "epoch", "lastTimestamp", "producerId")

    def __init__(
        self,
        producerId: int,
        epoch: int = NO_PRODUCER_EPOCH,
        batches: list[BatchMetadata] | None = None,
        lastTimestamp: int = -1,
    ) -> None:
        self.producerId = producerId
        self.epoch = epoch
        self.batches = batches if batches is not None else []
        self.lastTimestamp = lastTimestamp

    def __repr__(self) -> str:
        return (
            f"<ProducerStateEntry id={self.producerId} epoch={self.epoch} "
            f"lastSeq={self.lastSeq} batches={len(self.batches)}>"
        )

    def __eq__(self, other) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return (self.producerId, self.epoch, self.batches, self.lastTimestamp) == (
            other.producerId,
            other.epoch,
            other.batches,
            other.lastTimestamp,
        )

    @property
    def lastSeq(self) -> int:
        return self.batches[-1].lastSeq if self.batches else NO_SEQUENCE

    @property
    def lastOffset(self) -> int:
        return self.batches[-1].lastOffset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producerId, self.epoch, list(self.batches), self.lastTimestamp
        )

    def addBatch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches = []
        batches = self.batches
        if len(batches) >= NUM_BATCHES_TO_RETAIN:
            del batches[0]
        batches.append(batch)
        self.lastTimestamp = batch.maxTimestamp


class ProducerStateManager:
    """
    The producer states of one partition.  Not thread-safe: the partition
    log calls it under its lock.

    @ivar producers: producer id -> L{ProducerStateEntry}.
    @ivar expirationMs: C{producer.id.expiration.ms}.
    """

    def __init__(
        self, name: str = "", expirationMs: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.name = name
        self.expirationMs = expirationMs
        self.producers: dict[int, ProducerStateEntry] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producerId: int) -> ProducerStateEntry | None:
        return self.producers.get(producerId)

    # -- append from a client ------------------------------------------------------

    def prepareAppend(self, batches, firstOffset: int, logAppendTime: int | None = None):
        """
        Check the batches of one append (L{kafkatwist.protocol.batch.ValidBatch}es
        about to get offsets from C{firstOffset}) against the producer state.
        C{logAppendTime}, if not C{None}, is the max timestamp the batches
        will be stamped with.  Nothing changes until L{commit}.

        @return: a L{BatchMetadata} if a batch duplicates a cached one (the
            append must then write nothing and report those offsets), else
            the pending updates to L{commit} once the batches are written.
        @raise KafkaError: INVALID_RECORD, INVALID_PRODUCER_EPOCH,
            OUT_OF_ORDER_SEQUENCE_NUMBER.
        """
        producers = self.producers
        pending = []
        # (epoch, last sequence) of producers seen earlier in this append.
        seen = None
        offset = firstOffset
        for _, header in batches:
            producerId = header.producerId
            delta = header.lastOffsetDelta
            lastOffset = offset + delta
            if producerId >= 0 and not header.attributes & _CONTROL_BIT:
                epoch, firstSeq = header.producerEpoch, header.baseSequence
                if firstSeq < 0:
                    raise KafkaError(
                        ErrorCode.invalid_record,
                        f"invalid sequence number {firstSeq} in a batch of producer {producerId}",
                    )
                lastSeq = firstSeq + delta
                if lastSeq > _INT32_MAX:
                    lastSeq -= _INT32_MAX + 1
                entry = producers.get(producerId)
                if entry is not None and epoch == entry.epoch:
                    for batch in entry.batches:
                        if batch[0] == firstSeq and batch[1] == lastSeq:
                            return batch
                if seen is not None and producerId in seen:
                    currentEpoch, currentLastSeq = seen[producerId]
                elif entry is not None:
                    currentEpoch = entry.epoch
                    currentLastSeq = entry.batches[-1][1] if entry.batches else NO_SEQUENCE
                else:
                    currentEpoch = currentLastSeq = NO_PRODUCER_EPOCH
                if epoch != currentEpoch or (
                    firstSeq != currentLastSeq + 1 and currentEpoch != NO_PRODUCER_EPOCH
                ):
                    self._refuse(producerId, epoch, firstSeq, offset, currentEpoch, currentLastSeq)
                maxTimestamp = header.maxTimestamp if logAppendTime is None else logAppendTime
                pending.append(
                    (
                        producerId,
                        epoch,
                        _newTuple(
                            BatchMetadata, (firstSeq, lastSeq, offset, lastOffset, maxTimestamp)
                        ),
                    )
                )
                if len(batches) > 1:
                    if seen is None:
                        seen = {}
                    seen[producerId] = (epoch, lastSeq)
            offset = lastOffset + 1
        return pending

    def _refuse(
        self,
        producerId: int,
        epoch: int,
        firstSeq: int,
        offset: int,
        currentEpoch: int,
        currentLastSeq: int,
    ) -> None:
        """
        The slow path of L{prepareAppend}: raise unless Kafka's rules accept
        the batch after all (a new epoch from 0, a new producer, a wrap).
        """
        if epoch < currentEpoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"epoch {epoch} of producer {producerId} at offset {offset} in "
                f"{self.name} is older than the last seen epoch {currentEpoch}",
            )
        if epoch != currentEpoch:
            if firstSeq != 0 and currentEpoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"invalid sequence number {firstSeq} for new epoch {epoch} of producer "
                    f"{producerId} at offset {offset} in {self.name} "
                    f"(current epoch {currentEpoch}): a new epoch starts at 0",
                )
            return
        if currentEpoch == NO_PRODUCER_EPOCH:
            return
        if firstSeq == currentLastSeq + 1 or (firstSeq == 0 and currentLastSeq == _INT32_MAX):
            return
        raise KafkaError(
            ErrorCode.out_of_order_sequence_number,
            f"out of order sequence number for producer {producerId} at offset "
            f"{offset} in {self.name}: {firstSeq} (incoming), {currentLastSeq} (current end)",
        )

    def commit(self, pending) -> None:
        """
        Apply the updates of a successful L{prepareAppend}.
        """
        producers = self.producers
        for producerId, epoch, batch in pending:
            entry = producers.get(producerId)
            if entry is None:
                producers[producerId] = ProducerStateEntry(producerId, epoch, [batch], batch[4])
                continue
            if epoch != entry.epoch:
                entry.epoch = epoch
                entry.batches = [batch]
            else:
                batches = entry.batches
                if len(batches) >= NUM_BATCHES_TO_RETAIN:
                    del batches[0]
                batches.append(batch)
            entry.lastTimestamp = batch[4]

    # -- rebuilding ------------------------------------------------------------------

    def replay(self, header) -> None:
        """
        Update the state with one batch already in the log (recovery, and
        appends the broker makes itself): no checks.

        @param header: a L{kafkatwist.protocol.batch.BatchHeader} with its
            final offsets.
        """
        producerId = header.producerId
        if producerId < 0 or header.attributes & _CONTROL_BIT:
            return
        entry = self.producers.get(producerId)
        if entry is None:
            entry = self.producers[producerId] = ProducerStateEntry(producerId)
        firstSeq = header.baseSequence
        entry.addBatch(
            header.producerEpoch,
            BatchMetadata(
                firstSeq,
                lastSequence(firstSeq, header.lastOffsetDelta),
                header.baseOffset,
                header.baseOffset + header.lastOffsetDelta,
                header.maxTimestamp,
            ),
        )

    def removeExpired(self, nowMs: int) -> int:
        """
        Forget producers idle for C{expirationMs}.

        @return: how many were removed.
        """
        limit = nowMs - self.expirationMs
        doomed = [pid for pid, e in self.producers.items() if e.lastTimestamp <= limit]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    def clear(self) -> None:
        self.producers = {}

    # -- snapshots ---------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return encodeSnapshot(self.producers.values())

    def loadSnapshot(self, data: bytes) -> None:
        """
        Replace the state with a snapshot's.

        @raise CorruptSnapshot: the snapshot does not decode.
        """
        self.producers = {entry.producerId: entry for entry in decodeSnapshot(data)}


def producerIdExpirationMs(defaults) -> int:
    """
    C{producer.id.expiration.ms} from broker settings (Kafka's default: one
    day).
    """
    value = (defaults or {}).get("producer.id.expiration.ms")
    if value is None:
        return DEFAULT_PRODUCER_ID_EXPIRATION_MS
    try:
        number = int(str(value).strip())
    except ValueError:
        raise KafkaError(
            ErrorCode.invalid_config, f"producer.id.expiration.ms: {value!r} is not an integer"
        ) from None
    if number < 1:
        raise KafkaError(
            ErrorCode.invalid_config, f"producer.id.expiration.ms: {number} is below 1"
        )
    return number


class CorruptSnapshot(ValueError):
    """
    A producer state snapshot that does not decode (torn write, bad
    checksum, unknown version).
    """


# Snapshot format (big-endian):
#   magic "KTPS" | version int16 | crc32c uint32 of the rest | count int32 |
#   entries: producerId int64 | epoch int16 | lastTimestamp int64 |
#            batches int8 | batches x (firstSeq int32 | lastSeq int32 |
#            firstOffset int64 | lastOffset int64 | maxTimestamp int64)
_MAGIC = b"KTPS"
_VERSION = 1
_PREFIX = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhqb")
_BATCH = struct.Struct(">iiqqq")


def encodeSnapshot(entries) -> bytes:
    body = bytearray()
    entries = list(entries)
    body += _COUNT.pack(len(entries))
    for entry in entries:
        body += _ENTRY.pack(entry.producerId, entry.epoch, entry.lastTimestamp, len(entry.batches))
        for batch in entry.batches:
            body += _BATCH.pack(*batch)
    return _PREFIX.pack(_MAGIC, _VERSION, crc32c(body)) + bytes(body)


def decodeSnapshot(data: bytes) -> list[ProducerStateEntry]:
    """
    @raise CorruptSnapshot: bad magic, version, checksum or lengths.
    """
    if len(data) < _PREFIX.size + _COUNT.size:
        raise CorruptSnapshot(f"{len(data)} bytes is too short")
    magic, version, crc = _PREFIX.unpack_from(data, 0)
    if magic != _MAGIC or version != _VERSION:
        raise CorruptSnapshot(f"unknown magic {magic!r} or version {version}")
    body = memoryview(data)[_PREFIX.size :]
    if crc32c(body) != crc:
        raise CorruptSnapshot("checksum mismatch")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        position = _COUNT.size
        entries = []
        for _ in range(count):
            producerId, epoch, lastTimestamp, n = _ENTRY.unpack_from(body, position)
            position += _ENTRY.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata._make(_BATCH.unpack_from(body, position)))
                position += _BATCH.size
            entries.append(ProducerStateEntry(producerId, epoch, batches, lastTimestamp))
    except struct.error as e:
        raise CorruptSnapshot(f"truncated: {e}") from None
    if position != len(body):
        raise CorruptSnapshot(f"{len(body) - position} trailing bytes")
    return entries
