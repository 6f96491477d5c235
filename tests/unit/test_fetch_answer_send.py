"""
A Fetch answer's shape -- its head, the records' file region, its tail --
written by C{sendResponse} itself, a call each: whole when the socket takes
it, and from where it stopped when it takes part (the rest by C{_send}), a
failure aborting the connection with the region closed.
"""

from kafkatwist.network.channel import Response
from tests.unit.fakes import FakeOwner, FakeRegion, apiVersionsFrame, connect


class ScriptedLayer:
    """
    A transport layer whose writes and sendfiles take what a script says
    (None: all of it), and record what they were given.
    """

    securityProtocol = "PLAINTEXT"

    def __init__(self, writes=(), transfers=()):
        self.writes = list(writes)
        self.transfers = list(transfers)
        self.calls = []
        self.out = bytearray()
        self.flushWaiters = []

    def writeChunks(self, chunks):
        data = b"".join(bytes(c) for c in chunks)
        self.calls.append(("write", len(data)))
        take = self.writes.pop(0) if self.writes else None
        if take is None:
            take = len(data)
        if take > 0:
            self.out += data[:take]
        return take

    def writeBefore(self, chunk):
        written = self.writeChunks((chunk,))
        self.calls[-1] = ("more",) + self.calls[-1][1:]
        return written

    def transferFrom(self, region, position, count):
        self.calls.append(("sendfile", position, count))
        take = self.transfers.pop(0) if self.transfers else "all"
        if take == "all":
            take = count
        if take is not None and take > 0:
            self.out += region.read()[position:position + take]
        return take

    def whenFlushed(self, callback):
        self.flushWaiters.append(callback)

    def flush(self):
        while self.flushWaiters:
            self.flushWaiters.pop(0)()


def answer(layer, records=b"r" * 100):
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.layer = layer
    connection.dataReceived(apiVersionsFrame(1))
    region = FakeRegion(records)
    head, tail = b"head:" * 3, b"\x00\x00\x00"
    connection.sendResponse(Response(owner.submitted[0], [head, region, tail]))
    return connection, transport, region, head + records + tail


def test_whole_answer_leaves_in_three_calls_without_a_queue():
    layer = ScriptedLayer()
    connection, _, region, expected = answer(layer)
    assert layer.calls == [("more", 15), ("sendfile", 0, 100), ("write", 3)]
    assert bytes(layer.out) == expected
    assert region.closed
    assert not connection.inflight
    assert not connection._chunks


def test_an_empty_region_is_not_sent():
    layer = ScriptedLayer()
    connection, _, region, expected = answer(layer, records=b"")
    assert layer.calls == [("write", 15), ("write", 3)]
    assert bytes(layer.out) == expected
    assert region.closed and not connection.inflight


def test_partial_head_region_and_tail_resume_where_they_stopped():
    for writes, transfers in (
        ([4, 0], []),            # head in part, then the socket is full
        ([0], []),               # nothing of the head
        ([], [None]),            # the socket full at the region
        ([], [40, None, 30]),    # the region in three parts
        ([None, 1], []),         # the tail in part
        ([None, 0], []),         # none of the tail
    ):
        layer = ScriptedLayer(writes, transfers)
        connection, _, region, expected = answer(layer)
        for _ in range(10):
            if not layer.flushWaiters:
                break
            layer.flush()
        assert bytes(layer.out) == expected, (writes, transfers)
        assert region.closed, (writes, transfers)
        assert not connection.inflight, (writes, transfers)


def test_a_failure_aborts_the_connection_and_closes_the_region():
    for writes, transfers in (
        ([-1, -1], []),          # the head's write fails
        ([], [0, 0]),            # the file ended early
        ([], [-1, -1]),          # sendfile fails
        ([], [50, -1]),          # sendfile fails half way
        ([None, -1, -1], []),    # the tail's write fails
    ):
        layer = ScriptedLayer(writes, transfers)
        connection, transport, region, _ = answer(layer)
        for _ in range(10):
            if not layer.flushWaiters:
                break
            layer.flush()
        assert transport.disconnecting or transport.disconnected or connection.closed, (writes, transfers)
        assert region.closed, (writes, transfers)


def test_the_head_goes_with_msg_more_on_a_real_socket():
    # The kernel puts the head in the records' segment rather than in one
    # of its own; without records (nothing follows at once) it is pushed.
    import socket

    from kafkatwist.util.clock import ThreadSafeClock
    from kafkatwist.network.reactor import ProcessorReactor
    from tests.unit.test_plaintext_writes import serve

    class Recording:
        def __init__(self, sock):
            self.sock = sock
            self.flags = []

        def send(self, data, flags=0):
            self.flags.append(flags)
            return self.sock.send(data, flags)

        def sendmsg(self, chunks):
            self.flags.append(0)
            return self.sock.sendmsg(chunks)

    for records, first in ((b"r" * 100, socket.MSG_MORE), (b"", 0)):
        reactor = ProcessorReactor()
        owner = FakeOwner()
        owner.clock = ThreadSafeClock(reactor)
        client, connection = serve(reactor, owner)
        try:
            recording = connection.layer._socket = Recording(connection.layer._socket)
            client.sendall(apiVersionsFrame(1))
            while not owner.submitted:
                reactor.doIteration(0.1)
            region = FakeRegion(records)
            connection.sendResponse(Response(owner.submitted[0], [b"head:", region, b":tail"]))
            assert recording.flags == [first, 0]
            assert not connection.inflight and region.closed
            expected = b"head:" + records + b":tail"
            received = bytearray()
            client.settimeout(2)
            while len(received) < len(expected):
                received += client.recv(1 << 16)
            assert bytes(received) == expected
        finally:
            client.close()
            reactor.removeAll()
