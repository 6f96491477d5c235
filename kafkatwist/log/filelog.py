"""
A partition log on disk: loading and crash recovery of a partition
directory C{<log dir>/<topic>-<partition>/}.

After a clean shutdown the segments are trusted as they are (indexes are
checked lazily when first loaded and rebuilt if missing or malformed).
After an unclean one, every segment from the one holding the recovery point
onwards is re-validated batch by batch (header, CRC-32C, increasing
offsets); the first invalid batch and everything after it, including later
segments, is truncated away, and the indexes of the recovered segments are
rebuilt.  A corrupted byte below the recovery point is not looked for,
exactly as in Kafka: that data was fsynced before the crash.

Producer state (L{kafkatwist.log.producerstate}) is snapshotted as
C{<offset>.snapshot} beside the segments when a segment rolls (the state of
every offset below the new segment's base) and at a clean close (below the
log end offset).  Loading takes the newest snapshot at or below the log end
offset that decodes (snapshots past the end, left by a truncation, and
unreadable ones are deleted) and replays the producer fields of the batch
headers after it; without any snapshot it replays the whole log.  Retention
deletes the snapshots of deleted segments.

Aborted-transaction indexes (C{<offset>.txnindex}, L{kafkatwist.log.txnindex})
are rebuilt by that same replay: entries for markers at or after the
snapshot's offset are dropped and written again from the markers replayed
(the snapshot carries the transactions open at its offset).  An index file
that does not read back makes the replay start at the log's beginning.
Retention deletes the index files of deleted segments; a cleaned segment
takes over the entries of the segments it replaces.
"""

from __future__ import annotations

import os
import re
import time

from twisted.logger import Logger

from kafkatwist.log import swap
from kafkatwist.log.epochs import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from kafkatwist.log.partition import PartitionLog
from kafkatwist.log.producerstate import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    SNAPSHOT_SUFFIX,
    CorruptSnapshot,
    ProducerStateManager,
)
from kafkatwist.log.segment import (
    INDEX_CHECKSUMS,
    SEGMENT_FILE,
    FileSegment,
    _ScanError,
    segmentFileName,
)
from kafkatwist.log.txnindex import (
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    CorruptTxnIndex,
    TransactionIndex,
)

__all__ = ["FilePartitionLog"]

log = Logger()

# Kafka's leftovers of interrupted operations, safe to delete at load
# (once kafkatwist.log.swap has finished any committed swap).
_STRAY_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp")
SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
TXN_INDEX_FILE = re.compile(r"^(\d{20})\.txnindex$")


class FilePartitionLog(PartitionLog):
    """
    A L{PartitionLog} whose segments are files in C{directory}.
    """

    def __init__(
        self, directory: str, cache, topic: str, partition: int, config, segments, **kw
    ) -> None:
        self.directory = directory
        self.cache = cache
        super().__init__(topic, partition, config, segments, **kw)
        for segment in segments:
            segment.writeLock = self._lock

    @classmethod
    def create(
        cls,
        directory: str,
        cache,
        topic: str,
        partition: int,
        config,
        nowMs: int,
        *,
        producerIdExpirationMs: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        prepared: bool = False,
    ) -> FilePartitionLog:
        """
        A new partition directory with an empty first segment (replacing
        leftovers of that name).

        @param prepared: the directory and its empty first segment file
            exist already (a committed creation): nothing is touched, and
            nothing is opened until the log is used.
        """
        if not prepared:
            os.makedirs(directory, exist_ok=True)
            FileSegment.createFile(directory, 0)
        segment = FileSegment.empty(directory, 0, cache, nowMs)
        segment.indexIntervalBytes = config.indexIntervalBytes
        cache.pin(segment)
        return cls(
            directory,
            cache,
            topic,
            partition,
            config,
            [segment],
            producerIdExpirationMs=producerIdExpirationMs,
            epochCache=LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT)),
        )

    @classmethod
    def load(
        cls,
        directory: str,
        cache,
        topic: str,
        partition: int,
        config,
        *,
        recoveryPoint: int,
        logStartOffset: int,
        clean: bool,
        nowMs: int,
        producerIdExpirationMs: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> FilePartitionLog:
        """
        Open an existing partition directory, recovering it if C{clean} is
        false.
        """
        swap.recover(directory, config.indexIntervalBytes)
        bases = []
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            if name.endswith(_STRAY_SUFFIXES):
                os.unlink(path)
                continue
            match = SEGMENT_FILE.match(name)
            if match:
                bases.append(int(match.group(1)))
        bases.sort()
        for name in os.listdir(directory):
            stem, _, suffix = name.partition(".")
            if (
                suffix in ("index", "timeindex", INDEX_CHECKSUMS[1:], TXN_INDEX_SUFFIX[1:])
                and stem.isdigit()
                and int(stem) not in bases
            ):
                os.unlink(os.path.join(directory, name))
        segments = [FileSegment.open(directory, base, cache) for base in bases]
        if not segments:
            segments = [FileSegment.create(directory, max(logStartOffset, 0), cache, nowMs)]
        for segment in segments:
            segment.indexIntervalBytes = config.indexIntervalBytes
        cache.pin(segments[-1])
        if clean:
            try:
                segments[-1].indexes()
                segments[-1].recomputeNextOffset()
            except _ScanError as e:
                log.warn(
                    "{dir}: clean shutdown marker but unreadable tail ({error}), recovering",
                    dir=directory,
                    error=e,
                )
                clean = False
        epochCache = LeaderEpochCache.load(os.path.join(directory, LEADER_EPOCH_CHECKPOINT))
        if not clean:
            segments = cls._recover(directory, segments, recoveryPoint, config.indexIntervalBytes)
            cls._recoverEpochs(directory, segments, recoveryPoint, epochCache)
        end = segments[-1].nextOffset
        for what, checkpointed in (("recovery point", recoveryPoint),
                                   ("log start offset", logStartOffset)):
            if checkpointed > end:
                # Below the recovery point everything was on disk: something
                # other than a crash removed it.
                log.error(
                    "{dir}: the log ends at offset {end}, below its checkpointed {what} "
                    "{checkpointed} (in {segment}): offsets {end} to {last} are lost",
                    dir=directory,
                    end=end,
                    what=what,
                    checkpointed=checkpointed,
                    segment=segments[-1].logPath,
                    last=checkpointed - 1,
                )
                break
        recoveryPoint = end
        if not epochCache.entries:
            cls._seedEpochs(directory, segments, logStartOffset, epochCache)
        producerState = ProducerStateManager(f"{topic}-{partition}", producerIdExpirationMs)
        intact = cls._openTxnIndexes(directory, segments)
        cls._loadProducerState(directory, segments, producerState, nowMs, fromStart=not intact)
        return cls(
            directory,
            cache,
            topic,
            partition,
            config,
            segments,
            logStartOffset=logStartOffset,
            recoveryPoint=recoveryPoint,
            producerState=producerState,
            producerIdExpirationMs=producerIdExpirationMs,
            epochCache=epochCache,
        )

    @staticmethod
    def _seedEpochs(directory: str, segments: list, logStartOffset: int, cache) -> None:
        """
        A log written before it kept a leader-epoch checkpoint (every batch
        stamped with the broker's epoch 0): the epoch of its first batch
        from its start, in memory (the file is written at the next change).
        So OffsetForLeaderEpoch answers a client validating its position
        with the log end rather than "unknown", which would reset it.
        """
        for segment in segments:
            if segment.size == 0:
                continue
            try:
                for header in segment.batchHeaders(logStartOffset):
                    if header.partitionLeaderEpoch >= 0:
                        start = max(logStartOffset, segment.baseOffset)
                        cache.entries = ((header.partitionLeaderEpoch, start),)
                        cache.latestEpoch = header.partitionLeaderEpoch
                    return
            except (OSError, _ScanError) as e:
                log.warn("{dir}: no leader epoch found: {error}", dir=directory, error=e)
                return

    @staticmethod
    def _recoverEpochs(directory: str, segments: list, recoveryPoint: int, cache) -> None:
        """
        The leader epochs of the batches recovery re-read (as Kafka's
        recovery assigns them): the checkpoint may predate them.
        """
        try:
            for i, segment in enumerate(segments):
                following = segments[i + 1] if i + 1 < len(segments) else None
                if following is not None and following.baseOffset <= recoveryPoint:
                    continue
                for header in segment.batchHeaders(max(recoveryPoint, segment.baseOffset)):
                    if header.partitionLeaderEpoch > cache.latestEpoch:
                        cache.assign(header.partitionLeaderEpoch, header.baseOffset)
        except (OSError, _ScanError) as e:
            log.warn("{dir}: leader epochs not recovered: {error}", dir=directory, error=e)

    # -- producer state snapshots ------------------------------------------------------

    @staticmethod
    def _snapshotOffsets(directory: str) -> list[int]:
        offsets = []
        for name in os.listdir(directory):
            match = SNAPSHOT_FILE.match(name)
            if match:
                offsets.append(int(match.group(1)))
        offsets.sort()
        return offsets

    @staticmethod
    def _snapshotPath(directory: str, offset: int) -> str:
        return os.path.join(directory, segmentFileName(offset, SNAPSHOT_SUFFIX))

    @staticmethod
    def _txnIndexPath(directory: str, offset: int) -> str:
        return os.path.join(directory, segmentFileName(offset, TXN_INDEX_SUFFIX))

    @classmethod
    def _openTxnIndexes(cls, directory: str, segments: list) -> bool:
        """
        Give every segment that has an index file its index, read.

        @return: whether they all read back.
        """
        bases = {segment.baseOffset: segment for segment in segments}
        intact = True
        for name in os.listdir(directory):
            match = TXN_INDEX_FILE.match(name)
            if not match or int(match.group(1)) not in bases:
                continue
            segment = bases[int(match.group(1))]
            index = TransactionIndex(segment.baseOffset, os.path.join(directory, name))
            try:
                index.entries
            except (OSError, CorruptTxnIndex) as e:
                log.warn(
                    "{path} is unusable ({error}): rebuilding the aborted-transaction "
                    "indexes from the log",
                    path=index.path, error=e,
                )
                index.replace(())
                intact = False
            segment.txnIndex = index
        return intact

    @classmethod
    def _loadProducerState(
        cls,
        directory: str,
        segments: list,
        state: ProducerStateManager,
        nowMs: int,
        fromStart: bool = False,
    ) -> None:
        """
        The newest usable snapshot, then the batch headers after it (with
        C{fromStart}, every batch); the aborted-transaction indexes are
        rebuilt for what is replayed.
        """
        end = segments[-1].nextOffset
        start = segments[0].baseOffset
        loaded = None
        for offset in [] if fromStart else reversed(cls._snapshotOffsets(directory)):
            path = cls._snapshotPath(directory, offset)
            if offset > end:
                # Written before a truncation: describes offsets that are gone.
                _unlinkQuietly(path)
                continue
            try:
                with open(path, "rb") as f:
                    state.loadSnapshot(f.read())
            except (OSError, CorruptSnapshot) as e:
                log.warn("Deleting unusable producer snapshot {path}: {error}", path=path, error=e)
                _unlinkQuietly(path)
                continue
            loaded = offset
            break
        replayFrom = start if loaded is None else max(loaded, start)
        replayed = 0
        if replayFrom < end:
            for i, segment in enumerate(segments):
                following = segments[i + 1] if i + 1 < len(segments) else None
                if following is not None and following.baseOffset <= replayFrom:
                    continue
                index = getattr(segment, "txnIndex", None)
                if index is not None:
                    index.truncateTo(replayFrom)
                try:
                    for header, marker in segment.batchHeaders(replayFrom, markers=True):
                        if marker is not None and not marker.isTransactionMarker:
                            continue  # another control type: no producer state
                        completed = state.replay(
                            header,
                            None if marker is None else (marker.isAborted, marker.coordinatorEpoch),
                        )
                        if completed is not None and completed.isAborted:
                            cls._indexAborted(directory, segment, state, completed)
                        replayed += 1
                except _ScanError as e:
                    log.warn(
                        "{dir}: producer state rebuild skips the rest of {segment}: {error}",
                        dir=directory,
                        segment=segment,
                        error=e,
                    )
        state.removeExpired(nowMs)
        if loaded is None or replayed:
            log.info(
                "{dir}: producer state of {count} producer(s) from snapshot {snapshot} "
                "and {replayed} batch(es) after it",
                dir=directory,
                count=len(state),
                snapshot=loaded,
                replayed=replayed,
            )

    @classmethod
    def _indexAborted(cls, directory: str, segment, state, completed) -> None:
        index = getattr(segment, "txnIndex", None)
        if index is None:
            index = segment.txnIndex = TransactionIndex(
                segment.baseOffset, cls._txnIndexPath(directory, segment.baseOffset)
            )
        entry = AbortedTxn(
            completed.producerId, completed.firstOffset, completed.lastOffset,
            state.lastStableOffsetAfter(completed),
        )
        try:
            if not index.entries or index.entries[-1].lastOffset < entry.lastOffset:
                index.append(entry)
        except OSError as e:
            log.warn("Could not write {path}: {error}", path=index.path, error=e)

    def _newTxnIndex(self, segment) -> TransactionIndex:
        return TransactionIndex(
            segment.baseOffset, self._txnIndexPath(self.directory, segment.baseOffset)
        )

    def _writeSnapshot(self, offset: int, sync: bool) -> None:
        path = self._snapshotPath(self.directory, offset)
        temporary = path + ".tmp"
        try:
            with open(temporary, "wb") as f:
                f.write(self.producerState.snapshot())
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(temporary, path)
        except OSError as e:
            # Only an optimisation: recovery replays from an older snapshot.
            log.warn("Could not write producer snapshot {path}: {error}", path=path, error=e)
            _unlinkQuietly(temporary)

    def _onRoll(self, offset: int) -> None:
        self._writeSnapshot(offset, sync=False)

    def _onCleanClose(self) -> None:
        if self.txnIndexDamaged:
            # An index append failed: without snapshots the next start
            # replays the whole log and so rebuilds every index.
            for offset in self._snapshotOffsets(self.directory):
                _unlinkQuietly(self._snapshotPath(self.directory, offset))
            return
        self._writeSnapshot(self._end[0], sync=True)

    def _onSegmentsDeleted(self, firstBaseOffset: int) -> None:
        offsets = self._snapshotOffsets(self.directory)
        # Keep the newest one whatever happens: the state survives retention.
        for offset in offsets[:-1]:
            if offset < firstBaseOffset:
                _unlinkQuietly(self._snapshotPath(self.directory, offset))
        for name in os.listdir(self.directory):
            match = TXN_INDEX_FILE.match(name)
            if match and int(match.group(1)) < firstBaseOffset:
                _unlinkQuietly(os.path.join(self.directory, name))

    @staticmethod
    def _recover(
        directory: str, segments: list, recoveryPoint: int, indexIntervalBytes: int
    ) -> list:
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            if following is not None and following.baseOffset <= recoveryPoint:
                continue
            truncated = segment.recover(indexIntervalBytes)
            segment.sync()
            if truncated and following is not None:
                doomed = segments[i + 1 :]
                log.warn(
                    "{dir}: deleting {count} segment(s) after the truncation point, "
                    "from offset {offset}",
                    dir=directory,
                    count=len(doomed),
                    offset=doomed[0].baseOffset,
                )
                for later in doomed:
                    later.delete()
                segments = segments[: i + 1]
                segment.cache.pin(segment)
                break
        return segments

    def _newSegment(self, baseOffset: int, nowMs: int) -> FileSegment:
        segment = FileSegment.create(self.directory, baseOffset, self.cache, nowMs)
        segment.indexIntervalBytes = self.config.indexIntervalBytes
        segment.writeLock = self._lock
        self.cache.pin(segment)
        return segment

    def _installCleaned(self, baseOffset: int, old: list, goneAborted=frozenset()) -> FileSegment:
        # The cleaner wrote <baseOffset>.*.cleaned; see kafkatwist.log.swap.
        # The replaced segments' aborted transactions go to the index under
        # the cleaned segment's name first (the first old segment's, so a
        # crash at any step leaves them indexed), then the others' go.
        index = self._mergeTxnIndexes(baseOffset, old, goneAborted)
        swap.commit(self.directory, baseOffset)
        for segment in old:
            segment.delete()
        swap.complete(self.directory, baseOffset)
        # Producer snapshots at the bases of the segments merged away go with
        # them, as Kafka's do (the newest stays whatever happens).
        gone = {s.baseOffset for s in old[1:]}
        for offset in self._snapshotOffsets(self.directory)[:-1]:
            if offset in gone:
                _unlinkQuietly(self._snapshotPath(self.directory, offset))
        segment = FileSegment.open(self.directory, baseOffset, self.cache)
        segment.indexIntervalBytes = self.config.indexIntervalBytes
        if index is not None:
            segment.txnIndex = index
        for replaced in old:
            if replaced.baseOffset != baseOffset:
                _unlinkQuietly(self._txnIndexPath(self.directory, replaced.baseOffset))
        return segment

    def _mergeTxnIndexes(self, baseOffset: int, old: list, goneAborted) -> TransactionIndex | None:
        entries = []
        had = False
        for segment in old:
            index = getattr(segment, "txnIndex", None)
            if index is not None:
                had = True
                entries.extend(
                    e for e in index.entries if (e.producerId, e.lastOffset) not in goneAborted
                )
        if not entries:
            if had:
                # Every entry went: no file under the cleaned segment's name.
                _unlinkQuietly(self._txnIndexPath(self.directory, baseOffset))
            return None
        index = TransactionIndex(baseOffset, self._txnIndexPath(self.directory, baseOffset))
        index.replace(entries)
        return index

    def _reactivate(self, segment) -> None:
        segment.writeLock = self._lock
        self.cache.pin(segment)

    def _rebuildProducerState(self, deletedBases: list) -> None:
        for base in deletedBases:
            _unlinkQuietly(self._txnIndexPath(self.directory, base))
        self.producerState.clear()
        self._loadProducerState(
            self.directory, self._view[1], self.producerState, int(time.time() * 1000)
        )

    def _deactivate(self, segment) -> None:
        segment.persistIndexesOrWarn("at roll")
        self.cache.unpin(segment)

    def abandon(self) -> None:
        """
        Drop every descriptor without flushing or writing anything, as a
        crash would (for tests of recovery).
        """
        with self._lock:
            self._closed = True
            for segment in self._view[1]:
                # Unpersisted index entries are lost in a crash too.
                segment._offsetIndex = segment._timeIndex = None
                segment.released = True
                self.cache.forget(segment)


def _unlinkQuietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
