"""
A segment's sparse offset index and time index, held in memory.

The on-disk formats are Kafka's: the C{.index} file is 8-byte entries
(offset relative to the segment base int32, byte position int32), the
C{.timeindex} file 12-byte entries (timestamp int64, relative offset int32),
big-endian.  Both are kept as C{array}s and binary-searched with C{bisect};
files are written from them (see L{kafkatwist.log.segment}).

Threads: one writer (the partition's appender, under its lock) and readers
on any thread without a lock.  An entry is two arrays' elements, so the
writer appends both and only then publishes it by raising C{count}; readers
search only the first C{count} elements.  A reader therefore sees an entry
whole or not at all (it used to see a timestamp without its offset, an
IndexError that closed the client's connection).
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right

from crc32c import crc32c

__all__ = ["CorruptIndex", "OffsetIndex", "TimeIndex"]

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_SWAP = sys.byteorder == "little"


class CorruptIndex(Exception):
    """
    An index file that cannot be trusted; the segment rebuilds it.
    """


class _Checksummed:
    """
    A CRC-32C of the entries' file bytes, kept up to date as entries are
    appended (recomputed only after a truncation).
    """

    _crc = 0
    _crcCount = 0

    @property
    def checksum(self) -> tuple[int, int]:
        """
        @return: C{(entries, CRC-32C of their encoding)}.
        """
        count = len(self)
        if self._crcCount < count:
            self._crc = crc32c(self.encode(self._crcCount), self._crc)
            self._crcCount = count
        return count, self._crc

    def _checksumFrom(self, data: bytes) -> None:
        self._crc, self._crcCount = crc32c(data), len(self)

    def _checksumTruncated(self, entries: int) -> None:
        if entries < self._crcCount:
            self._crc = self._crcCount = 0


class OffsetIndex(_Checksummed):
    """
    Offset -> byte position, one entry every C{index.interval.bytes}.

    Entries point at batch starts, so the position found for an offset is at
    or before the batch containing it.

    @ivar written: how many entries are already in the file.
    """

    entrySize = _OFFSET_ENTRY.size

    def __init__(self, baseOffset: int) -> None:
        self.baseOffset = baseOffset
        self.relativeOffsets = array("i")
        self.positions = array("i")
        #: published entries (see the module docstring)
        self.count = 0
        self.written = 0

    def __len__(self) -> int:
        return self.count

    def append(self, offset: int, position: int) -> None:
        self.relativeOffsets.append(offset - self.baseOffset)
        self.positions.append(position)
        self.count += 1

    def lookup(self, offset: int) -> int:
        """
        @return: the position of the last entry at or below C{offset}, or 0.
        """
        i = bisect_right(self.relativeOffsets, offset - self.baseOffset, 0, self.count)
        return self.positions[i - 1] if i else 0

    def lookupEntry(self, offset: int) -> tuple[int, int]:
        """
        @return: C{(offset, position)} of the last entry at or below
            C{offset}, or the base offset at position 0.
        """
        i = bisect_right(self.relativeOffsets, offset - self.baseOffset, 0, self.count)
        if not i:
            return self.baseOffset, 0
        return self.baseOffset + self.relativeOffsets[i - 1], self.positions[i - 1]

    def floorPosition(self, position: int) -> int:
        """
        @return: the last indexed batch start at or before C{position}, or 0.
        """
        i = bisect_right(self.positions, position, 0, self.count)
        return self.positions[i - 1] if i else 0

    def lastPosition(self) -> int:
        """
        @return: the last entry's position, or 0.
        """
        count = self.count
        return self.positions[count - 1] if count else 0

    def truncateTo(self, entries: int) -> None:
        # Unpublish first: a reader never looks at an element being removed.
        self.count = min(self.count, entries)
        del self.relativeOffsets[entries:]
        del self.positions[entries:]
        self.written = min(self.written, entries)
        self._checksumTruncated(entries)

    def encode(self, start: int = 0) -> bytes:
        """
        @return: the file bytes of entries C{start} onwards.
        """
        count = self.count
        pairs = array("i", bytes(8 * (count - start)))
        pairs[0::2] = self.relativeOffsets[start:count]
        pairs[1::2] = self.positions[start:count]
        if _SWAP:
            pairs.byteswap()
        return pairs.tobytes()

    @classmethod
    def decode(cls, baseOffset: int, data: bytes, logSize: int) -> OffsetIndex:
        """
        Parse an index file, checking it is usable against a log of
        C{logSize} bytes.

        @raise CorruptIndex: torn entry, non-increasing entries, a position
            past the log.
        """
        if len(data) % cls.entrySize:
            raise CorruptIndex(f"size {len(data)} is not a multiple of {cls.entrySize}")
        pairs = array("i", data)
        if _SWAP:
            pairs.byteswap()
        index = cls(baseOffset)
        index.relativeOffsets = pairs[0::2]
        index.positions = pairs[1::2]
        index.count = len(index.positions)
        _checkIncreasing(index.relativeOffsets, "relative offsets")
        _checkIncreasing(index.positions, "positions")
        if index.positions and (index.relativeOffsets[0] < 0 or index.positions[-1] >= logSize):
            raise CorruptIndex("entries outside the segment")
        index.written = index.count
        index._checksumFrom(data)
        return index


class TimeIndex(_Checksummed):
    """
    Max-timestamp-so-far -> offset, appended alongside the offset index when
    the segment's max timestamp grew.
    """

    entrySize = _TIME_ENTRY.size

    def __init__(self, baseOffset: int) -> None:
        self.baseOffset = baseOffset
        self.timestamps = array("q")
        self.relativeOffsets = array("i")
        #: published entries (see the module docstring)
        self.count = 0
        self.written = 0

    def __len__(self) -> int:
        return self.count

    def maybeAppend(self, timestamp: int, offset: int) -> None:
        """
        Add an entry if C{timestamp} is newer than the last one (entries
        are strictly increasing in both fields).
        """
        count = self.count
        if timestamp < 0 or (count and timestamp <= self.timestamps[count - 1]):
            return
        self.timestamps.append(timestamp)
        self.relativeOffsets.append(offset - self.baseOffset)
        self.count = count + 1

    def lookup(self, timestamp: int) -> int:
        """
        @return: the offset of the last entry whose timestamp is at or below
            C{timestamp} (every batch before it has a smaller max timestamp),
            or the base offset.
        """
        i = bisect_right(self.timestamps, timestamp, 0, self.count)
        return self.baseOffset + self.relativeOffsets[i - 1] if i else self.baseOffset

    def lastEntry(self) -> tuple[int, int] | None:
        count = self.count
        if not count:
            return None
        return self.timestamps[count - 1], self.baseOffset + self.relativeOffsets[count - 1]

    def truncateTo(self, entries: int) -> None:
        self.count = min(self.count, entries)
        del self.timestamps[entries:]
        del self.relativeOffsets[entries:]
        self.written = min(self.written, entries)
        self._checksumTruncated(entries)

    def encode(self, start: int = 0) -> bytes:
        count = self.count
        return b"".join(
            _TIME_ENTRY.pack(t, r)
            for t, r in zip(self.timestamps[start:count], self.relativeOffsets[start:count])
        )

    @classmethod
    def decode(cls, baseOffset: int, data: bytes, nextOffset: int | None = None) -> TimeIndex:
        """
        @raise CorruptIndex: torn entry, non-increasing entries, offsets
            outside the segment.
        """
        if len(data) % cls.entrySize:
            raise CorruptIndex(f"size {len(data)} is not a multiple of {cls.entrySize}")
        index = cls(baseOffset)
        for timestamp, relative in _TIME_ENTRY.iter_unpack(data):
            index.timestamps.append(timestamp)
            index.relativeOffsets.append(relative)
        index.count = len(index.timestamps)
        _checkIncreasing(index.timestamps, "timestamps")
        _checkIncreasing(index.relativeOffsets, "relative offsets", strict=False)
        if index.relativeOffsets and (
            index.relativeOffsets[0] < 0
            or (nextOffset is not None and baseOffset + index.relativeOffsets[-1] >= nextOffset)
        ):
            raise CorruptIndex("entries outside the segment")
        index.written = index.count
        index._checksumFrom(data)
        return index


def _checkIncreasing(values, what: str, strict: bool = True) -> None:
    previous = None
    for value in values:
        if previous is not None and (value < previous or (strict and value == previous)):
            raise CorruptIndex(f"{what} are not increasing")
        previous = value
