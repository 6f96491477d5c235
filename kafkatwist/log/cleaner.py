"""
Kafka's log cleaner: compacts the logs of topics with
C{cleanup.policy=compact}, keeping the latest record of each key.

Threads: C{log.cleaner.threads} cleaner threads (never a Processor or a
handler thread).  Each repeatedly takes the dirtiest compacted log (Kafka's
C{LogCleanerManager.grabFilthiestCompactedLog}), cleans it, and sleeps
C{log.cleaner.backoff.ms} when no log needs it.  The pass itself
(L{kafkatwist.log.cleaning}) runs in a cleaner process for the on-disk log
(L{kafkatwist.log.cleanerworker}: a GIL of its own) and on the thread for the
in-memory log.  Produce and fetch never wait for a pass: each cleaned
segment is written aside and swapped in under the partition lock
(L{kafkatwist.log.partition.PartitionLog.replaceSegments}; on disk
L{kafkatwist.log.swap}).

Which log, and how much of it:

  - a log's dirty section starts at its C{cleaner-offset-checkpoint} entry
    (one file per log directory, Kafka's format; the log start offset if
    absent or out of range) and ends at the first uncleanable offset: the
    active segment's base, or the first segment whose newest record is
    younger than C{min.compaction.lag.ms};
  - the dirty ratio is the dirty section's bytes over the log's;
    the dirtiest log above its C{min.cleanable.dirty.ratio} is cleaned, or
    sooner one with a dirty record older than C{max.compaction.lag.ms};
  - beyond Kafka: a log whose cleaned tombstones reached their delete
    horizon is cleaned again even if nothing else is dirty, so tombstones
    do go once C{delete.retention.ms} has passed (Kafka waits for the
    dirty ratio).  Only horizons still to come count: a batch kept with a
    horizon already passed holds nothing a pass would drop, so a log whose
    horizons have all passed is not due again until new data arrives.  The
    horizons are remembered in memory only: after a restart that wait
    falls back to Kafka's;
  - beyond Kafka too: a log whose clean section would merge into half as
    many segments or fewer is cleaned again at once, so the many small
    segments a first pass leaves (it groups segments by their size before
    cleaning, as Kafka does) do not wait for the dirty ratio.

A damaged batch stops the pass and marks the partition uncleanable (Kafka
does the same) until the broker restarts.

Metrics (L{LogCleaner.metrics}): Kafka's C{max-dirty-percent},
C{time-since-last-run-ms}, C{max-buffer-utilization-percent},
C{cleaner-recopy-percent}, C{max-clean-time-secs},
C{max-compaction-delay-secs}, C{DeadThreadCount},
C{uncleanable-partitions-count} and C{uncleanable-bytes}, plus the bytes
read and written.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass

from twisted.logger import Logger

from kafkatwist.log import swap
from kafkatwist.log.checkpoint import readCheckpoint, writeCheckpoint
from kafkatwist.log.cleanerworker import WorkerDied, WorkerProcess, segmentOpener
from kafkatwist.log.cleaning import (
    CleaningAborted,
    CleaningStats,
    CleanTask,
    SourceSegment,
    Throttler,
    cleanLog,
    groupSegmentsBySize,
)
from kafkatwist.log.memory import MemorySegment
from kafkatwist.log.offsetmap import OffsetMap
from kafkatwist.protocol.records import CorruptRecordError

__all__ = ["CLEANER_CHECKPOINT", "LogCleaner", "LogToClean"]

log = Logger()

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
_INT64_MAX = 2**63 - 1
_UNLIMITED = 1.7976931348623157e308


def _wallClockMs() -> int:
    return int(time.time() * 1000)


@dataclass
class LogToClean:
    """
    A compacted log and its cleanable range (Kafka's C{LogToClean}).
    """

    key: tuple[str, int]
    log: object
    segments: list
    firstDirty: int
    firstUncleanable: int
    cleanBytes: int
    cleanableBytes: int
    compactionDelayMs: int
    horizonDue: bool
    fragmented: bool = False

    @property
    def totalBytes(self) -> int:
        return self.cleanBytes + self.cleanableBytes

    @property
    def cleanableRatio(self) -> float:
        return self.cleanableBytes / self.totalBytes if self.totalBytes else 0.0

    @property
    def needCompactionNow(self) -> bool:
        return self.compactionDelayMs > 0


def _overlapping(segments: list, start: int, end: int) -> list:
    """
    The segments holding offsets in C{[start, end)} (Kafka's
    C{logSegments(from, to)}).
    """
    bases = [s.baseOffset for s in segments]
    first = max(bisect_right(bases, start) - 1, 0)
    return [s for s in segments[first:] if s.baseOffset < end]


class _Runner:
    """
    Where one cleaner thread's passes run: in this thread (in-memory logs,
    and tests), or in the thread's cleaner process (on-disk logs).
    """

    def __init__(self, cleaner: LogCleaner, inProcess: bool) -> None:
        self.cleaner = cleaner
        self.offsetMap = OffsetMap(cleaner.mapBytesPerThread, cleaner.loadFactor)
        self.worker = None if inProcess else WorkerProcess(cleaner.cpus)

    def clean(self, partitionLog, task: CleanTask, onGroup) -> CleaningStats:
        directory = getattr(partitionLog, "directory", None)
        if directory is None:
            return self._inThread(partitionLog, task, onGroup)
        if self.worker is not None:
            cleaner = self.cleaner
            options = {
                "mapBytes": cleaner.mapBytesPerThread,
                "loadFactor": cleaner.loadFactor,
                "chunkSize": cleaner.chunkSize,
                "bytesPerSecond": cleaner.maxIoBytesPerSecond / cleaner.numThreads,
            }
            return self.worker.clean(
                task, directory, options, lambda result: onGroup(result, result.baseOffset)
            )
        return self._inThread(partitionLog, task, onGroup)

    def _inThread(self, partitionLog, task: CleanTask, onGroup) -> CleaningStats:
        directory = getattr(partitionLog, "directory", None)
        if directory is not None:
            open_ = segmentOpener(directory)

            def newSink(baseOffset):
                return swap.CleanedSegment(directory, baseOffset, task.nowMs)

            def cleanedOf(sink, result):
                return result.baseOffset

        else:
            byBase = {segment.baseOffset: segment for segment in partitionLog.segments}

            def open_(source):
                return byBase[source.baseOffset]._openReader()

            def newSink(baseOffset):
                return MemorySegment(baseOffset, task.nowMs)

            def cleanedOf(sink, result):
                return sink

        def groupDone(sink, result) -> None:
            if not onGroup(result, cleanedOf(sink, result)):
                raise CleaningAborted(f"stopped after the segment at {result.baseOffset}")

        cleaner = self.cleaner
        return cleanLog(
            task,
            self.offsetMap,
            open_,
            newSink,
            groupDone,
            chunkSize=cleaner.chunkSize,
            throttler=cleaner.throttler,
            checkDone=cleaner.checkDone,
        )

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()


class LogCleaner:
    """
    The cleaner of one L{kafkatwist.log.LogManager} or
    L{kafkatwist.log.MemoryLogManager}.

    Owner: its state is shared by the cleaner threads and read by metrics
    scrapes, always under C{_lock}; a pass runs on the cleaner thread that
    took the log (only one at a time per log).

    @param threads: C{log.cleaner.threads}.
    @param dedupeBufferSize: C{log.cleaner.dedupe.buffer.size}, shared by
        the threads.
    @param ioBufferSize: C{log.cleaner.io.buffer.size}, shared (half for
        reading, half for writing, as in Kafka).
    @param loadFactor: C{log.cleaner.io.buffer.load.factor}.
    @param maxIoBytesPerSecond: C{log.cleaner.io.max.bytes.per.second},
        split evenly between cleaner processes.
    @param backoffMs: C{log.cleaner.backoff.ms}.
    @param inProcess: run passes on the cleaner threads even for on-disk
        logs (tests); otherwise in cleaner processes.
    @param cpus: CPUs the cleaner processes may use (C{None}: any).
    @param clock: milliseconds since the epoch.
    """

    def __init__(
        self,
        logManager,
        *,
        threads: int = 1,
        dedupeBufferSize: int = 128 * 1024 * 1024,
        ioBufferSize: int = 512 * 1024,
        loadFactor: float = 0.9,
        maxIoBytesPerSecond: float = _UNLIMITED,
        backoffMs: int = 15000,
        inProcess: bool = False,
        cpus: frozenset[int] | None = None,
        clock=None,
    ) -> None:
        self.logManager = logManager
        self.numThreads = max(threads, 1)
        self.mapBytesPerThread = dedupeBufferSize // self.numThreads
        self.chunkSize = max(ioBufferSize // self.numThreads // 2, 64 * 1024)
        self.loadFactor = loadFactor
        self.maxIoBytesPerSecond = maxIoBytesPerSecond
        self.backoffMs = backoffMs
        self.inProcess = inProcess
        self.cpus = cpus
        self.clock = clock or _wallClockMs
        self.throttler = Throttler(maxIoBytesPerSecond)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._runners: list[_Runner] = []
        # (topic, partition) -> (log, offset): the log object tells a
        # recreated topic's log from the one the entry was for.
        self._checkpoints: dict[tuple[str, int], tuple[object, int]] = {}
        self._horizons: dict[tuple[str, int], tuple[object, int]] = {}
        self._inProgress: set[tuple[str, int]] = set()
        self._uncleanable: dict[tuple[str, int], object] = {}
        self.timeOfLastRunMs = self.clock()
        self.dirtiestRatio = 0.0
        self.maxCompactionDelayMs = 0
        self.lastStats: dict[int, CleaningStats] = {}
        self.bytesRead = 0
        self.bytesWritten = 0
        self.passes = 0
        self.deadThreads = 0
        self._loadCheckpoints()
        listeners = getattr(logManager, "deletionListeners", None)
        if listeners is not None:
            listeners.append(self._topicDeleted)

    # -- checkpoints -----------------------------------------------------------

    def _logDirs(self) -> list[str]:
        return list(getattr(self.logManager, "logDirs", ()))

    @staticmethod
    def _logDirOf(partitionLog) -> str | None:
        directory = getattr(partitionLog, "directory", None)
        return os.path.dirname(directory) if directory else None

    def _loadCheckpoints(self) -> None:
        for logDir in self._logDirs():
            entries = readCheckpoint(os.path.join(logDir, CLEANER_CHECKPOINT))
            for key, offset in entries.items():
                partitionLog = self.logManager.getLog(*key)
                if partitionLog is not None and self._logDirOf(partitionLog) == logDir:
                    self._checkpoints[key] = (partitionLog, offset)

    def _writeCheckpoint(self, logDir: str) -> None:
        with self._lock:
            entries = {
                key: offset
                for key, (partitionLog, offset) in self._checkpoints.items()
                if self.logManager.getLog(*key) is partitionLog
                and self._logDirOf(partitionLog) == logDir
            }
        try:
            writeCheckpoint(os.path.join(logDir, CLEANER_CHECKPOINT), entries)
        except OSError as e:
            # Only costs cleaning more again after a restart.
            log.warn("Could not write {dir}/{name}: {error}", dir=logDir, name=CLEANER_CHECKPOINT, error=e)

    def _topicDeleted(self, topic: str) -> None:
        with self._lock:
            doomed = [key for key in self._checkpoints if key[0] == topic]
            logDirs = {self._logDirOf(self._checkpoints[key][0]) for key in doomed}
            for key in doomed:
                del self._checkpoints[key]
                self._horizons.pop(key, None)
                self._uncleanable.pop(key, None)
        for logDir in logDirs:
            if logDir is not None:
                self._writeCheckpoint(logDir)

    def checkpoint(self, topic: str, partition: int) -> int | None:
        """
        @return: the first dirty offset recorded for the partition's log,
            or C{None}.
        """
        with self._lock:
            entry = self._checkpoints.get((topic, partition))
        if entry is None or self.logManager.getLog(topic, partition) is not entry[0]:
            return None
        return entry[1]

    # -- choosing a log ------------------------------------------------------------

    def _cleanable(self, key, partitionLog, nowMs: int) -> LogToClean:
        """
        Kafka's C{cleanableOffsets} and C{calculateCleanableBytes}.
        """
        config = partitionLog.config
        segments = partitionLog.segments
        logStart = partitionLog.logStartOffset
        with self._lock:
            entry = self._checkpoints.get(key)
            horizon = self._horizons.get(key)
        firstDirty = entry[1] if entry is not None and entry[0] is partitionLog else logStart
        if firstDirty < logStart or firstDirty > partitionLog.logEndOffset:
            firstDirty = logStart
        active = segments[-1]
        uncleanable = min(partitionLog.lastStableOffset, active.baseOffset)
        dirtyInactive = _overlapping(segments, firstDirty, _INT64_MAX)[:-1]
        if config.minCompactionLagMs > 0:
            for segment in dirtyInactive:
                try:
                    youngest = segment.largestTimestamp
                except FileNotFoundError:
                    continue
                if youngest > nowMs - config.minCompactionLagMs:
                    uncleanable = min(uncleanable, segment.baseOffset)
                    break
        uncleanable = max(firstDirty, uncleanable)
        following = _overlapping(segments, uncleanable, _INT64_MAX)[:-1]
        firstUncleanable = following[0].baseOffset if following else active.baseOffset
        cleanableBytes = sum(
            s.size for s in _overlapping(segments, min(firstDirty, firstUncleanable), firstUncleanable)
        )
        cleanBytes = sum(s.size for s in _overlapping(segments, -1, firstDirty))
        delay = 0
        if config.maxCompactionLagMs < _INT64_MAX:
            earliest = None
            for segment in dirtyInactive:
                try:
                    first = segment.firstBatchTimestamp()
                except OSError:
                    continue
                if first > 0 and (earliest is None or first < earliest):
                    earliest = first
            cleanUntil = nowMs - config.maxCompactionLagMs
            if earliest is not None and earliest < cleanUntil:
                delay = cleanUntil - earliest
        horizonDue = horizon is not None and horizon[0] is partitionLog and horizon[1] <= nowMs
        return LogToClean(
            key,
            partitionLog,
            [s for s in segments if s.baseOffset < firstUncleanable],
            firstDirty,
            firstUncleanable,
            cleanBytes,
            cleanableBytes,
            delay,
            horizonDue,
            self._fragmented(segments, firstDirty, config),
        )

    @staticmethod
    def _fragmented(segments: list, firstDirty: int, config) -> bool:
        """
        Whether the clean section's segments would go together into half as
        many or fewer: a pass groups segments by their size before
        cleaning, so one that removed most of their records leaves many
        small ones (1,000 rolled 64 KiB segments of one group's commits
        become 1,000 near-empty ones) until a pass merges them.
        """
        clean = [s for s in segments[:-1] if s.baseOffset < firstDirty]
        if len(clean) < 4:
            return False
        nextBases = [s.baseOffset for s in segments[1 : len(clean) + 1]]
        groups = groupSegmentsBySize(
            clean, nextBases, config.segmentBytes, config.segmentIndexBytes, config.indexIntervalBytes
        )
        return len(groups) * 2 <= len(clean)

    def grabFilthiestLog(self, nowMs: int | None = None) -> LogToClean | None:
        """
        Choose the log to clean now and mark it in progress (Kafka's
        C{grabFilthiestCompactedLog}).
        """
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            self.timeOfLastRunMs = nowMs
            busy = set(self._inProgress)
            uncleanable = dict(self._uncleanable)
        # Measuring reads segment timestamps (disk): outside the lock, which
        # metrics scrapes take.
        candidates = []
        for partitionLog in self.logManager.logs():
            if not partitionLog.config.compacts:
                continue
            key = (partitionLog.topic, partitionLog.partition)
            if key in busy or uncleanable.get(key) is partitionLog:
                continue
            ltc = self._cleanable(key, partitionLog, nowMs)
            if ltc.totalBytes > 0:
                candidates.append(ltc)
        ready = [
            c
            for c in candidates
            if (c.needCompactionNow and c.cleanableBytes > 0)
            or c.cleanableRatio > c.log.config.minCleanableDirtyRatio
            or (c.horizonDue and c.cleanBytes > 0)
            or c.fragmented
        ]
        with self._lock:
            self.dirtiestRatio = max((c.cleanableRatio for c in candidates), default=0.0)
            self.maxCompactionDelayMs = max((c.compactionDelayMs for c in candidates), default=0)
            ready = [c for c in ready if c.key not in self._inProgress]
            if not ready:
                return None
            chosen = max(ready, key=lambda c: c.cleanableRatio)
            self._inProgress.add(chosen.key)
            return chosen

    # -- cleaning ------------------------------------------------------------------

    def checkDone(self) -> None:
        if self._stopping:
            raise CleaningAborted("the log cleaner is stopping")

    def _task(self, ltc: LogToClean, nowMs: int) -> CleanTask:
        config = ltc.log.config
        sources = []
        holding = _overlapping(ltc.segments, ltc.firstDirty, ltc.firstDirty + 1)
        for segment in ltc.segments:
            hint = 0
            if holding and segment is holding[0]:
                # Where mapping starts, if the dirty section begins inside it.
                hint = segment.indexes()[0].lookup(ltc.firstDirty)
            sources.append(SourceSegment(segment.baseOffset, segment.size, segment.lastModifiedMs(), hint))
        return CleanTask(
            topicPartition=f"{ltc.log.topic}-{ltc.log.partition}",
            segments=sources,
            firstDirty=ltc.firstDirty,
            firstUncleanable=ltc.firstUncleanable,
            nowMs=nowMs,
            deleteRetentionMs=config.deleteRetentionMs,
            segmentBytes=config.segmentBytes,
            maxIndexBytes=config.segmentIndexBytes,
            indexIntervalBytes=config.indexIntervalBytes,
            producerLastOffsets=ltc.log.producerLastOffsets(),
            maxMessageBytes=config.maxMessageBytes,
            abortedTxns=ltc.log.abortedTransactions(ltc.firstUncleanable),
            producerEpochs=ltc.log.producerMarkerEpochs(),
        )

    def cleanLog(self, ltc: LogToClean, runner: _Runner, threadId: int = 0) -> CleaningStats | None:
        """
        Clean one log taken with L{grabFilthiestLog}, and release it.

        @return: the pass's statistics, or C{None} if it did not complete.
        """
        partitionLog = ltc.log
        name = f"{partitionLog.topic}-{partitionLog.partition}"
        directory = getattr(partitionLog, "directory", None)
        nowMs = self.clock()
        swapped = []

        def onGroup(result, cleaned) -> bool:
            if self._stopping:
                ok = False
            else:
                ok = partitionLog.replaceSegments(result.replaced, cleaned, result.goneAborted)
            if ok:
                swapped.append(result)
            elif directory is not None:
                swap.discard(directory, result.baseOffset)
            return ok

        stats = None
        try:
            if not ltc.segments:
                return None
            task = self._task(ltc, nowMs)
            stats = runner.clean(partitionLog, task, onGroup)
            # Before the checkpoint moves: whoever watches it finds the line.
            self._report(threadId, name, stats, len(swapped))
        except CorruptRecordError as e:
            log.error(
                "Log cleaner: {name} has a damaged batch, it will not be cleaned again until "
                "restart: {error}",
                name=name,
                error=e,
            )
            with self._lock:
                self._uncleanable[ltc.key] = partitionLog
        except CleaningAborted:
            pass
        except FileNotFoundError as e:
            # Retention or a topic deletion removed a segment under the pass.
            log.info("Log cleaner: {name} changed during cleaning ({error}), trying later", name=name, error=e)
        except WorkerDied as e:
            if not self._stopping:
                log.warn("Log cleaner: {error}; cleaning {name} again later", error=e, name=name)
            if directory is not None:
                # Its cleaned segment in the making; nothing else of this
                # log's is being cleaned.
                swap.discardCleaned(directory)
        except Exception:
            log.failure("Log cleaner: cleaning {name} failed", name=name)
        finally:
            self._done(ltc, stats, threadId, complete=stats is not None)
        return stats

    @staticmethod
    def _report(threadId: int, name: str, stats: CleaningStats, swapped: int) -> None:
        log.info(
            "Log cleaner thread {thread} cleaned {name} up to offset {end}: "
            "{dirty:,} dirty bytes mapped in {mapSecs:.2f} s, {read:,} bytes read, "
            "{written:,} written, {messagesRead:,} -> {messagesWritten:,} records, "
            "{segments} segment(s) swapped, {secs:.2f} s ({rate:.1f} MB/s of dirty log; "
            "{cpu:.2f} CPU-s), buffer {utilization:.1%} used",
            thread=threadId,
            name=name,
            end=stats.endOffset,
            dirty=stats.mapBytesRead,
            mapSecs=stats.mapDoneTime - stats.startTime,
            read=stats.bytesRead,
            written=stats.bytesWritten,
            messagesRead=stats.messagesRead,
            messagesWritten=stats.messagesWritten,
            segments=swapped,
            secs=stats.elapsedSecs,
            rate=stats.mapBytesRead / stats.elapsedSecs / 1e6,
            cpu=stats.cpuSecs,
            utilization=stats.bufferUtilization,
        )

    def _done(self, ltc: LogToClean, stats, threadId: int, complete: bool) -> None:
        logDir = self._logDirOf(ltc.log)
        with self._lock:
            self._inProgress.discard(ltc.key)
            if not complete:
                return
            self._checkpoints[ltc.key] = (ltc.log, stats.endOffset)
            if stats.earliestHorizonMs is None:
                self._horizons.pop(ltc.key, None)
            else:
                self._horizons[ltc.key] = (ltc.log, stats.earliestHorizonMs)
            self.lastStats[threadId] = stats
            self.bytesRead += stats.bytesRead
            self.bytesWritten += stats.bytesWritten
            self.passes += 1
        if logDir is not None:
            self._writeCheckpoint(logDir)

    def cleanOnce(self, nowMs: int | None = None) -> CleaningStats | None:
        """
        Clean the dirtiest log now, on the calling thread, if one needs it
        (tests; the cleaner threads do the same in a loop).
        """
        ltc = self.grabFilthiestLog(nowMs)
        if ltc is None:
            return None
        if not self._runners:
            self._runners.append(_Runner(self, self.inProcess))
        return self.cleanLog(ltc, self._runners[0])

    # -- threads -----------------------------------------------------------------------

    def start(self) -> None:
        """
        Start the cleaner threads.
        """
        for threadId in range(self.numThreads):
            runner = _Runner(self, self.inProcess)
            self._runners.append(runner)
            thread = threading.Thread(
                target=self._run,
                args=(threadId, runner),
                name=f"kafka-log-cleaner-thread-{threadId}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def _run(self, threadId: int, runner: _Runner) -> None:
        try:
            while not self._stopping:
                ltc = self.grabFilthiestLog()
                if ltc is not None:
                    self.cleanLog(ltc, runner, threadId)
                    continue
                with self._wake:
                    if not self._stopping:
                        self._wake.wait(self.backoffMs / 1000.0)
        except Exception:
            log.failure("Log cleaner thread {thread} died", thread=threadId)
            with self._lock:
                self.deadThreads += 1

    def wakeUp(self) -> None:
        """
        Make sleeping cleaner threads look for work now.
        """
        with self._wake:
            self._wake.notify_all()

    def stop(self) -> None:
        """
        Stop the threads: a pass in progress is abandoned (its cleaned
        files are deleted, the swaps already done stay), the cleaner
        processes are killed.
        """
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        listeners = getattr(self.logManager, "deletionListeners", None)
        if listeners is not None and self._topicDeleted in listeners:
            listeners.remove(self._topicDeleted)
        for runner in self._runners:
            runner.close()
        for thread in self._threads:
            thread.join()
        self._threads = []

    # -- metrics -------------------------------------------------------------------

    def metrics(self, nowMs: int | None = None) -> dict:
        """
        Kafka's cleaner gauges, and byte counters.
        """
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            stats = list(self.lastStats.values())
            uncleanable: dict[str, tuple[int, int]] = {}
            for key, partitionLog in self._uncleanable.items():
                if self.logManager.getLog(*key) is not partitionLog:
                    continue
                logDir = self._logDirOf(partitionLog) or ""
                count, size = uncleanable.get(logDir, (0, 0))
                uncleanable[logDir] = (count + 1, size + partitionLog.size)
            return {
                "max-dirty-percent": int(100 * self.dirtiestRatio),
                "time-since-last-run-ms": max(0, nowMs - self.timeOfLastRunMs),
                "max-buffer-utilization-percent": int(
                    max((s.bufferUtilization for s in stats), default=0.0) * 100
                ),
                "cleaner-recopy-percent": int(
                    sum(100 * s.bytesWritten / max(s.bytesRead, 1) for s in stats) / len(stats)
                )
                if stats
                else 0,
                "max-clean-time-secs": int(max((s.elapsedSecs for s in stats), default=0.0)),
                "max-compaction-delay-secs": self.maxCompactionDelayMs // 1000,
                "DeadThreadCount": self.deadThreads,
                "bytes-read": self.bytesRead,
                "bytes-written": self.bytesWritten,
                "uncleanable": uncleanable,
            }
