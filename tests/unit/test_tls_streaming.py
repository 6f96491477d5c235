"""
Record data over TLS: read in bounded chunks off the connection's thread,
one chunk ahead, and never written while the transport has asked to pause.
"""

from twisted.internet.interfaces import ISSLTransport
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from kafkatwist.network.channel import Response
from kafkatwist.network.connection import KafkaConnection
from kafkatwist.network.transport import TLS_READ_CHUNK, SslTransportLayer
from tests.unit.fakes import FakeOwner, FakeRegion, OneHandlerBroker, apiVersionsFrame


@implementer(ISSLTransport)
class TLSStringTransport(StringTransport):
    def getPeerCertificate(self):
        return None


class OffloadingOwner(FakeOwner):
    """
    Offloaded reads wait until the test runs them (they would run on a
    handler thread).
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.reads = []

    def offload(self, f, args, then):
        self.reads.append((f, args, then))

    def runRead(self):
        f, args, then = self.reads.pop(0)
        try:
            result = f(*args)
        except Exception as e:
            result = e
        then(result)


def tlsConnection(owner):
    connection = KafkaConnection(owner, "SSL", 1)
    transport = TLSStringTransport()
    connection.makeConnection(transport)
    assert isinstance(connection.layer, SslTransportLayer)
    connection.dataReceived(apiVersionsFrame(1))
    return connection, transport


def test_region_is_read_off_thread_in_bounded_chunks():
    owner = OffloadingOwner()
    connection, transport = tlsConnection(owner)
    data = bytes(range(256)) * ((3 * TLS_READ_CHUNK + 1000) // 256)
    region = FakeRegion(data)
    connection.sendResponse(Response(owner.submitted[0], [b"head:", region, b":tail"]))
    # Nothing of the region read on the connection's thread.
    assert transport.value() == b"head:"
    written = [len(transport.value())]
    while owner.reads:
        assert len(owner.reads) == 1  # one read at a time, one chunk ahead
        [(_, (fd, count, position), _)] = owner.reads
        assert count <= TLS_READ_CHUNK
        owner.runRead()
        written.append(len(transport.value()))
        # Never more than one chunk written ahead of what was read.
        assert written[-1] - written[-2] <= TLS_READ_CHUNK + len(b":tail")
    assert transport.value() == b"head:" + data + b":tail"
    assert region.closed
    # The response is out: the next request is taken.
    connection.dataReceived(apiVersionsFrame(2))
    assert len(owner.submitted) == 2


def test_paused_transport_holds_the_next_chunk():
    owner = OffloadingOwner()
    connection, transport = tlsConnection(owner)
    data = b"x" * (2 * TLS_READ_CHUNK + 5)
    region = FakeRegion(data)
    connection.sendResponse(Response(owner.submitted[0], [region]))
    owner.runRead()
    assert len(transport.value()) == TLS_READ_CHUNK
    # The socket backs up; the chunk read ahead must wait.
    connection.pauseProducing()
    owner.runRead()
    assert len(transport.value()) == TLS_READ_CHUNK
    assert owner.reads == []
    connection.resumeProducing()
    assert len(transport.value()) == 2 * TLS_READ_CHUNK
    owner.runRead()
    assert transport.value() == data
    assert region.closed


def test_truncated_file_aborts_the_connection():
    owner = OffloadingOwner()
    connection, transport = tlsConnection(owner)
    region = FakeRegion(b"short")
    region.length = 100  # the file ended before the region did
    aborted = []
    transport.abortConnection = lambda: aborted.append(True)
    connection.sendResponse(Response(owner.submitted[0], [region]))
    owner.runRead()
    owner.runRead()
    assert aborted == [True]
    assert region.closed


def test_read_finishing_after_the_connection_closed_is_ignored():
    owner = OffloadingOwner()
    connection, transport = tlsConnection(owner)
    region = FakeRegion(b"y" * (TLS_READ_CHUNK + 1))
    connection.sendResponse(Response(owner.submitted[0], [region]))
    connection.connectionLost(None)
    assert region.closed
    # The read had its own descriptor; finishing it sends nothing.
    owner.runRead()
    assert transport.value() == b""


class Answering:
    apiKey, minVersion, maxVersion = 18, 0, 3

    def __init__(self, answer):
        self.answer = answer

    def handle(self, context, request):
        return self.answer


def test_small_regions_are_read_on_the_handler_thread():
    """
    A typical TLS fetch response is read where it is handled, so its
    Processor neither reads the disk nor waits for a read.
    """
    from kafkatwist.network.handlers import HandlerPool
    from kafkatwist.protocol.codec import EncodedResponse

    owner = OffloadingOwner()
    connection, transport = tlsConnection(owner)
    small, large = FakeRegion(b"s" * 1000), FakeRegion(b"L" * (TLS_READ_CHUNK + 1))
    answer = EncodedResponse([b"<", small, large, b">"])
    pool = HandlerPool(None, OneHandlerBroker(Answering(answer)), 1)
    response = pool.handle(owner.submitted[0])
    assert b"s" * 1000 in response.chunks
    assert small.closed
    assert large in response.chunks and not large.closed
    connection.sendResponse(response)
    while owner.reads:
        owner.runRead()
    assert transport.value().endswith(b"<" + b"s" * 1000 + b"L" * (TLS_READ_CHUNK + 1) + b">")
