"""
Reading a partition's files without the broker: batches of a C{.log}, the
C{.index} and C{.timeindex} beside it, producer snapshots.  Read-only:
nothing here writes, locks or repairs.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass

from kafkatwist.log.index import CorruptIndex, OffsetIndex, TimeIndex
from kafkatwist.protocol.batch import BatchHeader, batchError

#: Kafka's file names: the base offset, 20 digits, and the kind
FILE_NAME = re.compile(r"^(\d{20})\.(log|index|timeindex|snapshot|txnindex)$")


@dataclass
class ScannedBatch:
    position: int
    header: BatchHeader | None
    #: why the batch is not sound, or None
    error: str | None


class SegmentFile:
    """
    A C{.log} file mapped read-only (an empty file maps to nothing).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.baseOffset = baseOffsetOf(path)
        with open(path, "rb") as f:
            self.size = os.fstat(f.fileno()).st_size
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        self.view = memoryview(self._map) if self._map is not None else memoryview(b"")

    def close(self) -> None:
        self.view.release()
        if self._map is not None:
            self._map.close()

    def __enter__(self) -> SegmentFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def batches(self):
        """
        Every batch from the start, checked (lengths, magic, CRC-32C, counts);
        stops after the first that is not sound, since nothing after it can
        be located.
        """
        position = 0
        while position < self.size:
            # cleaned: compaction may leave fewer records than the offset range.
            header, error = batchError(self.view, position, self.size - position, cleaned=True)
            if error is not None:
                yield ScannedBatch(position, header, error.message or str(error))
                return
            yield ScannedBatch(position, header, None)
            position += header.size

    def batchAt(self, position: int) -> ScannedBatch:
        header, error = batchError(self.view, position, self.size - position, cleaned=True)
        return ScannedBatch(position, header, error.message if error is not None else None)

    def bytesAt(self, position: int, size: int):
        return self.view[position:position + size]


def baseOffsetOf(path: str) -> int:
    match = FILE_NAME.match(os.path.basename(path))
    if match is None:
        raise ValueError(f"{path}: not a segment file name (20-digit base offset and .log, "
                         ".index, .timeindex or .snapshot)")
    return int(match.group(1))


def sibling(path: str, suffix: str) -> str:
    return os.path.join(os.path.dirname(path), f"{baseOffsetOf(path):020d}.{suffix}")


def readOffsetIndex(path: str, logSize: int) -> OffsetIndex:
    """
    @raise CorruptIndex: as the broker would judge it.
    """
    with open(path, "rb") as f:
        return OffsetIndex.decode(baseOffsetOf(path), f.read(), logSize)


def readTimeIndex(path: str) -> TimeIndex:
    with open(path, "rb") as f:
        return TimeIndex.decode(baseOffsetOf(path), f.read())


def rawOffsetEntries(path: str) -> list[tuple[int, int]]:
    """
    (absolute offset, position) of every whole entry, checked or not.
    """
    base = baseOffsetOf(path)
    with open(path, "rb") as f:
        data = f.read()
    usable = len(data) - len(data) % OffsetIndex.entrySize
    return [(base + relative, position)
            for relative, position in struct.iter_unpack(">ii", data[:usable])]


def rawTimeEntries(path: str) -> list[tuple[int, int]]:
    """
    (timestamp, absolute offset) of every whole entry.
    """
    base = baseOffsetOf(path)
    with open(path, "rb") as f:
        data = f.read()
    usable = len(data) - len(data) % TimeIndex.entrySize
    return [(timestamp, base + relative) for timestamp, relative in struct.iter_unpack(">qi", data[:usable])]


def indexMismatches(log: SegmentFile, indexPath: str) -> list[str]:
    """
    Each offset index entry must point at the start of a sound batch that
    holds its offset (kafkatwist indexes a batch's base offset, Kafka its
    last; either is inside the batch).
    """
    problems = []
    try:
        readOffsetIndex(indexPath, log.size)
    except CorruptIndex as e:
        problems.append(f"{indexPath}: {e}")
    for offset, position in rawOffsetEntries(indexPath):
        if not 0 <= position < log.size:
            problems.append(f"{indexPath}: offset {offset} points at position {position}, "
                            f"outside the {log.size}-byte log")
            continue
        batch = log.batchAt(position)
        if batch.error is not None:
            problems.append(f"{indexPath}: offset {offset} points at position {position}, "
                            f"where there is no sound batch ({batch.error})")
        elif not batch.header.baseOffset <= offset <= batch.header.lastOffset:
            problems.append(f"{indexPath}: index offset {offset}, log offsets "
                            f"{batch.header.baseOffset}-{batch.header.lastOffset} at position {position}")
    return problems


def timeIndexMismatches(log: SegmentFile, timeIndexPath: str) -> list[str]:
    """
    Each time index entry's offset must be in the segment, in a batch whose
    max timestamp is the entry's timestamp.
    """
    problems = []
    try:
        readTimeIndex(timeIndexPath)
    except CorruptIndex as e:
        problems.append(f"{timeIndexPath}: {e}")
    entries = rawTimeEntries(timeIndexPath)
    if not entries:
        return problems
    byOffset = [(b.header.baseOffset, b.header.lastOffset, b.header.maxTimestamp)
                for b in log.batches() if b.error is None]
    for timestamp, offset in entries:
        holder = next((b for b in byOffset if b[0] <= offset <= b[1]), None)
        if holder is None:
            problems.append(f"{timeIndexPath}: timestamp {timestamp} indexes offset {offset}, "
                            "which is not in the log")
        elif holder[2] != timestamp:
            problems.append(f"{timeIndexPath}: timestamp {timestamp} at offset {offset}, but the "
                            f"batch holding it has max timestamp {holder[2]}")
    return problems
