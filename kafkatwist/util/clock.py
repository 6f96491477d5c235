"""
Clocks usable from any thread.

Handlers run in handler threads but the timers they arm (long-poll expiry,
group session timeouts) belong to a reactor: the one that owns the
connection, or the broker's main one.  L{ThreadSafeClock} forwards
C{callLater} and C{cancel} to that reactor's thread; under a test's
C{task.Clock} (no threads) it calls straight through.
"""

import threading
import time

from zope.interface import implementer

from kafkatwist.interfaces import IThreadSafeClock


class _Handle:
    """
    A cancellable timer whose C{cancel} may come from any thread, before or
    after the timer was armed in the reactor's thread, and before or after
    it fired there.
    """

    __slots__ = ("_clock", "_call", "_cancelled", "_lock")

    def __init__(self, clock: "ThreadSafeClock") -> None:
        self._clock = clock
        self._call = None
        self._cancelled = False
        self._lock = threading.Lock()

    def _arm(self, delay, f, args, kw) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._call = self._clock.reactor.callLater(delay, self._fire, f, args, kw)

    def _fire(self, f, args, kw) -> None:
        with self._lock:
            self._call = None
            if self._cancelled:
                return
            self._cancelled = True
        f(*args, **kw)

    def cancel(self) -> None:
        with self._lock:
            if self._cancelled:
                return
            self._cancelled = True
            call, self._call = self._call, None
        if call is not None:
            # Runs later in the reactor's thread, which may fire the call
            # first (it is due, or the reactor is behind): the expiry then
            # finds the handle cancelled and does nothing, and so must this.
            self._clock.inThread(_cancelIfPending, call)

    def active(self) -> bool:
        return not self._cancelled


def _cancelIfPending(call) -> None:
    # In the reactor's thread, the only one that fires or cancels its calls,
    # so active() cannot change under us.
    if call.active():
        call.cancel()


@implementer(IThreadSafeClock)
class ThreadSafeClock:
    """
    Wrap a reactor so timers can be armed from any thread.

    @ivar reactor: an C{IReactorTime} (and C{IReactorThreads} when it runs in
        another thread).
    @ivar threadId: ident of the thread that runs C{reactor}, or C{None}
        when everything runs in one thread (tests).
    """

    def __init__(self, reactor, threadId: int | None = None, callInThread=None) -> None:
        self.reactor = reactor
        self.threadId = threadId
        # A Processor passes its coalescing hand-off, so arming or
        # cancelling a long-poll timer shares the wake-up that carries the
        # response, instead of costing one of its own.
        self._callFromThread = callInThread or getattr(reactor, "callFromThread", None)

    def seconds(self) -> float:
        return self.reactor.seconds()

    def inThread(self, f, *args) -> None:
        """
        Run C{f} in the reactor's thread: now if already there.
        """
        if self.threadId is None or threading.get_ident() == self.threadId:
            f(*args)
        else:
            self._callFromThread(f, *args)

    def callLater(self, delay, f, *args, **kw) -> _Handle:
        handle = _Handle(self)
        self.inThread(handle._arm, delay, f, args, kw)
        return handle


def nowMs() -> int:
    """
    Wall-clock time in milliseconds (what ZooKeeper records and Kafka's
    timestamps count in).
    """
    return int(time.time() * 1000)
