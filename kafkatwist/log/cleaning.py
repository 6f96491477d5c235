"""
One cleaning pass over one log (Kafka's C{Cleaner.doClean}), independent
of where it runs: in a cleaner process for the on-disk log (see
L{kafkatwist.log.cleanerworker}), in a cleaner thread for the in-memory log.

A pass:

  1. maps the dirty section, C{[firstDirty, firstUncleanable)}: the hash of
     every key to the offset of its latest record
     (L{kafkatwist.log.offsetmap}); if the map fills up, the pass ends
     where it stopped;
  2. groups the segments from the start of the log to where the map ends
     so that each group fits one segment (C{segment.bytes},
     C{segment.index.bytes}, relative offsets): small cleaned segments
     merge;
  3. filters each group into one new segment (L{kafkatwist.log.compaction})
     and hands it over (C{onGroup}) to be swapped in before the next group
     is started.

Sources are read with C{pread} in chunks of the I/O buffer; every batch's
CRC is checked before anything of it is used, so the cleaner never rewrites
damaged data under a fresh CRC.  C{log.cleaner.io.max.bytes.per.second}
throttles reads and writes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from crc32c import crc32c

from kafkatwist.log.compaction import (
    AbortedBatches,
    DELETE_HORIZON_BIT,
    BatchFilter,
    TransactionCleaning,
    batchPayload,
    mapRecords,
)
from kafkatwist.log.offsetmap import OffsetMap
from kafkatwist.log.stored import decompressedLimit
from kafkatwist.protocol.batch import (
    ATTRIBUTES_AT,
    CODEC_MASK,
    CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    AssignedBatch,
)
from kafkatwist.protocol.records import CorruptRecordError

__all__ = [
    "CleaningAborted",
    "CleaningStats",
    "CleanTask",
    "GroupResult",
    "SourceSegment",
    "Throttler",
    "cleanLog",
    "groupSegmentsBySize",
]

_MAX_RELATIVE_OFFSET = 2**31 - 1
_OFFSET_INDEX_ENTRY = 8


class CleaningAborted(Exception):
    """
    The pass was stopped from outside (shutdown, log deleted).
    """


@dataclass
class SourceSegment:
    """
    A segment of the log being cleaned, as the pass sees it.

    @ivar size: bytes to read (the published size when the pass started).
    @ivar mtimeMs: its last modification time, which the cleaned segment
        replacing it keeps (retention measures from it).
    @ivar startHint: a byte position at or before the first dirty offset
        (from the segment's offset index), for the segment holding it.
    """

    baseOffset: int
    size: int
    mtimeMs: int
    startHint: int = 0


@dataclass
class CleanTask:
    """
    What a pass needs to know about the log, taken under its lock.

    @ivar segments: the log's segments from its first up to the first one
        that may not be cleaned (the active segment, or one within
        C{min.compaction.lag.ms}), oldest first.
    @ivar firstUncleanable: the base offset of that first uncleanable
        segment.
    @ivar producerLastOffsets: producer id -> last offset of its last batch.
    """

    topicPartition: str
    segments: list[SourceSegment]
    firstDirty: int
    firstUncleanable: int
    nowMs: int
    deleteRetentionMs: int
    segmentBytes: int
    maxIndexBytes: int
    indexIntervalBytes: int
    producerLastOffsets: dict[int, int] = field(default_factory=dict)
    maxMessageBytes: int = 1048588
    #: C{(producerId, firstOffset, lastOffset)} of aborted transactions
    #: that may have data in the cleaned range
    abortedTxns: list = field(default_factory=list)
    #: producer id -> epoch, for the producers with no data batch since
    #: their last epoch bump (their marker of that epoch stays)
    producerEpochs: dict[int, int] = field(default_factory=dict)


@dataclass
class GroupResult:
    """
    One cleaned segment, ready to replace the segments C{replaced} (their
    base offsets).
    """

    baseOffset: int
    replaced: list[int]
    size: int
    earliestHorizonMs: int | None
    #: C{(producerId, markerOffset)} of aborted transactions whose data is
    #: gone: their entries leave the aborted-transaction index
    goneAborted: tuple = ()


@dataclass
class CleaningStats:
    """
    Kafka's C{CleanerStats}.
    """

    startTime: float = field(default_factory=time.monotonic)
    mapDoneTime: float = 0.0
    endTime: float = 0.0
    #: CPU seconds of the process running the pass (its own process for
    #: the on-disk log): what it cost whatever else the machine was doing
    cpuSecs: float = 0.0
    mapBytesRead: int = 0
    mapMessagesRead: int = 0
    bytesRead: int = 0
    bytesWritten: int = 0
    messagesRead: int = 0
    messagesWritten: int = 0
    bufferUtilization: float = 0.0
    endOffset: int = -1
    earliestHorizonMs: int | None = None

    @property
    def elapsedSecs(self) -> float:
        return max(self.endTime - self.startTime, 1e-9)


class Throttler:
    """
    Sleep enough to keep the bytes passed to L{maybeThrottle} under
    C{bytesPerSecond} (Kafka's C{Throttler}: measured over periods of at
    least 100 ms; also as soon as the bytes are more than 100 ms ahead of
    the rate, so that a burst shorter than a period is held back too).
    """

    checkInterval = 0.1

    def __init__(self, bytesPerSecond: float, *, clock=time.monotonic, sleep=time.sleep) -> None:
        self.bytesPerSecond = bytesPerSecond
        self._clock = clock
        self._sleep = sleep
        self._periodStart = clock()
        self._observed = 0.0
        # Cleaner threads of the in-memory log share one throttler.
        self._lock = threading.Lock()

    def maybeThrottle(self, observed: int) -> None:
        if self.bytesPerSecond >= 1e300:
            return
        with self._lock:
            self._observed += observed
            now = self._clock()
            elapsed = now - self._periodStart
            pause = self._observed / self.bytesPerSecond - elapsed
            if elapsed < self.checkInterval and pause < self.checkInterval:
                return
            self._periodStart = now + max(pause, 0.0)
            self._observed = 0.0
        if pause > 0:
            self._sleep(pause)


def _batches(
    reader, start: int, end: int, chunkSize: int, throttler: Throttler, checkDone, checked=(0, -1)
):
    """
    Yield C{(view, position, header)} for every batch of C{reader} between
    byte C{start} (a batch start) and C{end}, each checked (magic, length,
    CRC) before it is yielded, except those within the offsets C{checked}
    (first, last), which this pass checked already.

    @raise CorruptRecordError: a batch that is not sound.
    """
    unpack = HEADER.unpack_from
    checkedFirst, checkedLast = checked
    position = start
    while position < end:
        checkDone()
        chunk = reader.pread(min(chunkSize, end - position), position)
        throttler.maybeThrottle(len(chunk))
        view = memoryview(chunk)
        available = len(view)
        at = 0
        while available - at >= HEADER_SIZE:
            header = unpack(view, at)
            size = LOG_OVERHEAD + header[1]
            if size > available - at:
                break
            if (
                header[3] != 2
                or size < HEADER_SIZE
                or not checkedFirst <= header[0] <= header[0] + header[6] <= checkedLast
                and crc32c(view[at + ATTRIBUTES_AT : at + size]) != header[4]
            ):
                _check(view, at, size, header, position + at)
            yield view, at, header
            at += size
        if at == 0:
            # One batch larger than the chunk: read it whole.
            if available < HEADER_SIZE:
                raise CorruptRecordError(f"truncated batch at byte {position}")
            header = unpack(view, 0)
            size = LOG_OVERHEAD + header[1]
            if size < HEADER_SIZE or position + size > end:
                raise CorruptRecordError(f"batch at byte {position} claims {size} bytes")
            view = memoryview(reader.pread(size, position))
            throttler.maybeThrottle(size)
            if len(view) < size:
                raise CorruptRecordError(f"batch at byte {position} is cut short")
            _check(view, 0, size, header, position)
            yield view, 0, header
            at = size
        position += at


def _check(view, at: int, size: int, header: tuple, position: int) -> None:
    if header[3] != 2 or size < HEADER_SIZE:
        raise CorruptRecordError(f"no magic 2 batch at byte {position}")
    if crc32c(view[at + ATTRIBUTES_AT : at + size]) != header[4]:
        raise CorruptRecordError(f"CRC mismatch in the batch at byte {position}")


def _nextBases(task: CleanTask) -> list[int]:
    bases = [s.baseOffset for s in task.segments[1:]]
    bases.append(task.firstUncleanable)
    return bases


def _buildOffsetMap(
    task, offsetMap, open_, chunkSize, throttler, checkDone, stats, aborted=None
) -> None:
    """
    Map the keys of the dirty section (Kafka's C{buildOffsetMap}), leaving
    out aborted transactions' records.
    """
    offsetMap.clear()
    entries, capacity = offsetMap.entries, offsetMap.capacity
    limit = decompressedLimit(task.maxMessageBytes)
    start = task.firstDirty
    latest = offsetMap.latestOffset
    mapBytes = messages = 0
    try:
        for segment, nextBase in zip(task.segments, _nextBases(task)):
            if nextBase <= start:
                continue
            reader = open_(segment)
            try:
                position = segment.startHint if segment.baseOffset <= start else 0
                for view, at, header in _batches(
                    reader, position, segment.size, chunkSize, throttler, checkDone
                ):
                    baseOffset, batchLength, lastOffsetDelta = header[0], header[1], header[6]
                    if baseOffset + lastOffsetDelta < start:
                        continue
                    mapBytes += LOG_OVERHEAD + batchLength
                    count, attributes = header[12], header[5]
                    if count and not attributes & CONTROL_BIT and not (
                        aborted and aborted.contains(attributes, header[9], baseOffset)
                    ):
                        if attributes & CODEC_MASK:
                            data = batchPayload(view, at, LOG_OVERHEAD + batchLength, attributes, limit)
                        else:
                            data = view[at + HEADER_SIZE : at + LOG_OVERHEAD + batchLength]
                        if mapRecords(
                            data, count, baseOffset, lastOffsetDelta, start, entries, capacity
                        ):
                            return
                        messages += count
                    latest = baseOffset + lastOffsetDelta
            finally:
                reader.close()
            # Offsets may have gaps: the segment is mapped up to the next one.
            latest = nextBase - 1
    finally:
        offsetMap.updateLatestOffset(latest)
        stats.mapBytesRead += mapBytes
        stats.mapMessagesRead += messages


def groupSegmentsBySize(
    segments: list[SourceSegment],
    nextBases: list[int],
    maxSize: int,
    maxIndexBytes: int,
    indexIntervalBytes: int,
) -> list[list[SourceSegment]]:
    """
    Kafka's C{groupSegmentsBySize}: runs of consecutive segments whose data
    fits one segment, whose offset index would fit C{segment.index.bytes}
    (estimated from the bytes, one entry per C{index.interval.bytes}) and
    whose offsets stay within 2^31 of the first one.
    """
    perEntry = max(indexIntervalBytes, HEADER_SIZE)
    maxEntries = maxIndexBytes // _OFFSET_INDEX_ENTRY
    groups = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        logSize = segments[i].size
        i += 1
        while i < len(segments):
            candidate = segments[i]
            if logSize + candidate.size > maxSize:
                break
            if (logSize + candidate.size) // perEntry > maxEntries:
                break
            if candidate.size and nextBases[i] - 1 - group[0].baseOffset > _MAX_RELATIVE_OFFSET:
                break
            group.append(candidate)
            logSize += candidate.size
            i += 1
        groups.append(group)
    return groups


def cleanLog(
    task: CleanTask,
    offsetMap: OffsetMap,
    open_,
    newSink,
    onGroup,
    *,
    chunkSize: int = 1 << 20,
    throttler: Throttler | None = None,
    checkDone=lambda: None,
) -> CleaningStats:
    """
    Run one pass.

    @param open_: C{open_(sourceSegment)} -> a reader with C{pread(n,
        position)} and C{close()}.
    @param newSink: C{newSink(baseOffset)} -> the cleaned segment to write
        (a L{kafkatwist.log.segment.Segment} with C{finish(mtimeMs)} and
        C{abort()}).
    @param onGroup: C{onGroup(sink, GroupResult)}, called once a cleaned
        segment is complete; it swaps it in (or aborts it) before the pass
        goes on.
    @param checkDone: raises L{CleaningAborted} when the pass must stop.
    @return: the statistics, with C{endOffset}: the next pass's first
        dirty offset.
    @raise CorruptRecordError: a damaged batch (the log is then left as it
        was, apart from groups already swapped in).
    """
    throttler = throttler or Throttler(float("inf"))
    stats = CleaningStats()
    cpuStart = time.process_time()
    aborted = AbortedBatches(task.abortedTxns)
    _buildOffsetMap(task, offsetMap, open_, chunkSize, throttler, checkDone, stats, aborted)
    stats.mapDoneTime = time.monotonic()
    endOffset = max(offsetMap.latestOffset + 1, task.firstDirty)
    stats.endOffset = endOffset
    # With nothing dirty (a pass for tombstones past their horizon) the
    # clean section must still count as mapped, or everything is kept.
    offsetMap.updateLatestOffset(endOffset - 1)
    filter_ = BatchFilter(
        offsetMap.entries,
        offsetMap.latestOffset,
        task.firstDirty,
        task.nowMs,
        task.deleteRetentionMs,
        task.producerLastOffsets,
        task.firstUncleanable,
        decompressedLimit(task.maxMessageBytes),
        aborted,
        TransactionCleaning(task.abortedTxns),
        task.producerEpochs,
    )
    nextBases = _nextBases(task)
    cleanable = [s for s in task.segments if s.baseOffset < endOffset]
    groups = groupSegmentsBySize(
        cleanable,
        nextBases,
        task.segmentBytes,
        task.maxIndexBytes,
        task.indexIntervalBytes,
    )
    for group in groups:
        checkDone()
        sink = newSink(group[0].baseOffset)
        try:
            horizon = _cleanGroup(group, sink, filter_, open_, chunkSize, throttler, checkDone, task, stats)
            sink.finish(group[-1].mtimeMs)
        except BaseException:
            sink.abort()
            raise
        if horizon is not None and (
            stats.earliestHorizonMs is None or horizon < stats.earliestHorizonMs
        ):
            stats.earliestHorizonMs = horizon
        gone = tuple(filter_.transactions.gone)
        filter_.transactions.gone.clear()
        onGroup(
            sink,
            GroupResult(group[0].baseOffset, [s.baseOffset for s in group], sink.size, horizon, gone),
        )
    stats.bufferUtilization = offsetMap.utilization
    stats.endTime = time.monotonic()
    stats.cpuSecs = time.process_time() - cpuStart
    return stats


def _cleanGroup(group, sink, filter_, open_, chunkSize, throttler, checkDone, task, stats):
    """
    Filter the segments of C{group} into C{sink}.

    @return: the earliest delete horizon still to come of the batches
        written, or C{None}: one this pass gave, or one in the future.  A
        batch kept with a horizon already passed holds nothing a later pass
        would drop (this one dropped what it could), so it does not make
        the log due again: the cleaner converges.
    """
    earliest = None
    interval = task.indexIntervalBytes
    # The dirty section was checked as it was mapped.
    checked = (task.firstDirty, filter_.latestOffset)
    for segment in group:
        reader = open_(segment)
        try:
            out = bytearray()
            assigned = []
            for view, at, header in _batches(
                reader, 0, segment.size, chunkSize, throttler, checkDone, checked
            ):
                stats.bytesRead += LOG_OVERHEAD + header[1]
                stats.messagesRead += header[12]
                retained = filter_.filter(view, at, header)
                data = retained.data
                if data is None:
                    continue
                horizon = retained.horizon
                if (
                    horizon is not None
                    and (horizon > task.nowMs or not header[5] & DELETE_HORIZON_BIT)
                    and (earliest is None or horizon < earliest)
                ):
                    earliest = horizon
                lastOffset = header[0] + header[6]
                assigned.append(
                    AssignedBatch(
                        len(out), len(data), header[0], lastOffset, retained.maxTimestamp, lastOffset
                    )
                )
                out += data
                stats.messagesWritten += retained.records
                if len(out) >= chunkSize:
                    _write(sink, out, assigned, interval, throttler, stats)
                    out, assigned = bytearray(), []
            if out:
                _write(sink, out, assigned, interval, throttler, stats)
        finally:
            reader.close()
    return earliest


def _write(sink, out, assigned, interval, throttler, stats) -> None:
    sink.append(out, assigned, interval)
    stats.bytesWritten += len(out)
    throttler.maybeThrottle(len(out))
