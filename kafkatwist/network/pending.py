"""
Answers given later (L{IPendingResponse}): the one way a request is
answered after its handler returned.

Three threads meet here, and the Deferred belongs to one at a time:

  - the handler thread creates the pending response in C{handle()} and may
    add callbacks to its C{deferred} until C{handle()} returns; the handler
    pool then adds its own and calls L{PendingResponse.handedOver};
  - any thread (an append that satisfies a parked Fetch, a coordinator, a
    timer) calls L{PendingResponse.complete} once -- it never touches the
    Deferred, it only stores the result;
  - whichever of those two comes second posts one call to the Processor that
    owns the connection, which fires the Deferred on its own thread.

So the only state shared between threads is a few flags under a lock, and
each answer costs exactly one hand-off to the Processor, as the response
itself would.
"""

from __future__ import annotations

import threading

from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatwist.interfaces import IPendingResponse
from kafkatwist.protocol.codec import EncodedResponse, closeRegions

log = Logger()

_NOTHING = object()


def discardResult(result) -> None:
    """
    Release what an answer that will never be sent holds (file regions).
    """
    if isinstance(result, EncodedResponse):
        closeRegions(result.chunks)


@implementer(IPendingResponse)
class PendingResponse:
    """
    @param post: C{post(f, *args)} runs C{f(*args)} on the thread that owns
        the connection (a Processor's C{callInThread}); safe from any thread.
    @param isOpen: called on that thread: whether the connection still wants
        an answer.  A response for a closed connection is dropped quietly.
    @param describe: what to name in a log line (the request context).
    """

    __slots__ = (
        "deferred",
        "_post",
        "_isOpen",
        "_describe",
        "_lock",
        "_result",
        "_completed",
        "_handedOver",
        "_abandoned",
        "_complainedTwice",
    )

    def __init__(self, post, isOpen, describe=None) -> None:
        self.deferred = Deferred()
        self._post = post
        self._isOpen = isOpen
        self._describe = describe
        self._lock = threading.Lock()
        self._result = _NOTHING
        self._completed = False
        self._handedOver = False
        self._abandoned = False
        self._complainedTwice = False

    def complete(self, result) -> None:
        """
        Answer, from any thread, once.  See L{IPendingResponse.complete}.
        """
        with self._lock:
            if self._completed:
                complain = not self._complainedTwice
                self._complainedTwice = True
                action = "twice"
            else:
                self._completed = True
                if self._abandoned:
                    action = "drop"
                elif self._handedOver:
                    action = "post"
                else:
                    self._result = result
                    action = "keep"
        if action == "post":
            self._post(self._fire, result)
        elif action == "drop":
            discardResult(result)
        elif action == "twice":
            discardResult(result)
            if complain:
                # A programming error in whoever answers: the first answer
                # stands, later ones are ignored; once is enough to find it.
                log.error(
                    "Pending response for {request} completed more than once; "
                    "only the first answer is sent",
                    request=self._describe,
                )

    def handedOver(self) -> None:
        """
        Called by the handler pool on the handler thread once C{handle()}
        returned this response's Deferred and the pool's callbacks are on
        it: from now on only the owning thread touches the Deferred.
        """
        with self._lock:
            self._handedOver = True
            result, self._result = self._result, _NOTHING
        if result is not _NOTHING:
            self._post(self._fire, result)

    def abandon(self) -> None:
        """
        The handler claimed the answer for later but then answered at once
        (or failed): a later C{complete} has nowhere to go.
        """
        with self._lock:
            self._abandoned = True
            result, self._result = self._result, _NOTHING
        if result is not _NOTHING:
            discardResult(result)

    def _fire(self, result) -> None:
        # On the owning thread.
        if not self._isOpen():
            discardResult(result)
            return
        if isinstance(result, Failure):
            self.deferred.errback(result)
        else:
            self.deferred.callback(result)
