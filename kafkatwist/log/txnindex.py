"""
The aborted-transaction index of a segment: Kafka's C{.txnindex}
(C{TransactionIndex}, C{AbortedTxn}).

One entry per transaction aborted by a marker in the segment, in marker
order, 34 bytes each, big-endian::

    int16 version (0) | int64 producerId | int64 firstOffset |
    int64 lastOffset (the ABORT marker) | int64 lastStableOffset (after it)

The first offset may lie in an earlier segment.  A read_committed Fetch
collects the entries that overlap what it returns (L{TransactionIndex.collect})
and hands them to the consumer as C{aborted_transactions}, which is how it
knows which transactional batches to drop.

The file is created on the first abort (a segment without one has none
and costs one C{stat}).  Entries are kept in memory once read; they are
published as a tuple that is replaced, never mutated, so readers take no
lock.  Appends come from the partition's writer, under its lock.

The index is derived data: the log rebuilds it from the markers after a
crash (see L{kafkatwist.log.filelog}), and a file that does not read back
(torn tail, bad version, entries out of order) is rebuilt the same way.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from typing import NamedTuple
from kafkatwist.util.atomic import replaceFile

__all__ = ["ENTRY_SIZE", "AbortedTxn", "CorruptTxnIndex", "TXN_INDEX_SUFFIX", "TransactionIndex"]

TXN_INDEX_SUFFIX = ".txnindex"
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_VERSION = 0


class AbortedTxn(NamedTuple):
    producerId: int
    firstOffset: int
    lastOffset: int
    lastStableOffset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(_VERSION, *self)


def _lastOffset(entry: AbortedTxn) -> int:
    return entry.lastOffset


class CorruptTxnIndex(ValueError):
    """
    A C{.txnindex} file that does not read back.
    """


def decodeEntries(data: bytes) -> list[AbortedTxn]:
    """
    @raise CorruptTxnIndex: a partial entry, an unknown version, or last
        offsets that do not increase.
    """
    if len(data) % ENTRY_SIZE:
        raise CorruptTxnIndex(f"{len(data)} bytes is not a whole number of entries")
    entries = []
    last = -1
    for position in range(0, len(data), ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, position)
        if version != _VERSION:
            raise CorruptTxnIndex(f"entry version {version} at byte {position}")
        entry = AbortedTxn(*fields)
        if entry.lastOffset <= last or entry.firstOffset > entry.lastOffset:
            raise CorruptTxnIndex(f"entry {entry} out of order at byte {position}")
        last = entry.lastOffset
        entries.append(entry)
    return entries


class TransactionIndex:
    """
    One segment's aborted transactions.

    @param path: the file, or C{None} to keep the entries in memory only
        (the in-memory log).
    """

    def __init__(self, baseOffset: int, path: str | None = None) -> None:
        self.baseOffset = baseOffset
        self.path = path
        self._entries: tuple[AbortedTxn, ...] | None = () if path is None else None

    def __repr__(self) -> str:
        return f"<TransactionIndex {self.path or self.baseOffset}>"

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        """
        @raise CorruptTxnIndex: the file does not read back.
        @raise OSError: it cannot be read.
        """
        entries = self._entries
        if entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            entries = self._entries = tuple(decodeEntries(data))
        return entries

    def append(self, entry: AbortedTxn) -> None:
        """
        Add an entry (the writer, under the partition's lock).

        @raise ValueError: its last offset is not after the last entry's.
        @raise OSError: the file cannot be written.
        """
        entries = self.entries
        if entries and entry.lastOffset <= entries[-1].lastOffset:
            raise ValueError(f"{entry} is not after {entries[-1]} in {self!r}")
        if self.path is not None:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, entry.encode())
            finally:
                os.close(fd)
        self._entries = entries + (entry,)

    def replace(self, entries) -> None:
        """
        Make the index hold exactly C{entries} (a rebuild, or a cleaned
        segment taking over the entries of those it replaced); an empty
        index leaves no file.
        """
        entries = tuple(sorted(set(entries), key=lambda e: e.lastOffset))
        if self.path is not None:
            if entries:
                replaceFile(self.path, b"".join(e.encode() for e in entries), sync=False)
            else:
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass
        self._entries = entries

    def truncateTo(self, offset: int) -> None:
        """
        Drop the entries whose marker is at or after C{offset}.
        """
        entries = self.entries
        keep = bisect_left(entries, offset, key=_lastOffset)
        if keep < len(entries):
            self.replace(entries[:keep])

    def collect(self, fetchOffset: int, upperBound: int) -> tuple[list[AbortedTxn], bool]:
        """
        Kafka's C{TransactionIndex.collectAbortedTxns}: the entries whose
        transaction overlaps C{[fetchOffset, upperBound)}.

        @return: C{(entries, complete)}; C{complete} says that no later
            segment can hold more (an entry's last stable offset reached
            C{upperBound}).
        """
        found = []
        entries = self.entries
        start = bisect_left(entries, fetchOffset, key=_lastOffset) if entries else 0
        for entry in entries[start:]:
            if entry.firstOffset < upperBound:
                found.append(entry)
            if entry.lastStableOffset >= upperBound:
                return found, True
        return found, False

    def delete(self) -> None:
        self._entries = ()
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
