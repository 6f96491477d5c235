"""
Answering a request from a coordinator's C{replyTo} callback.

The coordinator calls C{replyTo} either before the handler's call returns
(most requests: the handler thread ran the coordinator itself) or later on
another thread (a parked JoinGroup, an append another thread performed).
L{Reply} answers at once in the first case -- no Deferred, no thread hop --
and through L{IRequestContext.respondLater} in the second, so the Deferred
is only ever fired by the connection's own Processor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.python.failure import Failure

__all__ = ["Reply"]


class Reply:
    """
    One request's answer.  Pass the instance as the coordinator's
    C{replyTo}, then return L{Reply.response}C{()} from C{handle()}::

        reply = Reply(context, lambda result: makeResponse(result))
        coordinator.heartbeat(reply, ...)
        return reply.response()

    @param build: turns the coordinator's result into what C{handle()}
        returns (a response entity); run on whichever thread answers.
    """

    __slots__ = ("_context", "_build", "_lock", "_answered", "_result", "_pending")

    def __init__(self, context, build: Callable[[object], object]) -> None:
        self._context = context
        self._build = build
        self._lock = threading.Lock()
        self._answered = False
        self._result = None
        self._pending = None

    def __call__(self, result) -> None:
        """
        The coordinator's answer (from any thread, once).
        """
        with self._lock:
            if self._answered:
                return
            self._answered = True
            pending = self._pending
            if pending is None:
                self._result = result
                return
        if not isinstance(result, Failure):
            try:
                result = self._build(result)
            except Exception:
                result = Failure()
        pending.complete(result)

    def response(self):
        """
        @return: the response now if the answer came already, else the
            Deferred of a pending response that fires when it comes.
        @raise Exception: the coordinator failed (the connection is closed
            with a log line, as for any handler error).
        """
        with self._lock:
            if not self._answered:
                self._pending = self._context.respondLater()
                return self._pending.deferred
            result = self._result
        if isinstance(result, Failure):
            result.raiseException()
        return self._build(result)
