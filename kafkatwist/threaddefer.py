"""
Deferreds fired and observed from different threads.

Deprecated: answers given later go through C{context.respondLater()}
(L{kafkatwist.network.pending}), whose Deferred has one owning thread at a
time.  This module stays only until the group coordinator is ported to it;
nothing new may use it.
"""

import threading

from twisted.internet.defer import Deferred

__all__ = ["ThreadSafeDeferred"]


class ThreadSafeDeferred(Deferred):
    """
    A Deferred that one thread may fire while another adds callbacks.

    A handler's Deferred (JoinGroup, SyncGroup, a long-poll Fetch) is
    created in the requesting handler's thread but is usually fired from
    another one (the member whose join completes the rebalance, the append
    that satisfies a fetch, a timer), possibly while the handler pool is
    still attaching its callbacks.  A plain Deferred
    can lose a callback in that race, so firing and adding callbacks are
    serialised here.  Callbacks run with the (re-entrant) lock held by the
    firing thread; the coordinator never fires while holding a group lock,
    so the lock order is always this lock, then a group lock.
    """

    def __init__(self, canceller=None) -> None:
        super().__init__(canceller)
        self._threadLock = threading.RLock()

    def addCallbacks(self, *args, **kw):
        with self._threadLock:
            return super().addCallbacks(*args, **kw)

    def addCallback(self, *args, **kw):
        with self._threadLock:
            return super().addCallback(*args, **kw)

    def addErrback(self, *args, **kw):
        with self._threadLock:
            return super().addErrback(*args, **kw)

    def addBoth(self, *args, **kw):
        with self._threadLock:
            return super().addBoth(*args, **kw)

    def callback(self, result) -> None:
        with self._threadLock:
            if not self.called:
                super().callback(result)

    def errback(self, fail=None) -> None:
        with self._threadLock:
            super().errback(fail)
