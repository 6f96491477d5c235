"""
The cluster layer's owner thread (C{kafkatwist-cluster}): every piece of
cluster state -- the ZooKeeper view, the published L{ClusterImage}, the
controller's state machine, what was last handed to the replica manager --
belongs to it.  Kazoo runs its own threads; its watches and session
listener only hand a callable to this thread.  ZooKeeper calls block here,
never on a reactor or a kazoo thread.
"""

from __future__ import annotations

import heapq
from collections import deque
import itertools
import threading
import time

from twisted.logger import Logger

log = Logger()


class _Timer:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class OwnerThread:
    """
    A thread running handed-over callables one at a time, in order, and
    timers.
    """

    def __init__(self, name: str = "kafkatwist-cluster", clock=time.monotonic) -> None:
        self._clock = clock
        #: C{onError(f, exception)} for an exception a callable raised:
        #: C{True} when it handled it (said so, recovered); otherwise, and
        #: without one, the failure is logged with its traceback
        self.onError = None
        self._cond = threading.Condition()
        self._queue: deque = deque()
        self._timers: list = []
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def isOwner(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, f, *args) -> None:
        """
        Run C{f(*args)} on the owner thread after everything handed over
        before.  Safe from any thread.
        """
        with self._cond:
            if self._stopped:
                return
            self._queue.append((f, args))
            self._cond.notify()

    def callLater(self, delay: float, f, *args) -> _Timer:
        timer = _Timer()
        with self._cond:
            heapq.heappush(self._timers, (self._clock() + delay, next(self._seq), timer, f, args))
            self._cond.notify()
        return timer

    def call(self, f, *args, timeout: float = 30.0):
        """
        Run C{f(*args)} on the owner and wait for its result (start-up and
        shutdown only, from a thread that is not the owner).
        """
        if self.isOwner():
            return f(*args)
        done = threading.Event()
        box: list = []

        def run():
            try:
                box.append((True, f(*args)))
            except BaseException as e:  # handed back to the caller
                box.append((False, e))
            finally:
                done.set()

        self.submit(run)
        if not done.wait(timeout):
            raise TimeoutError(f"cluster owner did not run {getattr(f, '__name__', f)} in {timeout}s")
        ok, value = box[0]
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        if self._thread.is_alive() and not self.isOwner():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = self._clock()
                    if self._timers and self._timers[0][0] <= now:
                        _, _, timer, f, args = heapq.heappop(self._timers)
                        if timer.cancelled:
                            continue
                        break
                    if self._queue:
                        f, args = self._queue.popleft()
                        break
                    wait = self._timers[0][0] - now if self._timers else None
                    self._cond.wait(wait)
            try:
                f(*args)
            except Exception as e:
                try:
                    handled = self.onError is not None and self.onError(f, e)
                except Exception:
                    log.failure("handling a failure of cluster work failed")
                    handled = False
                if not handled:
                    log.failure("cluster work {f} failed", f=getattr(f, "__name__", f))
