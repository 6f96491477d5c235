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

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.index import CorruptIndex, OffsetIndex, TimeIndex
from kafkatwist.log.region import FileRegion
from kafkatwist.log.throttle import storageLog
from kafkatwist.protocol.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, BatchHeader, batchError

__all__ = ["SEGMENT_FILE", "FileSegment", "Segment", "segmentFileName"]

log = Logger()

SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
# lastOffsetDelta, baseTimestamp, maxTimestamp: what scans need.
_SCAN = struct.Struct(">qiibIhiqq")
_MAX_TIMESTAMP = struct.Struct(">q")
_INT32 = struct.Struct(">i")
_MAX_TIMESTAMP_AT = 35
_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 1024 * 1024
_INT32_MAX = 2**31 - 1


def segmentFileName(baseOffset: int, suffix: str) -> str:
    return f"{baseOffset:020d}{suffix}"


class _ScanError(Exception):
    """
    Batch headers that do not parse where a batch should start.
    """


class Segment:
    """
    The storage-independent part of a segment.

    Subclasses provide C{_write(data, position)}, C{_openReader()} (an object
    with C{pread(n, position)}, C{region(position, length)} and
    C{close()}), C{_loadIndexes()}, C{sync()}, C{delete()}, C{close()}.

    @ivar size: published bytes: everything below is complete batches.
    @ivar nextOffset: the offset after the last batch (meaningful for the
        active segment; inactive ones end where the next segment starts).
    """

    pinned = False
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

    def __repr__(self) -> str:
        return f"<{type(self).__name__} base={self.baseOffset} size={self.size}>"

    # -- indexes -----------------------------------------------------------

    def indexes(self) -> tuple[OffsetIndex, TimeIndex]:
        """
        @return: the offset and time index, loading them if needed.
        """
        offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
        if offsetIndex is None or timeIndex is None:
            with self._indexLock:
                offsetIndex, timeIndex = self._offsetIndex, self._timeIndex
                if offsetIndex is None or timeIndex is None:
                    offsetIndex, timeIndex = self._loadIndexes()
                    self._offsetIndex, self._timeIndex = offsetIndex, timeIndex
        self._touch()
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

    def _firstBatchMaxTimestamp(self) -> int:
        reader = self._openReader()
        try:
            data = reader.pread(_MAX_TIMESTAMP_AT + 8, 0)
        finally:
            reader.close()
        return _MAX_TIMESTAMP.unpack_from(data, _MAX_TIMESTAMP_AT)[0]

    def isFull(self, maxIndexBytes: int) -> bool:
        offsetIndex, timeIndex = self.indexes()
        return (
            len(offsetIndex) >= maxIndexBytes // OffsetIndex.entrySize
            or len(timeIndex) >= maxIndexBytes // TimeIndex.entrySize
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
        offsetIndex, timeIndex = self.indexes()
        maxTimestamp = self.largestTimestamp
        offsetOfMax = self._offsetOfMaxTimestamp
        since = self._bytesSinceLastIndexEntry
        if self._rollingBasedTimestamp is None:
            self._rollingBasedTimestamp = assigned[0].maxTimestamp if start == 0 else None
        for batch in assigned:
            if batch.maxTimestamp > maxTimestamp:
                maxTimestamp, offsetOfMax = batch.maxTimestamp, batch.offsetOfMaxTimestamp
            if since > indexIntervalBytes:
                offsetIndex.append(batch.baseOffset, start + batch.position)
                timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
                since = 0
            since += batch.size
        self._bytesSinceLastIndexEntry = since
        self._maxTimestamp, self._offsetOfMaxTimestamp = maxTimestamp, offsetOfMax
        self.nextOffset = assigned[-1].lastOffset + 1
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

    def read(self, offset: int, maxBytes: int, minOneBatch: bool, end: int):
        """
        Whole batches from the one containing C{offset}, below position
        C{end}.

        @return: the storage's region (or C{b""} if nothing fits), or
            C{None} if no batch of this segment reaches C{offset}.
        """
        reader = self._openReader()
        try:
            try:
                start = self._findBatch(reader, offset, end)
            except _ScanError:
                # An index entry pointing inside a batch: do not trust it.
                # (The active segment's index is built by appends, never
                # loaded, so only an inactive one can be wrong that way.)
                if self.pinned:
                    raise
                self._rebuildIndexes(getattr(self, "indexIntervalBytes", 4096))
                start = self._findBatch(reader, offset, end)
            if start is None:
                return None
            length = self._extent(reader, start, maxBytes, minOneBatch, end)
            if length == 0:
                return b""
            return reader.region(start, length)
        except _ScanError as e:
            # Damage after the recovery point was validated: refuse rather
            # than serve garbage.
            raise KafkaError(ErrorCode.kafka_storage_error, f"unreadable batch: {e}") from None
        finally:
            reader.close()

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
                    raise _ScanError(f"short header at {position}")
            baseOffset, length, _, magic, _, _, lastDelta, _, maxTimestamp = unpack(chunk, at)
            size = LOG_OVERHEAD + length
            if magic != 2 or size < HEADER_SIZE or position + size > end:
                raise _ScanError(f"no batch header at {position} of {self!r}")
            yield position, baseOffset, size, baseOffset + lastDelta, maxTimestamp
            position += size

    def batchHeaders(self, fromOffset: int, end: int | None = None):
        """
        Yield the full L{BatchHeader} of every batch whose base offset is at
        or after C{fromOffset}, below position C{end} (default: the
        published size), reading headers only (producer state rebuild).
        """
        if end is None:
            end = self.size
        offsetIndex, _ = self.indexes()
        position = min(offsetIndex.lookup(fromOffset), end)
        chunk, chunkStart = b"", position
        unpack = HEADER.unpack_from
        make = BatchHeader._make
        reader = self._openReader()
        try:
            while position < end:
                at = position - chunkStart
                if at + HEADER_SIZE > len(chunk):
                    chunkStart, at = position, 0
                    chunk = reader.pread(min(_CHUNK, end - position), position)
                    if len(chunk) < HEADER_SIZE:
                        raise _ScanError(f"short header at {position}")
                header = make(unpack(chunk, at))
                size = LOG_OVERHEAD + header.batchLength
                if header.magic != 2 or size < HEADER_SIZE or position + size > end:
                    raise _ScanError(f"no batch header at {position} of {self!r}")
                if header.baseOffset >= fromOffset:
                    yield header
                position += size
        finally:
            reader.close()

    def _findBatch(self, reader, offset: int, end: int) -> int | None:
        offsetIndex, _ = self.indexes()
        start = min(offsetIndex.lookup(offset), end)
        for position, _, _, lastOffset, _ in self._headers(reader, start, end):
            if lastOffset >= offset:
                return position
        return None

    def _extent(self, reader, start: int, maxBytes: int, minOneBatch: bool, end: int) -> int:
        limit = start + max(maxBytes, 0)
        if limit >= end:
            return end - start
        offsetIndex, _ = self.indexes()
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
        offsetIndex, timeIndex = self.indexes()
        start = min(offsetIndex.lookup(timeIndex.lookup(timestamp)), end)
        reader = self._openReader()
        try:
            for _, baseOffset, _, _, maxTimestamp in self._headers(reader, start, end):
                if maxTimestamp >= timestamp:
                    return baseOffset, maxTimestamp
        except _ScanError as e:
            raise KafkaError(ErrorCode.kafka_storage_error, f"unreadable batch: {e}") from None
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
        finally:
            reader.close()
        timeIndex.maybeAppend(maxTimestamp, offsetOfMax)
        with self._indexLock:
            self._offsetIndex, self._timeIndex = offsetIndex, timeIndex
            self._bytesSinceLastIndexEntry = since
            self._maxTimestamp, self._offsetOfMaxTimestamp = maxTimestamp, offsetOfMax
            self.nextOffset = nextOffset
        self.persistIndexes()
        return offsetIndex, timeIndex

    def persistIndexes(self, sync: bool = False) -> None:
        pass

    def recomputeNextOffset(self) -> None:
        """
        Find the offset after the last batch, scanning from the last index
        entry (a clean load of the active segment).
        """
        offsetIndex, _ = self.indexes()
        position = offsetIndex.positions[-1] if len(offsetIndex) else 0
        nextOffset = self.baseOffset
        since = 0
        reader = self._openReader()
        try:
            for _, _, size, lastOffset, _ in self._headers(reader, position, self.size):
                nextOffset = lastOffset + 1
                since += size
        finally:
            reader.close()
        self.nextOffset = nextOffset
        self._bytesSinceLastIndexEntry = since


class _FileReader:
    """
    Reads through a private duplicate descriptor, which becomes the region's.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self.fd, n, position)

    def region(self, position: int, length: int) -> FileRegion:
        fd, self.fd = self.fd, None
        return FileRegion(fd, position, length)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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
        for suffix in (".index", ".timeindex"):
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
            try:
                self.persistIndexes()
            except OSError as e:
                # Keep them in memory; the next eviction tries again.
                storageLog.warn(
                    (self.indexPath, "persist"),
                    "Could not write the indexes of {path}: {error}",
                    path=self.logPath,
                    error=e,
                )
                return
            self._offsetIndex = self._timeIndex = None

    def _touch(self) -> None:
        self.cache.touch(self)

    def _openReader(self) -> _FileReader:
        return _FileReader(self.cache.dup(self))

    def _write(self, data, position: int) -> None:
        # Under the partition's lock (the segment's writeLock), so the handle
        # cache cannot close the descriptor under this write.
        fd = self._fd
        if fd is None:
            fd = self.cache.writerFd(self)
        else:
            self._used = True
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.pwrite(fd, view[written:], position + written)
        except OSError as e:
            # Leave no partial batch behind: the next append writes here.
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
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
                offsetIndex = OffsetIndex.decode(self.baseOffset, f.read(), self.size)
            with open(self.timeIndexPath, "rb") as f:
                timeIndex = TimeIndex.decode(self.baseOffset, f.read())
            return offsetIndex, timeIndex
        except (OSError, CorruptIndex) as e:
            reason = "missing" if isinstance(e, FileNotFoundError) else f"corrupt ({e})"
        log.warn("Rebuilding {reason} indexes of {path}", reason=reason, path=self.logPath)
        return self._rebuildIndexes(self.indexIntervalBytes)

    def persistIndexes(self, sync: bool = False) -> None:
        """
        Write index entries not yet in the files.
        """
        if self.deleted:
            return
        for index, path in (
            (self._offsetIndex, self.indexPath),
            (self._timeIndex, self.timeIndexPath),
        ):
            if index is None or (index.written == len(index) and not sync):
                continue
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                start = index.written
                os.pwrite(fd, index.encode(start), start * index.entrySize)
                os.ftruncate(fd, len(index) * index.entrySize)
                if sync:
                    os.fsync(fd)
                index.written = len(index)
            finally:
                os.close(fd)

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
        for path in (self.logPath, self.indexPath, self.timeIndexPath):
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
