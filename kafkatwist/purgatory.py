"""
Delayed operations (Kafka's C{DelayedOperation} and
C{DelayedOperationPurgatory}): a long-poll Fetch or a JoinGroup waits here,
holding no thread, until something it watches happens or its timeout
passes on the clock it was given.
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

    def forceComplete(self) -> bool:
        with self._lock:
            if self._completed:
                return False
            self._completed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
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
        self._timer = self.clock.callLater(timeout, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.forceComplete():
            self.onExpiration()


@implementer(IPurgatory)
class Purgatory:
    def __init__(self, name: str) -> None:
        self.name = name
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
