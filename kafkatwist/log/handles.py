"""
A bounded LRU of open descriptors for inactive segments.

With hundreds of partitions and many segments each, keeping every segment's
file open would exhaust descriptors.  Policy:

  - an active segment (the one being appended to) is I{pinned}: its
    descriptor stays open for the partition's lifetime and it is never in
    the LRU;
  - an inactive segment is opened on first use and enters the LRU; when more
    than C{maxOpen} inactive segments are open, the least recently used is
    closed, and its in-memory indexes are dropped too (they load again from
    the index files on next use), which also bounds index memory;
  - callers never use a cached descriptor outside the cache's lock: they get
    an C{os.dup} of it (L{HandleCache.dup}), so eviction can close the
    original at any time.

Index files are not held open at all: they are read whole when a segment's
indexes load and written by path when they are persisted.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

__all__ = ["HandleCache"]


class HandleCache:
    """
    The LRU of inactive segments with an open descriptor or loaded indexes,
    shared by every partition of a L{LogManager}.

    Segments taking part provide C{pinned} (bool), C{_fd}, C{_openFd()} and
    C{_evict()}.
    """

    def __init__(self, maxOpen: int = 256) -> None:
        if maxOpen < 1:
            raise ValueError("maxOpen must be at least 1")
        self.maxOpen = maxOpen
        self._lock = threading.Lock()
        self._lru: OrderedDict = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def dup(self, segment) -> int:
        """
        @return: a new descriptor for C{segment}'s log file, owned by the
            caller.
        @raise FileNotFoundError: the segment was deleted.
        """
        with self._lock:
            fd = segment._fd
            if fd is None:
                fd = segment._fd = segment._openFd()
            if not segment.pinned:
                self._touchLocked(segment)
            return os.dup(fd)

    def touch(self, segment) -> None:
        """
        Note a use of C{segment} (e.g. its indexes were loaded).
        """
        if segment.pinned:
            return
        with self._lock:
            self._touchLocked(segment)

    def _touchLocked(self, segment) -> None:
        self._lru[segment] = None
        self._lru.move_to_end(segment)
        while len(self._lru) > self.maxOpen:
            victim, _ = self._lru.popitem(last=False)
            victim._evict()

    def pin(self, segment) -> None:
        """
        Make C{segment} active: keep its descriptor open outside the LRU.
        """
        with self._lock:
            segment.pinned = True
            self._lru.pop(segment, None)
            if segment._fd is None:
                segment._fd = segment._openFd()

    def unpin(self, segment) -> None:
        """
        C{segment} is no longer active; its descriptor joins the LRU.
        """
        with self._lock:
            segment.pinned = False
            if segment._fd is not None:
                self._touchLocked(segment)

    def forget(self, segment) -> None:
        """
        Close C{segment}'s descriptor and stop tracking it (delete, close).
        """
        with self._lock:
            self._lru.pop(segment, None)
            segment.pinned = False
            segment._evict()
