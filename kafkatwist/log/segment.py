"""
Log segments: a run of batches from one base offset, with its indexes.

L{Segment} holds what does not depend on storage (index maintenance on
append, offset and time lookups, header scans); L{FileSegment} stores it as
Kafka does, C{<base offset, 20 digits>.log} with C{.index} and
C{.timeindex} beside it.  The in-memory log's segments are in
L{kafkatwist.log.memory}.

Files are appended to, not preallocated: the log file grows with each
C{os.pwrite} at the published end, and index entries are kept in memory and
written to the index files on roll, flush and close.  Kafka preallocates and
mmaps its indexes so that index updates are plain stores; in Python an
C{array} plus C{bisect} is as fast, appending keeps the files exactly as
long as their content (no trimming on roll, no zero tail to mistake for
entries after a crash), and an index that was not persisted is rebuilt by
scanning the batch headers, which recovery does anyway.

Every byte position read is below a published size: a reader can never see
a batch whose write is not complete.
"""

from __future__ import annotations

import os
import re
import struct
import threading

from crc32c import crc32c
from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.atomic import replaceFile
from kafkatwist.log.index import CorruptIndex, OffsetIndex, TimeIndex
from kafkatwist.log.region import FileRegion
from kafkatwist.log.throttle import storageLog
from kafkatwist.protocol.batch import (
    CONTROL_BIT as _CONTROL_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAX_TIMESTAMP_AT as _MAX_TIMESTAMP_AT,
    SCAN_HEADER as _SCAN,
    BatchHeader,
    batchError,
)
from kafkatwist.protocol.markers import MarkerError, readMarker

__all__ = ["SEGMENT_FILE", "FileSegment", "Segment", "segmentFileName"]

log = Logger()

SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
#: the suffix of the file recording both index files' checksums
INDEX_CHECKSUMS = ".indexcrc"
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp: what scans need.
_MAX_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 1024 * 1024
_TAIL_CHECK_BYTES = 1024 * 1024
_INT32_MAX = 2**31 - 1


def segmentFileName(baseOffset: int, suffix: str) -> str:
    return f"{baseOffset:020d}{suffix}"


class _ScanError(Exception):
    """
    Batch headers that do not parse where a batch should start.

    @ivar position: where.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


class Segment:
    """
    The storage-independent part of a segment.

    Subclasses provide C{_write(data, position)}, C{_openReader()} (an object
    with C{pread(n, position)}, C{region(position, length)} and
    C{close()}), C{_loadIndexes()}, C{sync()}, C{delete()}, C{close()}; and
    C{_ownReader()} where a reader closed by a generator (or the garbage
    collector) must not need the storage's locks.

    @ivar size: published bytes: everything below is complete batches.
    @ivar nextOffset: the offset after the last batch (meaningful for the
        active segment; inactive ones end where the next segment starts).
    """

    pinned = False
    indexIntervalBytes = 4096
    #: the partition's lock while the segment is active (see
    #: L{kafkatwist.log.handles})
    writeLock = None
    _used = False

    def __init__(self, baseOffset: int, size: int, createdMs: int) -> None:
        self.baseOffset = baseOffset
        self.size = size
        self.nextOffset = baseOffset
        self.createdMs = createdMs
        self.deleted = False
        self._offsetIndex: OffsetIndex | None = None
        self._timeIndex: TimeIndex | None = None
        # Reentrant: loading a corrupt index rebuilds it under the same lock.
        self._indexLock = threading.RLock()
        self._bytesSinceLastIndexEntry = 0
        self._maxTimestamp: int | None = None
        self._offsetOfMaxTimestamp = -1
        self._rollingBasedTimestamp: int | None = None
        #: the byte position of the first batch that cannot be read, once
        #: a read or an index rebuild found one
        self.damagedAt: int | None = None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} base={self.baseOffset} size={self.size}>"

    # -- indexes -----------------------------------------------------------

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """
        @return: the offset and time index, loading them if needed.
        """
        offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
        if offsetIndex is None or timeIndex is None:
            offsetIndex, timeIndex = self._loadedIndexes()
        if not self.pinned:
            # (an active segment's descriptor is not in the LRU)
            self._touch()
        return offsetIndex, timeIndex

    def _loadedIndexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """
        The indexes, loaded under the index lock if another thread has
        not loaded them meanwhile.
        """
        with self._indexLock:
            offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
            if offsetIndex is None or timeIndex is None:
                offsetIndex, timeIndex = self._loadIndexes()
                self._offsetIndex, self._timeIndex = offsetIndex, timeIndex
        return offsetIndex, timeIndex

    def _touch(self) -> None:
        pass

    @property
    def largestTimestamp(self) -> int:
        """
        The segment's max timestamp, or -1 if no batch has one.
        """
        if self._maxTimestamp is None:
            last = self.indexes()[1].lastEntry()
            self._maxTimestamp, self._offsetOfMaxTimestamp = last if last else (-1, -1)
        return self._maxTimestamp

    @property
    def offsetOfLargestTimestamp(self) -> int:
        if self._maxTimestamp is None:
            _ = self.largestTimestamp
        return self._offsetOfMaxTimestamp

    def lastModifiedMs(self) -> int:
        """
        What time retention uses when no batch carries a timestamp.
        """
        return self.createdMs

    def retentionTimestamp(self) -> int:
        largest = self.largestTimestamp
        return largest if largest > 0 else self.lastModifiedMs()

    # -- append --------------------------------------------------------------

    def timeWaitedForRoll(self, nowMs: int, maxTimestampInMessages: int) -> int:
        """
        Kafka's rule: time since the first batch's timestamp, measured with
        the new batches' timestamp, or since creation when timestamps are
        absent.
        """
        if self._rollingBasedTimestamp is None and self.size > 0:
            self._rollingBasedTimestamp = self._firstBatchMaxTimestamp()
        first = self._rollingBasedTimestamp
        if first is not None and first >= 0:
            return maxTimestampInMessages - first
        return nowMs - self.createdMs

    def firstBatchTimestamp(self) -> int:
        """
        The first batch's max timestamp (what C{max.compaction.lag.ms}
        measures a segment by), or -1 for an empty segment.
        """
        return self._firstBatchMaxTimestamp() if self.size > 0 else -1

    def _firstBatchMaxTimestamp(self) -> int:
        reader = self._openReader()
        try:
            data = reader.pread(_MAX_TIMESTAMP_AT + 8, 0)
        finally:
            reader.close()
        return _MAX_TIMESTAMP.unpack_from(data, _MAX_TIMESTAMP_AT)[0]

    def isFull(self, maxIndexBytes: int) -> bool:
        offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
        if offsetIndex is None or timeIndex is None or not self.pinned:
            offsetIndex, timeIndex = self.indexes()
        return (
            offsetIndex.count >= maxIndexBytes // OffsetIndex.entrySize
            or timeIndex.count >= maxIndexBytes // TimeIndex.entrySize
        )

    def append(self, data, assigned, indexIntervalBytes: int) -> None:
        """
        Write C{data} (already offset-assigned batches) at the end, index it,
        then publish the new size.

        @param assigned: the L{kafkatwist.protocol.batch.AssignedBatch}es of
            C{data}.
        """
        start = self.size
        self._write(data, start)
        maxTimestamp = self._maxTimestamp
        if maxTimestamp is None:
            maxTimestamp = self.largestTimestamp
        offsetOfMax = self._offsetOfMaxTimestamp
        since = self._bytesSinceLastIndexEntry
        if start == 0 and self._rollingBasedTimestamp is None:
            self._rollingBasedTimestamp = assigned[0][4]
        # AssignedBatch fields by position: 0 position, 1 size, 2 base
        # offset, 4 max timestamp, 5 its offset.
        for batch in assigned:
            if batch[4] > maxTimestamp:
                maxTimestamp, offsetOfMax = batch[4], batch[5]
            if since > indexIntervalBytes:
                # An entry every index.interval.bytes: the indexes are
                # loaded (if they were not) only then.
                offsetIndex, timeIndex = self.indexes()
                offsetIndex.append(batch[2], start + batch[0])
                timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
                since = 0
            since += batch[1]
        self._bytesSinceLastIndexEntry = since
        self._maxTimestamp, self._offsetOfMaxTimestamp = maxTimestamp, offsetOfMax
        self.nextOffset = assigned[-1][3] + 1
        self.size = start + len(data)

    def onBecomeInactive(self) -> None:
        """
        The segment was rolled: record its final max timestamp in the time
        index (Kafka does the same, so a reload knows it).
        """
        _, timeIndex = self.indexes()
        if self.largestTimestamp >= 0:
            timeIndex.maybeAppend(self._maxTimestamp, self._offsetOfMaxTimestamp)

    # -- reads ---------------------------------------------------------------

    def read(self, offset: int, maxBytes: int, minOneBatch: bool, end: int, inline: int = 0):
        """
        Whole batches from the one containing C{offset}, below position
        C{end}.

        @param inline: batches of at most this many bytes in all are
            returned as C{bytes} when the read of their headers already
            brought them (a consumer's fetch at the tail: no region, no
            descriptor for it, one socket write for its answer).
        @return: the storage's region (or C{bytes}: see C{inline}; C{b""}
            if nothing fits), or C{None} if no batch of this segment
            reaches C{offset}.
        """
        reader = self._openReader()
        try:
            for retry in (False, True):
                readable = self._readableEnd(end)
                try:
                    found = self._locate(reader, offset, readable)
                    if found is None:
                        if readable < end or (self.damagedAt is not None and not self.pinned):
                            raise self._damageError(offset)
                        return None
                    start, chunk, at = found
                    length = self._extent(reader, start, maxBytes, minOneBatch, readable)
                    break
                except _ScanError as e:
                    if retry:
                        raise self._damageError(offset) from None
                    # An index entry that is wrong, or a damaged batch:
                    # rebuild the indexes, which finds and records damage.
                    self._repairIndexes(e)
            if length == 0:
                return b""
            if length <= inline and at + length <= len(chunk):
                if at == 0 and length == len(chunk):
                    return bytes(chunk)
                return bytes(chunk[at : at + length])
            return reader.region(start, length)
        finally:
            reader.close()

    def _readableEnd(self, end: int) -> int:
        damagedAt = self.damagedAt
        return end if damagedAt is None else min(end, damagedAt)

    def _damageError(self, offset: int) -> KafkaError:
        # Refuse rather than serve garbage (or skip to the next segment,
        # which would silently lose the offsets in between).
        return KafkaError(
            ErrorCode.kafka_storage_error,
            f"offset {offset} is in a damaged part of {self!r} (unreadable from byte "
            f"{self.damagedAt})",
        )

    def _repairIndexes(self, error: _ScanError) -> None:
        log.warn(
            "Rebuilding the indexes of {path}: {error}",
            path=getattr(self, "logPath", repr(self)),
            error=error,
        )
        lock = self.writeLock if self.pinned else None
        if lock is None:
            self._rebuildIndexes(self.indexIntervalBytes)
        else:
            # The active segment: not under an append.
            with lock:
                self._rebuildIndexes(self.indexIntervalBytes)

    def _ownReader(self):
        """
        A reader whose C{close} takes no lock of the storage's (what
        L{_openReader} gives, unless a subclass says otherwise).
        """
        return self._openReader()

    def _headers(self, reader, position: int, end: int):
        """
        Yield C{(position, baseOffset, size, lastOffset, maxTimestamp)} of
        the batches from C{position} (a batch start) to C{end}, reading in
        chunks.
        """
        chunk, chunkStart = b"", position
        unpack = _SCAN.unpack_from
        while position < end:
            at = position - chunkStart
            if at + _SCAN.size > len(chunk):
                chunkStart, at = position, 0
                chunk = reader.pread(min(_CHUNK, end - position), position)
                if len(chunk) < _SCAN.size:
                    raise _ScanError(f"short header at {position}", position)
            baseOffset, length, _, magic, _, _, lastDelta, _, maxTimestamp = unpack(chunk, at)
            size = LOG_OVERHEAD + length
            if magic != 2 or size < HEADER_SIZE or position + size > end:
                raise _ScanError(f"no batch header at {position} of {self!r}", position)
            yield position, baseOffset, size, baseOffset + lastDelta, maxTimestamp
            position += size

    def batchHeaders(self, fromOffset: int, end: int | None = None, *, markers: bool = False):
        """
        Yield the full L{BatchHeader} of every batch whose base offset is at
        or after C{fromOffset}, below position C{end} (default: the
        published size), reading headers only (producer state rebuild).

        @param markers: yield C{(header, marker)} instead, where C{marker}
            is the L{kafkatwist.protocol.markers.Marker} of a control batch
            (C{None} for other batches, and for a control batch whose
            record does not read).
        """
        if end is None:
            end = self.size
        offsetIndex, _ = self.indexes()
        position = min(offsetIndex.lookup(fromOffset), end)
        chunk, chunkStart = b"", position
        unpack = HEADER.unpack_from
        make = BatchHeader._make
        # A reader of its own, not a borrowed one: a generator's finally can
        # run in the garbage collector, at any allocation -- inside the
        # handle cache's lock too, which a give-back may need.
        reader = self._ownReader()
        try:
            while position < end:
                at = position - chunkStart
                if at + HEADER_SIZE > len(chunk):
                    chunkStart, at = position, 0
                    chunk = reader.pread(min(_CHUNK, end - position), position)
                    if len(chunk) < HEADER_SIZE:
                        raise _ScanError(f"short header at {position}", position)
                header = make(unpack(chunk, at))
                size = LOG_OVERHEAD + header.batchLength
                if header.magic != 2 or size < HEADER_SIZE or position + size > end:
                    raise _ScanError(f"no batch header at {position} of {self!r}", position)
                if header.baseOffset >= fromOffset:
                    if not markers:
                        yield header
                    elif header.attributes & _CONTROL_BIT:
                        batch = chunk[at : at + size]
                        if len(batch) < size:
                            batch = reader.pread(size, position)
                        try:
                            yield header, readMarker(batch)
                        except MarkerError:
                            yield header, None
                    else:
                        yield header, None
                position += size
        finally:
            reader.close()

    def positionOf(self, offset: int, end: int) -> int:
        """
        The position of the first batch at or after C{offset} (a read's
        end at the last stable offset), or C{end}.
        """
        reader = self._openReader()
        try:
            found = self._findBatch(reader, offset, self._readableEnd(end))
        except _ScanError:
            # Never past the last stable offset: refuse rather than guess.
            raise self._damageError(offset) from None
        finally:
            reader.close()
        return end if found is None else found

    def positionOfBatchContaining(self, offset: int) -> int:
        """
        The position of the batch holding C{offset} or, if none does, the
        first after it; the size if there is none (a truncation point).
        """
        reader = self._openReader()
        try:
            found = self._findBatch(reader, offset, self.size)
        except _ScanError as e:
            raise self._damageError(offset) from e
        finally:
            reader.close()
        return self.size if found is None else found

    def reindex(self, indexIntervalBytes: int) -> None:
        """
        Rebuild the indexes and the end offset from the batches (after a
        truncation).
        """
        self.nextOffset = self.baseOffset
        self._rollingBasedTimestamp = None
        self._rebuildIndexes(indexIntervalBytes)

    def _findBatch(self, reader, offset: int, end: int) -> int | None:
        found = self._locate(reader, offset, end)
        return None if found is None else found[0]

    def _offsetIndexForRead(self) -> OffsetIndex:
        """
        The offset index, loaded if needed, for a reader that has its
        descriptor: opening the reader already noted the use (L{indexes}
        notes it again).  A load notes it once more: another thread's use
        may have evicted the segment since the borrow, and indexes loaded
        into a segment out of the LRU would escape C{maxOpen}.  (Indexes
        already loaded: no lock.)
        """
        offsetIndex = self._offsetIndex
        if offsetIndex is None or self._timeIndex is None:
            offsetIndex, _ = self._loadedIndexes()
            if not self.pinned:
                self._touch()
        return offsetIndex

    def _locate(self, reader, offset: int, end: int):
        """
        The batch holding C{offset} or, if none does, the first after it,
        below position C{end}: what L{_headers} finds, without a generator.

        @return: C{(position, chunk, at)}: the batch's position and the
            bytes last read, from the file's C{position - at}; or C{None}.
        """
        indexed, position = self._offsetIndexForRead().lookupEntry(offset)
        if position > end:
            position = end
        first = position != 0
        chunk, chunkStart = b"", position
        unpack = _SCAN.unpack_from
        scanSize = _SCAN.size
        while position < end:
            at = position - chunkStart
            if at + scanSize > len(chunk):
                chunkStart, at = position, 0
                chunk = reader.pread(min(_CHUNK, end - position), position)
                if len(chunk) < scanSize:
                    raise _ScanError(f"short header at {position}", position)
            baseOffset, length, _, magic, _, _, lastDelta, _, _ = unpack(chunk, at)
            size = LOG_OVERHEAD + length
            if magic != 2 or size < HEADER_SIZE or position + size > end:
                raise _ScanError(f"no batch header at {position} of {self!r}", position)
            if first:
                if baseOffset != indexed:
                    # The entry is a batch start, but not the batch it names.
                    raise _ScanError(
                        f"index entry for offset {indexed} points at offset {baseOffset}", position
                    )
                first = False
            if baseOffset + lastDelta >= offset:
                return position, chunk, at
            position += size
        return None

    def _extent(self, reader, start: int, maxBytes: int, minOneBatch: bool, end: int) -> int:
        limit = start + max(maxBytes, 0)
        if limit >= end:
            return end - start
        offsetIndex = self._offsetIndexForRead()
        # The last indexed batch start under the limit saves scanning every
        # header of a large fetch.
        boundary = max(start, offsetIndex.floorPosition(limit))
        for position, _, size, _, _ in self._headers(reader, boundary, end):
            if position + size > limit:
                break
            boundary = position + size
        if boundary == start and minOneBatch:
            return next(self._headers(reader, start, end))[2]
        return boundary - start

    def findOffsetByTimestamp(self, timestamp: int, end: int) -> tuple[int, int] | None:
        """
        @return: C{(baseOffset, maxTimestamp)} of the first batch whose max
            timestamp is at or after C{timestamp}, or C{None}.
        """
        reader = self._openReader()
        try:
            for retry in (False, True):
                readable = self._readableEnd(end)
                offsetIndex, timeIndex = self.indexes()
                start = min(offsetIndex.lookup(timeIndex.lookup(timestamp)), readable)
                try:
                    for _, baseOffset, _, _, maxTimestamp in self._headers(
                        reader, start, readable
                    ):
                        if maxTimestamp >= timestamp:
                            return baseOffset, maxTimestamp
                    break
                except _ScanError as e:
                    if retry:
                        raise self._damageError(-1) from None
                    self._repairIndexes(e)
            if readable < end:
                # The answer may be in the part that cannot be read.
                raise KafkaError(
                    ErrorCode.kafka_storage_error,
                    f"timestamp {timestamp} may be in the damaged part of {self!r}",
                )
        finally:
            reader.close()
        return None

    # -- index rebuild -------------------------------------------------------

    def _rebuildIndexes(self, indexIntervalBytes: int = 4096) -> tuple[OffsetIndex, TimeIndex]:
        """
        Rebuild both indexes from the batch headers (no CRC check: the data
        is trusted, only the index was lost).
        """
        offsetIndex, timeIndex = OffsetIndex(self.baseOffset), TimeIndex(self.baseOffset)
        maxTimestamp, offsetOfMax, since = -1, -1, 0
        nextOffset = self.baseOffset
        damage = None
        reader = self._openReader()
        try:
            for position, baseOffset, size, lastOffset, batchMax in self._headers(
                reader, 0, self.size
            ):
                if batchMax > maxTimestamp:
                    maxTimestamp, offsetOfMax = batchMax, lastOffset
                if since > indexIntervalBytes:
                    offsetIndex.append(baseOffset, position)
                    timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
                    since = 0
                since += size
                nextOffset = lastOffset + 1
        except _ScanError as e:
            # Data damaged below the recovery point (recovery truncates what
            # is above it): index what can be read, and refuse the rest.
            damage = e
        finally:
            reader.close()
        timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
        with self._indexLock:
            self._offsetIndex, self._timeIndex = offsetIndex, timeIndex
            self._maxTimestamp, self._offsetOfMaxTimestamp = maxTimestamp, offsetOfMax
            if damage is None:
                self._bytesSinceLastIndexEntry = since
                self.nextOffset = nextOffset
            else:
                self._markDamaged(damage, nextOffset)
        self.persistIndexes(rewrite=True)
        return offsetIndex, timeIndex

    def _markDamaged(self, error: _ScanError, offset: int) -> None:
        if self.damagedAt is None or error.position < self.damagedAt:
            self.damagedAt = error.position
        storageLog.once(
            ("damaged", repr(self), getattr(self, "logPath", None)),
            "{path}: unreadable data from byte {position} (offset {offset} on): {error}; "
            "fetches and lookups there answer KAFKA_STORAGE_ERROR",
            path=getattr(self, "logPath", repr(self)),
            position=error.position,
            offset=offset,
            error=error,
        )

    def persistIndexes(self, sync: bool = False, *, rewrite: bool = False) -> None:
        pass

    def recomputeNextOffset(self) -> None:
        """
        Find the offset after the last batch, scanning from the last index
        entry (a clean load of the active segment).
        """
        offsetIndex, _ = self.indexes()
        position = offsetIndex.lastPosition()
        nextOffset = self.baseOffset
        since = 0
        reader = self._openReader()
        try:
            for _, _, size, lastOffset, _ in self._headers(reader, position, self.size):
                nextOffset = lastOffset + 1
                since += size
            if since <= _TAIL_CHECK_BYTES:
                self._checkTail(reader, position, since)
        finally:
            reader.close()
        self.nextOffset = nextOffset
        self._bytesSinceLastIndexEntry = since


    def _checkTail(self, reader, position: int, length: int) -> None:
        """
        CRC-check the last batches (cheap: a few KiB), which a clean start
        does not otherwise read.  Their headers chain correctly, so a
        failure is damage inside one batch, not a torn write: the batches
        after it are sound and acknowledged, and are not truncated away.
        The damaged one is served as stored (its CRC fails in every client,
        as Kafka would serve it) and logged here.
        """
        tail = memoryview(reader.pread(length, position))
        at = 0
        while at < length:
            header, error = batchError(tail, at, length - at)
            if error is not None:
                log.error(
                    "{path}: the batch at offset {offset} (byte {position}) is damaged "
                    "({error}); it is served as stored and clients will reject it",
                    path=getattr(self, "logPath", repr(self)),
                    offset=header.baseOffset if header is not None else "?",
                    position=position + at,
                    error=error.message,
                )
            if header is None or header.size < HEADER_SIZE:
                return
            at += header.size


class _FileReader:
    """
    Reads through the segment's own descriptor, borrowed from the handle
    cache until L{close} (see L{kafkatwist.log.handles}); a region gets a
    duplicate of it, which it owns.
    """

    __slots__ = ("cache", "fd")

    def __init__(self, cache, fd: int) -> None:
        #: the handle cache it was borrowed from; C{None}: the descriptor is
        #: the reader's own (L{FileSegment._ownReader}), closed by it
        self.cache = cache
        self.fd = fd

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self.fd, n, position)

    def region(self, position: int, length: int) -> FileRegion:
        return FileRegion(os.dup(self.fd), position, length)

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            if self.cache is None:
                os.close(fd)
            else:
                self.cache.giveBack(fd)


class FileSegment(Segment):
    """
    A segment stored as Kafka does, in directory C{directory}.

    @ivar cache: the L{HandleCache} managing the descriptor.
    """

    def __init__(
        self, directory: str, baseOffset: int, cache, *, size: int, createdMs: int
    ) -> None:
        super().__init__(baseOffset, size, createdMs)
        self.directory = directory
        self.cache = cache
        self.logPath = os.path.join(directory, segmentFileName(baseOffset, ".log"))
        self.indexPath = os.path.join(directory, segmentFileName(baseOffset, ".index"))
        self.timeIndexPath = os.path.join(directory, segmentFileName(baseOffset, ".timeindex"))
        self.checksumPath = os.path.join(directory, segmentFileName(baseOffset, INDEX_CHECKSUMS))
        self._fd: int | None = None
        self.released = False
        self.indexIntervalBytes = 4096

    @classmethod
    def create(cls, directory: str, baseOffset: int, cache, nowMs: int) -> FileSegment:
        """
        A new empty segment (replacing any leftover files of that name).
        """
        segment = cls.empty(directory, baseOffset, cache, nowMs)
        segment._fd = cls.createFile(directory, baseOffset, keepOpen=True)
        return segment

    @staticmethod
    def createFile(directory: str, baseOffset: int, *, keepOpen: bool = False) -> int | None:
        """
        Create (or empty) the log file of the segment at C{baseOffset},
        removing its index files.

        @return: the open descriptor if C{keepOpen}.
        """
        # Leftovers of a segment of that name that recovery truncated away.
        for suffix in (".index", ".timeindex", INDEX_CHECKSUMS, ".txnindex"):
            _unlinkQuietly(os.path.join(directory, segmentFileName(baseOffset, suffix)))
        path = os.path.join(directory, segmentFileName(baseOffset, ".log"))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        if keepOpen:
            return fd
        os.close(fd)
        return None

    @classmethod
    def empty(cls, directory: str, baseOffset: int, cache, nowMs: int) -> FileSegment:
        """
        The segment of an empty log file that was just created, and has no
        index files yet; nothing is opened until it is used.
        """
        segment = cls(directory, baseOffset, cache, size=0, createdMs=nowMs)
        segment._offsetIndex, segment._timeIndex = OffsetIndex(baseOffset), TimeIndex(baseOffset)
        return segment

    @classmethod
    def open(cls, directory: str, baseOffset: int, cache) -> FileSegment:
        """
        An existing segment; nothing is read until it is used.
        """
        path = os.path.join(directory, segmentFileName(baseOffset, ".log"))
        st = os.stat(path)
        return cls(directory, baseOffset, cache, size=st.st_size, createdMs=int(st.st_mtime * 1000))

    # -- storage -----------------------------------------------------------

    def _openFd(self) -> int:
        # A closed segment must not sneak back into the handle cache.
        if self.deleted or self.released:
            raise FileNotFoundError(self.logPath)
        return os.open(self.logPath, os.O_RDWR)

    def _dropIndexes(self) -> None:
        # The handle cache evicted this inactive segment: keep index memory
        # bounded too.  A segment made active again keeps its indexes.
        with self._indexLock:
            if self.pinned or self._offsetIndex is None:
                return
            if self.persistIndexesOrWarn("at eviction"):
                self._offsetIndex = self._timeIndex = None

    def persistIndexesOrWarn(self, when: str) -> bool:
        """
        L{persistIndexes}, where failing (a full disk) only delays the
        write: the entries stay in memory for the next flush, eviction or
        close, and the failure is logged once a minute.

        @return: whether they were written.
        """
        try:
            self.persistIndexes()
        except OSError as e:
            storageLog.warn(
                ("index-persist", self.directory),
                "Could not write the indexes of {path} {when}: {error}",
                path=self.logPath,
                when=when,
                error=e,
            )
            return False
        return True

    def _touch(self) -> None:
        self.cache.touch(self)

    def _openReader(self) -> _FileReader:
        cache = self.cache
        return _FileReader(cache, cache.borrow(self))

    def _ownReader(self) -> _FileReader:
        return _FileReader(None, self.cache.dup(self))

    def _write(self, data, position: int) -> None:
        # Under the partition's lock (the segment's writeLock), so the handle
        # cache cannot close the descriptor under this write.
        fd = self._fd
        if fd is None:
            fd = self.cache.writerFd(self)
        else:
            self._used = True
        try:
            # One pwrite (a short write goes on from where it stopped).
            written = os.pwrite(fd, data, position)
            if written < len(data):
                view = memoryview(data)
                while written < len(view):
                    written += os.pwrite(fd, view[written:], position + written)
        except OSError as e:
            # Leave no partial batch behind: the next append writes here.
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            storageLog.warn(
                ("write", self.directory),
                "Write to {path} failed: {error}",
                path=self.logPath,
                error=e,
            )
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"write to {self.logPath} failed: {e}"
            ) from e

    def lastModifiedMs(self) -> int:
        try:
            return int(os.stat(self.logPath).st_mtime * 1000)
        except OSError:
            return self.createdMs

    def _loadIndexes(self) -> tuple[OffsetIndex, TimeIndex]:
        try:
            with open(self.indexPath, "rb") as f:
                indexData = f.read()
            with open(self.timeIndexPath, "rb") as f:
                timeData = f.read()
            stale = self._checkRecord(indexData, timeData)
            offsetIndex = OffsetIndex.decode(self.baseOffset, indexData, self.size)
            timeIndex = TimeIndex.decode(self.baseOffset, timeData)
            if stale:
                self._writeRecord(offsetIndex, timeIndex)
            return offsetIndex, timeIndex
        except (OSError, CorruptIndex) as e:
            reason = "missing" if isinstance(e, FileNotFoundError) else f"corrupt ({e})"
        log.warn(
            "Rebuilding {reason} indexes {index} and {timeindex} from the log",
            reason=reason,
            index=self.indexPath,
            timeindex=self.timeIndexPath,
        )
        return self._rebuildIndexes(self.indexIntervalBytes)

    def _checkRecord(self, indexData: bytes, timeData: bytes) -> bool:
        """
        Check the index files against what L{persistIndexes} recorded of
        them, and the log file against its size then.

        @return: whether the record is stale: it describes another log file
            (one swapped in since, by the cleaner), or none exists (a log
            written before records); the decoders' checks then stand alone.
        @raise CorruptIndex: the index files (or the record) changed.
        """
        try:
            with open(self.checksumPath, "rb") as f:
                fields = f.read().split()
        except FileNotFoundError:
            return True
        try:
            count, crc, timeCount, timeCrc, logSize, inode = (int(f, 16) for f in fields)
        except ValueError:
            raise CorruptIndex(f"{self.checksumPath} is unreadable") from None
        if inode != os.stat(self.logPath).st_ino:
            return True
        if (count, crc, timeCount, timeCrc) != (
            len(indexData) // OffsetIndex.entrySize,
            crc32c(indexData),
            len(timeData) // TimeIndex.entrySize,
            crc32c(timeData),
        ):
            raise CorruptIndex(f"contents differ from {self.checksumPath}")
        self._checkLogSize(logSize)
        return False

    def _writeRecord(self, offsetIndex: OffsetIndex, timeIndex: TimeIndex) -> None:
        # Kafka's index formats have no checksum: record one beside them
        # (with the log file's size and inode), so a damaged index is
        # rebuilt instead of trusted.  Not fsynced: a stale record only
        # costs a rebuild after a crash.
        (count, crc), (timeCount, timeCrc) = offsetIndex.checksum, timeIndex.checksum
        inode = os.stat(self.logPath).st_ino
        replaceFile(
            self.checksumPath,
            f"{count:x} {crc:08x} {timeCount:x} {timeCrc:08x} {self.size:x} {inode:x}\n".encode(),
            sync=False,
        )

    def _checkLogSize(self, recorded: int) -> None:
        """
        A log file shorter than when its indexes were written lost data
        (truncated by something other than recovery, which rewrites the
        record): say so, and refuse the offsets it held.
        """
        if self.size >= recorded:
            return
        log.error(
            "{path} is {size} bytes, but was {recorded} when its indexes were written: "
            "the data after byte {size} is lost",
            path=self.logPath,
            size=self.size,
            recorded=recorded,
        )
        if not self.pinned:
            # An old segment's offsets answer KAFKA_STORAGE_ERROR rather
            # than skip to the next segment.
            self.damagedAt = self.size

    def persistIndexes(self, sync: bool = False, *, rewrite: bool = False) -> None:
        """
        Write index entries not yet in the files.

        @param sync: fsync them.
        @param rewrite: the indexes were rebuilt: write both files whatever
            they hold.
        """
        if self.deleted:
            return
        offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
        if offsetIndex is None or timeIndex is None:
            return
        changed = False
        for index, path in ((offsetIndex, self.indexPath), (timeIndex, self.timeIndexPath)):
            if index.written == len(index) and not (sync or rewrite):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                start = index.written
                os.pwrite(fd, index.encode(start), start * index.entrySize)
                os.ftruncate(fd, len(index) * index.entrySize)
                if sync:
                    os.fsync(fd)
                index.written = len(index)
                changed = True
            finally:
                os.close(fd)
        if changed:
            self._writeRecord(offsetIndex, timeIndex)

    def sync(self, indexes: bool = False) -> None:
        """
        fsync the log file (and the index files if C{indexes}).
        """
        fd = self.cache.dup(self)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if indexes:
            self.persistIndexes(sync=True)

    def truncateTo(self, size: int) -> None:
        fd = self.cache.dup(self)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)
        self.size = size

    def delete(self) -> None:
        self.deleted = True
        self.cache.forget(self)
        for path in (self.logPath, self.indexPath, self.timeIndexPath, self.checksumPath):
            _unlinkQuietly(path)

    def close(self) -> None:
        if self._offsetIndex is not None:
            self.persistIndexes()
        self.released = True
        self.cache.forget(self)

    # -- recovery ------------------------------------------------------------

    def recover(self, indexIntervalBytes: int) -> int:
        """
        Re-validate every batch (header, CRC, increasing offsets: a cleaned
        segment has gaps), rebuild both indexes, and truncate at the first
        invalid batch.

        @return: bytes truncated.
        """
        offsetIndex, timeIndex = OffsetIndex(self.baseOffset), TimeIndex(self.baseOffset)
        maxTimestamp, offsetOfMax, since = -1, -1, 0
        expected = self.baseOffset
        fileSize = os.stat(self.logPath).st_size
        position = 0
        reason = None
        reader = self._openReader()
        try:
            chunk, chunkStart = memoryview(b""), 0
            while position < fileSize:
                remaining = fileSize - position
                at = position - chunkStart
                if len(chunk) - at < HEADER_SIZE and len(chunk) - at < remaining:
                    chunk, chunkStart, at = (
                        memoryview(reader.pread(_RECOVERY_CHUNK, position)),
                        position,
                        0,
                    )
                if len(chunk) - at >= LOG_OVERHEAD:
                    need = LOG_OVERHEAD + _INT32.unpack_from(chunk, at + 8)[0]
                    if len(chunk) - at < need <= remaining:
                        chunk = memoryview(reader.pread(max(need, _RECOVERY_CHUNK), position))
                        chunkStart, at = position, 0
                header, error = batchError(chunk, at, len(chunk) - at, cleaned=True)
                if error is None and header.baseOffset < expected:
                    error = f"offset {header.baseOffset} where {expected} or more was expected"
                if error is not None:
                    reason = str(error)
                    break
                if header.maxTimestamp > maxTimestamp:
                    maxTimestamp, offsetOfMax = header.maxTimestamp, header.lastOffset
                if since > indexIntervalBytes:
                    offsetIndex.append(header.baseOffset, position)
                    timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
                    since = 0
                since += header.size
                position += header.size
                expected = header.lastOffset + 1
        finally:
            reader.close()
        truncated = fileSize - position
        if truncated:
            log.warn(
                "Truncating {path} at byte {position} "
                "({truncated} bytes, offsets from {offset}): {reason}",
                path=self.logPath,
                position=position,
                truncated=truncated,
                offset=expected,
                reason=reason,
            )
            self.truncateTo(position)
        self.size = position
        self.nextOffset = expected
        self._bytesSinceLastIndexEntry = since
        self._maxTimestamp, self._offsetOfMaxTimestamp = maxTimestamp, offsetOfMax
        self._offsetIndex, self._timeIndex = offsetIndex, timeIndex
        self.persistIndexes(sync=True)
        self._touch()
        return truncated


def _unlinkQuietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
