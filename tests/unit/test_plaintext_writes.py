"""
Responses on a real PLAINTEXT socket: runs of byte chunks leave in one
C{sendmsg}, and a socket that takes only part of them resumes where it
stopped, across chunk boundaries, in order.
"""

import socket

from twisted.internet.protocol import Factory

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.network.channel import Response
from kafkatwist.network.reactor import ProcessorReactor
from kafkatwist.network.transport import PlaintextTransportLayer
from tests.unit.fakes import FakeOwner, FakeRegion, apiVersionsFrame


def serve(reactor, owner):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    listener.close()
    accepted.setblocking(False)
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    connections = []

    class ConnectionFactory(Factory):
        def buildProtocol(self, addr):
            from kafkatwist.network.connection import KafkaConnection

            connection = KafkaConnection(owner, "PLAINTEXT", 1)
            connections.append(connection)
            return connection

    reactor.adoptStreamConnection(accepted.fileno(), socket.AF_INET, ConnectionFactory())
    accepted.close()
    return client, connections[0]


def test_chunks_arrive_whole_and_in_order_through_partial_sends():
    reactor = ProcessorReactor()
    owner = FakeOwner()
    owner.clock = ThreadSafeClock(reactor)
    client, connection = serve(reactor, owner)
    try:
        assert isinstance(connection.layer, PlaintextTransportLayer)
        client.sendall(apiVersionsFrame(1))
        while not owner.submitted:
            reactor.doIteration(0.1)
        request = owner.submitted[0]
        chunks = [b"head:", bytes(range(256)) * 4096, memoryview(b"-middle-"), b"x" * 70_000, b":tail"]
        expected = b"".join(bytes(c) for c in chunks)
        connection.sendResponse(Response(request, list(chunks)))
        assert connection.inflight, "a 1 MiB response cannot fit a 4 KiB send buffer at once"
        received = bytearray()
        client.settimeout(0.01)
        while len(received) < len(expected):
            reactor.doIteration(0.01)
            try:
                received += client.recv(1 << 20)
            except socket.timeout:
                pass
        assert bytes(received) == expected
        reactor.doIteration(0)
        assert not connection.inflight
    finally:
        client.close()
        reactor.removeAll()


def test_one_send_for_header_and_body(monkeypatch):
    reactor = ProcessorReactor()
    owner = FakeOwner()
    owner.clock = ThreadSafeClock(reactor)
    client, connection = serve(reactor, owner)
    sends = []
    layer = connection.layer
    original = layer.writeChunks
    monkeypatch.setattr(layer, "writeChunks", lambda chunks: sends.append(len(chunks)) or original(chunks))
    try:
        client.sendall(apiVersionsFrame(1))
        while not owner.submitted:
            reactor.doIteration(0.1)
        connection.sendResponse(Response(owner.submitted[0], [b"\x00\x00\x00\x08", b"\x00\x00\x00\x01", b"body"]))
        assert sends == [3]
        client.settimeout(2)
        assert client.recv(100) == b"\x00\x00\x00\x08\x00\x00\x00\x01body"
    finally:
        client.close()
        reactor.removeAll()


def test_one_chunk_arrives_whole_through_partial_sends():
    reactor = ProcessorReactor()
    owner = FakeOwner()
    owner.clock = ThreadSafeClock(reactor)
    client, connection = serve(reactor, owner)
    try:
        for correlationId, size in ((1, 100), (2, 3 << 20), (3, 100)):
            client.sendall(apiVersionsFrame(correlationId))
            while len(owner.submitted) < correlationId:
                reactor.doIteration(0.1)
            expected = bytes(range(256)) * (size // 256)
            connection.sendResponse(Response(owner.submitted[-1], [expected]))
            received = bytearray()
            client.settimeout(0.01)
            while len(received) < len(expected):
                reactor.doIteration(0.01)
                try:
                    received += client.recv(1 << 20)
                except socket.timeout:
                    pass
            assert bytes(received) == expected
            reactor.doIteration(0)
            assert not connection.inflight
    finally:
        client.close()
        reactor.removeAll()


def test_a_region_between_lone_byte_chunks_arrives_in_order_through_partial_sends():
    # A Fetch answer's shape: its head, the records (sendfile), its tail.
    reactor = ProcessorReactor()
    owner = FakeOwner()
    owner.clock = ThreadSafeClock(reactor)
    client, connection = serve(reactor, owner)
    try:
        client.sendall(apiVersionsFrame(1))
        while not owner.submitted:
            reactor.doIteration(0.1)
        records = bytes(range(256)) * 8192
        region = FakeRegion(records)
        chunks = [b"head:" * 1000, region, b":tail"]
        expected = b"head:" * 1000 + records + b":tail"
        connection.sendResponse(Response(owner.submitted[0], chunks))
        received = bytearray()
        client.settimeout(0.01)
        while len(received) < len(expected):
            reactor.doIteration(0.01)
            try:
                received += client.recv(1 << 20)
            except socket.timeout:
                pass
        assert bytes(received) == expected
        reactor.doIteration(0)
        assert not connection.inflight
        assert region.closed
    finally:
        client.close()
        reactor.removeAll()
