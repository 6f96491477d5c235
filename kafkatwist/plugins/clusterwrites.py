"""
The ZooKeeper writes of one admin request, made without a request handler
thread waiting for them.

In ZooKeeper mode Kafka's handler threads write ZooKeeper themselves; here
the cluster's admin methods (C{createTopic}, C{deleteTopic},
C{addPartitions}, C{setTopicConfigs}) run on the cluster's owner thread and
answer C{onDone(result, error)} there.  A handler thread that waited for
that answer was held as long as ZooKeeper was slow or paused (up to 30 s),
and with it every Produce and Fetch queued behind it.  L{ClusterWrites}
hands every write over at once; if they have all answered by the time the
handler is done with the request, it answers as before, from that thread;
otherwise the request answers through C{respondLater}: once every write has
answered, or at the deadline with REQUEST_TIMED_OUT for those that had not,
the rest of the request runs on a request handler thread (where disk I/O is
allowed), never on the cluster's thread or a reactor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from twisted.python.failure import Failure

from kafkatwist.errors import ErrorCode, KafkaError

__all__ = ["WRITE_TIMEOUT_SECONDS", "ClusterWrites"]

#: how long a request's ZooKeeper writes may take before they are answered
#: REQUEST_TIMED_OUT (what a handler thread once waited at most)
WRITE_TIMEOUT_SECONDS = 30.0


def timedOut() -> KafkaError:
    return KafkaError(ErrorCode.request_timed_out, "ZooKeeper did not answer in time")


class ClusterWrites:
    """
    One request's writes::

        writes = ClusterWrites(self.broker, context)
        writes.add(cluster.deleteTopic, name, then=lambda result, error: ...)
        return writes.run(finish)

    @param broker: the L{IBroker} (C{callInHandlerThread}).
    @param context: the request's L{IRequestContext} (C{respondLater},
        C{clock} for the deadline).
    """

    def __init__(self, broker, context, seconds: float = WRITE_TIMEOUT_SECONDS) -> None:
        self._broker = broker
        self._context = context
        self._seconds = seconds
        self._writes: list = []
        self._answers: list = []
        self._lock = threading.Lock()
        self._left = 0
        #: None while the handler thread issues the writes; then "now" (all
        #: answered: the handler thread finishes) or "later" (a pending
        #: response; the last answer or the deadline finishes)
        self._mode: str | None = None
        self._finished = False
        self._timer: Any = None
        #: the request's IPendingResponse once it answers later
        self._pending: Any = None
        self._finish: Callable | None = None

    def __len__(self) -> int:
        return len(self._writes)

    def add(self, method, *args, then: Callable[[object, KafkaError | None], None]) -> None:
        """
        A write: C{method(*args, onDone)}.  C{then(result, error)} runs
        before the request is finished, on the thread that finishes it:
        C{error} is what the write answered (a L{KafkaError}) or
        REQUEST_TIMED_OUT at the deadline.
        """
        self._writes.append((method, args, then))

    def run(self, finish: Callable[[Callable[[], object]], object]):
        """
        Issue the writes and finish the request once they have answered.

        @param finish: C{finish(respondLater)} builds what C{handle()}
            returns, after every write's C{then}; a later stage calls
            C{respondLater()} (the request's one L{IPendingResponse}) and
            returns its C{deferred}.
        @return: what C{handle()} returns.
        """
        self._finish = finish
        self._answers = [None] * len(self._writes)
        self._left = len(self._writes)
        for index, (method, args, then) in enumerate(self._writes):
            try:
                method(*args, self._onDone(index))
            except KafkaError as e:
                self._onDone(index)(None, e)
        with self._lock:
            if self._left == 0:
                self._mode = "now"
            else:
                self._mode = "later"
                self._pending = self._context.respondLater()
                self._timer = self._context.clock.callLater(self._seconds, self._expired)
        if self._mode == "now":
            return self._complete(lambda: self._context.respondLater())
        return self._pending.deferred

    def _onDone(self, index: int):
        def onDone(result, error) -> None:
            # Any thread (the cluster's owner).
            with self._lock:
                if self._finished or self._answers[index] is not None:
                    return
                self._answers[index] = (result, error)
                self._left -= 1
                if self._left or self._mode != "later":
                    return
                self._finished = True
                timer = self._timer
            if timer is not None:
                timer.cancel()
            self._broker.callInHandlerThread(self._later)

        return onDone

    def _expired(self) -> None:
        # On the connection's Processor: only hand over.
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self._broker.callInHandlerThread(self._later)

    def _later(self) -> None:
        pending = self._pending
        try:
            result = self._complete(lambda: pending)
        except Exception:
            pending.complete(Failure())
            return
        if result is not pending.deferred:
            pending.complete(result)

    def _complete(self, respondLater):
        for (method, args, then), answer in zip(self._writes, self._answers):
            if answer is None:
                then(None, timedOut())
            else:
                then(*answer)
        return self._finish(respondLater)
