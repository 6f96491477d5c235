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
C{producer.id.expiration.ms} old (Kafka's rule, default one day), unless
it has a transaction open in the partition.

Transactions (Kafka's C{ProducerAppendInfo} rules for transactional
batches and end-transaction markers):

  - a transactional batch of a producer without an open transaction in the
    partition begins one (its first offset is remembered: the partition's
    last stable offset cannot pass it), but only with the verification
    guard the partition handed out for that producer before the
    coordinator confirmed that the partition is in the producer's
    transaction (KIP-890 part 1); without it, INVALID_TXN_STATE.  A marker
    for the producer drops its guard, so data verified before an abort
    cannot open a transaction nobody will ever close (a "hanging"
    transaction, which would stop the last stable offset for good);
  - a non-transactional batch of a producer with an open transaction is
    INVALID_TXN_STATE;
  - a marker (a control batch only the broker writes) with an epoch older
    than the producer's is INVALID_PRODUCER_EPOCH, one from an older
    coordinator TRANSACTION_COORDINATOR_FENCED; it ends the producer's open
    transaction, giving a L{CompletedTxn}.

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
from kafkatwist.protocol.batch import CONTROL_BIT, TRANSACTIONAL_BIT

__all__ = [
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NUM_BATCHES_TO_RETAIN",
    "SNAPSHOT_SUFFIX",
    "BatchMetadata",
    "CompletedTxn",
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
# NamedTuple construction without its Python-level __new__ (hot path).
_newTuple = tuple.__new__
_TXN_OR_CONTROL = TRANSACTIONAL_BIT | CONTROL_BIT


class BatchMetadata(NamedTuple):
    """
    One appended batch of a producer, as the duplicate check needs it.
    """

    firstSeq: int
    lastSeq: int
    firstOffset: int
    lastOffset: int
    maxTimestamp: int


class CompletedTxn(NamedTuple):
    """
    A transaction a marker ended in this partition.

    @ivar firstOffset: where its first batch is.
    @ivar lastOffset: where its marker is.
    """

    producerId: int
    firstOffset: int
    lastOffset: int
    isAborted: bool


def _ordered(batches) -> bool:
    """
    Whether each cached batch's sequence range lies below the next one's,
    none wrapping (L{ProducerStateEntry.ordered}).
    """
    last = -1
    for batch in batches:
        if batch[0] <= last or batch[1] < batch[0]:
            return False
        last = batch[1]
    return True


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
    @ivar lastTimestamp: max timestamp of the last batch or marker (for
        expiry).
    @ivar coordinatorEpoch: the coordinator epoch of the last marker, -1
        before any.
    @ivar currentTxnFirstOffset: the first offset of the producer's open
        transaction in this partition, -1 when none is open.
    @ivar ordered: C{True} only while the cached batches are known to be in
        sequence order without a wrap (each one's range below the next's):
        the next batch in order cannot then repeat any of them, and its
        duplicate scan is skipped (L{ProducerStateManager.prepareAppend}).
        Every change of L{batches} but that short path's sets it C{False}
        (cached ranges need not be ordered: a snapshot, a replay).
    """

    __slots__ = (
        "batches", "coordinatorEpoch", "currentTxnFirstOffset", "epoch", "lastTimestamp",
        "ordered", "producerId",
    )

    def __init__(
        self,
        producerId: int,
        epoch: int = NO_PRODUCER_EPOCH,
        batches: list[BatchMetadata] | None = None,
        lastTimestamp: int = -1,
        coordinatorEpoch: int = -1,
        currentTxnFirstOffset: int = -1,
    ) -> None:
        self.producerId = producerId
        self.epoch = epoch
        self.batches = batches if batches is not None else []
        self.lastTimestamp = lastTimestamp
        self.coordinatorEpoch = coordinatorEpoch
        self.currentTxnFirstOffset = currentTxnFirstOffset
        self.ordered = False

    def __repr__(self) -> str:
        return (
            f"<ProducerStateEntry id={self.producerId} epoch={self.epoch} "
            f"lastSeq={self.lastSeq} batches={len(self.batches)} "
            f"txn={self.currentTxnFirstOffset}>"
        )

    def _fields(self) -> tuple:
        return (
            self.producerId, self.epoch, self.batches, self.lastTimestamp,
            self.coordinatorEpoch, self.currentTxnFirstOffset,
        )

    def __eq__(self, other) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return self._fields() == other._fields()

    @property
    def lastSeq(self) -> int:
        return self.batches[-1].lastSeq if self.batches else NO_SEQUENCE

    @property
    def lastOffset(self) -> int:
        return self.batches[-1].lastOffset if self.batches else -1

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producerId, self.epoch, list(self.batches), self.lastTimestamp,
            self.coordinatorEpoch, self.currentTxnFirstOffset,
        )

    def addBatch(self, epoch: int, batch: BatchMetadata) -> None:
        self.ordered = False
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
    @ivar ongoing: producer id -> first offset of its open transaction.
    @ivar firstUnstableOffset: the smallest first offset of an open
        transaction, C{None} when none is open.  Readers on other threads
        read it without the lock: it is replaced, never mutated.
    """

    def __init__(
        self, name: str = "", expirationMs: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.name = name
        self.expirationMs = expirationMs
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing: dict[int, int] = {}
        self.firstUnstableOffset: int | None = None
        # producer id -> the guard of its last verification (see newGuard).
        self._guards: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self.producers)

    def get(self, producerId: int) -> ProducerStateEntry | None:
        return self.producers.get(producerId)

    def hasOngoingTxn(self, producerId: int) -> bool:
        return producerId in self.ongoing

    # -- verification (KIP-890 part 1) ------------------------------------------------

    def newGuard(self, producerId: int) -> object:
        """
        A fresh verification guard for C{producerId}: take it before asking
        the coordinator whether this partition is in the producer's
        transaction, and append the first transactional batch with it.  A
        marker for the producer (or a newer guard) invalidates it.
        """
        guard = object()
        self._guards[producerId] = guard
        return guard

    # -- append from a client ------------------------------------------------------

    def prepareAppend(
        self, batches, firstOffset: int, logAppendTime: int | None = None, guard=None
    ):
        """
        Check the batches of one append (L{kafkatwist.protocol.batch.ValidBatch}es
        about to get offsets from C{firstOffset}) against the producer state.
        C{logAppendTime}, if not C{None}, is the max timestamp the batches
        will be stamped with.  Nothing changes until L{commit}.

        @param guard: the verification guard (L{newGuard}) a transactional
            batch that begins a transaction must come with.
        @return: a L{BatchMetadata} if a batch duplicates a cached one (the
            append must then write nothing and report those offsets), else
            the pending updates to L{commit} once the batches are written.
        @raise KafkaError: INVALID_RECORD, INVALID_PRODUCER_EPOCH,
            OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE.
        """
        producers = self.producers
        if len(batches) == 1:
            # The commonest idempotent append: one batch of a producer this
            # partition knows, in its current epoch, outside a transaction,
            # the next in order (its first sequence follows the last one,
            # no wrap).  The same checks as below in Kafka's order, by
            # index: the duplicate scan first, then nothing else can refuse
            # it; the pending update is the entry itself (L{commit}).
            header = batches[0][1]
            entry = producers.get(header[9])
            if entry is not None and header[10] == entry.epoch and not header[5] & _TXN_OR_CONTROL:
                cached = entry.batches
                if cached:
                    firstSeq = header[11]
                    delta = header[6]
                    lastSeq = firstSeq + delta
                    if (
                        firstSeq == cached[-1][1] + 1
                        and firstSeq >= 0
                        and lastSeq <= _INT32_MAX
                        and header[9] not in self.ongoing
                    ):
                        if entry.ordered:
                            # (nothing cached reaches firstSeq: no duplicate)
                            ordered = True
                        else:
                            for batch in cached:
                                if batch[0] == firstSeq and batch[1] == lastSeq:
                                    return batch
                            ordered = _ordered(cached)
                        return (
                            entry,
                            _newTuple(BatchMetadata, (
                                firstSeq, lastSeq, firstOffset, firstOffset + delta,
                                header[8] if logAppendTime is None else logAppendTime,
                            )),
                            ordered,
                        )
        pending = []
        # (epoch, last sequence) of producers seen earlier in this append.
        seen = None
        offset = firstOffset
        for _, header in batches:
            producerId = header.producerId
            delta = header.lastOffsetDelta
            lastOffset = offset + delta
            if producerId >= 0 and not header.attributes & CONTROL_BIT:
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
                begins = False
                if header.attributes & TRANSACTIONAL_BIT:
                    if producerId not in self.ongoing and not any(
                        p[0] == producerId and p[3] for p in pending
                    ):
                        if guard is None or self._guards.get(producerId) is not guard:
                            raise KafkaError(
                                ErrorCode.invalid_txn_state,
                                f"a transactional batch of producer {producerId} in {self.name} "
                                f"is not part of a transaction the coordinator knows of",
                            )
                        begins = True
                elif producerId in self.ongoing:
                    raise KafkaError(
                        ErrorCode.invalid_txn_state,
                        f"a non-transactional batch of producer {producerId} while its "
                        f"transaction is open in {self.name}",
                    )
                maxTimestamp = header.maxTimestamp if logAppendTime is None else logAppendTime
                pending.append(
                    (
                        producerId,
                        epoch,
                        _newTuple(
                            BatchMetadata, (firstSeq, lastSeq, offset, lastOffset, maxTimestamp)
                        ),
                        begins,
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

    def commit(self, pending) -> list[CompletedTxn]:
        """
        Apply the updates of a successful L{prepareAppend} or
        L{prepareBrokerAppend}, before the log publishes its new end (so
        that a transaction begun here already holds the last stable offset
        back when readers see its batch).

        @return: the transactions markers of this append ended; the log
            calls L{completeTxns} with them once it published its new end.
        """
        if type(pending) is tuple:
            # L{prepareAppend}'s next batch in order: (entry, its batch,
            # whether the cache stays ordered with it -- it follows the
            # last one, so it does if the cache was).
            entry, batch, entry.ordered = pending
            batches = entry.batches
            if len(batches) >= NUM_BATCHES_TO_RETAIN:
                del batches[0]
            batches.append(batch)
            entry.lastTimestamp = batch[4]
            return []
        producers = self.producers
        completed = []
        for item in pending:
            producerId, epoch, batch = item[0], item[1], item[2]
            if batch is None:
                # A marker: (producerId, epoch, None, offset, timestamp,
                # coordinatorEpoch, isAborted).
                done = self._applyMarker(producerId, epoch, *item[3:])
                if done is not None:
                    completed.append(done)
                continue
            entry = producers.get(producerId)
            if entry is None:
                entry = producers[producerId] = ProducerStateEntry(
                    producerId, epoch, [batch], batch[4]
                )
            else:
                entry.ordered = False
                if epoch != entry.epoch:
                    entry.epoch = epoch
                    entry.batches = [batch]
                else:
                    batches = entry.batches
                    if len(batches) >= NUM_BATCHES_TO_RETAIN:
                        del batches[0]
                    batches.append(batch)
                entry.lastTimestamp = batch[4]
            if item[3]:
                self._begin(entry, batch[2])
        return completed

    def _begin(self, entry: ProducerStateEntry, firstOffset: int) -> None:
        entry.currentTxnFirstOffset = firstOffset
        self._guards.pop(entry.producerId, None)
        self.ongoing[entry.producerId] = firstOffset
        if self.firstUnstableOffset is None or firstOffset < self.firstUnstableOffset:
            self.firstUnstableOffset = firstOffset

    # -- appends the broker makes (markers, coordinator records) ------------------------

    def prepareBrokerAppend(self, batches, firstOffset: int, markers=None):
        """
        Check the broker's own batches that carry a producer id: the
        group coordinator's transactional offset commits (epoch checked, no
        sequence: Kafka writes them with none) and end-transaction markers.

        @param markers: for each control batch, in order, C{(isAborted,
            coordinatorEpoch)} (from its record).
        @return: the pending updates to L{commit}.
        @raise KafkaError: INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED.
        """
        pending = []
        marks = iter(markers or ())
        offset = firstOffset
        for _, header in batches:
            producerId = header.producerId
            lastOffset = offset + header.lastOffsetDelta
            if producerId >= 0:
                epoch = header.producerEpoch
                entry = self.producers.get(producerId)
                if entry is not None and epoch < entry.epoch:
                    raise KafkaError(
                        ErrorCode.invalid_producer_epoch,
                        f"epoch {epoch} of producer {producerId} in {self.name} is older "
                        f"than its current epoch {entry.epoch}",
                    )
                if header.attributes & CONTROL_BIT:
                    isAborted, coordinatorEpoch = next(marks)
                    if entry is not None and coordinatorEpoch < entry.coordinatorEpoch:
                        raise KafkaError(
                            ErrorCode.transaction_coordinator_fenced,
                            f"a marker of coordinator epoch {coordinatorEpoch} for producer "
                            f"{producerId} in {self.name}, which has seen "
                            f"{entry.coordinatorEpoch}",
                        )
                    pending.append(
                        (producerId, epoch, None, offset, header.maxTimestamp,
                         coordinatorEpoch, isAborted)
                    )
                else:
                    firstSeq = header.baseSequence
                    pending.append(
                        (
                            producerId,
                            epoch,
                            BatchMetadata(
                                firstSeq,
                                lastSequence(firstSeq, header.lastOffsetDelta),
                                offset,
                                lastOffset,
                                header.maxTimestamp,
                            ),
                            bool(header.attributes & TRANSACTIONAL_BIT)
                            and producerId not in self.ongoing
                            and not any(p[0] == producerId and p[3] is True for p in pending),
                        )
                    )
            offset = lastOffset + 1
        return pending

    def _applyMarker(
        self,
        producerId: int,
        epoch: int,
        offset: int,
        timestamp: int,
        coordinatorEpoch: int,
        isAborted: bool,
    ) -> CompletedTxn | None:
        entry = self.producers.get(producerId)
        if entry is None:
            entry = self.producers[producerId] = ProducerStateEntry(producerId, epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches = []
            entry.ordered = False
        entry.coordinatorEpoch = coordinatorEpoch
        entry.lastTimestamp = timestamp
        self._guards.pop(producerId, None)
        first = entry.currentTxnFirstOffset
        if first < 0:
            # A marker for a transaction that never wrote here (or a
            # marker sent again after a restart): nothing to end.
            return None
        entry.currentTxnFirstOffset = -1
        return CompletedTxn(producerId, first, offset, isAborted)

    def lastStableOffsetAfter(self, completed: CompletedTxn) -> int:
        """
        Kafka's C{lastStableOffset(completedTxn)}: the first offset of the
        oldest other open transaction, else the offset after the marker.
        """
        others = [o for pid, o in self.ongoing.items() if pid != completed.producerId]
        return min(others) if others else completed.lastOffset + 1

    def completeTxns(self, completed) -> None:
        """
        Forget the open transactions L{commit} reported ended, once the log
        published its new end (readers then see the marker before the last
        stable offset moves past it).
        """
        for txn in completed:
            self.ongoing.pop(txn.producerId, None)
        self._updateFirstUnstable()

    def _updateFirstUnstable(self) -> None:
        self.firstUnstableOffset = min(self.ongoing.values()) if self.ongoing else None

    # -- rebuilding ------------------------------------------------------------------

    def replay(self, header, marker=None) -> CompletedTxn | None:
        """
        Update the state with one batch already in the log (recovery, and
        appends the broker makes itself): no checks.

        @param header: a L{kafkatwist.protocol.batch.BatchHeader} with its
            final offsets.
        @param marker: for a control batch, C{(isAborted,
            coordinatorEpoch)} from its record; C{None} treats it as an
            abort of epoch -1's coordinator (only its end matters then).
        @return: the transaction a marker ended, if any; its entry is gone
            from L{ongoing} already.
        """
        producerId = header.producerId
        if producerId < 0:
            return None
        if header.attributes & CONTROL_BIT:
            isAborted, coordinatorEpoch = marker if marker is not None else (True, -1)
            completed = self._applyMarker(
                producerId, header.producerEpoch, header.baseOffset, header.maxTimestamp,
                coordinatorEpoch, isAborted,
            )
            if completed is not None:
                self.completeTxns((completed,))
            return completed
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
        if header.attributes & TRANSACTIONAL_BIT and entry.currentTxnFirstOffset < 0:
            self._begin(entry, header.baseOffset)
        return None

    def removeExpired(self, nowMs: int) -> int:
        """
        Forget producers idle for C{expirationMs}, except those with an open
        transaction.

        @return: how many were removed.
        """
        limit = nowMs - self.expirationMs
        doomed = [
            pid for pid, e in self.producers.items()
            if e.lastTimestamp <= limit and e.currentTxnFirstOffset < 0
        ]
        for pid in doomed:
            del self.producers[pid]
            self._guards.pop(pid, None)
        return len(doomed)

    def clear(self) -> None:
        self.producers = {}
        self.ongoing = {}
        self._guards = {}
        self.firstUnstableOffset = None

    # -- snapshots ---------------------------------------------------------------------

    def snapshot(self) -> bytes:
        return encodeSnapshot(self.producers.values())

    def loadSnapshot(self, data: bytes) -> None:
        """
        Replace the state with a snapshot's.

        @raise CorruptSnapshot: the snapshot does not decode.
        """
        self.producers = {entry.producerId: entry for entry in decodeSnapshot(data)}
        self.ongoing = {
            pid: e.currentTxnFirstOffset
            for pid, e in sorted(self.producers.items(), key=lambda i: i[1].currentTxnFirstOffset)
            if e.currentTxnFirstOffset >= 0
        }
        self._guards = {}
        self._updateFirstUnstable()


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
#            [v2: coordinatorEpoch int32 | currentTxnFirstOffset int64] |
#            batches int8 | batches x (firstSeq int32 | lastSeq int32 |
#            firstOffset int64 | lastOffset int64 | maxTimestamp int64)
# Version 1 (written before transactions were served) has no transaction
# fields: no transaction could be open then, so it loads as "none open".
_MAGIC = b"KTPS"
_VERSION = 2
_PREFIX = struct.Struct(">4shI")
_COUNT = struct.Struct(">i")
_ENTRY_V1 = struct.Struct(">qhqb")
_ENTRY = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")


def encodeSnapshot(entries) -> bytes:
    body = bytearray()
    entries = list(entries)
    body += _COUNT.pack(len(entries))
    for entry in entries:
        body += _ENTRY.pack(
            entry.producerId, entry.epoch, entry.lastTimestamp, entry.coordinatorEpoch,
            entry.currentTxnFirstOffset, len(entry.batches),
        )
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
    if magic != _MAGIC or version not in (1, _VERSION):
        raise CorruptSnapshot(f"unknown magic {magic!r} or version {version}")
    body = memoryview(data)[_PREFIX.size :]
    if crc32c(body) != crc:
        raise CorruptSnapshot("checksum mismatch")
    try:
        (count,) = _COUNT.unpack_from(body, 0)
        position = _COUNT.size
        entries = []
        for _ in range(count):
            if version == 1:
                producerId, epoch, lastTimestamp, n = _ENTRY_V1.unpack_from(body, position)
                coordinatorEpoch, txnFirstOffset = -1, -1
                position += _ENTRY_V1.size
            else:
                producerId, epoch, lastTimestamp, coordinatorEpoch, txnFirstOffset, n = (
                    _ENTRY.unpack_from(body, position)
                )
                position += _ENTRY.size
            batches = []
            for _ in range(n):
                batches.append(BatchMetadata._make(_BATCH.unpack_from(body, position)))
                position += _BATCH.size
            entries.append(
                ProducerStateEntry(
                    producerId, epoch, batches, lastTimestamp, coordinatorEpoch, txnFirstOffset
                )
            )
    except struct.error as e:
        raise CorruptSnapshot(f"truncated: {e}") from None
    if position != len(body):
        raise CorruptSnapshot(f"{len(body) - position} trailing bytes")
    return entries
