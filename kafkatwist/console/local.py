"""
The console asks the broker what a client would ask it, in process: each
request is a C{kio} entity handed to the request handler plugin for its
ApiKey, on a request handler thread, with a L{ConsoleContext} that carries
the console user's principal.  So a page or an action goes through the same
code (validation, ZooKeeper writes, coordinator owners) and the same ACL
checks as the wire protocol, and nothing here waits: the answer comes back
to the main reactor as a Deferred.
"""

from __future__ import annotations

import itertools

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from zope.interface import implementer

from kafkatwist.interfaces import IRequestContext
from kafkatwist.network.pending import PendingResponse
from kafkatwist.protocol.apis import knownVersions, requestType
from kafkatwist.protocol.header import responseHeaderBytes
from kafkatwist.protocol.codec import BYTES_TYPES, EncodedResponse, decodeResponseFrame, encodeRequestFrame
from kafkatwist.security.checks import authorize

_ids = itertools.count(1)

#: the client id handlers and audit logs see
CLIENT_ID = "kafkatwist-console"


@implementer(IRequestContext)
class ConsoleContext:
    """
    One console request as a request handler sees it.

    @param principal: C{User:<name>} of the logged-in user, or
        C{User:ANONYMOUS} when the console is open.
    @param listener: the L{kafkatwist.config.Listener} whose name and
        security protocol the console stands for (addresses in answers are
        this listener's).
    """

    sasl = None
    clientId = CLIENT_ID
    size = 0

    def __init__(self, broker, reactor, principal: str, listener, clientAddress=("127.0.0.1", 0)) -> None:
        self._broker = broker
        self._reactor = reactor
        self.principal = principal
        self.listenerName = listener.name
        self.securityProtocol = listener.securityProtocol
        self.clientAddress = clientAddress
        self.connectionId = f"console-{next(_ids)}"
        self.apiKey = -1
        self.apiVersion = 0
        self.correlationId = 0
        self.pending = None
        self.throttleMs = 0

    @property
    def clock(self):
        return self._broker.clock

    def forRequest(self, apiKey: int, apiVersion: int) -> "ConsoleContext":
        """
        A fresh context for one request (a context holds one pending answer).
        """
        context = ConsoleContext.__new__(ConsoleContext)
        context.__dict__.update(self.__dict__)
        context.apiKey = apiKey
        context.apiVersion = apiVersion
        context.correlationId = next(_ids)
        context.pending = None
        context.throttleMs = 0
        return context

    def authorize(self, operation, resourceType, resourceName: str) -> bool:
        return authorize(self._broker.authorizer, self, operation, resourceType, resourceName)

    def allowed(self, operation, resourceType, resourceName: str, logIfDenied: bool = True) -> bool:
        return authorize(
            self._broker.authorizer, self, operation, resourceType, resourceName, logIfDenied
        )

    def respondLater(self) -> PendingResponse:
        if self.pending is not None:
            raise RuntimeError(f"respondLater called twice for {self!r}")
        self.pending = PendingResponse(self._reactor.callFromThread, lambda: True, self)
        return self.pending

    def __repr__(self) -> str:
        return f"<ConsoleContext api={self.apiKey} v{self.apiVersion} {self.principal}>"


class ConsoleError(Exception):
    """
    A request the handlers could not answer (no handler, a handler error).
    """


def pickVersion(handler, apiKey: int) -> int:
    known = knownVersions(apiKey)
    version = min(handler.maxVersion, known[-1]) if known else handler.maxVersion
    if version < handler.minVersion:
        raise ConsoleError(f"no version of API {apiKey} both sides know")
    return version


def call(broker, context: ConsoleContext, apiKey: int, build) -> Deferred:
    """
    Ask the handler of C{apiKey}, on a request handler thread.

    @param build: C{build(version, cls)} returns the request entity of that
        version (C{cls} is its class).
    @return: a Deferred fired on the main reactor with the response entity.
    """
    reactor = context._reactor
    done: Deferred = Deferred()

    def answer(result) -> None:
        reactor.callFromThread(_fire, done, result)

    def run() -> None:
        try:
            handler = broker.handlerFor(apiKey)
            if handler is None:
                raise ConsoleError(f"no handler for API {apiKey}")
            version = pickVersion(handler, apiKey)
            ctx = context.forRequest(apiKey, version)
            entity = build(version, requestType(apiKey, version))
            decode = getattr(handler, "decodeRequest", None)
            if decode is not None:
                # A handler with its own decoder reads the frame itself.
                frame = encodeRequestFrame(apiKey, version, ctx.correlationId, CLIENT_ID, entity)
                offset = 4 + 8 + 2 + len(CLIENT_ID) + (1 if type(entity).__flexible__ else 0)
                entity = decode(version, memoryview(frame), offset)
            result = handler.handle(ctx, entity)
            if isinstance(result, Deferred):
                pending = ctx.pending
                result.addBoth(lambda r: _settle(done, apiKey, version, r))
                if pending is not None:
                    pending.handedOver()
                return
            answer(_decoded(apiKey, version, result))
        except Exception:
            answer(Failure())

    broker.callInHandlerThread(run)
    return done


def _settle(done: Deferred, apiKey: int, version: int, result) -> None:
    # On the main reactor (the pending response posts there).
    if not isinstance(result, Failure):
        try:
            result = _decoded(apiKey, version, result)
        except Exception:
            result = Failure()
    _fire(done, result)


def _fire(done: Deferred, result) -> None:
    if not done.called:
        done.callback(result) if not isinstance(result, Failure) else done.errback(result)


def _decoded(apiKey: int, version: int, result):
    """
    A response already encoded (Produce answers bytes) read back as an entity.
    """
    if not isinstance(result, EncodedResponse):
        return result
    chunks = []
    for chunk in result.chunks:
        if not isinstance(chunk, BYTES_TYPES):
            raise ConsoleError("a response with file regions cannot be read back here")
        chunks.append(bytes(chunk))
    header = responseHeaderBytes(apiKey, version, 0)
    _, entity = decodeResponseFrame(apiKey, version, header + b"".join(chunks))
    return entity
