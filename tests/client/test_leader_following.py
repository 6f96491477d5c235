"""
L{KafkaWireClient} in a cluster whose leaders move: KIP-320 leader epochs on
Fetch and ListOffsets, metadata refreshed and the request retried with a
growing pause on the errors that mean "the leader moved", bounded by the
client's timeout; idempotent batches resent after a lost connection.
Against the in-process fake brokers (L{fakebroker}), with an injected clock.
"""

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.client import KafkaConnectionError, KafkaWireClient
from kafkatwist.client.client import RETRY_BACKOFF, RETRY_BACKOFF_MAX
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.records import Record, buildBatch

from .fakebroker import requestsFor


class FakeTime:
    """
    A monotonic clock that only moves when the client sleeps.
    """

    def __init__(self):
        self.now = 1000.0
        self.pauses: list[float] = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.pauses.append(seconds)
        self.now += seconds


@pytest.fixture
def fakeTime():
    return FakeTime()


def client(fakeTime, *brokers, timeout=5.0):
    return KafkaWireClient(
        [b.address for b in brokers], timeout=timeout, clock=fakeTime.clock, sleep=fakeTime.sleep
    )


@pytest.fixture
def three(cluster):
    brokers = [cluster.addBroker() for _ in range(3)]
    cluster.createTopic("t", 2, leaders=[1, 2])
    return brokers


def test_fetch_and_list_offsets_carry_the_leader_epoch(cluster, three, fakeTime):
    cluster.moveLeader("t", 0, 3)  # epoch 1
    with client(fakeTime, three[0]) as c:
        c.produce("t", 0, [Record(value=b"a")])
        c.fetch("t", 0, 0)
        c.listOffsets("t", [0, 1])
    assert (3, 1, 0, 1) in cluster.epochsSeen
    assert (3, 2, 0, 1) in cluster.epochsSeen
    assert (2, 2, 1, 0) in cluster.epochsSeen


@pytest.mark.parametrize("moved", [True, False])
def test_fetch_follows_a_moved_leader(cluster, three, fakeTime, moved):
    """
    NOT_LEADER_OR_FOLLOWER (the leader moved) or FENCED_LEADER_EPOCH (our
    epoch is stale): refresh metadata, retry with the new leader and epoch.
    """
    with client(fakeTime, three[0]) as c:
        c.produce("t", 0, [Record(value=b"a")])
        assert c.fetch("t", 0, 0).records[0].value == b"a"
        cluster.moveLeader("t", 0, 2 if moved else 1)
        result = c.fetch("t", 0, 0)
    assert result.error == ErrorCode.none
    assert result.records[0].value == b"a"
    fetches = [(node, epoch) for node, key, p, epoch in cluster.epochsSeen if key == 1]
    assert fetches == [(1, 0), (1, 0), (2 if moved else 1, 1)]
    assert fakeTime.pauses == [RETRY_BACKOFF]


def test_retries_with_growing_pauses_until_the_new_leader_knows(cluster, three, fakeTime):
    with client(fakeTime, three[0]) as c:
        cluster.moveLeader("t", 0, 2)
        cluster.notYetLeader[2] = 4
        assert c.produce("t", 0, [Record(value=b"a")]) == 0
        assert c.listOffsets("t", [0])[0][0] == 1
    assert fakeTime.pauses == [0.1, 0.2, 0.4, 0.8]
    # Metadata was read again before each retry.
    assert len(requestsFor(cluster, 3)) >= 5


def test_gives_up_at_the_timeout(cluster, three, fakeTime):
    cluster.notYetLeader[1] = 10**6
    with client(fakeTime, three[0], timeout=5.0) as c:
        # Fetch reports a partition's error in its result ...
        assert c.fetch("t", 0, 0).error == ErrorCode.not_leader_or_follower
        spent = sum(fakeTime.pauses)
        fakeTime.pauses.clear()
        # ... ListOffsets raises it.
        with pytest.raises(KafkaError) as e:
            c.listOffsets("t", [0])
    assert e.value.code == ErrorCode.not_leader_or_follower
    assert spent == sum(fakeTime.pauses)
    assert sum(fakeTime.pauses) <= 5.0
    assert max(fakeTime.pauses) == RETRY_BACKOFF_MAX
    assert sum(fakeTime.pauses) > 5.0 - RETRY_BACKOFF_MAX


def test_leaders_broker_dies(cluster, three, fakeTime):
    """
    The leader's broker goes away: the connection breaks, metadata (from
    another broker) soon names a new leader, and the client follows.
    """
    with client(fakeTime, three[1], three[0]) as c:
        c.produce("t", 0, [Record(value=b"a")])
        three[0].close()
        cluster.moveLeader("t", 0, 3)
        assert c.fetch("t", 0, 0).records[0].value == b"a"
        assert c.listOffsets("t", [0, 1]) == {0: (1, -1), 1: (0, -1)}


def test_bootstrap_from_any_server_of_the_list(cluster, three, fakeTime):
    three[0].close()
    with client(fakeTime, three[0], three[2]) as c:
        meta = c.metadata(["t"])
    assert sorted(meta.brokers) == [1, 2, 3]
    assert meta.topics["t"].leaderEpochs == {0: 0, 1: 0}


def test_idempotent_batch_resent_after_a_lost_connection(cluster, three, fakeTime):
    from kafkatwist_spark.encoding import encodeBatch

    # producer id 7, epoch 0, sequence 0
    idempotent = encodeBatch([None], [b"a"], None, 0, "none", (7, 0, 0), transactional=False)
    with client(fakeTime, three[0]) as c:
        cluster.closeOnNext = 0
        assert c.produce("t", 0, idempotent, acks=-1) == 0
        plain = buildBatch([Record(value=b"b")], "none")
        cluster.closeOnNext = 0
        with pytest.raises(KafkaConnectionError):
            c.produce("t", 0, plain, acks=-1)
