"""
RequestChannel bounds and the MemoryPool.
"""

import threading

from kafkatwist.network.acceptor import ConnectionQuotas
from kafkatwist.network.channel import MemoryPool, RequestChannel


class R:
    """
    A request stand-in.
    """

    def __init__(self, name):
        self.name = name
        self.dequeuedAt = 0.0

    def __eq__(self, other):
        return other == self.name


class FakeProcessor:
    def __init__(self):
        self.notified = 0

    def channelHasRoom(self):
        self.notified += 1


def test_full_channel_refuses_rest_and_notifies_when_room():
    channel = RequestChannel(2, batchSize=1)
    processor = FakeProcessor()
    assert channel.sendRequests([R("a"), R("b"), R("c")], processor) == 2
    assert len(channel) == 2
    assert channel.receiveRequests() == ["a"]
    assert processor.notified == 1
    assert channel.sendRequests([R("c")], processor) == 1


def test_requests_travel_in_batches():
    channel = RequestChannel(100, batchSize=3)
    channel.sendRequests([R(str(i)) for i in range(7)], FakeProcessor())
    assert [len(channel.receiveRequests()) for _ in range(3)] == [3, 3, 1]
    assert channel.receiveRequests(timeout=0.01) == []


def test_receive_blocks_until_request_then_closes():
    channel = RequestChannel(10)
    got = []
    thread = threading.Thread(target=lambda: got.append(channel.receiveRequests()))
    thread.start()
    channel.sendRequests([R("x")], FakeProcessor())
    thread.join(5)
    assert got == [["x"]]
    channel.close()
    assert channel.receiveRequests() is None


def test_memory_pool_admits_while_anything_left():
    pool = MemoryPool(100)
    assert pool.tryAllocate(90)
    assert pool.tryAllocate(50)  # overshoots, as Kafka's pool does
    woken = []
    assert not pool.tryAllocate(1, lambda: woken.append(1))
    pool.release(50)
    assert woken == [1]
    assert pool.used == 90


def test_zero_capacity_is_unbounded_as_in_kafka():
    pool = MemoryPool(0)
    assert pool.capacity == -1
    assert pool.tryAllocate(1 << 30)


def test_unbounded_pool():
    pool = MemoryPool(-1)
    assert pool.tryAllocate(10**12)
    assert pool.used == 0


def test_connection_quotas():
    quotas = ConnectionQuotas(maxConnections=3, maxPerIp=2)
    assert quotas.tryAcquire("a") is None
    assert quotas.tryAcquire("a") is None
    assert "max.connections.per.ip=2" in quotas.tryAcquire("a")
    assert quotas.tryAcquire("b") is None
    assert "max.connections=3" in quotas.tryAcquire("c")
    quotas.release("a")
    assert quotas.tryAcquire("c") is None
    quotas.release("zzz")  # unknown: ignored
    assert quotas.total == 3


def test_calls_run_on_a_handler_thread_outside_the_bound():
    from kafkatwist.network.handlers import HandlerPool

    channel = RequestChannel(1)
    processor = FakeProcessor()
    assert channel.sendRequests([R("a")], processor) == 1
    ran = threading.Event()
    where = []

    def work(x):
        where.append((x, threading.current_thread().name))
        ran.set()

    # A full channel still takes calls: each stands for an admitted request.
    channel.sendCall(work, 7)
    assert len(channel) == 1
    assert channel.receiveRequests() == ["a"]
    pool = HandlerPool(channel, broker=None, numThreads=1)
    pool.start()
    try:
        assert ran.wait(10)
    finally:
        channel.close()
        pool.join(10)
    assert where == [(7, "kafkatwist-request-handler-0")]
