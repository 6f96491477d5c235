"""
The request handler pool (Kafka's C{KafkaRequestHandlerPool}): threads that
take requests from the RequestChannel, decode them, call the handler plugin
for their ApiKey, encode the answer and send it to the Processor that owns
the connection.

A handler may answer later (long-poll Fetch, JoinGroup): it calls
C{context.respondLater()} and returns the pending response's Deferred; the
thread moves on at once.  Whoever completes it posts the answer to the
Processor that owns the connection, where the Deferred fires and the
response is encoded and written (L{kafkatwist.network.pending}).
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time

from twisted.internet.defer import Deferred
from twisted.logger import Logger, LogLevel
from twisted.python.failure import Failure

from kafkatwist.config import TLS_PROTOCOLS
from kafkatwist.metrics.stats import HandlerIdle
from kafkatwist.util.affinity import pinCurrentThread
from kafkatwist.network.channel import Request, Response
from kafkatwist.interfaces import CloseConnection, frameAnswerer
from kafkatwist.util.purgatory import DelayedActions
from kafkatwist.protocol.apis import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, apiName, responseType
from kafkatwist.protocol.entities import durationMs
from kafkatwist.quota.store import REQUEST_PERCENTAGE
from kafkatwist.network.transport import TLS_READ_CHUNK
from kafkatwist.protocol.codec import (
    BYTES_TYPES,
    EncodedResponse,
    MalformedRequest,
    decodeRequest,
    encodeResponseFrame,
)
from kafkatwist.protocol.errorcounts import errorCounts
from kafkatwist.protocol.errorresponse import errorResponse
from kafkatwist.protocol.versions import unsupportedApiVersionsBody

log = Logger()

#: requests client quotas never throttle: a client must always be able to
#: learn the versions and authenticate (Kafka's exempt requests)
_QUOTA_EXEMPT = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))

#: L{HandlerPool.handle}'s answer when the handler cannot answer on a
#: network thread: the request goes to a request handler thread
NOT_HERE = Response(None, None)


class HandlerPool:
    """
    @param broker: what answers requests: C{handlerFor(apiKey)} and
        C{supportedVersions()} (the L{IBroker}; the SocketServer gives it
        with L{kafkatwist.network.server.SocketServer.serve}).
    @param clientQuotas: the broker's
        L{kafkatwist.quota.manager.ClientQuotas} (request_percentage), or
        C{None}: no request is throttled.
    """

    def __init__(self, channel, broker, numThreads: int, cpus=None, clientQuotas=None) -> None:
        self.channel = channel
        self.broker = broker
        self.clientQuotas = clientQuotas
        self.numThreads = numThreads
        self.cpus = cpus
        self._threads: list[threading.Thread] = []
        self._warnedLegacy: set[str] = set()
        self._started = 0
        self._running = False
        self._resizeLock = threading.Lock()
        #: handler -> its answerFrame or None (L{_frameAnswerer})
        self._frameAnswerers: dict = {}
        #: the threads' idle clock (L{HandlerIdle}), read by the scrape
        self.idle = HandlerIdle()

    @property
    def broker(self):
        return self._broker

    @broker.setter
    def broker(self, broker) -> None:
        # (the SocketServer gives the broker once it is built: serve)
        self._broker = broker
        #: where every response's error counts go (Kafka's ErrorsPerSec);
        #: a broker stand-in without it counts nothing
        self._errors = getattr(broker, "requestErrors", None)

    def start(self) -> None:
        with self._resizeLock:
            self._running = True
            for _ in range(self.numThreads):
                self._startThread()

    def _startThread(self) -> None:
        thread = threading.Thread(
            target=self._run, name=f"kafkatwist-request-handler-{self._started}", daemon=True
        )
        self._started += 1
        thread.start()
        self._threads.append(thread)

    def resize(self, numThreads: int) -> None:
        """
        C{num.io.threads} updated dynamically: start threads, or tell the
        surplus to end once they have taken what is queued before (as
        Kafka's pool does).  Safe from any thread.
        """
        with self._resizeLock:
            if not self._running:
                pass
            elif numThreads > self.numThreads:
                for _ in range(numThreads - self.numThreads):
                    self._startThread()
            elif numThreads < self.numThreads:
                self.channel.close(self.numThreads - numThreads)
            self._threads = [t for t in self._threads if t.is_alive()]
            self.numThreads = numThreads

    def join(self, timeout: float) -> bool:
        """
        Wait for the threads to end (after the channel was closed).

        @return: whether all ended in time.
        """
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def _run(self) -> None:
        pinCurrentThread(self.cpus)
        receive = self.channel.receiveRequests
        actions = DelayedActions.install()
        # The idle clock (Kafka's RequestHandlerAvgIdlePercent): how long
        # this thread waits in receive, published in its slot as each wait
        # begins and ends (~1.3k instructions a wait).
        slot = self.idle.slot()
        monotonic = time.monotonic
        idle = 0.0
        while True:
            slot.since = since = monotonic()
            batch = receive()
            idle += monotonic() - since
            slot.state = (idle, since)
            if batch is None:
                slot.ended = monotonic()
                return
            if batch.__class__ is tuple:
                f, args = batch
                try:
                    f(*args)
                except Exception:
                    log.failure("Error in {f}, run on a request handler thread", f=f)
            elif len(batch) == 1:
                response = self.handle(batch[0])
                if response is not None:
                    batch[0].processor.sendResponse(response)
            else:
                byProcessor: dict = {}
                for request in batch:
                    response = self.handle(request)
                    if response is not None:
                        byProcessor.setdefault(request.processor, []).append(response)
                for processor, responses in byProcessor.items():
                    processor.sendResponses(responses)
            # Work a handler deferred until its answer was on its way (Kafka's
            # ActionQueue): e.g. the long-poll fetches a produce satisfied.
            actions.run()

    def handle(self, request: Request, here: bool = False) -> Response | None:
        """
        Run one request through its handler.

        @param here: called on the Processor's thread: the handler's
            C{handleOnNetworkThread(context, request)} answers (requests that
            need neither disk nor ZooKeeper, e.g. ApiVersions and Metadata,
            spared the hand-off to a handler thread and back); it returns
            C{None} when a request handler thread must answer after all.
        @return: the response to send now, or C{None} if a Deferred will
            send it later; with C{here}, L{NOT_HERE} when the handler has no
            answer on a network thread (nothing was released: the request
            goes on to the channel as it is).
        """
        header = request.header
        body = None
        try:
            handler = self.broker.handlerFor(header.apiKey)
            if not here:
                try:
                    answerFrame = self._frameAnswerers[handler]
                except KeyError:
                    answerFrame = self._frameAnswerer(handler)
                quotas = self.clientQuotas
                if answerFrame is not None and (quotas is None or not quotas.active(REQUEST_PERCENTAGE)):
                    # (with a request_percentage quota, the general path
                    # counts the handler's time)
                    try:
                        chunks = answerFrame(request.context, request.frame, header.bodyOffset)
                    except Exception:
                        # Answered as the general path answers a handler
                        # that raised: the error response needs the body.
                        failure = Failure()
                        if failure.type is not CloseConnection:
                            body = self._decodeQuietly(handler, request)
                        self._abandon(request)
                        return self._done(request, self._failed(failure, request, body))
                    if chunks.__class__ is Deferred:
                        # Answered later after all (a Produce that must
                        # wait for the ISR): as a handler's deferred.
                        request.handler = handler
                        return self._handOver(request, handler, chunks, None)
                    if chunks is not NotImplemented:
                        # (_done, inline)
                        memory, request.memory = request.memory, 0
                        request.frame = None
                        if memory:
                            request.processor.memoryPool.release(memory)
                        request.handler = handler
                        request.completedAt = time.monotonic()
                        return Response(request, chunks)
            if header.apiKey == API_VERSIONS and not (
                handler.minVersion <= header.apiVersion <= handler.maxVersion
            ):
                # Answer in the v0 layout every client can read, with our
                # ranges, so the client retries with a version we know.
                body = unsupportedApiVersionsBody(self.broker.supportedVersions())
                chunks = encodeResponseFrame(API_VERSIONS, 0, header.correlationId, body)
                if self._errors is not None:
                    self._errors.record(API_VERSIONS, errorCounts(body))
                return self._done(request, Response(request, chunks))
            try:
                decode = getattr(handler, "decodeRequest", None)
                if decode is not None:
                    # The handler's own fast decoder (Produce): it answers
                    # what it decodes with an already encoded response.
                    body = decode(header.apiVersion, request.frame, header.bodyOffset)
                else:
                    body = decodeRequest(header.apiKey, header.apiVersion, request.frame, header.bodyOffset)
            except MalformedRequest as e:
                return self._done(
                    request,
                    Response(
                        request,
                        None,
                        close=True,
                        reason=f"malformed {apiName(header.apiKey)} v{header.apiVersion} request: {e}",
                    ),
                )
            request.handler = handler
            quotas = self._requestQuota(request)
            started = time.thread_time_ns() if quotas is not None else 0
            if here:
                inline = getattr(handler, "handleOnNetworkThread", None)
                result = inline(request.context, body) if inline is not None else None
                if result is None:
                    return NOT_HERE
            else:
                result = handler.handle(request.context, body)
            if quotas is not None:
                quotas.handlerTime(request.context, time.thread_time_ns() - started)
        except Exception:
            self._abandon(request)
            return self._done(request, self._failed(Failure(), request, body))
        if isinstance(result, Deferred):
            return self._handOver(request, handler, result, body)
        context = request.context
        if context.pending is not None:
            context.pending.abandon()
        response = self._encode(request, result, body)
        if (
            isinstance(result, EncodedResponse)
            # (a body of one bytes chunk holds no file region)
            and not (len(result.chunks) == 1 and result.chunks[0].__class__ is bytes)
            and context.securityProtocol in TLS_PROTOCOLS
        ):
            response.chunks = _readSmallRegions(response.chunks, TLS_READ_CHUNK)
        # (_done, inline: every request's path)
        memory, request.memory = request.memory, 0
        request.frame = None
        if memory:
            request.processor.memoryPool.release(memory)
        request.completedAt = time.monotonic()
        return response

    @staticmethod
    def _decodeQuietly(handler, request: Request):
        """
        The request's body decoded as the general path decodes it, or
        C{None} if it does not decode.
        """
        header = request.header
        try:
            decode = getattr(handler, "decodeRequest", None)
            if decode is not None:
                return decode(header.apiVersion, request.frame, header.bodyOffset)
            return decodeRequest(header.apiKey, header.apiVersion, request.frame, header.bodyOffset)
        except Exception:
            return None

    def _frameAnswerer(self, handler):
        """
        The handler's C{answerFrame(context, frame, offset)}, if it has one;
        kept per handler.  Not called while a request_percentage quota is
        set: the general path counts the handler's time.

        C{answerFrame} answers the commonest shape of its requests straight
        from the frame, before anything is decoded (the built-in Produce):
        the response chunks, C{None} (no response), or C{NotImplemented}
        when the request is of another shape and nothing was done -- it
        then goes the general way, C{decodeRequest} and C{handle}.  A
        drop-in wrapping the handler has no C{answerFrame} (unless it says
        so), so it sees every request; neither does a subclass overriding
        C{handle} (L{frameAnswerer}).
        """
        answerFrame = frameAnswerer(handler)
        try:
            self._frameAnswerers[handler] = answerFrame
        except TypeError:
            pass
        return answerFrame

    def _done(self, request: Request, response: Response) -> Response:
        self._release(request)
        request.completedAt = time.monotonic()
        return response

    def _handOver(self, request: Request, handler, result: Deferred, body) -> None:
        """
        A handler answers later: its deferred sends the response.
        """
        self._release(request)
        pending = request.context.pending
        if pending is not None:
            # Fires on the connection's Processor thread, after this.
            result.addCallbacks(
                self._answered, self._answerFailed, (request, body), None, (request, body)
            )
            pending.handedOver()
        else:
            self._legacyDeferred(handler, result)
            result.addCallbacks(self._later, self._laterFailed, (request, body), None, (request, body))

    def _release(self, request: Request) -> None:
        memory, request.memory = request.memory, 0
        request.frame = None
        if memory:
            request.processor.memoryPool.release(memory)

    def _requestQuota(self, request: Request):
        """
        Kafka's request_percentage: the throttle a client's handler time so
        far calls for goes on this request's response (handlers raise it
        for their byte rates), and this request's handler time is counted.

        @return: the broker's client quotas when the request counts.
        """
        quotas = self.clientQuotas
        if quotas is None or request.header.apiKey in _QUOTA_EXEMPT:
            return None
        if quotas.active(REQUEST_PERCENTAGE):
            request.context.throttleMs = quotas.requestThrottle(request.context)
            return quotas
        return None

    def _encode(self, request: Request, result, body=None) -> Response:
        if result is None:
            return Response(request, None)
        throttleMs = getattr(request.context, "throttleMs", 0)
        if throttleMs > 0 and hasattr(result, "throttle_time"):
            if durationMs(result.throttle_time) < throttleMs:
                result = dataclasses.replace(result, throttle_time=datetime.timedelta(milliseconds=throttleMs))
        header = request.header
        try:
            chunks = encodeResponseFrame(header.apiKey, header.apiVersion, header.correlationId, result)
        except Exception:
            return self._failed(Failure(), request, body)
        errors = self._errors
        if errors is not None:
            counts = result.errors if isinstance(result, EncodedResponse) else errorCounts(result)
            if counts:
                errors.record(header.apiKey, counts)
        return Response(request, chunks)

    def _failed(self, failure: Failure, request: Request, body=None) -> Response:
        """
        A handler raised (or failed to be encoded): as Kafka does, answer
        UNKNOWN_SERVER_ERROR for everything the request named and keep the
        connection; one line says so, the traceback is at debug.  Only a
        request with no error response (undecoded, Produce acks=0) closes
        its connection, and one whose handler raised L{CloseConnection}.
        """
        if failure.check(CloseConnection):
            # Asked for (acks=0 Produce that failed): the connection's
            # closing line says why.
            return Response(request, None, close=True, reason=str(failure.value))
        header = request.header
        api = apiName(header.apiKey)
        error = f"{failure.type.__name__}: {failure.getErrorMessage()}"
        log.failure(
            "Handler for {api} v{version} failed on {context}",
            failure,
            level=LogLevel.debug,
            api=api,
            version=header.apiVersion,
            context=request.context,
        )
        chunks = None
        if body is not None:
            try:
                entity = errorResponse(responseType(header.apiKey, header.apiVersion), body)
                chunks = encodeResponseFrame(header.apiKey, header.apiVersion, header.correlationId, entity)
                if self._errors is not None:
                    self._errors.record(header.apiKey, errorCounts(entity))
            except Exception as e:
                log.debug("No error response for {api}: {e}", api=api, e=e)
        if chunks is not None:
            log.error(
                "Handler for {api} v{version} failed on {context}: {error}; answered UNKNOWN_SERVER_ERROR",
                api=api, version=header.apiVersion, context=request.context, error=error,
            )
            return Response(request, chunks)
        log.error(
            "Handler for {api} v{version} failed on {context}: {error}; closing the connection",
            api=api, version=header.apiVersion, context=request.context, error=error,
        )
        return Response(request, None, close=True, reason=f"handler error: {failure.getErrorMessage()}")

    @staticmethod
    def _abandon(request: Request) -> None:
        pending = request.context.pending
        if pending is not None:
            pending.abandon()

    def _legacyDeferred(self, handler, result: Deferred) -> None:
        # A Deferred not from context.respondLater() may fire on any thread,
        # possibly while callbacks are being added here.  Still served (its
        # answer is posted to the Processor), but said once per handler.
        if result.called:
            return
        name = type(handler).__qualname__
        if name in self._warnedLegacy:
            return
        self._warnedLegacy.add(name)
        log.warn(
            "{handler} answers with a Deferred not from context.respondLater(); "
            "such Deferreds are deprecated (see docs/plugins.md)",
            handler=name,
        )

    def _answered(self, result, request: Request, body=None) -> None:
        # In the Processor's thread (a pending response fires there).
        request.completedAt = time.monotonic()
        request.connection.sendResponse(self._encode(request, result, body))

    def _answerFailed(self, failure: Failure, request: Request, body=None) -> None:
        request.completedAt = time.monotonic()
        request.connection.sendResponse(self._failed(failure, request, body))

    def _later(self, result, request: Request, body=None) -> None:
        request.completedAt = time.monotonic()
        request.processor.sendResponse(self._encode(request, result, body))

    def _laterFailed(self, failure: Failure, request: Request, body=None) -> None:
        request.completedAt = time.monotonic()
        request.processor.sendResponse(self._failed(failure, request, body))


def _readSmallRegions(chunks, budget: int):
    """
    For TLS, which must encrypt record data in memory: read up to C{budget}
    bytes of file regions here, on the handler thread, so a typical fetch
    response needs no trip to a handler thread and back from its Processor
    (which may not touch the disk).  Larger regions stay regions and are
    streamed in chunks read by handler threads.
    """
    if not chunks:
        return chunks
    out = []
    for chunk in chunks:
        if not isinstance(chunk, BYTES_TYPES) and chunk.length <= budget:
            try:
                data = chunk.read()
            except OSError:
                # Left to the streaming path, which ends the connection.
                out.append(chunk)
                budget = 0
                continue
            chunk.close()
            budget -= len(data)
            chunk = data
        out.append(chunk)
    return out
