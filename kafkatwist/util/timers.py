"""
A timer thread: C{callLater} from any thread, the calls run on one thread
of their own, apart from the reactors.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
import weakref

from twisted.logger import Logger

__all__ = ["TimerThread"]

log = Logger()


class _TimerCall:
    __slots__ = ("f", "args", "kw", "cancelled", "_clock")

    def __init__(self, clock, f, args, kw) -> None:
        self._clock = clock
        self.f, self.args, self.kw = f, args, kw
        self.cancelled = False

    def cancel(self) -> None:
        """
        Harmless after the call ran, from any thread.
        """
        if not self.cancelled:
            self.cancelled = True
            self._clock._cancelled()

    def active(self) -> bool:
        return not self.cancelled


class TimerThread:
    """
    The coordinators' clock: C{callLater} from any thread, calls run on
    this thread ("kafkatwist-<name>").  Not a reactor (there is no I/O to
    wait for), and apart from the reactors, so timers neither load a
    network thread nor wait for one.  C{seconds()} is wall time; delays are
    measured on the monotonic clock.
    """

    def __init__(self, name: str = "group-coordinator") -> None:
        self.name = f"kafkatwist-{name}"
        self._cond = threading.Condition()
        self._heap: list = []
        self._seq = itertools.count()
        self._garbage = 0
        self._stopping = False
        self._thread: threading.Thread | None = None

    def seconds(self) -> float:
        return time.time()

    def callLater(self, delay: float, f, *args, **kw) -> _TimerCall:
        call = _TimerCall(self, f, args, kw)
        when = time.monotonic() + max(delay, 0.0)
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), call))
            if self._heap[0][2] is call:
                self._cond.notify()
        return call

    def _cancelled(self) -> None:
        with self._cond:
            self._garbage += 1
            if self._garbage > 1024 and self._garbage * 2 > len(self._heap):
                # Cancelled calls are dropped when they come due; when most
                # of the heap is such garbage, drop it now.
                self._heap = [entry for entry in self._heap if not entry[2].cancelled]
                heapq.heapify(self._heap)
                self._garbage = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        # Started in BrokerService.prepare(), before twistd daemonizes: a
        # forked child has no thread of ours, so it starts its own (without
        # this, a daemonized broker's group timers never fired).
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restartAfterFork(ref))

    def _afterFork(self) -> None:
        if self._thread is None or self._stopping:
            return
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    if self._heap:
                        wait = self._heap[0][0] - time.monotonic()
                        if wait <= 0:
                            _, _, call = heapq.heappop(self._heap)
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if call.cancelled:
                    self._garbage = max(0, self._garbage - 1)
                    continue
                call.cancelled = True
            try:
                call.f(*call.args, **call.kw)
            except Exception:
                log.failure("timer {f} failed", f=call.f)


def _restartAfterFork(ref) -> None:
    timer = ref()
    if timer is not None:
        timer._afterFork()
