"""
Replication between real broker processes on loopback, driven by a static
controller (no ZooKeeper): followers converge, acks=all waits for the ISR,
a divergent follower truncates after a leader change (KIP-279), consumers
never see past the high watermark.
"""

from __future__ import annotations

import time

import pytest

from kafkatwist.testing import waitUntil
from tests.replication.cluster import produce
from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.records import Record


def test_followers_converge(cluster):
    c = cluster(3)
    c.createTopic("r")
    c.elect("r", 0, leader=1, epoch=1, isr=[1, 2, 3])
    waitUntil(lambda: (c.state(2, "r") or {}).get("role") == "follower", what="roles")
    errors = produce(c.bootstrap(1), "r", [b"v%d" % i for i in range(200)])
    assert errors == [None] * 200
    dumps = c.waitInSync("r")
    assert len(dumps[1]) > 0
    state = c.state(1, "r")
    assert state["leo"] == 200 and state["hw"] == 200 and state["isr"] == [1, 2, 3]
    assert state["epochs"] == [[1, 0]]
    assert c.state(3, "r")["epochs"] == [[1, 0]]


def test_acks_all_waits_for_the_isr_then_shrinks(cluster):
    # A lag long enough that a loaded machine answers acks=1 well within it.
    c = cluster(3, {"replica.lag.time.max.ms": "8000"})
    c.createTopic("r")
    c.elect("r", 0, leader=1, epoch=1, isr=[1, 2, 3])
    assert produce(c.bootstrap(1), "r", [b"a"]) == [None]
    c.waitInSync("r")
    c.pause(3)
    try:
        # acks=1 does not wait for the paused follower: answered while it
        # is still in the ISR.
        assert produce(c.bootstrap(1), "r", [b"c"], acks="1") == [None]
        assert c.state(1, "r")["isr"] == [1, 2, 3]
        started = time.monotonic()
        # acks=all is acknowledged only once broker 3 left the ISR.
        assert produce(c.bootstrap(1), "r", [b"b"]) == [None]
        waited = time.monotonic() - started
        assert waited > 2.0, waited
        assert c.state(1, "r")["isr"] == [1, 2]
    finally:
        c.resume(3)
    # Broker 3 catches up and rejoins.
    waitUntil(lambda: c.state(1, "r")["isr"] == [1, 2, 3], what="broker 3 back in the ISR")
    c.waitInSync("r")


def test_not_enough_replicas(cluster):
    c = cluster(3)
    c.createTopic("m", configs={"min.insync.replicas": "3"})
    c.elect("m", 0, leader=1, epoch=1, isr=[1, 2, 3])
    assert produce(c.bootstrap(1), "m", [b"a"]) == [None]
    c.pause(3)
    try:
        waitUntil(lambda: c.state(1, "m")["isr"] == [1, 2], what="the ISR shrink")
        with KafkaWireClient(c.bootstrap(1)) as client:
            from kafkatwist.errors import KafkaError

            with pytest.raises(KafkaError) as e:
                client.produce("m", 0, [Record(value=b"x")], acks=-1)
            assert e.value.code.name == "not_enough_replicas"
            # acks=1 is not held to min.insync.replicas.
            client.produce("m", 0, [Record(value=b"y")], acks=1)
    finally:
        c.resume(3)


def test_consumers_never_see_past_the_high_watermark(cluster):
    c = cluster(2, {"replica.lag.time.max.ms": "60000"})
    c.createTopic("h")
    c.elect("h", 0, leader=1, epoch=1, isr=[1, 2])
    assert produce(c.bootstrap(1), "h", [b"a", b"b"]) == [None, None]
    c.waitInSync("h")
    c.pause(2)
    try:
        assert produce(c.bootstrap(1), "h", [b"c"], acks="1") == [None]
        state = c.state(1, "h")
        assert (state["leo"], state["hw"]) == (3, 2)
        with KafkaWireClient(c.bootstrap(1)) as client:
            fetched = client.fetchRaw("h", 0, 0, maxWaitMs=0)
            assert fetched.highWatermark == 2
            from kafkatwist.protocol.batch import iterBatchHeaders

            lastOffsets = [h.lastOffset for _, h in iterBatchHeaders(fetched.records)]
            assert max(lastOffsets) == 1
            assert client.fetchRaw("h", 0, 2, maxWaitMs=0).records == b""
            assert client.listOffsets("h", [0])[0][0] == 2
    finally:
        c.resume(2)
    c.waitInSync("h")
    with KafkaWireClient(c.bootstrap(1)) as client:
        assert client.listOffsets("h", [0])[0][0] == 3


def test_divergent_follower_truncates_after_a_leader_change(cluster):
    """
    KIP-279: broker 1 leads epoch 1 and takes writes its followers never
    see (acks=1 while they are down), then dies.  Broker 2 leads epoch 2
    and takes other writes.  Broker 1 comes back as a follower: it truncates
    its suffix of epoch 1 and ends with broker 2's log.
    """
    c = cluster(3, {"replica.lag.time.max.ms": "60000"})
    c.createTopic("k")
    c.elect("k", 0, leader=1, epoch=1, isr=[1, 2, 3])
    assert produce(c.bootstrap(1), "k", [b"a%d" % i for i in range(5)]) == [None] * 5
    c.waitInSync("k")
    c.kill(2)
    c.kill(3)
    assert produce(c.bootstrap(1), "k", [b"lost%d" % i for i in range(3)], acks="1") == [None] * 3
    assert c.state(1, "k")["leo"] == 8
    c.kill(1)
    c.restart(2)
    c.restart(3)
    c.elect("k", 0, leader=2, epoch=2, isr=[2, 3])
    waitUntil(lambda: c.state(2, "k")["role"] == "leader", what="broker 2 leading")
    assert produce(c.bootstrap(2), "k", [b"b%d" % i for i in range(4)]) == [None] * 4
    c.restart(1)
    c.elect("k", 0, leader=2, epoch=2, isr=[2, 3], nodes=[1])
    dumps = c.waitInSync("k")
    state = c.state(1, "k")
    assert state["leo"] == 9 and state["epochs"] == [[1, 0], [2, 5]]
    assert b"lost" not in dumps[1]
    assert b"b3" in dumps[1]
    waitUntil(lambda: c.state(2, "k")["isr"] == [1, 2, 3], what="broker 1 back in the ISR")


def test_only_the_leader_serves_clients(cluster):
    c = cluster(2)
    c.createTopic("n")
    c.elect("n", 0, leader=1, epoch=3, isr=[1, 2])
    waitUntil(lambda: (c.state(2, "n") or {}).get("role") == "follower", what="roles")
    from kafkatwist.errors import KafkaError

    # A short timeout: the client follows leaders, so each refused call is
    # retried until then (the default would make this test wait 90 s).
    with KafkaWireClient(c.bootstrap(2), timeout=3) as client:
        for call in (
            lambda: client.produce("n", 0, [Record(value=b"x")], acks=1),
            lambda: client.listOffsets("n", [0]),
        ):
            with pytest.raises(KafkaError) as e:
                call()
            assert e.value.code.name == "not_leader_or_follower"
        # Fetch v11+ carries a consumer's client metadata (KIP-392): Kafka
        # serves it from a follower too, up to that follower's high
        # watermark; an older fetch only from the leader.
        assert client.fetchRaw("n", 0, 0, maxWaitMs=0).error.name == "none"
    assert _fetchV10(c.bootstrap(2), "n") == ErrorCode.not_leader_or_follower
    assert _fetchV10(c.bootstrap(1), "n") == ErrorCode.none


def _fetchV10(bootstrap, topic):
    import datetime

    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(1, 10)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(Topic(topic=topic, partitions=(Partition(
            partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 16),)),),
        forgotten_topics_data=(),
    )
    with KafkaWireClient(bootstrap) as client:
        _, response = decodeResponseFrame(1, 10, client.sendRaw(encodeRequestFrame(1, 10, 5, "t", request)))
    return response.responses[0].partitions[0].error_code


def test_no_acknowledged_record_is_lost_across_leader_kills(cluster):
    """
    acks=all records acknowledged by a leader survive its kill -9: the
    controller elects another ISR member, the killed broker comes back as a
    follower, and every replica ends with the same log holding every
    acknowledged record.
    """
    from kafkatwist.errors import KafkaError
    from kafkatwist.protocol.records import decodeBatches

    c = cluster(3, {"replica.lag.time.max.ms": "10000", "min.insync.replicas": "2"})
    c.createTopic("d")
    leader, epoch = 1, 1
    c.elect("d", 0, leader=leader, epoch=epoch, isr=[1, 2, 3])
    waitUntil(lambda: (c.state(leader, "d") or {}).get("role") == "leader", what="a leader")
    acknowledged = []
    n = 0
    for round in range(3):
        with KafkaWireClient(c.bootstrap(leader)) as client:
            for _ in range(30):
                value = b"r%d-%d" % (round, n)
                n += 1
                try:
                    client.produce("d", 0, [Record(value=value)], acks=-1, timeoutMs=10000)
                except (KafkaError, OSError):
                    continue
                acknowledged.append(value)
        isr = c.state(leader, "d")["isr"]
        c.kill(leader)
        survivors = [b for b in isr if b != leader]
        old, leader, epoch = leader, survivors[0], epoch + 1
        c.elect("d", 0, leader=leader, epoch=epoch, isr=survivors)
        waitUntil(lambda: (c.state(leader, "d") or {}).get("epoch") == epoch, what="the new leader")
        c.restart(old)
        c.elect("d", 0, leader=leader, epoch=epoch, isr=survivors, nodes=[old])
    dumps = c.waitInSync("d")
    values = [r.value for b in decodeBatches(dumps[leader]) for r in b.records]
    assert set(acknowledged) <= set(values)
    assert len(acknowledged) > 60
