"""
A Processor: one thread running its own C{EPollReactor}, owning the
connections handed to it (Kafka's C{SocketServer.Processor}).

Everything that crosses into the thread -- new sockets from the Acceptor,
responses from handler threads, memory and channel-room notices -- goes
through one queue of calls and one coalesced C{callFromThread}: a burst of
responses costs one wake-up, not one each.  Requests leave in batches too:
all requests framed in one reactor iteration reach the RequestChannel in one
call, at the end of the iteration.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from time import monotonic as _monotonic

from twisted.internet import defer
from twisted.internet.protocol import Factory
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.protocols.tls import TLSMemoryBIOFactory

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.util.logthrottle import connectionLogs
from kafkatwist.metrics.stats import IdleClock, RequestStats
from kafkatwist.util.affinity import pinCurrentThread
from kafkatwist.network.connection import KafkaConnection
from kafkatwist.network.handlers import NOT_HERE
from kafkatwist.network.reactor import ProcessorReactor
from kafkatwist.protocol.apis import API_VERSIONS, METADATA
from kafkatwist.security.session import SaslSession

log = Logger()

#: requests a handler may answer on the Processor's thread (its
#: C{handleOnNetworkThread}): what a client sends on every connect, answered
#: from memory, spared the hand-off to a handler thread and back (a wake-up
#: and a GIL hand-off each way)
ANSWERED_HERE = frozenset((API_VERSIONS, METADATA))


class _ConnectionFactory(Factory):
    def __init__(self, processor: "Processor", listener) -> None:
        self.processor = processor
        self.listener = listener
        #: the SASL listener's settings (mechanisms, credential store,
        #: connections.max.reauth.ms), or None
        self.sasl = processor.server.saslSettings(listener) if listener.sasl else None

    def buildProtocol(self, addr):
        processor = self.processor
        processor._connectionIndex += 1
        session = SaslSession(*self.sasl) if self.sasl is not None else None
        connection = KafkaConnection(
            processor,
            self.listener.name,
            processor._connectionIndex,
            securityProtocol=self.listener.securityProtocol,
            sasl=session,
        )
        connection.quotaHost = processor._adoptingHost
        return connection


class Processor:
    """
    @ivar reactor: this Processor's own reactor (never the global one).
    @ivar clock: a L{ThreadSafeClock} over C{reactor}: timers for requests on
        these connections are armed here.
    """

    def __init__(self, index: int, server, reactor=None) -> None:
        self.index = index
        self.server = server
        self.sslPrincipalBuilder = server.sslPrincipalBuilder
        if reactor is None:
            reactor = ProcessorReactor()
            # Otherwise run() in our thread would make *this* thread Twisted's
            # IO thread and isInIOThread() would turn False in the main one.
            reactor._registerAsIOThread = False
        self.reactor = reactor
        # Requests framed in one iteration reach the channel in one batch:
        # at the end of the iteration, or (for requests taken from a
        # connection's buffer by a call from another thread) before the wait.
        self._flushHooked = isinstance(reactor, ProcessorReactor)
        if self._flushHooked:
            reactor.beforeWait = self._flushNew
            # Calls from other threads (responses) run after the iteration's
            # events, woken by the reactor's waker alone: no Twisted
            # callFromThread queue on either side.
            reactor.afterEvents = self._afterEvents
            self._wake = reactor.waker.wakeUp
        else:
            self._wake = self._wakeByCallFromThread
        self.clock = ThreadSafeClock(reactor, callInThread=self.callInThread)
        self.memoryPool = server.memoryPool
        self.maxRequestSize = server.maxRequestSize
        self.supportedVersions = server.supportedVersions
        self.connections: set[KafkaConnection] = set()
        self._connectionIndex = 0
        #: the host the Acceptor counted the socket being adopted under
        self._adoptingHost: str | None = None
        self._calls: deque = deque()
        self._wakePending = False
        self._pending: list = []
        self._blocked: list = []
        self._flushScheduled = False
        self._thread: threading.Thread | None = None
        self._stopped = defer.Deferred()
        self._stopping = False
        self._factories: dict[str, Factory] = {}
        for listener in server.listeners:
            factory = _ConnectionFactory(self, listener)
            if listener.tls:
                factory = TLSMemoryBIOFactory(
                    server.tlsContextFactoryFor(listener.name), False, factory, clock=self.reactor
                )
            self._factories[listener.name] = factory
        self.stats = RequestStats()
        self.requestLog = bool(getattr(server, "requestLog", False))
        if self._flushHooked:
            # The reactor adds its waits to the clock itself.
            self.idleClock = reactor.idleClock = IdleClock(None)
        else:
            poller = getattr(reactor, "_poller", None)
            self.idleClock = IdleClock(poller)
            if poller is not None:
                reactor._poller = self.idleClock
        self._idleSweep = LoopingCall(self._closeIdle)
        self._idleSweep.clock = self.reactor

    @property
    def authorizer(self):
        """
        The broker's L{IAuthorizer} or C{None} (for C{context.authorize}).
        """
        return self.server.broker.authorizer

    # -- thread --------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, name=f"kafkatwist-network-thread-{self.index}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        pinCurrentThread(getattr(self.server, "requestThreadCpus", None))
        self.clock.threadId = threading.get_ident()
        idleSeconds = self.server.idleTimeout
        interval = max(0.01, min(idleSeconds / 4, 30.0))
        self.reactor.callWhenRunning(self._idleSweep.start, interval, now=False)
        try:
            self.reactor.run(installSignalHandlers=False)
        except BaseException:
            log.failure("Processor {index} crashed", index=self.index)
        finally:
            self.server.mainReactor.callFromThread(self._stopped.callback, None)

    def callInThread(self, f, *args) -> None:
        """
        Run C{f(*args)} in this Processor's thread, coalescing wake-ups.
        Safe from any thread.
        """
        self._calls.append((f, args))
        if not self._wakePending:
            self._wakePending = True
            self._wake()

    def _wakeByCallFromThread(self) -> None:
        self.reactor.callFromThread(self._runCalls)

    def _afterEvents(self) -> None:
        # (a ProcessorReactor's hook) A set _wakePending says calls were
        # queued; _runCalls clears it before it drains the queue, so a call
        # queued meanwhile wakes the reactor again.
        if self._wakePending or self._calls:
            self._runCalls()
        if self._pending:
            self._flush()

    def offload(self, f, args, then) -> None:
        """
        Run C{f(*args)} on a request handler thread (disk reads a connection
        needs), then C{then(result)} back in this thread; C{result} is the
        exception if C{f} raised one.
        """
        self.server.channel.sendCall(self._offloaded, f, args, then)

    def _offloaded(self, f, args, then) -> None:
        try:
            result = f(*args)
        except Exception as e:
            result = e
        self.callInThread(then, result)

    def _runCalls(self) -> None:
        self._wakePending = False
        calls = self._calls
        while calls:
            f, args = calls.popleft()
            try:
                f(*args)
            except Exception:
                log.failure("Processor {index}: error in {f}", index=self.index, f=f)

    # -- from the Acceptor ---------------------------------------------------

    def accept(self, sock, listener, host: str) -> None:
        """
        Take over an accepted socket (called in the main thread).

        @param host: the peer's address as accept() gave it, which the
            connection quotas counted it under.
        """
        self.callInThread(self._adopt, sock, listener, host)

    def _adopt(self, sock, listener, host: str) -> None:
        # The quota is released under the host it was taken for: asking the
        # socket again (getpeername) fails once the peer has reset it, and
        # the per-IP count would leak.
        self._adoptingHost = host
        try:
            if self._stopping:
                raise RuntimeError("shutting down")
            # adoptStreamConnection dup()s the descriptor; our copy is closed
            # here, in this thread, only after the reactor took its own.
            self.reactor.adoptStreamConnection(
                sock.fileno(), sock.family, self._factories[listener.name]
            )
        except Exception as e:
            log.warn(
                "Could not adopt connection from {host} on {listener}: {e}",
                host=host,
                listener=listener.name,
                e=e,
            )
            self.server.quotas.release(host)
        finally:
            self._adoptingHost = None
            sock.close()

    # -- connections ---------------------------------------------------------

    def connectionOpened(self, connection: KafkaConnection) -> None:
        self.connections.add(connection)
        self.server.connectionOpened(connection)
        connectionLogs.emit(
            log.info, ("opened", connection.clientAddress[0], connection.listenerName),
            "Connection {connectionId} opened on {listener} (processor {index})",
            connectionId=connection.connectionId,
            listener=connection.listenerName,
            index=self.index,
        )

    def connectionClosed(self, connection: KafkaConnection) -> None:
        self.connections.discard(connection)
        if connection.quotaHost is not None:
            self.server.quotas.release(connection.quotaHost)
        self.server.connectionClosed(connection)
        connectionLogs.emit(
            log.info, ("closed", connection.clientAddress[0], connection.closeReason),
            "Connection {connectionId} closed: {reason}",
            connectionId=connection.connectionId,
            reason=connection.closeReason,
        )

    def _closeIdle(self) -> None:
        deadline = self.reactor.seconds() - self.server.idleTimeout
        for connection in list(self.connections):
            if connection.lastActive < deadline and not connection.inflight:
                connection.close(f"idle for more than {self.server.idleTimeout * 1000:.0f} ms")

    # -- requests out --------------------------------------------------------

    def submit(self, request) -> None:
        if request.header.apiKey in ANSWERED_HERE and self._answerHere(request):
            return
        self._pending.append(request)
        if not self._flushScheduled and not self._flushHooked:
            self._flushScheduled = True
            # Runs once this reactor iteration has handled every ready
            # socket, so the channel gets one batch.
            self.reactor.callLater(0, self._flush)

    def _answerHere(self, request) -> bool:
        """
        Answer C{request} on this thread if its handler can without disk or
        ZooKeeper (L{HandlerPool.handle} with C{here}).

        @return: whether it was answered (else it goes to the channel).
        """
        pool = getattr(self.server, "handlerPool", None)
        if pool is None or pool.broker is None:
            return False
        request.dequeuedAt = time.monotonic()
        response = pool.handle(request, here=True)
        if response is NOT_HERE:
            request.dequeuedAt = 0.0
            return False
        if response is not None:
            request.connection.sendResponse(response)
        return True

    def _flushNew(self) -> None:
        # Requests held back by a full channel wait for channelHasRoom.
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        self._flushScheduled = False
        blocked = self._blocked
        if blocked:
            batch = blocked + self._pending
        else:
            batch = self._pending
        self._pending = []
        if not batch:
            return
        accepted = self.server.channel.sendRequests(batch, self)
        if accepted < len(batch):
            self._blocked = batch[accepted:]
        elif blocked:
            self._blocked = []

    def channelHasRoom(self) -> None:
        self.callInThread(self._flush)

    # -- responses in --------------------------------------------------------

    def sendResponse(self, response) -> None:
        """
        Queue C{response} for its connection.  Safe from any thread.
        """
        self.callInThread(response.request.connection.sendResponse, response)

    def sendResponses(self, responses) -> None:
        """
        Queue several responses with one wake-up.  Safe from any thread.
        """
        self.callInThread(self._sendAll, responses)

    def _sendAll(self, responses) -> None:
        for response in responses:
            response.request.connection.sendResponse(response)

    def responseSent(self, connection, request, pickedUpAt: float) -> None:
        if request is not None:
            sentAt = _monotonic()
            self.stats.record(request, pickedUpAt, sentAt)
            if self.requestLog:
                log.debug(
                    "Completed request {context}: total {total:.3f} ms, request queue "
                    "{queue:.3f} ms, local {local:.3f} ms, send {send:.3f} ms",
                    context=request.context,
                    total=(sentAt - request.receivedAt) * 1000,
                    queue=((request.dequeuedAt or request.receivedAt) - request.receivedAt) * 1000,
                    local=((request.completedAt or request.dequeuedAt) - (request.dequeuedAt or request.receivedAt)) * 1000,
                    send=(sentAt - pickedUpAt) * 1000,
                )

    # -- shutdown ------------------------------------------------------------

    def stop(self, deadline: float, reason: str = "broker shutting down") -> defer.Deferred:
        """
        Take no more requests, let in-flight ones finish until C{deadline}
        (reactor seconds), close every connection (with C{reason}), stop
        the thread.

        @return: a Deferred firing in the main thread once the thread ended.
        """
        self.callInThread(self._beginStop, deadline, reason)
        return self._stopped

    def _beginStop(self, deadline: float, reason: str) -> None:
        self._stopping = True
        for connection in self.connections:
            connection.mute()
        self._waitForInflight(deadline, reason)

    def _waitForInflight(self, deadline: float, reason: str) -> None:
        busy = [c for c in self.connections if c.inflight]
        if busy and self.reactor.seconds() < deadline:
            self.reactor.callLater(0.02, self._waitForInflight, deadline, reason)
            return
        for connection in list(self.connections):
            connection.close(reason)
        self._waitForClosed(self.reactor.seconds() + 1.0)

    def _waitForClosed(self, deadline: float) -> None:
        if self.connections and self.reactor.seconds() < deadline:
            self.reactor.callLater(0.02, self._waitForClosed, deadline)
            return
        for connection in list(self.connections):
            connection.transport.abortConnection()
        if self._idleSweep.running:
            self._idleSweep.stop()
        self.reactor.callLater(0, self.reactor.stop)

