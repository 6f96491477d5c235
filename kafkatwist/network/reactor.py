"""
The reactor a Processor runs: Twisted's C{EPollReactor}, with one
iteration shaped for a Processor.

  - Ready descriptors are dispatched straight to C{_doReadOrWrite}, without
    C{log.callWithLogger}: setting a legacy log context per event cost a
    fifth of a Processor's Python time in profiles of small requests, and
    nothing a Processor runs logs through that context.  A failure still
    closes only the connection it came from, and is logged.
  - C{beforeWait} and C{afterEvents} hooks run around the wait: the
    Processor hands the requests framed in an iteration to the
    RequestChannel there, in one batch, without a C{callLater(0)} per
    iteration.
  - Its waker is an C{eventfd} polled edge-triggered, written with one
    C{os.eventfd_write} and never read: Twisted's pipe waker goes through
    C{twisted.python.util.untilConcludes}, and C{twisted.python.util} is a
    deprecation proxy whose every attribute lookup is four Python calls --
    on a handler thread, once per response it hands back -- and costs the
    Processor a C{read} per wake-up.  (C{EINTR} needs no loop: Python
    retries it itself, PEP 475.)
  - Its main loop (L{ProcessorReactor.mainLoop}) runs Twisted's timed and
    thread calls (C{runUntilCurrent}) only when some are due or queued,
    computes the wait from the first timer inline, and dispatches a socket
    that is only readable straight to its C{doRead}: per iteration, a
    Processor under small requests paid ~250 Python opcodes of Twisted's
    generic loop (C{runUntilCurrent}, C{timeout}, C{_doReadOrWrite}) of its
    ~1,800 per request.  Everything else (writes, hang-ups, errors) still
    goes through C{_doReadOrWrite}.
  - The time spent waiting in C{epoll} is added to C{idleClock.idle} (the
    Processor's idle ratio) without a wrapper around the poller.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from select import EPOLLET, EPOLLIN
from time import monotonic

from twisted.internet._signals import _UnixWaker
from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger()

#: the most epoll_wait takes (milliseconds in a C int), as Twisted's timeout()
_LONGEST_WAIT = 2147483


def _nothing() -> None:
    pass


class ProcessorWaker(_UnixWaker):
    """
    An C{eventfd} (one descriptor, not a pipe's two), which the reactor
    polls edge-triggered (L{ProcessorReactor.installWaker}): every write
    reports it once, and it is never read -- no C{read} per wake-up on the
    Processor.  Its counter cannot fill up (2**64 - 2 wake-ups).

    Closed when its reactor's loop ends (L{ProcessorReactor.mainLoop}):
    Twisted never closes a reactor's waker, and a Processor is a reactor
    of its own.  A wake-up after that does nothing; the lock keeps a
    late one from writing to the number once another file reuses it.
    """

    #: set once the reactor polls it edge-triggered; a waker polled
    #: level-triggered is read, or it would be reported for ever
    edgeTriggered = False

    def __init__(self) -> None:
        self.i = self.o = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._closeLock = threading.Lock()

    def fileno(self) -> int:
        return self.i

    def wakeUp(self) -> None:
        with self._closeLock:
            o = self.o
            if o is not None:
                try:
                    os.eventfd_write(o, 1)
                except BlockingIOError:
                    # (the counter is full: the reactor is woken anyway)
                    pass

    def doRead(self) -> None:
        if not self.edgeTriggered:
            try:
                os.eventfd_read(self.i)
            except OSError:
                pass

    def connectionLost(self, reason) -> None:
        with self._closeLock:
            fd, self.o = self.o, None
            if fd is None:
                return
            try:
                os.close(fd)
            except OSError:
                pass


class ProcessorReactor(EPollReactor):
    #: called before the reactor waits for events (work queued by timers and
    #: calls from other threads), and after it dispatched them
    beforeWait = staticmethod(_nothing)
    afterEvents = staticmethod(_nothing)
    #: an object whose C{idle} attribute the seconds spent waiting in epoll
    #: are added to (L{kafkatwist.metrics.stats.IdleClock}), or None
    idleClock = None

    def mainLoop(self) -> None:
        try:
            while self._started:
                try:
                    self._loop()
                except Exception:
                    # What Twisted's loop does with an error escaping an
                    # iteration: say so and go on.
                    log.failure("Unexpected error in a Processor's main loop")
        finally:
            # A reactor runs once (Twisted's are not restartable): its
            # waker's descriptor is closed with it, not leaked.
            waker = self.waker
            if isinstance(waker, ProcessorWaker):
                self.removeReader(waker)
                waker.connectionLost(None)

    def _loop(self) -> None:
        # One iteration: Twisted's timed and thread calls when any are due or
        # queued, then doPoll's work, inline (the hooks are read once: a
        # Processor sets them before it runs).  beforeWait runs after the
        # timed and thread calls, when they ran: afterEvents has just run
        # otherwise, and nothing else happened since.
        seconds = self.seconds
        selectables = self._selectables
        poll = self._poller.poll
        beforeWait = self.beforeWait
        afterEvents = self.afterEvents
        dispatch = self._dispatchReady
        idleClock = self.idleClock
        while self._started:
            pending = self._pendingTimedCalls
            if pending:
                timeout = pending[0].time - seconds()
                due = timeout <= 0.0
            else:
                due = False
            if due or self.threadCallQueue or self._newTimedCalls or self._justStopped:
                self.runUntilCurrent()
                if self._newTimedCalls:
                    self._insertNewDelayedCalls()
                pending = self._pendingTimedCalls
                if pending:
                    timeout = pending[0].time - seconds()
                # Work queued by timers and Twisted's thread calls: the
                # only work between afterEvents and the wait.
                beforeWait()
            if not self.running:
                timeout = 0.0
            elif pending:
                if timeout < 0.0:
                    timeout = 0.0
                elif timeout > _LONGEST_WAIT:
                    timeout = _LONGEST_WAIT
            else:
                timeout = -1
            if idleClock is None:
                events = poll(timeout, len(selectables))
            else:
                before = monotonic()
                events = poll(timeout, len(selectables))
                idleClock.idle += monotonic() - before
            if len(events) == 1:
                [(fd, event)] = events
                selectable = selectables.get(fd)
                if selectable is not None:
                    if event == EPOLLIN:
                        # (_dispatchReady's commonest case, inline)
                        try:
                            why = selectable.doRead()
                        except Exception:
                            why = sys.exc_info()[1]
                            log.failure("Error reading from {selectable}", Failure(), selectable=selectable)
                        if why:
                            try:
                                self._disconnectSelectable(selectable, why, True)
                            except Exception:
                                log.failure("Error disconnecting {selectable}", selectable=selectable)
                    else:
                        dispatch(selectable, fd, event)
            elif events:
                for fd, event in events:
                    selectable = selectables.get(fd)
                    if selectable is not None:
                        dispatch(selectable, fd, event)
            afterEvents()

    def _dispatchReady(self, selectable, fd: int, event: int) -> None:
        if event == EPOLLIN:
            # Only readable (the common case): what _doReadOrWrite does
            # for it, without its checks for the other cases.
            try:
                why = selectable.doRead()
            except Exception:
                why = sys.exc_info()[1]
                log.failure("Error reading from {selectable}", Failure(), selectable=selectable)
            if why:
                try:
                    self._disconnectSelectable(selectable, why, True)
                except Exception:
                    log.failure("Error disconnecting {selectable}", selectable=selectable)
            return
        try:
            self._doReadOrWrite(selectable, fd, event)
        except Exception:
            # _doReadOrWrite already turns a failing doRead/doWrite into
            # connectionLost; this is what escapes even that.
            log.failure("Error handling an event on {selectable}", selectable=selectable)

    def doPoll(self, timeout):
        self.beforeWait()
        if timeout is None:
            timeout = -1
        selectables = self._selectables
        idleClock = self.idleClock
        try:
            if idleClock is None:
                events = self._poller.poll(timeout, len(selectables))
            else:
                before = monotonic()
                events = self._poller.poll(timeout, len(selectables))
                idleClock.idle += monotonic() - before
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        dispatch = self._dispatchReady
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is not None:
                dispatch(selectable, fd, event)
        self.afterEvents()

    doIteration = doPoll

    def _wakerFactory(self) -> ProcessorWaker:
        return ProcessorWaker()

    def installWaker(self) -> None:
        super().installWaker()
        waker = self.waker
        if isinstance(waker, ProcessorWaker) and not waker.edgeTriggered:
            self._poller.modify(waker.fileno(), EPOLLIN | EPOLLET)
            waker.edgeTriggered = True
