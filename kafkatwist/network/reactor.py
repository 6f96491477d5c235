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
  - Its waker writes its byte with one C{os.write}: Twisted's goes through
    C{twisted.python.util.untilConcludes}, and C{twisted.python.util} is a
    deprecation proxy whose every attribute lookup is four Python calls --
    on a handler thread, once per response it hands back.  (C{EINTR} needs
    no loop: Python retries it itself, PEP 475.)
"""

from __future__ import annotations

import errno
import os

from twisted.internet._signals import _UnixWaker
from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger

log = Logger()


def _nothing() -> None:
    pass


class ProcessorWaker(_UnixWaker):
    def wakeUp(self) -> None:
        o = self.o
        if o is not None:
            try:
                os.write(o, b"x")
            except BlockingIOError:
                # The pipe is full: the reactor has wake-ups to read anyway.
                pass


class ProcessorReactor(EPollReactor):
    #: called before the reactor waits for events (work queued by timers and
    #: calls from other threads), and after it dispatched them
    beforeWait = staticmethod(_nothing)
    afterEvents = staticmethod(_nothing)

    def doPoll(self, timeout):
        self.beforeWait()
        if timeout is None:
            timeout = -1
        try:
            events = self._poller.poll(timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        dispatch = self._doReadOrWrite
        selectables = self._selectables
        for fd, event in events:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            try:
                dispatch(selectable, fd, event)
            except Exception:
                # _doReadOrWrite already turns a failing doRead/doWrite into
                # connectionLost; this is what escapes even that.
                log.failure("Error handling an event on {selectable}", selectable=selectable)
        self.afterEvents()

    doIteration = doPoll

    def _wakerFactory(self) -> ProcessorWaker:
        return ProcessorWaker()
