"""
Bounded descriptors for segments, shared by every partition of a
L{kafkatwist.log.LogManager}.

With thousands of partitions and many segments each, keeping every segment's
file open would exhaust descriptors (and a creation of many partitions would
fail half way with EMFILE).  Policy:

  - nothing is opened before it is used: a new or loaded segment has no
    descriptor until its first read or write;
  - an I{active} segment (the one being appended to) is I{pinned}: once
    open, its descriptor stays open while the partition is written to.  At
    most C{maxActive} are open; past that the least recently written one is
    closed (a clock: a segment written since the last sweep gets a second
    chance), and only when its partition's lock is free, so a descriptor is
    never closed under a write in progress; the next write opens it again;
  - an inactive segment is opened on first use and enters an LRU of
    C{maxOpen}; the least recently used is closed past that, and its
    in-memory indexes are dropped too (they load again from the index files
    on next use), which also bounds index memory;
  - callers never use a cached descriptor outside the cache's lock, except
    the writer of an active segment under its partition's lock, and a
    reader that I{borrowed} it (L{HandleCache.borrow}): while a descriptor
    is borrowed, whatever would close it (eviction, a segment deleted or
    closed) detaches it from its segment but leaves it open, and the last
    L{HandleCache.giveBack} closes it -- so neither a roll, nor eviction,
    nor retention deleting the file breaks a read under way, and a read
    costs no C{dup} and C{close} of its own.  What outlives the read (a
    file region left to C{sendfile}) gets an C{os.dup} of the borrowed
    descriptor (L{HandleCache.dup} for the other users).

Threads: any thread may call the cache except a reactor thread (eviction
writes index files and closes descriptors).  In practice that is the handler
threads (produce, fetch, admin), the log maintenance pool (retention, flush)
and start-up.  The cache's own lock only guards its bookkeeping: evicting
picks victims and detaches their descriptors under it, and closes them and
writes their indexes after releasing it, under each victim's own index lock.

Index files are not held open at all: they are read whole when a segment's
indexes load and written by path when they are persisted.
"""

from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict

__all__ = ["HandleCache", "defaultActiveBudget"]


def defaultActiveBudget() -> int:
    """
    Active segment descriptors allowed by default: half the process's
    descriptor limit, leaving the rest to connections, inactive segments and
    fetch regions.
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, soft // 2)


class HandleCache:
    """
    The descriptors and loaded indexes of segments.

    Segments taking part provide C{pinned} (bool), C{_fd}, C{_used} (set by
    their writer), C{writeLock} (their partition's lock, for active
    segments), C{_openFd()} and C{_dropIndexes()}.

    @param maxOpen: inactive segments kept open (and with indexes loaded).
    @param maxActive: active segment descriptors kept open; by default
        L{defaultActiveBudget}.
    """

    def __init__(self, maxOpen: int = 256, maxActive: int | None = None) -> None:
        if maxOpen < 1:
            raise ValueError("maxOpen must be at least 1")
        if maxActive is None:
            maxActive = defaultActiveBudget()
        if maxActive < 1:
            raise ValueError("maxActive must be at least 1")
        self.maxOpen = maxOpen
        self.maxActive = maxActive
        self._lock = threading.Lock()
        self._lru: OrderedDict = OrderedDict()
        self._active: OrderedDict = OrderedDict()
        #: descriptor -> a list with one item per borrower holding it (an
        #: empty list: none); appended to under the lock, popped from
        #: without it (L{giveBack})
        self._borrowed: dict[int, list] = {}
        #: borrowed descriptors detached from their segment, closed by
        #: their last giveBack
        self._orphans: set[int] = set()

    def __len__(self) -> int:
        return len(self._lru)

    @property
    def openActive(self) -> int:
        """
        Active segments with an open descriptor.
        """
        return len(self._active)

    def dup(self, segment) -> int:
        """
        @return: a new descriptor for C{segment}'s log file, owned by the
            caller.
        @raise FileNotFoundError: the segment was deleted.
        """
        with self._lock:
            fd = self._openLocked(segment)
            victims = self._touchLocked(segment)
            duplicate = os.dup(fd)
        _release(victims)
        return duplicate

    def borrow(self, segment) -> int:
        """
        C{segment}'s own descriptor, kept open until L{giveBack}: the
        caller reads through it and never closes it.  One use of the
        segment, as L{touch}.

        @raise FileNotFoundError: the segment was deleted.
        """
        with self._lock:
            fd = self._openLocked(segment)
            victims = self._touchLocked(segment)
            holders = self._borrowed.get(fd)
            if holders is None:
                self._borrowed[fd] = holders = []
            holders.append(None)
        if victims:
            _release(victims)
        return fd

    def giveBack(self, fd: int) -> None:
        """
        The end of a L{borrow} of C{fd}: closed if it was detached from
        its segment meanwhile and nobody else borrows it.

        Without the lock unless it closes: a read costs one lock round
        trip.  The holders list's C{pop} and the checks after it are each
        atomic; a detach (under the lock) sees either a holder -- and
        leaves the descriptor to the last one, which then finds it among
        the orphans -- or none, and closes it itself, which this then
        finds not orphaned.  Among several last holders the lock lets
        one close it; the others find the holders list no longer the
        descriptor's, because the number may meanwhile have been closed,
        opened again for another segment, borrowed and orphaned again,
        and that descriptor is its new holders' to close.
        """
        holders = self._borrowed[fd]
        holders.pop()
        if holders or fd not in self._orphans:
            return
        with self._lock:
            if holders or fd not in self._orphans or self._borrowed.get(fd) is not holders:
                return
            self._orphans.discard(fd)
            del self._borrowed[fd]
        os.close(fd)

    @property
    def borrowed(self) -> int:
        """
        Descriptors borrowed now (for tests).
        """
        return sum(1 for holders in list(self._borrowed.values()) if holders)

    def writerFd(self, segment) -> int:
        """
        The descriptor the writer of active C{segment} writes through, opened
        if it was closed.  Call with the segment's C{writeLock} held, and
        use the descriptor only while holding it.
        """
        with self._lock:
            fd = self._openLocked(segment)
            victims = self._touchLocked(segment)
        _release(victims)
        return fd

    def touch(self, segment) -> None:
        """
        Note a use of C{segment} (e.g. its indexes were loaded).
        """
        if segment.pinned:
            return
        with self._lock:
            victims = self._touchLocked(segment)
        _release(victims)

    def pin(self, segment) -> None:
        """
        Make C{segment} active: its descriptor (once open) leaves the
        inactive LRU for the active budget.
        """
        with self._lock:
            segment.pinned = True
            self._lru.pop(segment, None)
            victims = []
            if segment._fd is not None:
                self._active[segment] = None
                victims = self._evictActiveLocked(segment)
        _release(victims)

    def unpin(self, segment) -> None:
        """
        C{segment} is no longer active; its descriptor joins the LRU.
        """
        with self._lock:
            segment.pinned = False
            self._active.pop(segment, None)
            victims = self._touchLocked(segment) if segment._fd is not None else []
        _release(victims)

    def forget(self, segment) -> None:
        """
        Close C{segment}'s descriptor and stop tracking it (delete, close).
        """
        with self._lock:
            self._lru.pop(segment, None)
            self._active.pop(segment, None)
            segment.pinned = False
            fd = self._detachLocked(segment)
        _release([(segment, fd, True)])

    # -- under the lock ----------------------------------------------------------

    def _openLocked(self, segment) -> int:
        fd = segment._fd
        if fd is None:
            fd = segment._fd = segment._openFd()
            if segment.pinned:
                self._active[segment] = None
        return fd

    def _detachLocked(self, segment) -> int | None:
        """
        Take C{segment}'s descriptor from it.

        @return: the descriptor to close, or C{None} (none, or it is
            borrowed: the last L{giveBack} closes it).
        """
        fd, segment._fd = segment._fd, None
        if fd is None:
            return None
        holders = self._borrowed.get(fd)
        if holders:
            # Published first, checked again after: a giveBack (which takes
            # no lock) that pops the last hold between the two checks finds
            # the orphan and waits for the lock, under which it is already
            # discarded; one that popped before the first check never sees
            # the orphan.  Either way exactly one side closes it.
            self._orphans.add(fd)
            if holders:
                return None
            self._orphans.discard(fd)
        return fd

    def _touchLocked(self, segment) -> list:
        if segment.pinned:
            segment._used = True
            return self._evictActiveLocked(segment) if len(self._active) > self.maxActive else []
        self._lru[segment] = None
        self._lru.move_to_end(segment)
        victims = []
        while len(self._lru) > self.maxOpen:
            victim, _ = self._lru.popitem(last=False)
            victims.append((victim, self._detachLocked(victim), True))
        return victims

    def _evictActiveLocked(self, keep) -> list:
        """
        Close active descriptors past the budget: a clock over the oldest
        opened, skipping C{keep}, segments written since the last sweep
        (once) and segments whose partition is busy.
        """
        victims = []
        active = self._active
        budget = 2 * len(active)
        while len(active) > self.maxActive and budget > 0:
            budget -= 1
            segment = next(iter(active))
            if segment is keep or segment._used:
                segment._used = False
                active.move_to_end(segment)
                continue
            lock = segment.writeLock
            if lock is not None and not lock.acquire(blocking=False):
                active.move_to_end(segment)
                continue
            try:
                del active[segment]
                fd = self._detachLocked(segment)
            finally:
                if lock is not None:
                    lock.release()
            victims.append((segment, fd, False))
        return victims


def _release(victims) -> None:
    """
    Outside the cache's lock: close detached descriptors, and drop the
    indexes of evicted inactive segments.
    """
    for segment, fd, dropIndexes in victims:
        if fd is not None:
            os.close(fd)
        if dropIndexes:
            segment._dropIndexes()
