"""
Framing, mute/unmute, ordering, bad input and memory-pool muting of one
connection, over Twisted's StringTransport.
"""

import struct

from kafkatwist.network.channel import MemoryPool, Response
from tests.unit.fakes import FakeOwner, FakeRegion, apiVersionsFrame, connect, metadataFrame, respond


def test_frame_split_across_reads():
    owner = FakeOwner()
    connection, transport = connect(owner)
    frame = apiVersionsFrame(7)
    for i in range(len(frame)):
        connection.dataReceived(frame[i : i + 1])
    assert [r.header.correlationId for r in owner.submitted] == [7]
    assert owner.submitted[0].frame == frame[4:]


def test_second_request_waits_for_first_response():
    """
    A slow first request and a fast second on one connection: the second is
    not even taken until the first's response is written, so responses go
    out in request order.
    """
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1) + metadataFrame(2))
    assert [r.header.correlationId for r in owner.submitted] == [1]
    # Muted: more bytes arrived while a request is in flight.
    assert transport.producerState == "paused"
    respond(connection, owner.submitted[0], b"first")
    assert [r.header.correlationId for r in owner.submitted] == [1, 2]
    respond(connection, owner.submitted[1], b"second")
    out = transport.value()
    assert out.index(b"first") < out.index(b"second")
    assert struct.unpack(">i", out[4:8])[0] == 1
    assert transport.producerState == "producing"


def test_lazy_mute_without_pipelining():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1))
    # Nothing more to read: no need to touch the reactor's interest set.
    assert transport.producerState == "producing"
    respond(connection, owner.submitted[0])
    connection.dataReceived(apiVersionsFrame(2))
    assert len(owner.submitted) == 2


def test_no_response_unmutes_at_once():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1) + apiVersionsFrame(2))
    connection.sendResponse(Response(owner.submitted[0], None))
    assert len(owner.submitted) == 2
    assert transport.value() == b""


def test_oversized_size_closes():
    owner = FakeOwner(maxRequestSize=1000)
    connection, transport = connect(owner)
    connection.dataReceived(struct.pack(">i", 1001) + b"x" * 10)
    assert transport.disconnecting
    assert "invalid request size 1001" in connection.closeReason
    assert owner.submitted == []


def test_negative_size_closes():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(struct.pack(">i", -5))
    assert transport.disconnecting
    assert "invalid request size -5" in connection.closeReason


def test_size_below_header_closes():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(struct.pack(">i", 5) + b"\x00" * 5)
    assert transport.disconnecting


def test_truncated_client_id_closes():
    owner = FakeOwner()
    connection, transport = connect(owner)
    body = struct.pack(">hhih", 18, 0, 1, 50) + b"abc"
    connection.dataReceived(struct.pack(">i", len(body)) + body)
    assert transport.disconnecting
    assert "malformed request header" in connection.closeReason


def test_unknown_api_key_closes():
    owner = FakeOwner()
    connection, transport = connect(owner)
    body = struct.pack(">hhih", 999, 0, 1, -1)
    connection.dataReceived(struct.pack(">i", len(body)) + body)
    assert transport.disconnecting
    assert "no handler for ApiKey 999" in connection.closeReason


def test_unsupported_version_closes_except_api_versions():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(metadataFrame(1, version=13))
    assert transport.disconnecting
    assert "unsupported version 13" in connection.closeReason

    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1, version=4))
    assert not transport.disconnecting
    assert owner.submitted[-1].header.apiVersion == 4


def test_bytes_after_close_are_ignored():
    owner = FakeOwner(maxRequestSize=100)
    connection, transport = connect(owner)
    connection.dataReceived(struct.pack(">i", 101))
    connection.dataReceived(apiVersionsFrame(1))
    assert owner.submitted == []


def test_memory_pool_mutes_until_released():
    pool = MemoryPool(60)
    owner = FakeOwner(pool=pool)
    first, _ = connect(owner)
    second, secondTransport = connect(owner)
    frame = apiVersionsFrame(1)
    size = len(frame) - 4
    first.dataReceived(frame)
    first.dataReceived(b"")
    assert pool.used == size
    # Exhaust the pool: the pool admits while anything is left (Kafka's rule).
    while pool.available > 0:
        pool.tryAllocate(size)
    second.dataReceived(apiVersionsFrame(2))
    assert [r.header.correlationId for r in owner.submitted] == [1]
    assert secondTransport.producerState == "paused"
    pool.release(pool.used)
    assert [r.header.correlationId for r in owner.submitted] == [1, 2]
    assert secondTransport.producerState == "producing"


def test_slow_large_sender_holds_no_memory_and_blocks_nobody():
    """
    A connection announcing a frame as large as the whole pool and sending
    it slowly: Kafka would reserve the frame at once and every connection
    would stop reading.  Here its partial frame holds nothing; the others
    are served, and it gets its memory once its bytes have arrived.
    """
    pool = MemoryPool(1000)
    owner = FakeOwner(pool=pool)
    slow, slowTransport = connect(owner)
    frame = apiVersionsFrame(99)
    big = struct.pack(">i", 1000) + frame[4:] + b"\x00" * (1000 - len(frame) + 4)
    slow.dataReceived(big[:20])
    assert pool.used == 0
    others = [connect(owner) for _ in range(3)]
    for i, (connection, transport) in enumerate(others):
        connection.dataReceived(apiVersionsFrame(i))
        assert transport.producerState == "producing"
    assert [r.header.correlationId for r in owner.submitted] == [0, 1, 2]
    for request in owner.submitted:
        pool.release(request.memory)
    for i in range(20, len(big), 100):
        slow.dataReceived(big[i : i + 100])
    assert owner.submitted[-1].header.correlationId == 99
    assert pool.used == 1000
    # Pool full: a complete frame waits, with its connection muted.
    late, lateTransport = connect(owner)
    late.dataReceived(apiVersionsFrame(7))
    assert owner.submitted[-1].header.correlationId == 99
    assert lateTransport.producerState == "paused"
    pool.release(1000)
    assert owner.submitted[-1].header.correlationId == 7


def test_frame_larger_than_the_pool_is_refused_at_once():
    pool = MemoryPool(1000)
    owner = FakeOwner(pool=pool)
    connection, transport = connect(owner)
    connection.dataReceived(struct.pack(">i", 1001) + b"\x00" * 20)
    assert transport.disconnecting
    assert connection.closeReason == "request of 1001 bytes can never fit in queued.max.request.bytes=1000"
    assert pool.used == 0


def test_response_after_close_is_dropped():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1))
    connection.connectionLost(None)
    respond(connection, owner.submitted[0])
    assert transport.value() == b""


def test_file_regions_are_written_in_order():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1))
    region = FakeRegion(b"RECORDS")
    connection.sendResponse(Response(owner.submitted[0], [b"head:", region, b":tail"]))
    assert transport.value() == b"head:RECORDS:tail"
    assert region.closed


def test_muted_connection_takes_no_pipelined_request():
    """
    Shutdown mutes: the in-flight request is answered, a request already
    buffered behind it is not taken, even when memory frees up.
    """
    pool = MemoryPool(10_000)
    owner = FakeOwner(pool=pool)
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1) + apiVersionsFrame(2))
    connection.mute()
    assert transport.producerState == "paused"
    respond(connection, owner.submitted[0])
    pool.release(0)
    assert [r.header.correlationId for r in owner.submitted] == [1]
    assert transport.producerState == "paused"


def test_connection_stays_small():
    """
    A connection's fields are slots; its __dict__ (Twisted's attributes)
    stays a small one sharing the class's keys, idle, after requests and
    after closing, where a dict of its own is ~1.6 KB on every one of
    10,000 idle connections.  It holds no response queue until it has a
    response to queue.
    """
    import sys

    owner = FakeOwner()
    for _ in range(3):
        connection, transport = connect(owner)
        connection.quotaHost = "127.0.0.1"  # as the Processor sets it
    assert connection._chunks == ()
    assert sys.getsizeof(connection.__dict__) < 600
    connection.dataReceived(apiVersionsFrame(1))
    respond(connection, owner.submitted[0], b"answer")
    connection.dataReceived(apiVersionsFrame(2))
    respond(connection, owner.submitted[1], b"answer")
    assert sys.getsizeof(connection.__dict__) < 600
    connection.close("done")
    connection.connectionLost(None)
    fresh, _ = connect(owner)
    assert sys.getsizeof(fresh.__dict__) < 600


def test_quota_throttle_mutes_until_it_has_passed():
    """
    A response whose request was throttled (client quotas): the Processor
    reads nothing more from the connection until the throttle has passed,
    then takes the pipelined request.
    """
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1) + apiVersionsFrame(2))
    first = owner.submitted[0]
    first.context.throttleMs = 250
    respond(connection, first, b"first")
    assert connection.throttled
    assert len(owner.submitted) == 1
    assert transport.producerState == "paused"
    reactor = owner.clock.reactor
    reactor.advance(0.2)
    assert len(owner.submitted) == 1
    reactor.advance(0.06)
    assert not connection.throttled
    assert [r.header.correlationId for r in owner.submitted] == [1, 2]
    respond(connection, owner.submitted[1], b"second")
    assert transport.producerState == "producing"


def test_closing_a_throttled_connection_cancels_the_throttle():
    owner = FakeOwner()
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(1))
    owner.submitted[0].context.throttleMs = 1000
    respond(connection, owner.submitted[0])
    assert owner.clock.reactor.getDelayedCalls()
    connection.connectionLost(None)
    assert not [c for c in owner.clock.reactor.getDelayedCalls() if c.active()]


def test_a_refused_allocation_waits_for_memory_once():
    pool = MemoryPool(60)
    owner = FakeOwner(pool=pool)
    connection, _ = connect(owner)
    while pool.available > 0:
        pool.tryAllocate(10)
    connection.dataReceived(apiVersionsFrame(1))
    assert owner.submitted == []
    assert len(pool._waiters) == 1
    pool.release(pool.used)
    assert [r.header.correlationId for r in owner.submitted] == [1]
