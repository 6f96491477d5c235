"""
Serial executors: callables handed to one run one at a time, in the order
handed, on whichever thread found it idle -- the owner of a piece of state
without a thread of its own (the coordinators' state machines, one internal
partition's appends, the replica manager, fetch sessions).

A thread that hands work to an idle executor runs it itself, after what it
is already running (L{runHere}), so that nothing nests.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from twisted.logger import Logger

__all__ = ["SerialExecutor", "isRunningHere", "runHere"]

log = Logger()

_local = threading.local()


def runHere(work: Callable[[], object]) -> None:
    """
    Run C{work} on this thread: now, or -- if this thread is already
    running such work -- once that is done, so that nothing nests.
    """
    queue = getattr(_local, "queue", None)
    if queue is not None:
        queue.append(work)
        return
    queue = _local.queue = deque((work,))
    try:
        while queue:
            work = queue.popleft()
            try:
                work()
            except Exception:
                log.failure("coordinator work {work} failed", work=work)
    finally:
        _local.queue = None


def isRunningHere() -> bool:
    """
    Whether this thread is inside L{runHere} (waiting for other coordinator
    work here would deadlock).
    """
    return getattr(_local, "queue", None) is not None


class SerialExecutor:
    """
    Runs callables one at a time, in the order they were submitted, on
    whichever thread submitted to it while it was idle.

    @param perTurn: how many callables one turn runs before letting other
        work of the same thread run (C{None}: until empty).  An append queue
        takes one at a time, so a thread appending for one partition does
        not keep the owner's work waiting behind a run of disk writes.
    """

    def __init__(self, perTurn: int | None = None) -> None:
        self._lock = threading.Lock()
        self._queue: deque = deque()
        self._running = False
        self._perTurn = perTurn

    def submit(self, f: Callable, *args) -> None:
        """
        Run C{f(*args)} after everything submitted before.  Safe from any
        thread.
        """
        with self._lock:
            self._queue.append((f, args))
            if self._running:
                return
            self._running = True
        runHere(self._turn)

    def _turn(self) -> None:
        done = 0
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                if self._perTurn is not None and done == self._perTurn:
                    break
                f, args = self._queue.popleft()
            try:
                f(*args)
            except Exception:
                log.failure("coordinator work {f} failed", f=f)
            done += 1
        runHere(self._turn)
