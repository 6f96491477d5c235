"""
One topic-partition's log: a list of segments, the last one active.

Concurrency: one lock per partition serialises appends, rolls, retention and
flushes.  Reads take no lock: they read the published state, a tuple
C{(logEndOffset, activeSegment, activeSize)} replaced in one assignment
after a write completes, and the segment list, replaced (never mutated) on
roll and deletion.  A reader therefore sees a prefix of the appends, never a
torn batch.  The read path is L{kafkatwist.log.reads.PartitionReads}, this
class's base.

Flush policy: nothing is fsynced by default (the page cache holds it, like
Kafka).  C{flush.messages} (topic, default C{log.flush.interval.messages})
fsyncs within C{append} once that many records are unflushed, so
C{flush.messages=1} fsyncs before the append returns ("fsync before ack").
C{flush.ms} (default C{log.flush.interval.ms}) is honoured by
L{PartitionLog.maybeFlush}, which the log manager's C{flushDirty} calls on
the broker's timer; that also fsyncs segments rolled since the last call
(Kafka flushes a segment when it rolls), so after a crash only the active
segment normally needs recovering.  The recovery point is the offset below
which everything is known to be on disk.

Idempotent producers: C{producerState} (L{ProducerStateManager}) checks
the batches of each append that carry a producer id, under the lock and
before anything is written; a retried batch (a duplicate of one of the
producer's last five) writes nothing and returns its original offsets with
C{AppendInfo.duplicate} set.  Batches without a producer id cost one
comparison.

Transactions: a transactional batch that begins a producer's transaction
needs the verification guard the producer state handed out (see
L{kafkatwist.log.producerstate}); the open transactions hold the last
stable offset (LSO) back.  Markers are appended by the broker
(L{PartitionLog.appendMarker}); each ABORT of a transaction that wrote
here adds an entry to the aborted-transaction index (L{kafkatwist.log.txnindex})
of the segment the marker lands in.  Publication order keeps readers
safe without a lock: a transaction's first offset is published before the
log end moves past its batch, and forgotten only after the log end moves
past its marker; readers read the log end first.  A read_committed read
stops at the LSO and reports the aborted transactions overlapping it.
"""

from __future__ import annotations

import os
import threading
import zlib
from bisect import bisect_right

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IPartitionLog
from kafkatwist.log.config import LogConfig
from kafkatwist.log.epochs import LeaderEpochCache
from kafkatwist.log.index import OffsetIndex, TimeIndex
from kafkatwist.log.recordchecks import checkClientRecords
from kafkatwist.log.reads import PartitionReads
from kafkatwist.log.producerstate import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateManager,
)
from kafkatwist.log.records import AppendInfo
from kafkatwist.log.throttle import storageLog
from kafkatwist.log.txnindex import AbortedTxn, TransactionIndex
from kafkatwist.protocol.batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    AssignedBatch,
    assignOffsets,
    batchError,
    validateRecordSet,
)
from kafkatwist.protocol.markers import MarkerError, buildMarkerBatch, readMarker

__all__ = ["PartitionLog"]

log = Logger()

_MAX_RELATIVE_OFFSET = 2**31 - 1
# NamedTuple construction without its Python-level __new__ (hot path).
_newTuple = tuple.__new__


def _segmentText(segment) -> str:
    """
    A segment as Kafka's C{LogSegment.toString} writes it (the largest
    timestamp only if known already: no index is loaded for a log line).
    """
    largest = getattr(segment, "_maxTimestamp", None)
    return (
        f"LogSegment(baseOffset={segment.baseOffset}, size={segment.size}, "
        f"lastModifiedTime={segment.lastModifiedMs()}, "
        f"largestRecordTimestamp={-1 if largest is None else largest})"
    )


@implementer(IPartitionLog)
class PartitionLog(PartitionReads):
    """
    A partition log over segments made by C{self._newSegment(baseOffset,
    nowMs)} (subclasses: on disk, in memory).

    @ivar config: the L{LogConfig} in force; replaced whole when the topic's
        configs change.
    @ivar recoveryPoint: everything below this offset has been fsynced.
    @ivar leaderEpoch: written into appended batches.
    @ivar producerState: the idempotent producers' state.
    """

    def __init__(
        self,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list,
        *,
        logStartOffset: int = 0,
        recoveryPoint: int = 0,
        leaderEpoch: int = 0,
        producerState: ProducerStateManager | None = None,
        producerIdExpirationMs: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        epochCache: LeaderEpochCache | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.config = config
        self.leaderEpoch = leaderEpoch
        self._lock = threading.RLock()
        self._closed = False
        self._setSegments(list(segments))
        active = segments[-1]
        self._end = (active.nextOffset, active, active.size)
        self._logStartOffset = min(max(logStartOffset, segments[0].baseOffset), active.nextOffset)
        self.recoveryPoint = min(recoveryPoint, active.nextOffset)
        self._unflushedRecords = 0
        self._dirtySinceMs: int | None = None
        self._rolledUnflushed: list = []
        #: bumped by every truncation from the end (L{_afterTruncation}):
        #: a flush that synced rolled segments outside the lock advances the
        #: recovery point only if none happened meanwhile
        self._truncations = 0
        self.flushCount = 0
        if producerState is None:
            producerState = ProducerStateManager(f"{topic}-{partition}", producerIdExpirationMs)
        else:
            producerState.name = f"{topic}-{partition}"
            producerState.expirationMs = producerIdExpirationMs
        self.producerState = producerState
        self.epochs = epochCache if epochCache is not None else LeaderEpochCache(None)
        self.epochs.truncateFromEnd(self._end[0])
        self.epochs.truncateFromStart(self._logStartOffset)

    #: whether this replica takes appends from clients and coordinators
    #: (the replica manager clears it on a follower; a single broker leads
    #: every partition)
    isLeader = True
    #: the high watermark, or C{None} while it is the log end offset (a
    #: leader alone in its ISR, and every log of a single broker): the
    #: replica manager sets it; reads for consumers stop there
    _highWatermark: int | None = None
    #: the ISR's broker ids as the replica manager last published them
    #: (empty on a follower; C{None}: not replicated, and
    #: min.insync.replicas is not checked); replication throttles do not
    #: hold back replicas in it
    inSyncReplicas: frozenset | None = None

    @property
    def isrSize(self) -> int | None:
        """
        The size of L{inSyncReplicas} (C{None} when not replicated): derived,
        so one published value can never disagree with the other.
        """
        isr = self.inSyncReplicas
        return None if isr is None else len(isr)

    def replicated(self) -> bool:
        """
        See L{IPartitionLog.replicated}: the high watermark is pinned (the
        replica manager publishes it) rather than following the log end.
        """
        return self._highWatermark is not None

    def __repr__(self) -> str:
        name = f"{self.topic}-{self.partition}"
        return f"<{type(self).__name__} {name} [{self.logStartOffset}, {self.logEndOffset})>"

    # -- state ---------------------------------------------------------------

    def _setSegments(self, segments: list) -> None:
        self._view = ([s.baseOffset for s in segments], segments)

    @property
    def segments(self) -> list:
        """
        A snapshot of the segments, oldest first.
        """
        return list(self._view[1])

    @property
    def activeSegment(self):
        return self._view[1][-1]

    @property
    def logEndOffset(self) -> int:
        return self._end[0]

    @property
    def highWatermark(self) -> int:
        end = self._end[0]
        hw = self._highWatermark
        return end if hw is None or hw > end else hw

    def setHighWatermark(self, offset: int | None) -> None:
        """
        Publish the high watermark (C{None}: it follows the log end).
        Called by the replica manager's thread only.
        """
        self._highWatermark = offset

    def pinHighWatermark(self) -> int:
        """
        Stop the high watermark following the log end: pin it at the log
        end, atomically with appends, and return it (where it is already
        pinned, where it is).  From then on every append is L{replicated},
        so an acks=-1 answer waits for the ISR the replica manager computes
        the high watermark over.  Called by the replica manager's thread
        only, before it lets a follower into a leader's ISR: an append
        answered before the pin is below it, and the follower has it.
        """
        with self._lock:
            if self._highWatermark is None:
                self._highWatermark = self._end[0]
            return self._highWatermark

    @property
    def lastStableOffset(self) -> int:
        # The log end first (see the module docs); never past the high
        # watermark (Kafka's LSO is bounded by it).
        end = self.highWatermark
        first = self.producerState.firstUnstableOffset
        if first is None or first >= end:
            return end
        return max(first, self._logStartOffset)

    @property
    def logStartOffset(self) -> int:
        return self._logStartOffset

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._view[1])

    # -- append --------------------------------------------------------------

    def append(
        self, records, nowMs: int, *, isFromClient: bool = True, verificationGuard=None
    ) -> AppendInfo:
        """
        See L{IPartitionLog.append}.

        @param isFromClient: C{False} lets the broker itself write control
            batches (end-transaction markers, checked against the producer
            and coordinator epochs) and batches without sequence numbers
            (the group coordinator's transactional offset commits).
        @param verificationGuard: what
            L{ProducerStateManager.newGuard} gave for the producer whose
            transactional batch this append may begin a transaction with.
        """
        config = self.config
        data = bytearray(records)
        batches = validateRecordSet(
            data, maxBatchBytes=config.maxMessageBytes, allowControl=not isFromClient
        )
        if isFromClient:
            markers = None
            check = config.recordChecks
            if not check:
                # A batch claiming LogAppendTime is checked (a bit test each).
                for batch in batches:
                    if batch[1][5] & TIMESTAMP_TYPE_BIT:
                        check = True
                        break
            if check:
                checkClientRecords(data, batches, f"{self.topic}-{self.partition}", config, nowMs)
        else:
            markers = self._readMarkers(data, batches)
        size = len(data)
        if size > config.segmentBytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"{size} bytes is larger than segment.bytes {config.segmentBytes}",
            )
        logAppendTime = nowMs if config.appendTime else None
        with self._lock:
            if self._closed:
                self._checkOpen()
            if not self.isLeader:
                raise KafkaError(
                    ErrorCode.not_leader_or_follower,
                    f"this broker does not lead {self.topic}-{self.partition}",
                )
            firstOffset = self._end[0]
            leaderEpoch = self.leaderEpoch
            if leaderEpoch > self.epochs.latestEpoch:
                # The first append of this leader's epoch: once per epoch.
                try:
                    self.epochs.assign(leaderEpoch, firstOffset)
                except OSError as e:
                    raise self._storageError("leader-epoch-checkpoint", e) from None
            producers = None
            for _, header in batches:
                if header[9] >= 0:  # a producer id
                    if isFromClient:
                        producers = self.producerState.prepareAppend(
                            batches, firstOffset, logAppendTime, verificationGuard
                        )
                        if type(producers) is BatchMetadata:
                            return self._duplicate(producers)
                    else:
                        producers = self.producerState.prepareBrokerAppend(
                            batches, firstOffset, markers
                        )
                    break
            assigned = assignOffsets(
                data,
                batches,
                firstOffset,
                logAppendTime=logAppendTime,
                leaderEpoch=leaderEpoch,
            )
            last = assigned[-1]
            lastOffset = last[3]
            maxTimestamp, offsetOfMax = last[4], last[5]
            if len(assigned) > 1:
                maxTimestamp, offsetOfMax = -1, -1
                for batch in assigned:
                    if batch[4] > maxTimestamp:
                        maxTimestamp, offsetOfMax = batch[4], batch[5]
            segment = self._maybeRoll(size, maxTimestamp, lastOffset, nowMs)
            segment.append(data, assigned, config.indexIntervalBytes)
            # Before the end is published: a transaction begun here holds
            # the last stable offset back before readers can see its batch.
            completed = self.producerState.commit(producers) if producers else None
            # Publish only now: readers never look past this.
            self._end = (lastOffset + 1, segment, segment.size)
            if completed:
                self._completeTxns(completed, segment)
            # Every batch's count is its offset span (validateRecordSet).
            numRecords = lastOffset + 1 - firstOffset
            unflushed = self._unflushedRecords
            if unflushed == 0:
                self._dirtySinceMs = nowMs
            unflushed = self._unflushedRecords = unflushed + numRecords
            if unflushed >= config.flushMessages:
                try:
                    self._flushLocked()
                except OSError as e:
                    # Written but not durable: the producer retries (an
                    # idempotent one is deduplicated).
                    raise self._storageError("fsync", e) from None
            return _newTuple(
                AppendInfo,
                (
                    firstOffset,
                    lastOffset,
                    -1 if logAppendTime is None else nowMs,
                    self._logStartOffset,
                    maxTimestamp,
                    offsetOfMax,
                    numRecords,
                    size,
                    False,
                ),
            )

    #: whether L{close} flushed everything (a full disk may stop it)
    closedClean = True

    def _duplicate(self, batch: BatchMetadata) -> AppendInfo:
        # Kafka answers a retried batch with the offsets it got the first time.
        return AppendInfo(
            firstOffset=batch.firstOffset,
            lastOffset=batch.lastOffset,
            logAppendTime=batch.maxTimestamp if self.config.logAppendTime else -1,
            logStartOffset=self._logStartOffset,
            maxTimestamp=batch.maxTimestamp,
            offsetOfMaxTimestamp=batch.lastOffset,
            numRecords=0,
            validBytes=0,
            duplicate=True,
        )

    @staticmethod
    def _readMarkers(data, batches) -> list[tuple[bool, int]]:
        """
        C{(isAborted, coordinatorEpoch)} of each control batch of a broker
        append.

        @raise KafkaError: INVALID_RECORD for a control batch that is not
            an end-transaction marker.
        """
        markers = []
        for position, header in batches:
            if header.attributes & CONTROL_BIT:
                try:
                    marker = readMarker(memoryview(data)[position : position + header.size])
                except MarkerError as e:
                    raise KafkaError(ErrorCode.invalid_record, f"control batch: {e}") from None
                if not marker.isTransactionMarker:
                    raise KafkaError(
                        ErrorCode.invalid_record, f"control record type {marker.controlType}"
                    )
                markers.append((marker.isAborted, marker.coordinatorEpoch))
        return markers

    def verificationGuard(self, producerId: int) -> object:
        """
        A verification guard for C{producerId}'s next transactional
        append (see L{ProducerStateManager.newGuard}).
        """
        with self._lock:
            return self.producerState.newGuard(producerId)

    def appendMarker(
        self,
        producerId: int,
        producerEpoch: int,
        commit: bool,
        coordinatorEpoch: int,
        nowMs: int,
    ) -> AppendInfo:
        """
        Write an end-transaction marker (the WriteTxnMarkers path): it ends
        the producer's open transaction here, if any.

        @raise KafkaError: INVALID_PRODUCER_EPOCH (the producer has a newer
            epoch here), TRANSACTION_COORDINATOR_FENCED, or what any append
            may raise.
        """
        batch = buildMarkerBatch(producerId, producerEpoch, commit, coordinatorEpoch, nowMs)
        return self.append(batch, nowMs, isFromClient=False)

    # -- replication -----------------------------------------------------------

    def appendAsFollower(
        self, records, nowMs: int, leaderEpoch: int | None = None
    ) -> AppendInfo | None:
        """
        Append batches fetched from the leader as they are: their offsets
        and leader epochs are the leader's (nothing is rewritten), each
        batch's CRC is checked, the producer state is replayed from their
        headers and the leader-epoch cache learns the epochs.

        @param leaderEpoch: the leader epoch the data was fetched in: if
            this replica has since changed role or epoch, nothing is
            appended (NOT_LEADER_OR_FOLLOWER).
        @return: what was appended, or C{None} for an empty record set.
        @raise KafkaError: CORRUPT_MESSAGE for a damaged batch (nothing is
            appended), OFFSET_OUT_OF_RANGE for a batch below the log end or
            offsets that go backwards, KAFKA_STORAGE_ERROR.
        """
        data = records if isinstance(records, (bytes, bytearray)) else bytes(records)
        view = memoryview(data)
        end = len(view)
        position = 0
        batches = []
        while position < end:
            if end - position < HEADER_SIZE:
                # Fetch answers may end in a partial batch (a size limit).
                break
            header, error = batchError(view, position, end - position, cleaned=True)
            if error is not None:
                if header is not None and header.size > end - position:
                    break
                raise error
            batches.append((position, header))
            position += header.size
        if not batches:
            return None
        if position < end:
            data = data[:position]
        with self._lock:
            self._checkOpen()
            if leaderEpoch is not None and (self.isLeader or self.leaderEpoch != leaderEpoch):
                raise KafkaError(
                    ErrorCode.not_leader_or_follower,
                    f"{self.topic}-{self.partition} is no longer a follower in epoch {leaderEpoch}",
                )
            expected = self._end[0]
            assigned = []
            maxTimestamp, offsetOfMax = -1, -1
            for at, header in batches:
                if header.baseOffset < expected:
                    raise KafkaError(
                        ErrorCode.offset_out_of_range,
                        f"{self.topic}-{self.partition}: replicated batch at offset "
                        f"{header.baseOffset} is below {expected}",
                    )
                last = header.baseOffset + header.lastOffsetDelta
                assigned.append(
                    AssignedBatch(at, header.size, header.baseOffset, last, header.maxTimestamp, last)
                )
                if header.maxTimestamp > maxTimestamp:
                    maxTimestamp, offsetOfMax = header.maxTimestamp, last
                expected = last + 1
            epochs = self.epochs
            try:
                for _, header in batches:
                    if header.partitionLeaderEpoch > epochs.latestEpoch:
                        epochs.assign(header.partitionLeaderEpoch, header.baseOffset)
            except OSError as e:
                raise self._storageError("leader-epoch-checkpoint", e) from None
            firstOffset = batches[0][1].baseOffset
            segment = self._maybeRoll(len(data), maxTimestamp, expected - 1, nowMs)
            segment.append(data, assigned, self.config.indexIntervalBytes)
            markers = None
            if any(h.attributes & CONTROL_BIT for _, h in batches):
                markers = iter(self._readMarkers(data, [b for b in batches]))
            state = self.producerState
            completed = []
            for _, header in batches:
                marker = next(markers) if markers is not None and header.attributes & CONTROL_BIT else None
                done = state.replay(header, marker)
                if done is not None:
                    completed.append(done)
            self._end = (expected, segment, segment.size)
            for txn in completed:
                if txn.isAborted:
                    try:
                        self.txnIndexOf(segment).append(
                            AbortedTxn(
                                txn.producerId, txn.firstOffset, txn.lastOffset,
                                state.lastStableOffsetAfter(txn),
                            )
                        )
                    except (OSError, ValueError):
                        self.txnIndexDamaged = True
            numRecords = sum(header.recordsCount for _, header in batches)
            if self._unflushedRecords == 0:
                self._dirtySinceMs = nowMs
            self._unflushedRecords += numRecords
            if self._unflushedRecords >= self.config.flushMessages:
                try:
                    self._flushLocked()
                except OSError as e:
                    raise self._storageError("fsync", e) from None
            return AppendInfo(
                firstOffset=firstOffset,
                lastOffset=expected - 1,
                logAppendTime=-1,
                logStartOffset=self._logStartOffset,
                maxTimestamp=maxTimestamp,
                offsetOfMaxTimestamp=offsetOfMax,
                numRecords=numRecords,
                validBytes=len(data),
            )

    def truncateTo(self, offset: int) -> bool:
        """
        Remove every batch at or after C{offset} (a batch that straddles it
        goes whole), with its index entries, producer state, aborted
        transactions and leader epochs: a follower's log diverging from its
        new leader's (KIP-101/279).

        @return: whether anything was removed.
        """
        with self._lock:
            self._checkOpen()
            if offset >= self._end[0]:
                return False
            if offset <= self._logStartOffset:
                self._truncateFully(offset if offset > self._logStartOffset else self._logStartOffset)
                return True
            bases, segments = self._view
            i = bisect_right(bases, offset) - 1
            keep, doomed = segments[: i + 1], segments[i + 1 :]
            segment = keep[-1]
            position = segment.positionOfBatchContaining(offset)
            # The segment truncated into is active again: it is synced as
            # the active segment is, not as a rolled one that no longer
            # changes.
            self._rolledUnflushed = [
                s for s in self._rolledUnflushed if s not in doomed and s is not segment
            ]
            if segment is not self.activeSegment:
                self._reactivate(segment)
            self._setSegments(keep)
            for old in doomed:
                old.delete()
            try:
                segment.truncateTo(position)
                segment.reindex(self.config.indexIntervalBytes)
            except OSError as e:
                self._closed = True
                raise self._storageError("truncation", e) from None
            newEnd = segment.nextOffset
            self._end = (newEnd, segment, segment.size)
            self._afterTruncation(newEnd, [s.baseOffset for s in doomed])
            return True

    def truncateFullyAndStartAt(self, offset: int) -> None:
        """
        Delete everything and start empty at C{offset} (a follower whose
        fetch offset the leader no longer has).
        """
        with self._lock:
            self._checkOpen()
            self._truncateFully(offset)

    def _truncateFully(self, offset: int) -> None:
        doomed = self._view[1]
        self._rolledUnflushed = []
        for old in doomed:
            old.delete()
        try:
            new = self._newSegment(offset, 0)
        except OSError as e:
            # No segment left: the partition is offline until a restart.
            self._closed = True
            raise self._storageError("truncation", e) from None
        self._setSegments([new])
        self._end = (offset, new, 0)
        self._logStartOffset = offset
        try:
            self.epochs.clear()
        except OSError as e:
            self._storageError("leader-epoch-checkpoint", e)
        self._afterTruncation(offset, [s.baseOffset for s in doomed])

    def _afterTruncation(self, newEnd: int, deletedBases: list) -> None:
        """
        Under the lock, the log now ends at C{newEnd}: bring what is
        derived from it back in line.
        """
        self._truncations += 1
        self.recoveryPoint = min(self.recoveryPoint, newEnd)
        if self._highWatermark is not None and self._highWatermark > newEnd:
            self._highWatermark = newEnd
        self._unflushedRecords = 0
        self._dirtySinceMs = None
        try:
            self.epochs.truncateFromEnd(newEnd)
        except OSError as e:
            self._storageError("leader-epoch-checkpoint", e)
        self._rebuildProducerState(deletedBases)

    def _rebuildProducerState(self, deletedBases: list) -> None:
        """
        After a truncation: the producer state and aborted-transaction
        indexes again from the batches left (storage may start from a
        snapshot).
        """
        state = self.producerState
        state.clear()
        for segment in self._view[1]:
            index = getattr(segment, "txnIndex", None)
            if index is not None:
                index.truncateTo(segment.baseOffset)
            for header, marker in segment.batchHeaders(segment.baseOffset, markers=True):
                if marker is not None and not marker.isTransactionMarker:
                    continue
                done = state.replay(
                    header, None if marker is None else (marker.isAborted, marker.coordinatorEpoch)
                )
                if done is not None and done.isAborted:
                    self.txnIndexOf(segment).append(
                        AbortedTxn(done.producerId, done.firstOffset, done.lastOffset,
                                   state.lastStableOffsetAfter(done))
                    )

    def becomeLeader(self, leaderEpoch: int) -> int:
        """
        Lead in C{leaderEpoch}: appends are taken and stamped with it from
        now on, and the epoch begins at the log end (Kafka's
        C{maybeAssignEpochStartOffset}).

        @return: the offset the epoch begins at.
        """
        with self._lock:
            self.leaderEpoch = leaderEpoch
            self.isLeader = True
            end = self._end[0]
            if not self._closed:
                try:
                    self.epochs.assign(leaderEpoch, end)
                except OSError as e:
                    self._storageError("leader-epoch-checkpoint", e)
            return end

    def becomeFollower(self, leaderEpoch: int) -> None:
        """
        Follow in C{leaderEpoch}: no appends but replicated ones; the high
        watermark is pinned where it is (a follower learns it from its
        leader).
        """
        with self._lock:
            self.leaderEpoch = leaderEpoch
            self.isLeader = False
            if self._highWatermark is None:
                self._highWatermark = self._end[0]

    def _epochsFromStart(self) -> None:
        try:
            self.epochs.truncateFromStart(self._logStartOffset)
        except OSError as e:
            self._storageError("leader-epoch-checkpoint", e)

    def _reactivate(self, segment) -> None:
        """
        An inactive segment becomes the active one again (a truncation
        removed the segments after it).
        """

    def _completeTxns(self, completed, segment) -> None:
        """
        Under the lock, after the end was published: index the aborted
        transactions in the segment their markers went into, then let the
        last stable offset move on.
        """
        state = self.producerState
        try:
            for txn in completed:
                if txn.isAborted:
                    self.txnIndexOf(segment).append(
                        AbortedTxn(
                            txn.producerId, txn.firstOffset, txn.lastOffset,
                            state.lastStableOffsetAfter(txn),
                        )
                    )
        except (OSError, ValueError) as e:
            # The marker is written and the transaction over; the index is
            # rebuilt from the markers at the next start (this one is
            # not clean: see _onCleanClose).
            self.txnIndexDamaged = True
            if isinstance(e, OSError):
                self._storageError("aborted-transaction index append", e)
            else:
                storageLog.warn(
                    ("txnindex", self.topic, self.partition),
                    "{topic}-{partition}: aborted-transaction index: {error}; rebuilt at the "
                    "next start", topic=self.topic, partition=self.partition, error=e,
                )
        finally:
            state.completeTxns(completed)

    #: whether an index append failed since the log opened (the index is
    #: then rebuilt at the next start)
    txnIndexDamaged = False

    def txnIndexOf(self, segment) -> TransactionIndex:
        """
        The aborted-transaction index of C{segment} (made on first use).
        """
        index = getattr(segment, "txnIndex", None)
        if index is None:
            index = segment.txnIndex = self._newTxnIndex(segment)
        return index

    def _newTxnIndex(self, segment) -> TransactionIndex:
        return TransactionIndex(segment.baseOffset)

    def expireProducers(self, nowMs: int) -> int:
        """
        Forget producers idle for C{producer.id.expiration.ms} (by their
        last batch's max timestamp, as Kafka does).

        @return: producers removed.
        """
        with self._lock:
            return self.producerState.removeExpired(nowMs)

    def _storageError(self, what: str, error: OSError) -> KafkaError:
        name = f"{self.topic}-{self.partition}"
        storageLog.warn(
            (what, name),
            "{partition}: {what} failed: {error}",
            partition=name,
            what=what,
            error=error,
        )
        return KafkaError(ErrorCode.kafka_storage_error, f"{name}: {what} failed: {error}")

    def _checkOpen(self) -> None:
        if self._closed:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"{self.topic}-{self.partition} is closed"
            )

    def _maybeRoll(self, appendBytes: int, maxTimestamp: int, lastOffset: int, nowMs: int):
        config = self.config
        segment = self._view[1][-1]
        size = segment.size
        if size == 0:
            return segment
        if size + appendBytes > config.segmentBytes or lastOffset - segment.baseOffset > _MAX_RELATIVE_OFFSET:
            return self._roll(nowMs)
        offsetIndex, timeIndex = segment._offsetIndex, segment._timeIndex
        if offsetIndex is None or timeIndex is None or not segment.pinned:
            if segment.isFull(config.segmentIndexBytes):
                return self._roll(nowMs)
        elif (
            # (Segment.isFull, inline)
            offsetIndex.count >= config.segmentIndexBytes // OffsetIndex.entrySize
            or timeIndex.count >= config.segmentIndexBytes // TimeIndex.entrySize
        ):
            return self._roll(nowMs)
        first = segment._rollingBasedTimestamp
        if first is not None and first >= 0:
            waited = maxTimestamp - first  # (timeWaitedForRoll, inline)
        else:
            waited = segment.timeWaitedForRoll(nowMs, maxTimestamp)
        rollMs = config.rollAfterMs
        if config.segmentJitterMs > 0:
            rollMs -= self._rollJitter(segment, config)
        if waited > rollMs:
            return self._roll(nowMs)
        return segment

    def _rollJitter(self, segment, config) -> int:
        """
        Kafka's C{segment.jitter.ms}: up to that much off the roll time, a
        different amount per segment (derived from its name, so the same
        after a restart) so that partitions do not all roll at once.
        """
        if config.segmentJitterMs <= 0:
            return 0
        bound = min(config.segmentJitterMs, config.rollMs)
        if bound <= 0:
            return 0
        return zlib.crc32(f"{self.topic}-{self.partition}-{segment.baseOffset}".encode()) % bound

    def _roll(self, nowMs: int):
        old = self.activeSegment
        if old.size == 0:
            return old
        try:
            new = self._newSegment(self._end[0], nowMs)
        except OSError as e:
            # A full disk, say: the active segment stays active, and the
            # next append tries again.
            raise self._storageError("roll", e) from None
        old.onBecomeInactive()
        self._deactivate(old)
        self._rolledUnflushed.append(old)
        self._setSegments(self._view[1] + [new])
        self._end = (self._end[0], new, 0)
        self._onRoll(new.baseOffset)
        return new

    def roll(self, nowMs: int = 0):
        """
        Start a new segment now (if the active one holds anything).
        """
        with self._lock:
            return self._roll(nowMs)

    # Storage hooks.

    def _newSegment(self, baseOffset: int, nowMs: int):
        raise NotImplementedError

    def _deactivate(self, segment) -> None:
        pass

    def _onRoll(self, offset: int) -> None:
        """
        A segment starting at C{offset} became active (the producer state
        then covers exactly the offsets below it).
        """

    def _onSegmentsDeleted(self, firstBaseOffset: int) -> None:
        """
        Segments below C{firstBaseOffset} were deleted.
        """

    # -- deletion --------------------------------------------------------------

    def deleteRecordsBefore(self, offset: int) -> int:
        with self._lock:
            self._checkOpen()
            if offset > self._end[0] or offset < 0:
                raise KafkaError(
                    ErrorCode.offset_out_of_range,
                    f"offset {offset} is past the end {self._end[0]} "
                    f"of {self.topic}-{self.partition}",
                )
            if offset > self._logStartOffset:
                self._logStartOffset = offset
                self._epochsFromStart()
                self._deleteSegments(
                    lambda segment, nextBase: nextBase is not None and nextBase <= offset,
                    0,
                    self._startOffsetBreach,
                )
            return self._logStartOffset

    def deleteOldSegments(self, nowMs: int) -> int:
        """
        Apply retention: C{retention.ms}, C{retention.bytes} and the log
        start offset, deleting whole segments from the oldest; and expire
        idle producers (C{producer.id.expiration.ms}).

        @return: segments deleted.
        """
        config = self.config
        with self._lock:
            if self._closed:
                return 0
            self.producerState.removeExpired(nowMs)
            if not config.deletes:
                return 0
            deleted = 0
            if config.retentionMs >= 0:
                deleted += self._deleteSegments(
                    lambda segment, _: nowMs - segment.retentionTimestamp() > config.retentionMs,
                    nowMs,
                    self._retentionMsBreach,
                    belowHighWatermark=True,
                )
            if config.retentionBytes >= 0:
                excess = [self.size - config.retentionBytes]

                def overSize(segment, _):
                    if excess[0] - segment.size >= 0:
                        excess[0] -= segment.size
                        return True
                    return False

                deleted += self._deleteSegments(
                    overSize, nowMs, self._retentionSizeBreach, belowHighWatermark=True
                )
            start = self._logStartOffset
            deleted += self._deleteSegments(
                lambda segment, nextBase: nextBase is not None and nextBase <= start,
                nowMs,
                self._startOffsetBreach,
            )
            return deleted

    # Why segments go, logged at INFO before they do as Kafka's
    # SegmentDeletionReasons log it.

    def _logIdent(self) -> str:
        directory = getattr(self, "directory", None)
        where = f", dir={os.path.dirname(directory)}" if directory else ""
        return f"[UnifiedLog partition={self.topic}-{self.partition}{where}] "

    def _retentionMsBreach(self, doomed: list) -> None:
        retentionMs = self.config.retentionMs
        for segment in doomed:
            basis = (
                "the largest record timestamp in the segment"
                if segment.largestTimestamp > 0
                else "the last modified time of the segment"
            )
            log.info(
                "{ident}Deleting segment {segment} due to log retention time {ms}ms breach "
                "based on {basis}",
                ident=self._logIdent(),
                segment=_segmentText(segment),
                ms=retentionMs,
                basis=basis,
            )

    def _retentionSizeBreach(self, doomed: list) -> None:
        size = self.size
        for segment in doomed:
            size -= segment.size
            log.info(
                "{ident}Deleting segment {segment} due to log retention size {bytes} breach. "
                "Log size after deletion will be {size}.",
                ident=self._logIdent(),
                segment=_segmentText(segment),
                bytes=self.config.retentionBytes,
                size=size,
            )

    def _startOffsetBreach(self, doomed: list) -> None:
        log.info(
            "{ident}Deleting segments due to log start offset {start} breach: {segments}",
            ident=self._logIdent(),
            start=self._logStartOffset,
            segments=",".join(_segmentText(segment) for segment in doomed),
        )

    def _deleteSegments(
        self, predicate, nowMs: int, reason, belowHighWatermark: bool = False
    ) -> int:
        """
        Delete the longest run of oldest segments matching
        C{predicate(segment, nextBaseOffset or None)}; an empty active
        segment is never deleted, a non-empty one is rolled first.

        @param reason: C{reason(segments)} logs why they go.
        @param belowHighWatermark: retention's bound (Kafka's
            C{UnifiedLog.deletableSegments}): a segment goes only if its
            upper bound -- the next segment's base, or the log end for the
            active one -- is at or below the high watermark, so nothing not
            yet committed is deleted and the log start offset never passes
            the high watermark.  Where the high watermark follows the log
            end (a single broker, a leader alone in its ISR) this bounds
            nothing.  The predicate is not asked of a segment above it.
        """
        segments = self._view[1]
        highWatermark = self.highWatermark if belowHighWatermark else None
        doomed = []
        for i, segment in enumerate(segments):
            nextBase = segments[i + 1].baseOffset if i + 1 < len(segments) else None
            if nextBase is None and segment.size == 0:
                break
            if highWatermark is not None:
                upperBound = self._end[0] if nextBase is None else nextBase
                if upperBound > highWatermark:
                    break
            if not predicate(segment, nextBase):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(segments):
            self._roll(nowMs)
        reason(doomed)
        remaining = self._view[1][len(doomed) :]
        self._setSegments(remaining)
        self._logStartOffset = max(self._logStartOffset, remaining[0].baseOffset)
        self._epochsFromStart()
        self.recoveryPoint = max(self.recoveryPoint, min(self._logStartOffset, self._end[0]))
        self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in doomed]
        for segment in doomed:
            segment.delete()
        self._onSegmentsDeleted(remaining[0].baseOffset)
        return len(doomed)

    # -- compaction ----------------------------------------------------------

    def replaceSegments(self, replacedBases: list[int], cleaned, goneAborted=()) -> bool:
        """
        Swap a cleaned segment in for the consecutive segments whose base
        offsets are C{replacedBases}: the log cleaner's last step, a few
        renames under the lock (the segment was written aside).

        @param cleaned: the cleaned segment as the storage has it (see
            C{_installCleaned}).
        @param goneAborted: C{(producerId, markerOffset)} of the aborted
            transactions whose entries leave the aborted-transaction index
            (their data is gone).
        @return: C{False}, with nothing changed, if the log is closed or
            those segments are no longer all there (retention deleted
            some, or one of them became active); the caller then discards
            the cleaned segment.
        """
        with self._lock:
            if self._closed:
                return False
            bases, segments = self._view
            first = bisect_right(bases, replacedBases[0]) - 1
            old = segments[first : first + len(replacedBases)]
            if first < 0 or [s.baseOffset for s in old] != list(replacedBases):
                return False
            if first + len(old) >= len(segments):
                return False
            try:
                new = self._installCleaned(cleaned, old, frozenset(goneAborted))
            except OSError:
                # Half swapped on disk: the next start's recovery finishes
                # the swap; until then the partition is offline.
                self._closed = True
                raise
            self._setSegments(segments[:first] + [new] + segments[first + len(old) :])
            self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in old]
            log.info(
                "{ident}Deleting segment files {segments}: log cleaning replaced them with "
                "{cleaned}",
                ident=self._logIdent(),
                segments=",".join(_segmentText(segment) for segment in old),
                cleaned=_segmentText(new),
            )
            return True

    def activeProducers(self) -> list:
        """
        Copies of the producers' states (DescribeProducers).
        """
        with self._lock:
            return [entry.copy() for entry in self.producerState.producers.values()]

    def abortedTransactions(self, upTo: int) -> list[tuple[int, int, int]]:
        """
        C{(producerId, firstOffset, lastOffset)} of the aborted
        transactions that began below C{upTo} (what a cleaning pass must
        leave out).
        """
        found = []
        for segment in self._view[1]:
            index = getattr(segment, "txnIndex", None)
            if index is not None:
                found.extend(
                    (e.producerId, e.firstOffset, e.lastOffset)
                    for e in index.entries
                    if e.firstOffset < upTo
                )
        return found

    def producerMarkerEpochs(self) -> dict[int, int]:
        """
        Producer id -> epoch, for the producers the partition knows with no
        data batch since their last epoch bump: their last batch is a
        marker of that epoch, which the cleaner must keep (Kafka's
        C{lastRecordsOfActiveProducers} without a data offset).
        """
        with self._lock:
            return {
                producerId: entry.epoch
                for producerId, entry in self.producerState.producers.items()
                if not entry.batches
            }

    def producerLastOffsets(self) -> dict[int, int]:
        """
        Producer id -> last offset of its last batch, for every producer
        the partition knows: the batches the cleaner must keep.
        """
        with self._lock:
            return {
                producerId: entry.batches[-1].lastOffset
                for producerId, entry in self.producerState.producers.items()
                if entry.batches
            }

    def _installCleaned(self, cleaned, old: list, goneAborted: frozenset):
        """
        Replace the segments C{old} by C{cleaned} in storage, under the
        lock; the log publishes the returned segment, whose
        aborted-transaction index holds C{old}'s entries but those of
        C{goneAborted}.
        """
        raise NotImplementedError

    # -- flush ---------------------------------------------------------------

    def flush(self) -> None:
        """
        fsync everything appended so far.
        """
        self._flushRolled()
        with self._lock:
            self._flushLocked()

    def _flushLocked(self) -> None:
        # Forget a rolled segment only once it is synced: a failure (a full
        # disk) leaves the rest for the next flush.
        while self._rolledUnflushed:
            segment = self._rolledUnflushed[0]
            if not segment.deleted:
                segment.sync(indexes=True)
            del self._rolledUnflushed[0]
        self.activeSegment.sync()
        self.recoveryPoint = self._end[0]
        self._unflushedRecords = 0
        self._dirtySinceMs = None
        self.flushCount += 1

    def _flushRolled(self) -> None:
        # Rolled segments no longer change: fsync them without holding up
        # appends, then advance the recovery point to where they end.  A
        # truncation meanwhile (a follower's, KIP-101) may have made one of
        # them active again and written to it after its fsync (even rolled
        # it again): then nothing is taken as synced, and the next flush
        # syncs them again.
        with self._lock:
            pending = [] if self._closed else list(self._rolledUnflushed)
            truncations = self._truncations
        if not pending:
            return
        for segment in pending:
            try:
                segment.sync(indexes=True)
            except FileNotFoundError:
                pass
        with self._lock:
            if self._truncations != truncations:
                return
            self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in pending]
            segments = self._view[1]
            last = pending[-1]
            if last in segments:
                i = segments.index(last)
                if i + 1 < len(segments):
                    self.recoveryPoint = max(self.recoveryPoint, segments[i + 1].baseOffset)

    def maybeFlush(self, nowMs: int) -> bool:
        """
        The periodic flush: segments rolled since the last call, and the
        active segment once it has been dirty for C{flush.ms}.

        @return: whether the active segment was flushed.
        """
        if self._closed:
            return False
        self._flushRolled()
        with self._lock:
            if self._closed or self._dirtySinceMs is None:
                return False
            if nowMs - self._dirtySinceMs >= self.config.flushMs:
                self._flushLocked()
                return True
            return False

    # -- lifecycle ---------------------------------------------------------------

    def close(self, flush: bool = True) -> None:
        """
        Release the segments; with C{flush}, fsync first (clean shutdown).
        """
        with self._lock:
            if self._closed:
                return
            if flush:
                try:
                    self.activeSegment.onBecomeInactive()
                    self._flushLocked()
                    self.activeSegment.persistIndexes(sync=True)
                    self._onCleanClose()
                except OSError as e:
                    # The next start must recover this log: no clean
                    # shutdown marker (see the log manager).
                    self.closedClean = False
                    self._storageError("flush at close", e)
            self._closed = True
            for segment in self._view[1]:
                segment.close()

    def _onCleanClose(self) -> None:
        """
        Everything is flushed and the log is about to close.
        """

    def deleteAll(self) -> None:
        """
        Close and delete every segment (topic deletion).
        """
        with self._lock:
            self._closed = True
            for segment in self._view[1]:
                segment.delete()
