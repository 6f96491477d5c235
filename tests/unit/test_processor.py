"""
A Processor on Twisted's fake reactor: idle expiry, response routing,
channel back-pressure.
"""

import threading

import pytest
from twisted.internet.testing import MemoryReactorClock, StringTransport

from kafkatwist.config import Listener
from kafkatwist.network.acceptor import ConnectionQuotas
from kafkatwist.network.channel import MemoryPool, RequestChannel, Response
from kafkatwist.network.processor import Processor
from kafkatwist.network.reactor import ProcessorReactor
from kafkatwist.security.sslprincipal import SslPrincipalBuilder
from tests.unit.fakes import apiVersionsFrame


class FakeServer:
    def __init__(self, idleSeconds=1.0, queue=10):
        self.memoryPool = MemoryPool(-1)
        self.maxRequestSize = 1 << 20
        self.supportedVersions = {18: (0, 3)}
        self.listeners = [Listener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")]
        self.tlsContextFactories = {}
        self.sslPrincipalBuilder = SslPrincipalBuilder()
        self.idleTimeout = idleSeconds
        self.quotas = ConnectionQuotas(100, 100)
        self.channel = RequestChannel(queue)
        self.mainReactor = None
        self.opened = self.closed = 0

    def tlsContextFactoryFor(self, listenerName):
        return self.tlsContextFactories.get(listenerName)

    def connectionOpened(self, c):
        self.opened += 1

    def connectionClosed(self, c):
        self.closed += 1


def connect(processor):
    protocol = processor._factories["PLAINTEXT"].buildProtocol(None)
    transport = StringTransport()
    protocol.makeConnection(transport)
    return protocol, transport


def test_idle_connections_expire_busy_ones_stay():
    reactor = MemoryReactorClock()
    processor = Processor(0, FakeServer(idleSeconds=1.0), reactor=reactor)
    idle, idleTransport = connect(processor)
    busy, busyTransport = connect(processor)
    for _ in range(3):
        reactor.advance(0.4)
        busy.dataReceived(apiVersionsFrame(1))
        reactor.advance(0)  # the end-of-iteration flush to the channel
        [request] = processor.server.channel.receiveRequests()
        busy.sendResponse(Response(request, [b"\x00\x00\x00\x04\x00\x00\x00\x01"]))
        processor._closeIdle()
    assert idleTransport.disconnecting
    assert "idle for more than 1000 ms" in idle.closeReason
    assert not busyTransport.disconnecting


def test_requests_reach_channel_in_one_batch_per_iteration():
    reactor = MemoryReactorClock()
    processor = Processor(0, FakeServer(), reactor=reactor)
    connections = [connect(processor)[0] for _ in range(5)]
    for i, c in enumerate(connections):
        c.dataReceived(apiVersionsFrame(i))
    assert len(processor.server.channel) == 0
    reactor.advance(0)
    assert len(processor.server.channel) == 5


def test_full_channel_holds_requests_until_room():
    reactor = MemoryReactorClock()
    server = FakeServer(queue=2)
    server.channel.batchSize = 1
    processor = Processor(0, server, reactor=reactor)
    connections = [connect(processor)[0] for _ in range(4)]
    for i, c in enumerate(connections):
        c.dataReceived(apiVersionsFrame(i))
    reactor.advance(0)
    assert len(server.channel) == 2
    assert len(processor._blocked) == 2
    # A handler takes one: the processor is told, and (in its thread) flushes.
    calls = []
    processor.callInThread = lambda f, *a: calls.append((f, a))
    server.channel.receiveRequests()
    for f, a in calls:
        f(*a)
    assert len(server.channel) == 2
    assert len(processor._blocked) == 1


def resetSocket():
    """
    A server-side socket whose peer has already reset the connection.
    """
    import select
    import socket
    import struct

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    sock, (host, _) = listener.accept()
    listener.close()
    # SO_LINGER 0: close() sends a RST rather than a FIN.
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLERR | select.POLLHUP)
    assert poller.poll(5000)
    try:
        sock.recv(1)
    except ConnectionResetError:
        pass
    return sock, host


def test_failed_adoption_releases_the_quota_of_the_accepted_host():
    """
    A socket reset between accept and adoption cannot be adopted (Twisted
    asks it for its peer), and cannot say who its peer was either: the
    quota is released under the host accept() gave.
    """
    from kafkatwist.network.reactor import ProcessorReactor

    server = FakeServer()
    processor = Processor(0, server, reactor=ProcessorReactor())
    sock, host = resetSocket()
    # What the old release asked, and why the count leaked.
    with pytest.raises(OSError):
        sock.getpeername()
    assert server.quotas.tryAcquire(host) is None
    processor._adopt(sock, server.listeners[0], host)
    assert server.quotas.count(host) == 0
    assert server.quotas.total == 0
    assert processor.connections == set()


def test_quota_released_on_close_under_the_accepted_host():
    reactor = MemoryReactorClock()
    server = FakeServer()
    processor = Processor(0, server, reactor=reactor)
    assert server.quotas.tryAcquire("10.1.2.3") is None
    processor._adoptingHost = "10.1.2.3"
    connection, transport = connect(processor)
    processor._adoptingHost = None
    assert connection.quotaHost == "10.1.2.3"
    connection.connectionLost(None)
    assert server.quotas.count("10.1.2.3") == 0


class _Broker:
    """
    What the handler pool asks of a broker: one handler per ApiKey.
    """

    def __init__(self, handlers):
        self.handlers = handlers

    def handlerFor(self, apiKey):
        return self.handlers[apiKey]

    def supportedVersions(self):
        return {18: (0, 3)}


def _correlationIds(data: bytes) -> list[int]:
    import struct

    ids, offset = [], 0
    while offset < len(data):
        (size,) = struct.unpack_from(">i", data, offset)
        ids.append(struct.unpack_from(">i", data, offset + 4)[0])
        offset += 4 + size
    return ids


def test_api_versions_answered_on_the_processor_thread_in_order():
    """
    ApiVersions needs neither disk nor ZooKeeper: the Processor answers it
    itself (no handler thread runs here), every pipelined request in order,
    however many one read brings.
    """
    from kafkatwist.network.handlers import HandlerPool
    from kafkatwist.plugins.api_versions import ApiVersionsHandler

    reactor = MemoryReactorClock()
    server = FakeServer()
    server.handlerPool = HandlerPool(server.channel, None, 1)
    server.handlerPool.broker = _Broker({18: ApiVersionsHandler(_Broker({}))})
    processor = Processor(0, server, reactor=reactor)
    connection, transport = connect(processor)
    connection.dataReceived(b"".join(apiVersionsFrame(i) for i in range(3000)))
    reactor.advance(0)
    assert len(server.channel) == 0
    assert _correlationIds(transport.value()) == list(range(3000))
    assert processor.stats.requests[18] == 3000


def test_handler_without_a_network_thread_answer_goes_to_the_channel():
    from kafkatwist.network.handlers import HandlerPool
    from kafkatwist.plugins.api_versions import ApiVersionsHandler

    class Wrapping:
        """
        A drop-in around ApiVersions: it may do anything, so a handler
        thread runs it.
        """

        minVersion, maxVersion = 0, 3

        def __init__(self, wrapped):
            self.wrapped = wrapped

        def handle(self, context, request):
            return self.wrapped.handle(context, request)

    reactor = MemoryReactorClock()
    server = FakeServer()
    server.handlerPool = HandlerPool(server.channel, None, 1)
    server.handlerPool.broker = _Broker({18: Wrapping(ApiVersionsHandler(_Broker({})))})
    processor = Processor(0, server, reactor=reactor)
    connection, transport = connect(processor)
    connection.dataReceived(apiVersionsFrame(7))
    reactor.advance(0)
    assert transport.value() == b""
    [request] = server.channel.receiveRequests()
    assert request.frame is not None and request.dequeuedAt > 0
    response = server.handlerPool.handle(request)
    connection.sendResponse(response)
    assert _correlationIds(transport.value()) == [7]


def test_calls_from_other_threads_run_in_the_processor_thread_by_the_waker():
    reactor = ProcessorReactor()
    reactor._registerAsIOThread = False
    processor = Processor(0, FakeServer(), reactor=reactor)
    assert reactor.idleClock is processor.idleClock
    ran = []
    done = threading.Event()

    def call(n):
        ran.append((n, threading.get_ident()))
        if n == 99:
            done.set()

    loop = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False})
    loop.start()
    try:
        for n in range(100):
            processor.callInThread(call, n)
        assert done.wait(30.0)
    finally:
        reactor.callFromThread(reactor.stop)
        loop.join(30.0)
    assert [n for n, _ in ran] == list(range(100))
    assert {thread for _, thread in ran} == {loop.ident}
    assert not loop.is_alive()
