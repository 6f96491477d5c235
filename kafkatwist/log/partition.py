"""
One topic-partition's log: a list of segments, the last one active.

Concurrency: one lock per partition serialises appends, rolls, retention and
flushes.  Reads take no lock: they read the published state, a tuple
C{(logEndOffset, activeSegment, activeSize)} replaced in one assignment
after a write completes, and the segment list, replaced (never mutated) on
roll and deletion.  A reader therefore sees a prefix of the appends, never a
torn batch.

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
"""

from __future__ import annotations

import threading
from bisect import bisect_right

from zope.interface import implementer

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IPartitionLog
from kafkatwist.log.compaction import requireKeys
from kafkatwist.log.config import LogConfig
from kafkatwist.log.producerstate import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateManager,
)
from kafkatwist.log.records import AppendInfo, ReadInfo
from kafkatwist.log.throttle import storageLog
from kafkatwist.protocol.batch import assignOffsets, validateRecordSet

__all__ = ["PartitionLog"]

_MAX_RELATIVE_OFFSET = 2**31 - 1


@implementer(IPartitionLog)
class PartitionLog:
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
        self.flushCount = 0
        if producerState is None:
            producerState = ProducerStateManager(f"{topic}-{partition}", producerIdExpirationMs)
        else:
            producerState.name = f"{topic}-{partition}"
            producerState.expirationMs = producerIdExpirationMs
        self.producerState = producerState

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
        return self._end[0]

    @property
    def lastStableOffset(self) -> int:
        return self._end[0]

    @property
    def logStartOffset(self) -> int:
        return self._logStartOffset

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self._view[1])

    # -- append --------------------------------------------------------------

    def append(self, records, nowMs: int, *, isFromClient: bool = True) -> AppendInfo:
        """
        See L{IPartitionLog.append}.

        @param isFromClient: C{False} lets the broker itself write control
            batches.
        """
        config = self.config
        data = bytearray(records)
        batches = validateRecordSet(
            data, maxBatchBytes=config.maxMessageBytes, allowControl=not isFromClient
        )
        if isFromClient and config.compacts:
            requireKeys(data, batches, f"{self.topic}-{self.partition}", config.maxMessageBytes)
        if len(data) > config.segmentBytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"{len(data)} bytes is larger than segment.bytes {config.segmentBytes}",
            )
        logAppendTime = nowMs if config.logAppendTime else None
        with self._lock:
            self._checkOpen()
            firstOffset = self._end[0]
            producers = None
            for _, header in batches:
                if header.producerId >= 0:
                    if isFromClient:
                        producers = self.producerState.prepareAppend(
                            batches, firstOffset, logAppendTime
                        )
                        if type(producers) is BatchMetadata:
                            return self._duplicate(producers)
                    else:
                        producers = False
                    break
            assigned = assignOffsets(
                data,
                batches,
                firstOffset,
                logAppendTime=logAppendTime,
                leaderEpoch=self.leaderEpoch,
            )
            last = assigned[-1]
            maxTimestamp, offsetOfMax = -1, -1
            for batch in assigned:
                if batch.maxTimestamp > maxTimestamp:
                    maxTimestamp, offsetOfMax = batch.maxTimestamp, batch.offsetOfMaxTimestamp
            segment = self._maybeRoll(len(data), maxTimestamp, last.lastOffset, nowMs)
            segment.append(data, assigned, config.indexIntervalBytes)
            # Publish only now: readers never look past this.
            self._end = (last.lastOffset + 1, segment, segment.size)
            if producers:
                self.producerState.commit(producers)
            elif producers is False:
                self._replayProducers(batches, assigned)
            numRecords = sum(batch.header.recordsCount for batch in batches)
            if self._unflushedRecords == 0:
                self._dirtySinceMs = nowMs
            self._unflushedRecords += numRecords
            if self._unflushedRecords >= config.flushMessages:
                try:
                    self._flushLocked()
                except OSError as e:
                    # Written but not durable: the producer retries (an
                    # idempotent one is deduplicated).
                    raise self._storageError("fsync", e) from None
            return AppendInfo(
                firstOffset=firstOffset,
                lastOffset=last.lastOffset,
                logAppendTime=nowMs if logAppendTime is not None else -1,
                logStartOffset=self._logStartOffset,
                maxTimestamp=maxTimestamp,
                offsetOfMaxTimestamp=offsetOfMax,
                numRecords=numRecords,
                validBytes=len(data),
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

    def _replayProducers(self, batches, assigned) -> None:
        # The broker's own appends (not checked): keep the state in step.
        for (_, header), placed in zip(batches, assigned):
            if header.producerId >= 0:
                self.producerState.replay(
                    header._replace(baseOffset=placed.baseOffset, maxTimestamp=placed.maxTimestamp)
                )

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
        segment = self.activeSegment
        if segment.size > 0 and (
            segment.size + appendBytes > config.segmentBytes
            or lastOffset - segment.baseOffset > _MAX_RELATIVE_OFFSET
            or segment.isFull(config.segmentIndexBytes)
            or segment.timeWaitedForRoll(nowMs, maxTimestamp) > config.rollMs
        ):
            return self._roll(nowMs)
        return segment

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

    # -- read ------------------------------------------------------------------

    def _onView(self, operation):
        """
        C{operation(view)} over the published segments; again over the new
        ones if a segment it used vanished because the view was replaced
        (retention deleted it, or the cleaner swapped in its cleaned copy).

        @raise FileNotFoundError: a segment vanished without the view
            changing (the log was deleted).
        """
        while True:
            view = self._view
            try:
                return operation(view)
            except FileNotFoundError:
                # A cleaner swap removes the old segments' files before it
                # publishes the new view, all under the lock: wait for it.
                with self._lock:
                    if self._view is view:
                        raise

    def read(self, offset: int, maxBytes: int, minOneBatch: bool = True) -> ReadInfo:
        try:
            return self._onView(lambda view: self._read(view, offset, maxBytes, minOneBatch))
        except FileNotFoundError:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} was deleted from {self.topic}-{self.partition}",
            ) from None

    def _read(self, view, offset: int, maxBytes: int, minOneBatch: bool) -> ReadInfo:
        # A cleaned log has gaps: the batch holding an offset may be gone,
        # and the read then starts at the next batch (in this segment or a
        # later one), as Kafka's does.
        logEndOffset, active, activeSize = self._end
        logStartOffset = self._logStartOffset
        if offset < logStartOffset or offset > logEndOffset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{logStartOffset}, {logEndOffset}] "
                f"of {self.topic}-{self.partition}",
            )
        records = b""
        if offset < logEndOffset:
            bases, segments = view
            if offset < bases[0]:
                raise KafkaError(
                    ErrorCode.offset_out_of_range,
                    f"offset {offset} was deleted from {self.topic}-{self.partition}",
                )
            i = bisect_right(bases, offset) - 1
            while i < len(segments):
                segment = segments[i]
                end = activeSize if segment is active else segment.size
                found = segment.read(offset, maxBytes, minOneBatch, end)
                if found is not None:
                    records = found
                    break
                if segment is active:
                    break
                i += 1
        return ReadInfo(
            records=records,
            highWatermark=logEndOffset,
            logStartOffset=logStartOffset,
            lastStableOffset=logEndOffset,
        )

    def offsetForTimestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        try:
            return self._onView(lambda view: self._offsetForTimestamp(view, timestamp_ms))
        except FileNotFoundError:
            return None

    def _offsetForTimestamp(self, view, timestamp_ms: int) -> tuple[int, int] | None:
        logEndOffset, active, activeSize = self._end
        logStartOffset = self._logStartOffset
        for segment in view[1]:
            if segment is not active and segment.largestTimestamp < timestamp_ms:
                continue
            end = activeSize if segment is active else segment.size
            found = segment.findOffsetByTimestamp(timestamp_ms, end)
            if found is not None:
                offset, timestamp = found
                offset = max(offset, logStartOffset)
                if offset >= logEndOffset:
                    return None
                return offset, timestamp
            if segment is active:
                break
        return None

    def maxTimestamp(self) -> tuple[int, int] | None:
        try:
            best = self._onView(self._maxTimestamp)
        except FileNotFoundError:
            best = None
        if best is None:
            if self.logEndOffset == self.logStartOffset:
                return None
            # Batches without timestamps: Kafka answers with -1.
            return self.logEndOffset - 1, -1
        return best

    @staticmethod
    def _maxTimestamp(view) -> tuple[int, int] | None:
        best = None
        for segment in view[1]:
            timestamp = segment.largestTimestamp
            if timestamp >= 0 and (best is None or timestamp > best[1]):
                best = (segment.offsetOfLargestTimestamp, timestamp)
        return best

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
                self._deleteSegments(
                    lambda segment, nextBase: nextBase is not None and nextBase <= offset, 0
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
                )
            if config.retentionBytes >= 0:
                excess = [self.size - config.retentionBytes]

                def overSize(segment, _):
                    if excess[0] - segment.size >= 0:
                        excess[0] -= segment.size
                        return True
                    return False

                deleted += self._deleteSegments(overSize, nowMs)
            start = self._logStartOffset
            deleted += self._deleteSegments(
                lambda segment, nextBase: nextBase is not None and nextBase <= start, nowMs
            )
            return deleted

    def _deleteSegments(self, predicate, nowMs: int) -> int:
        """
        Delete the longest run of oldest segments matching
        C{predicate(segment, nextBaseOffset or None)}; an empty active
        segment is never deleted, a non-empty one is rolled first.
        """
        segments = self._view[1]
        doomed = []
        for i, segment in enumerate(segments):
            nextBase = segments[i + 1].baseOffset if i + 1 < len(segments) else None
            if nextBase is None and segment.size == 0:
                break
            if not predicate(segment, nextBase):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(segments):
            self._roll(nowMs)
        remaining = self._view[1][len(doomed) :]
        self._setSegments(remaining)
        self._logStartOffset = max(self._logStartOffset, remaining[0].baseOffset)
        self.recoveryPoint = max(self.recoveryPoint, min(self._logStartOffset, self._end[0]))
        self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in doomed]
        for segment in doomed:
            segment.delete()
        self._onSegmentsDeleted(remaining[0].baseOffset)
        return len(doomed)

    # -- compaction ----------------------------------------------------------

    def replaceSegments(self, replacedBases: list[int], cleaned) -> bool:
        """
        Swap a cleaned segment in for the consecutive segments whose base
        offsets are C{replacedBases}: the log cleaner's last step, a few
        renames under the lock (the segment was written aside).

        @param cleaned: the cleaned segment as the storage has it (see
            C{_installCleaned}).
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
                new = self._installCleaned(cleaned, old)
            except OSError:
                # Half swapped on disk: the next start's recovery finishes
                # the swap; until then the partition is offline.
                self._closed = True
                raise
            self._setSegments(segments[:first] + [new] + segments[first + len(old) :])
            self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in old]
            return True

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

    def _installCleaned(self, cleaned, old: list):
        """
        Replace the segments C{old} by C{cleaned} in storage, under the
        lock; the log publishes the returned segment.
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
        # appends, then advance the recovery point to where they end.
        with self._lock:
            pending = [] if self._closed else list(self._rolledUnflushed)
        if not pending:
            return
        for segment in pending:
            try:
                segment.sync(indexes=True)
            except FileNotFoundError:
                pass
        with self._lock:
            self._rolledUnflushed = [s for s in self._rolledUnflushed if s not in pending]
            segments = self._view[1]
            last = pending[-1]
            if last in segments:
                following = segments[segments.index(last) + 1]
                self.recoveryPoint = max(self.recoveryPoint, following.baseOffset)

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
