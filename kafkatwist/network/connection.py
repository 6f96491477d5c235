"""
One client connection, as a Processor sees it (Kafka's C{KafkaChannel}).

Framing: a 4-byte big-endian size, then the request.  A size above
C{socket.request.max.bytes} or below the smallest header closes the
connection (Kafka's C{InvalidReceiveException}).

Mute/unmute: once a complete request is handed on, no further request is
taken from this connection until its response has been written to the
socket, so responses leave in request order.  Muting is lazy: reading only
stops when more bytes actually arrive while a request is in flight, which a
ping-pong client never does, and saves two C{epoll_ctl} calls per request.

Memory (C{queued.max.request.bytes}, KIP-72): a frame's size is reserved
from the L{MemoryPool} once all its bytes have arrived, when it becomes a
queued request; if the pool is exhausted, the connection holds that one
frame and reads no further until memory is released.  Kafka reserves as
soon as the size prefix is read, so one connection announcing a large frame
and sending it slowly holds the pool, and every other connection stops
reading; here a slow sender holds only its own partial frame.  A frame
larger than the whole pool could never be queued: the connection is closed
at once, with one log line.
"""

from __future__ import annotations

import struct
import time
from collections import deque

from OpenSSL import SSL
from twisted.internet import tcp
from twisted.internet.interfaces import IHandshakeListener, IPushProducer, ISSLTransport
from twisted.internet.protocol import Protocol
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.interfaces import IRequestContext
from kafkatwist.util.logthrottle import connectionLogs
from kafkatwist.network.channel import Request
from kafkatwist.network.pending import PendingResponse
from kafkatwist.network.tls import tlsFailureInWords
from kafkatwist.network.transport import (
    ANONYMOUS,
    BufferedTransportLayer,
    PlaintextTransportLayer,
    SslTransportLayer,
)
from kafkatwist.protocol.apis import API_VERSIONS, apiName
from kafkatwist.protocol.codec import BYTES_TYPES, closeRegions
from kafkatwist.protocol.header import MIN_HEADER_SIZE, MalformedHeader, parseRequestHeader
from kafkatwist.security.checks import authorize
from kafkatwist.security.session import SASL_MAX_RECEIVE_SIZE, rawTokenRequestFrame, rawTokenResponse
from kafkatwist.security.sslprincipal import NoMatchingRule

log = Logger()

_SIZE = struct.Struct(">i")

#: how long a closing TLS connection may wait for close_notify
CLOSE_GRACE_SECONDS = 2.0

#: never ask the kernel for more than this per read
MAX_READ_SIZE = 4 * 1024 * 1024
DEFAULT_READ_SIZE = 64 * 1024


#: at most this many chunks per C{sendmsg} (far below any IOV_MAX)
MAX_CHUNKS_PER_SEND = 64


def _bytesRun(chunks: deque) -> list:
    """
    The bytes-like chunks at the head of C{chunks}, up to the first file
    region (which goes by C{sendfile}).
    """
    run = []
    for chunk in chunks:
        if not isinstance(chunk, BYTES_TYPES) or len(run) == MAX_CHUNKS_PER_SEND:
            break
        run.append(chunk)
    return run


@implementer(IRequestContext)
class RequestContext:
    """
    Per-request fields, plus the connection's (read through it, so the
    TLS principal is the one known once the handshake completed).
    """

    __slots__ = (
        "_connection", "apiKey", "apiVersion", "correlationId", "clientId", "pending", "size",
        "throttleMs",
    )

    def __init__(self, connection: "KafkaConnection", header, size: int = 0) -> None:
        self._connection = connection
        self.apiKey = header.apiKey
        self.apiVersion = header.apiVersion
        self.correlationId = header.correlationId
        self.clientId = header.clientId
        #: the L{PendingResponse} once C{respondLater} was called
        self.pending = None
        #: the request's size on the wire (its frame and size prefix)
        self.size = size
        #: how long the connection is throttled once the response is sent
        #: (client quotas): set by the handler thread, carried to the
        #: Processor with the response, which alone acts on it
        self.throttleMs = 0

    connectionId = property(lambda self: self._connection.connectionId)
    listenerName = property(lambda self: self._connection.listenerName)
    securityProtocol = property(lambda self: self._connection.securityProtocol)
    principal = property(lambda self: self._connection.principal)
    sasl = property(lambda self: self._connection.sasl)
    clientAddress = property(lambda self: self._connection.clientAddress)
    clock = property(lambda self: self._connection.owner.clock)

    def authorize(self, operation, resourceType, resourceName: str) -> bool:
        """
        See L{IRequestContext.authorize}.
        """
        return authorize(self._connection.owner.authorizer, self, operation, resourceType, resourceName)

    def respondLater(self) -> PendingResponse:
        """
        See L{IRequestContext.respondLater}: completions are posted to the
        Processor that owns the connection.
        """
        if self.pending is not None:
            raise RuntimeError(f"respondLater called twice for {self!r}")
        connection = self._connection
        self.pending = PendingResponse(connection.owner.callInThread, connection.isOpen, self)
        return self.pending

    def __repr__(self) -> str:
        return (
            f"<RequestContext {apiName(self.apiKey)} v{self.apiVersion} "
            f"corr={self.correlationId} conn={self.connectionId} {self.principal}>"
        )


@implementer(IHandshakeListener, IPushProducer)
class KafkaConnection(Protocol):
    """
    @ivar owner: the Processor (or a test double) providing C{clock},
        C{submit(request)}, C{supportedVersions}, C{memoryPool},
        C{maxRequestSize}, C{connectionOpened(c)}, C{connectionClosed(c)},
        C{callInThread(f, *args)} and C{offload(f, args, then)}.
    @ivar lastActive: C{owner.clock.seconds()} of the last byte in or out.
    """

    # Slots: the request path reads these flags about 20 times a request on
    # the Processor's thread, and CPython 3.11 reads a slot fast but an
    # attribute an instance lacks (a class-level default) by the generic
    # lookup every time.  Slots also keep them out of the __dict__ (which
    # only Twisted's own attributes use): no shared-keys limit to outgrow,
    # whatever a connection sets as it lives and closes.
    __slots__ = (
        "owner", "listenerName", "index", "_securityProtocol", "sasl", "_rawToken",
        "quotaHost", "connectionId", "clientAddress", "layer", "lastActive", "closed",
        "closeReason", "_closing", "_abortCall", "_buffer", "_frameSize", "_inflight",
        "_waitingForMemory", "_muted", "_writePaused", "_readingPaused", "_readsGrown",
        "_chunks", "_regionSent", "_sending", "_pickedUpAt", "_seconds", "_throttleCall",
        "_taking",
    )

    def __init__(self, owner, listenerName: str, index: int = 0, *, securityProtocol: str | None = None,
                 sasl=None) -> None:
        self.owner = owner
        self.listenerName = listenerName
        self.index = index
        self._securityProtocol = securityProtocol
        #: the L{SaslSession} on a SASL listener, else None
        self.sasl = sasl
        #: the request in flight is a bare SASL token (after SaslHandshake v0)
        self._rawToken = False
        #: the host the connection quotas counted this connection under
        #: (set by the Processor that adopted it), released when it closes
        self.quotaHost: str | None = None
        self.connectionId = "unconnected"
        self.clientAddress = ("", 0)
        self.layer = None
        self.lastActive = 0.0
        self.closed = False
        self.closeReason: str | None = None
        self._closing = False
        self._abortCall = None
        #: the client-quota throttle in progress (a delayed call), if any
        self._throttleCall = None
        self._buffer = bytearray()
        self._frameSize = -1
        self._inflight = False
        self._waitingForMemory = False
        self._muted = False
        self._writePaused = False
        self._readingPaused = False
        self._readsGrown = False
        #: inside L{_takeRequests}: a request answered at once (on the
        #: Processor's thread) lets that loop take the next one, no recursion
        self._taking = False
        #: queued response chunks: a deque once a response is queued (an
        #: empty deque is ~760 bytes, on every idle connection)
        self._chunks = ()
        self._regionSent = 0
        self._sending = None
        self._pickedUpAt = 0.0
        clock = owner.clock
        # A ThreadSafeClock's seconds() only asks its reactor: ask it directly
        # (twice a request).
        self._seconds = getattr(getattr(clock, "reactor", None), "seconds", None) or clock.seconds

    # -- lifecycle -----------------------------------------------------------

    def connectionMade(self) -> None:
        transport = self.transport
        if ISSLTransport.providedBy(transport):
            self.layer = SslTransportLayer(transport, self.owner.offload, self.owner.sslPrincipalBuilder)
            # TLS buffers what we write: stop reading while it is backed up.
            transport.registerProducer(self, True)
        elif isinstance(transport, tcp.Connection):
            self.layer = PlaintextTransportLayer(transport)
        else:
            self.layer = BufferedTransportLayer(transport)
        peer = transport.getPeer()
        host = transport.getHost()
        self.clientAddress = (getattr(peer, "host", str(peer)), getattr(peer, "port", 0))
        self.connectionId = (
            f"{getattr(host, 'host', '')}:{getattr(host, 'port', 0)}-"
            f"{self.clientAddress[0]}:{self.clientAddress[1]}-{self.index}"
        )
        self.lastActive = self._seconds()
        self.owner.connectionOpened(self)

    @property
    def securityProtocol(self) -> str:
        return self._securityProtocol or self.layer.securityProtocol

    @property
    def principal(self) -> str:
        """
        C{User:<name>} once SASL authenticated the client, else what the
        transport knows (the certificate subject on SSL, C{User:ANONYMOUS}).
        """
        sasl = self.sasl
        if sasl is not None:
            return sasl.principal or ANONYMOUS
        return self.layer.principal

    def isOpen(self) -> bool:
        """
        Whether a response would still be sent (in the Processor's thread).
        """
        return not (self.closed or self._closing)

    def handshakeCompleted(self) -> None:
        try:
            self.layer.handshakeCompleted()
        except NoMatchingRule as e:
            # Kafka fails authentication when no mapping rule applies.
            self.close(str(e))

    def connectionLost(self, reason) -> None:
        self.closed = True
        if self._abortCall is not None and self._abortCall.active():
            self._abortCall.cancel()
        self._abortCall = None
        if self._throttleCall is not None and self._throttleCall.active():
            self._throttleCall.cancel()
        self._throttleCall = None
        self._dropChunks()
        self._buffer = bytearray()
        if self.closeReason is None:
            if reason is not None and reason.check(SSL.Error):
                self.closeReason = tlsFailureInWords(reason.value)
            else:
                self.closeReason = reason.getErrorMessage() if reason is not None else "closed"
        self.owner.connectionClosed(self)

    def close(self, reason: str) -> None:
        """
        Close with a log line (bad input, idle, shutdown).
        """
        if self._closing or self.closed:
            return
        self._closing = True
        self.closeReason = reason
        connectionLogs.emit(
            log.info, ("closing", self.clientAddress[0], reason),
            "Closing connection {connectionId} on {listener}: {reason}",
            connectionId=self.connectionId,
            listener=self.listenerName,
            reason=reason,
        )
        transport = self.transport
        # A paused TLS transport never sees the peer's close_notify.
        if self._readingPaused:
            self._readingPaused = False
            transport.resumeProducing()
        transport.loseConnection()
        if hasattr(transport, "abortConnection"):
            self._abortCall = self.owner.clock.reactor.callLater(
                CLOSE_GRACE_SECONDS, transport.abortConnection
            )

    # -- reading -------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._closing:
            return
        self.lastActive = self._seconds()
        # (With the buffer empty no frame size is pending and no frame waits
        # for memory: both keep bytes in the buffer.)
        if (
            not self._buffer
            and not self._inflight
            and self.sasl is None
            and not self._muted
            and self._throttleCall is None
            and len(data) > 4
        ):
            # The commonest read: exactly one whole request, nothing held.
            # Taken straight from the bytes read, with the checks
            # _takeFrames makes; anything else goes the general way.
            (size,) = _SIZE.unpack_from(data, 0)
            if size + 4 == len(data) and MIN_HEADER_SIZE <= size <= self.owner.maxRequestSize:
                pool = self.owner.memoryPool
                capacity = pool.capacity
                # (No waiter here: refused, the general way asks again with one.)
                if capacity < 0 or (size <= capacity and pool.tryAllocate(size)):
                    self._frameReceived(data[4:], size)
                    if self._readingPaused:
                        self._updateReading()
                    return
        self._buffer += data
        if not self._inflight and not self._waitingForMemory:
            self._takeRequests()
        self._updateReading()

    def _takeRequests(self) -> None:
        if self._taking:
            return
        self._taking = True
        try:
            self._takeFrames()
        finally:
            self._taking = False

    def _takeFrames(self) -> None:
        buffer = self._buffer
        while not self._inflight and not self._closing and not self._muted and self._throttleCall is None:
            if self._frameSize < 0:
                if len(buffer) < 4:
                    return
                (size,) = _SIZE.unpack_from(buffer, 0)
                smallest, largest = MIN_HEADER_SIZE, self.owner.maxRequestSize
                sasl = self.sasl
                if sasl is not None and not sasl.authenticated:
                    # Kafka's sasl.server.max.receive.size: nobody sends a
                    # large frame before saying who they are.
                    largest = min(largest, SASL_MAX_RECEIVE_SIZE)
                    if sasl.rawTokens:
                        smallest = 0
                if size < smallest or size > largest:
                    self.close(f"invalid request size {size} (allowed {smallest}..{largest})")
                    return
                pool = self.owner.memoryPool
                if 0 <= pool.capacity < size:
                    self.close(
                        f"request of {size} bytes can never fit in "
                        f"queued.max.request.bytes={pool.capacity}"
                    )
                    return
                self._frameSize = size
            end = 4 + self._frameSize
            if len(buffer) < end:
                if end - len(buffer) > DEFAULT_READ_SIZE or self._readsGrown:
                    self._growReads(end - len(buffer))
                return
            if not self.owner.memoryPool.tryAllocate(self._frameSize, self._memoryAvailable):
                self._waitingForMemory = True
                return
            memory = self._frameSize
            frame = bytes(memoryview(buffer)[4:end])
            del buffer[:end]
            self._frameSize = -1
            if self._readsGrown:
                self._growReads(0)
            self._frameReceived(frame, memory)

    def _growReads(self, missing: int) -> None:
        # One recv per 64 KiB would copy a 1 MiB request sixteen times over;
        # grow the read size while a large frame is pending.
        transport = self.transport
        if isinstance(transport, tcp.Connection):
            size = min(max(missing, DEFAULT_READ_SIZE), MAX_READ_SIZE)
            transport.bufferSize = size
            self._readsGrown = size > DEFAULT_READ_SIZE

    def _memoryAvailable(self) -> None:
        # Called from whichever thread released memory.
        self.owner.callInThread(self._retryMemory)

    def _retryMemory(self) -> None:
        if self.closed or not self._waitingForMemory:
            return
        self._waitingForMemory = False
        self._takeRequests()
        self._updateReading()

    def _frameReceived(self, frame: bytes, memory: int) -> None:
        sasl = self.sasl
        if sasl is not None and sasl.rawTokens and not sasl.authenticated:
            # After SaslHandshake v0 the client sends bare tokens: each goes
            # through the SaslAuthenticate handler as the v0 request it
            # stands for, and its answer goes back bare (sendResponse).
            frame = rawTokenRequestFrame(frame)
            self._rawToken = True
        try:
            header = parseRequestHeader(frame)
        except MalformedHeader as e:
            self.owner.memoryPool.release(memory)
            self.close(f"malformed request header: {e}")
            return
        owner = self.owner
        versions = owner.supportedVersions.get(header.apiKey)
        if versions is None:
            owner.memoryPool.release(memory)
            self.close(f"no handler for ApiKey {header.apiKey}")
            return
        low, high = versions
        if not low <= header.apiVersion <= high and header.apiKey != API_VERSIONS:
            # Kafka drops the connection; only ApiVersions answers an
            # unsupported version, so that clients can negotiate.
            self.owner.memoryPool.release(memory)
            self.close(
                f"unsupported version {header.apiVersion} of {apiName(header.apiKey)} "
                f"(supported {versions[0]}..{versions[1]})"
            )
            return
        if sasl is not None:
            refusal = sasl.refusal(header.apiKey)
            if refusal is not None:
                self.owner.memoryPool.release(memory)
                self.close(refusal)
                return
        self._inflight = True
        owner.submit(Request(owner, self, RequestContext(self, header, len(frame) + 4), header, frame, memory))

    def _updateReading(self) -> None:
        pause = (
            self._muted
            or self._throttleCall is not None
            or self._waitingForMemory
            or self._writePaused
            or (self._inflight and len(self._buffer) > 0)
        )
        if pause != self._readingPaused and not self.closed:
            self._readingPaused = pause
            if pause:
                self.transport.pauseProducing()
            else:
                self.transport.resumeProducing()

    def mute(self) -> None:
        """
        Stop reading (shutdown: let in-flight requests finish, take no more).
        """
        self._muted = True
        self._updateReading()

    @property
    def inflight(self) -> bool:
        return self._inflight

    # -- IPushProducer: backpressure from a buffering (TLS) transport --------

    def pauseProducing(self) -> None:
        self._writePaused = True
        self.layer.setWritePaused(True)
        self._updateReading()

    def resumeProducing(self) -> None:
        self._writePaused = False
        self._updateReading()
        self.layer.setWritePaused(False)

    def stopProducing(self) -> None:
        pass

    # -- writing -------------------------------------------------------------

    def sendResponse(self, response) -> None:
        """
        Write C{response} (in the Processor's thread); unmute once it is all
        on the socket.
        """
        if self.closed:
            closeRegions(response.chunks)
            return
        if response.close:
            closeRegions(response.chunks)
            self.close(response.reason or "the request handler failed")
            return
        self._sending = response.request
        self._pickedUpAt = time.monotonic()
        chunks = response.chunks
        if self._rawToken:
            self._rawToken = False
            token = rawTokenResponse(chunks) if chunks is not None else None
            if token is None:
                self.close(f"SASL authentication failed: {self.sasl.failure}")
                return
            chunks = [token]
        if chunks is None:
            self._responseSent()
            return
        if len(chunks) == 1 and not self._chunks:
            # One chunk of bytes (a small answer), nothing queued before it:
            # written here, the rest (if the socket took only part) queued.
            chunk = chunks[0]
            if chunk.__class__ is bytes:
                written = self.layer.writeChunks(chunks)
                if written == len(chunk):
                    self._responseSent()
                    return
                if written < 0:
                    self.transport.abortConnection()
                    return
                self._chunks = deque((memoryview(chunk)[written:],) if written else (chunk,))
                self.layer.whenFlushed(self._send)
                return
        elif len(chunks) == 3 and not self._chunks:
            # A Fetch answer's shape -- its head, the records' file region,
            # its tail -- with nothing queued before it: written here, a
            # call each, without _send's loop and deque; whatever the socket
            # did not take (or a failure) goes to _send from where it stopped.
            head, region, tail = chunks
            if head.__class__ is bytes and tail.__class__ is bytes and not isinstance(region, BYTES_TYPES):
                layer = self.layer
                count = region.length
                # (the head with the records in one segment when there are any)
                written = layer.writeBefore(head) if count > 0 else layer.writeChunks((head,))
                if written == len(head):
                    sent = layer.transferFrom(region, region.position(), count) if count > 0 else 0
                    if sent == count:
                        region.close()
                        written = layer.writeChunks((tail,))
                        if written == len(tail):
                            self._responseSent()
                            return
                        self._chunks = deque((memoryview(tail)[written:] if written > 0 else tail,))
                    else:
                        if sent is not None and sent > 0:
                            self._regionSent = sent
                        self._chunks = deque((region, tail))
                else:
                    self._chunks = deque(
                        (memoryview(head)[written:] if written > 0 else head, region, tail)
                    )
                self._send()
                return
        if self._chunks.__class__ is deque:
            self._chunks.extend(chunks)
        else:
            self._chunks = deque(chunks)
        self._send()

    def _send(self) -> None:
        if self.closed:
            return
        chunks = self._chunks
        layer = self.layer
        while chunks:
            chunk = chunks[0]
            if isinstance(chunk, BYTES_TYPES):
                # (a lone bytes chunk -- a Fetch answer's head or tail around
                # a file region -- without _bytesRun's loop)
                run = [chunk] if len(chunks) == 1 or not isinstance(chunks[1], BYTES_TYPES) else _bytesRun(chunks)
                written = layer.writeChunks(run)
                if written < 0:
                    self._dropChunks()
                    self.transport.abortConnection()
                    return
                for chunk in run:
                    if written < len(chunk):
                        chunks[0] = memoryview(chunk)[written:]
                        layer.whenFlushed(self._send)
                        return
                    written -= len(chunk)
                    chunks.popleft()
            else:
                remaining = chunk.length - self._regionSent
                if remaining > 0:
                    sent = layer.transferFrom(chunk, chunk.position() + self._regionSent, remaining)
                    if sent is None:
                        layer.whenFlushed(self._send)
                        return
                    if sent <= 0:
                        # The file ended early or the socket broke: the frame
                        # can no longer be completed.
                        self._dropChunks()
                        self.transport.abortConnection()
                        return
                    self._regionSent += sent
                    if sent < remaining:
                        layer.whenFlushed(self._send)
                        return
                chunks.popleft()
                chunk.close()
                self._regionSent = 0
        self._responseSent()

    def _responseSent(self) -> None:
        self.lastActive = self._seconds()
        self._inflight = False
        request, self._sending = self._sending, None
        self.owner.responseSent(self, request, self._pickedUpAt)
        if request is None:
            throttleMs = 0
        else:
            context = request.context
            throttleMs = context.throttleMs if context.__class__ is RequestContext else getattr(context, "throttleMs", 0)
        if throttleMs > 0 and not self.closed:
            # A client over its quota: read nothing more from it for that
            # long (Kafka mutes the channel once the response is sent).
            self._throttleCall = self.owner.clock.callLater(throttleMs / 1000.0, self._unthrottle)
        sasl = self.sasl
        if sasl is not None and sasl.failed:
            # The refusal is on its way; Kafka closes the connection after it.
            self.close(f"SASL authentication failed: {sasl.failure}")
            return
        if self._buffer:
            self._takeRequests()
            self._updateReading()
        elif (
            self._readingPaused or self._throttleCall is not None or self._muted
            or self._waitingForMemory or self._writePaused
        ):
            # (with none of these, reading goes on as it is)
            self._updateReading()

    def _unthrottle(self) -> None:
        self._throttleCall = None
        if self.closed:
            return
        self.lastActive = self._seconds()
        if self._buffer and not self._inflight:
            self._takeRequests()
        self._updateReading()

    @property
    def throttled(self) -> bool:
        return self._throttleCall is not None

    def _dropChunks(self) -> None:
        if self._chunks:
            closeRegions(self._chunks)
            self._chunks.clear()
        self._regionSent = 0
