"""
Delayed operations (Kafka's C{DelayedOperation} and
C{DelayedOperationPurgatory}): a long-poll Fetch waits here, holding no
thread, until something it watches happens or its timeout passes on the
clock it was given.

Threads: an operation is checked and completed on the thread that calls
C{tryCompleteElseWatch} or C{checkAndComplete} (handler threads).  Its timer
fires on the clock's reactor (a Processor), which must not touch the disk,
so an expiry is handed to the purgatory's C{reaper} (the request handler
threads, as Kafka's expiration reaper thread) unless the operation says it
can answer without I/O (L{DelayedOperation.canExpireHere}).
"""

from __future__ import annotations

import threading
from collections import defaultdict

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.interfaces import IDelayedOperation, IPurgatory

log = Logger()


@implementer(IDelayedOperation)
class DelayedOperation:
    """
    Subclasses implement C{tryComplete} (call C{forceComplete} when the
    condition holds), C{onComplete} and optionally C{onExpiration}.

    @param clock: an L{IThreadSafeClock}, normally the request context's, so
        the timer lives on the reactor that owns the connection.
    """

    def __init__(self, clock) -> None:
        self.clock = clock
        self._lock = threading.RLock()
        self._completed = False
        self._timer = None
        self._purgatory: Purgatory | None = None
        self._keys: tuple = ()

    @property
    def completed(self) -> bool:
        return self._completed

    def tryComplete(self) -> bool:
        raise NotImplementedError

    def onComplete(self) -> None:
        raise NotImplementedError

    def onExpiration(self) -> None:
        pass

    def canExpireHere(self) -> bool:
        """
        Called on the timer's (reactor) thread, with the operation locked,
        when the timeout passed: whether the expiry can complete right there,
        without disk I/O.  Otherwise it goes to the purgatory's reaper.
        """
        return False

    def forceComplete(self) -> bool:
        with self._lock:
            if self._completed:
                return False
            self._completed = True
            timer, self._timer = self._timer, None
        if timer is not None:
            # The timer may have fired meanwhile (its expiry then finds the
            # operation completed and does nothing): an IThreadSafeClock's
            # cancel is harmless then.
            timer.cancel()
        if self._purgatory is not None:
            self._purgatory._unwatch(self)
        self.onComplete()
        return True

    def maybeTryComplete(self) -> bool:
        # Two appends to watched partitions may check at once; one check at
        # a time keeps onComplete single.
        with self._lock:
            if self._completed:
                return False
            return self.tryComplete()

    def _startTimer(self, timeout: float) -> None:
        timer = self.clock.callLater(timeout, self._timedOut)
        # A completion may have come between the last check and the arming
        # of the timer; it found no timer to cancel, so cancel it here.
        with self._lock:
            if not self._completed:
                self._timer = timer
                return
        timer.cancel()

    def _timedOut(self) -> None:
        # On the clock's reactor thread.
        reaper = self._purgatory.reaper if self._purgatory is not None else None
        with self._lock:
            self._timer = None
            if self._completed:
                return
            if reaper is None or self.canExpireHere():
                self._expire()
                return
        reaper(self._expire)

    def _expire(self) -> None:
        if self.forceComplete():
            self.onExpiration()


@implementer(IPurgatory)
class Purgatory:
    """
    @ivar reaper: C{reaper(f)} runs C{f()} where disk I/O is allowed (a
        request handler thread); C{None} runs expiries on the timer's thread
        (unit tests without threads).
    """

    def __init__(self, name: str, reaper=None) -> None:
        self.name = name
        self.reaper = reaper
        self._lock = threading.Lock()
        self._watchers: dict = defaultdict(list)

    def __len__(self) -> int:
        with self._lock:
            return len({id(op) for ops in self._watchers.values() for op in ops})

    def tryCompleteElseWatch(self, operation: DelayedOperation, keys, timeout: float) -> bool:
        if operation.maybeTryComplete():
            return True
        keys = tuple(keys)
        operation._purgatory = self
        operation._keys = keys
        with self._lock:
            for key in keys:
                self._watchers[key].append(operation)
        # Something may have happened between the first check and the
        # watch; without this second look its wake-up would be missed.
        if operation.maybeTryComplete():
            return True
        operation._startTimer(timeout)
        return False

    def checkAndComplete(self, key) -> int:
        with self._lock:
            operations = list(self._watchers.get(key, ()))
        completed = 0
        for operation in operations:
            if operation.maybeTryComplete():
                completed += 1
        return completed

    def watching(self) -> bool:
        """
        Whether any operation watches any key, read without the lock: what
        a caller changed before asking is seen by any operation watching
        after that, as L{tryCompleteElseWatch} looks again once it watches;
        so a caller that finds nothing watched need not check any key.
        """
        return bool(self._watchers)

    def watched(self, key) -> int:
        with self._lock:
            return len(self._watchers.get(key, ()))

    def _unwatch(self, operation: DelayedOperation) -> None:
        with self._lock:
            for key in operation._keys:
                ops = self._watchers.get(key)
                if ops is None:
                    continue
                try:
                    ops.remove(operation)
                except ValueError:
                    pass
                if not ops:
                    del self._watchers[key]


class DelayedActions:
    """
    Actions to run once the current batch's responses were handed to their
    Processors, so a produce is acknowledged before the fetches it wakes are
    read and encoded.  Outside a handler thread (tests, timers) actions run
    at once.
    """

    _local = threading.local()

    def __init__(self) -> None:
        self._pending: list = []

    @classmethod
    def install(cls) -> "DelayedActions":
        actions = cls._local.actions = cls()
        return actions

    @classmethod
    def add(cls, f, *args) -> None:
        actions = getattr(cls._local, "actions", None)
        if actions is None:
            f(*args)
        else:
            actions._pending.append((f, args))

    def run(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, []
            for f, args in pending:
                try:
                    f(*args)
                except Exception:
                    log.failure("Delayed action {f} failed", f=f)
