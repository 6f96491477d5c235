"""
Swapping a cleaned segment in for the segments it replaces, crash-safely:
Kafka's C{.cleaned} / C{.swap} protocol.

A cleaned segment is written aside as C{<base>.log.cleaned} with its
C{.index.cleaned} and C{.timeindex.cleaned} (L{CleanedSegment}), every file
fsynced.  Its base is the base of the first segment it replaces, so it ends
up under that segment's name.  Then, under the partition's lock:

  1. L{commit}: the index files are renamed C{.cleaned} -> C{.swap}, then
     the log file, and the directory is fsynced.  The log file's rename is
     the commit point: from then on a crash completes the swap;
  2. the replaced segments' files are deleted (readers already holding a
     region keep reading it through their own descriptor);
  3. L{complete}: C{.swap} -> final names, index files first, log file
     last, and the directory is fsynced; the new segment is published.

L{recover} runs when a partition loads, before its segments are listed.  It
deletes every C{.cleaned} file (a swap that never committed: the old
segments are intact) and every index C{.swap} file without a C{.log.swap}
(a commit cut short).  For each C{<base>.log.swap} it finds the offset after
its last batch, deletes the old segments whose base offset lies in
C{[base, that offset)}, then renames the C{.swap} files into place (their
indexes rebuilt from the log file as recovery checks it).

Why nothing is lost or doubled: before the commit point the old segments are
all there and the cleaned data is not.  After it, recovery ends up with the
cleaned segment plus, possibly, old segments that begin past the cleaned
segment's last batch.  Those hold only records the cleaner found
superseded (everything it kept would lie below that last batch), so keeping
them is a less compacted but equally valid log, and losing them was the
cleaner's intent.  Offsets are never duplicated: each old segment is either
deleted or starts after the cleaned data ends.
"""

from __future__ import annotations

import os
import re

from twisted.logger import Logger

from kafkatwist.log.handles import HandleCache
from kafkatwist.log.index import OffsetIndex, TimeIndex
from kafkatwist.log.segment import SEGMENT_FILE, FileSegment, Segment, segmentFileName

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "CleanedSegment",
    "commit",
    "complete",
    "discard",
    "discardCleaned",
    "recover",
]

log = Logger()

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
#: rename order: the log file last, so that its name marks the step done
_SUFFIXES = (".index", ".timeindex", ".log")
_SWAP_LOG = re.compile(r"^(\d{20})\.log\.swap$")


def _path(directory: str, baseOffset: int, suffix: str, state: str = "") -> str:
    return os.path.join(directory, segmentFileName(baseOffset, suffix) + state)


class _Reader:
    def __init__(self, fd: int) -> None:
        self.fd = os.dup(fd)

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self.fd, n, position)

    def region(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def close(self) -> None:
        os.close(self.fd)


class CleanedSegment(Segment):
    """
    A cleaned segment being written as C{<base>.log.cleaned}, its indexes
    kept in memory and written as C{.cleaned} files by L{finish}.
    """

    def __init__(self, directory: str, baseOffset: int, nowMs: int) -> None:
        super().__init__(baseOffset, 0, nowMs)
        self.directory = directory
        self._offsetIndex, self._timeIndex = OffsetIndex(baseOffset), TimeIndex(baseOffset)
        self.logPath = _path(directory, baseOffset, ".log", CLEANED_SUFFIX)
        self._fd = os.open(self.logPath, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)

    def _write(self, data, position: int) -> None:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(self._fd, view[written:], position + written)

    def _openReader(self) -> _Reader:
        return _Reader(self._fd)

    def _loadIndexes(self):
        return self._offsetIndex, self._timeIndex

    def finish(self, mtimeMs: int) -> None:
        """
        Make everything durable: the log file, then its indexes; the log
        file takes the modification time of the last segment it replaces
        (what retention measures a segment without timestamps by).
        """
        self.onBecomeInactive()
        os.fsync(self._fd)
        for index, suffix in ((self._offsetIndex, ".index"), (self._timeIndex, ".timeindex")):
            path = _path(self.directory, self.baseOffset, suffix, CLEANED_SUFFIX)
            with open(path, "wb") as f:
                f.write(index.encode())
                f.flush()
                os.fsync(f.fileno())
        os.close(self._fd)
        self._fd = None
        os.utime(self.logPath, ns=(mtimeMs * 1_000_000, mtimeMs * 1_000_000))

    def abort(self) -> None:
        """
        Drop what was written.
        """
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        discard(self.directory, self.baseOffset)


def _syncDirectory(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlinkQuietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def commit(directory: str, baseOffset: int) -> None:
    """
    Step 1: the cleaned files become C{.swap} files, the log file last; from
    the moment its rename is on disk, recovery completes the swap.
    """
    for suffix in _SUFFIXES:
        os.rename(
            _path(directory, baseOffset, suffix, CLEANED_SUFFIX),
            _path(directory, baseOffset, suffix, SWAP_SUFFIX),
        )
    _syncDirectory(directory)


def complete(directory: str, baseOffset: int) -> None:
    """
    Step 3 (the replaced segments' files are gone): the C{.swap} files take
    their final names, the log file last.
    """
    for suffix in _SUFFIXES:
        os.replace(
            _path(directory, baseOffset, suffix, SWAP_SUFFIX), _path(directory, baseOffset, suffix)
        )
    _syncDirectory(directory)


def discard(directory: str, baseOffset: int) -> None:
    """
    Delete the C{.cleaned} and C{.swap} files of a swap that will not
    happen (only before its commit point).
    """
    for suffix in _SUFFIXES:
        for state in (CLEANED_SUFFIX, SWAP_SUFFIX):
            _unlinkQuietly(_path(directory, baseOffset, suffix, state))


def discardCleaned(directory: str) -> None:
    """
    Delete every C{.cleaned} file of a partition (after its cleaner process
    died mid-pass; nothing else writes them).
    """
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            _unlinkQuietly(os.path.join(directory, name))


def _recoverSwapSegment(directory: str, baseOffset: int, indexIntervalBytes: int) -> int:
    """
    Check every batch of a C{.log.swap} file as crash recovery checks a
    segment (truncating a damaged tail, which only a failing disk leaves:
    the file was fsynced before its commit) and rebuild its indexes as
    C{.swap} files.

    @return: the offset after its last batch.
    """
    segment = FileSegment(directory, baseOffset, HandleCache(1), size=0, createdMs=0)
    segment.logPath = _path(directory, baseOffset, ".log", SWAP_SUFFIX)
    segment.indexPath = _path(directory, baseOffset, ".index", SWAP_SUFFIX)
    segment.timeIndexPath = _path(directory, baseOffset, ".timeindex", SWAP_SUFFIX)
    try:
        segment.recover(indexIntervalBytes)
        return segment.nextOffset
    finally:
        segment.close()


def recover(directory: str, indexIntervalBytes: int = 4096) -> None:
    """
    Finish or undo the swaps a crash interrupted in one partition directory
    (see the module docstring).
    """
    names = os.listdir(directory)
    changed = False
    swaps = []
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            os.unlink(os.path.join(directory, name))
            changed = True
        else:
            match = _SWAP_LOG.match(name)
            if match:
                swaps.append(int(match.group(1)))
    for name in names:
        if name.endswith(SWAP_SUFFIX) and not _SWAP_LOG.match(name):
            stem = name.partition(".")[0]
            if not stem.isdigit() or int(stem) not in swaps:
                # Half a commit: the log file never became .swap.
                os.unlink(os.path.join(directory, name))
                changed = True
    for baseOffset in sorted(swaps):
        nextOffset = _recoverSwapSegment(directory, baseOffset, indexIntervalBytes)
        replaced = []
        for name in os.listdir(directory):
            match = SEGMENT_FILE.match(name)
            if match and baseOffset <= int(match.group(1)) < nextOffset:
                replaced.append(int(match.group(1)))
        for old in replaced:
            for suffix in _SUFFIXES:
                _unlinkQuietly(_path(directory, old, suffix))
        complete(directory, baseOffset)
        log.info(
            "{dir}: completed an interrupted swap: cleaned segment {base} replaces "
            "segment(s) {replaced}",
            dir=directory,
            base=baseOffset,
            replaced=sorted(replaced),
        )
        changed = True
    if changed:
        _syncDirectory(directory)
