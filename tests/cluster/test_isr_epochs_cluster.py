"""
KIP-903 end to end (real ZooKeeper, three real brokers): a follower killed
with kill -9 whose log lost its tail while it was down (cut back to offset
500 of 1,000 acknowledged records) and started again at once joins the ISR
again only under its new registration, once it has every record again; its
leader then dies and nothing acknowledged is lost.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest, partitions
from tests.cluster.crashhelpers import (
    CUT,
    RECORDS,
    cutActiveSegment,
    readAll,
    startThree,
    tracebacks,
)

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402

TOPIC = "rejoin"


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = ClusterUnderTest(zookeeper, tmp_path, "rejoin")
    yield c
    c.stop()


def test_a_follower_restarted_with_a_cut_log_rejoins_only_caught_up(cluster):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as PlainNewTopic

    from tests.replication.cluster import StaticCluster

    settings, admin = startThree(cluster)
    probe = StaticCluster.__new__(StaticCluster)
    probe.brokers = cluster.brokers
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1, 2, 3))
    try:
        client.create_topics([PlainNewTopic(TOPIC, -1, -1, replica_assignments={0: [1, 2, 3]},
                                            topic_configs={"min.insync.replicas": "2"})])
    finally:
        client.close()
    waitUntil(lambda: (partitions(admin, TOPIC) or {}).get(0, (None, (), ()))[0] == 1
              and len(partitions(admin, TOPIC)[0][2]) == 3, what=f"{TOPIC}-0 led by 1, ISR of 3")
    producer = Producer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    for half in (range(CUT), range(CUT, RECORDS)):
        for n in half:
            producer.produce(TOPIC, value=b"%06d" % n)
        assert producer.flush(60) == 0
    waitUntil(lambda: all((probe.state(i, TOPIC) or {}).get("leo") == RECORDS for i in (1, 2, 3)),
              what=f"{RECORDS} records on every replica")

    follower = cluster.brokers[3]
    follower.kill()
    cut = cutActiveSegment(os.path.join(follower.directory, "data", f"{TOPIC}-0"), CUT)
    assert cut > 0
    cluster.startBroker(3, **settings)
    admin = cluster.admin(1, 2, 3)

    def rejoined():
        state = (partitions(admin, TOPIC) or {}).get(0)
        return state is not None and 3 in state[2]

    waitUntil(rejoined, timeout=120, what="broker 3 back in the ISR")
    # Back in the ISR only with every acknowledged record again.
    assert (probe.state(3, TOPIC) or {}).get("leo", 0) >= RECORDS

    # Its leader dies: whoever leads next has every acknowledged record.
    cluster.brokers[1].kill()
    admin = cluster.admin(2, 3)
    waitUntil(lambda: (partitions(admin, TOPIC) or {}).get(0, (None,))[0] in (2, 3), timeout=120,
              what="a new leader")
    seen = readAll(cluster.bootstrap(2, 3), TOPIC, RECORDS)
    assert len(seen) == RECORDS
    for i in (2, 3):
        assert not tracebacks(cluster.brokers[i]), tracebacks(cluster.brokers[i])[:5]


@pytest.fixture
def nodes(zookeeper):
    from tests.cluster.test_control_plane import Node

    connect = zookeeper.connect("isr-epochs")
    started = []

    def start(brokerId):
        node = Node(connect, brokerId).start()
        started.append(node)
        return node

    yield start
    for node in started:
        node.stop()


def test_the_isr_write_refuses_a_previous_registration_of_a_replica(nodes):
    """
    The ISR write against a real ZooKeeper: an expansion made from the
    fetches of broker 2's previous registration, landing after it
    registered again, is refused; one under its current registration is
    written.
    """
    from kafkatwist.errors import ErrorCode
    from tests.cluster.test_control_plane import call

    a, b = nodes(1), nodes(2)
    waitUntil(lambda: a.image.live() == {1, 2}, what="two brokers")
    _, error = call(a.service.createTopic, "e", {0: (1, 2)}, {})
    assert error is None
    waitUntil(lambda: a.image.leader("e", 0) == 1, what="broker 1 leads e-0")
    # Broker 2 leaves the ISR (as its leader writes it), then restarts.
    state = a.image.states[("e", 0)]
    _, error = call(a.service.alterIsr, "e", 0, 1, state.leaderEpoch, (1,), state.zkVersion)
    assert error is None
    old = a.image.brokerEpochs[2]
    b.stop()
    waitUntil(lambda: 2 not in a.image.live(), what="broker 2 gone")
    new = nodes(2).service._brokerEpoch
    assert new > old
    waitUntil(lambda: a.image.brokerEpochs.get(2) == new, what="broker 1 reads broker 2's new registration")

    def expand(epoch):
        state = a.image.states[("e", 0)]
        return call(lambda *args: a.service.alterIsr(*args, brokerEpochs={2: epoch}),
                    "e", 0, 1, state.leaderEpoch, (1, 2), state.zkVersion)

    _, error = expand(old)
    assert error is not None and error.code == ErrorCode.ineligible_replica
    assert a.image.states[("e", 0)].isr == (1,)
    _, error = expand(new)
    assert error is None
    waitUntil(lambda: a.image.states[("e", 0)].isr == (1, 2), what="broker 2 back in the ISR")
