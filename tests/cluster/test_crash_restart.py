"""
Issue 30, item 1: a leader killed with kill -9 whose log lost its
unflushed tail while it was down (a machine crash or power loss drops the
page cache; without an fsync per message that is allowed), restarted at
once, must not cost any acknowledged record: it does not lead on its own
reading of ZooKeeper, the controller treats it as failed first (a new
leader from the ISR, in a new leader epoch), and no follower truncates to
its shorter log.

Three real broker processes and a real ZooKeeper; RF 3,
C{min.insync.replicas=2}; 1,000 records acknowledged with acks=all and on
every replica; the leader is killed, its active segment cut back to
offset 500 at a batch boundary (the index files and the checkpoints left
as they were: the high watermark and recovery point checkpoints are ahead
of the log, as after a power loss), and it is started again at once.
Once with the leader being the controller, once with it being another
broker; C{KAFKATWIST_CRASH_ATTEMPTS} attempts each (2 by default; the
issue's bar is 20).
"""

from __future__ import annotations

import os
import re

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.crashhelpers import (
    CUT,
    RECORDS,
    cutActiveSegment,
    readAll,
    startThree,
    tracebacks,
)
from tests.cluster.helpers import ClusterUnderTest, partitions

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402

_TRUNCATING = re.compile(r"(\S+)-(\d+): truncating from (\d+) to (\d+)")


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = ClusterUnderTest(zookeeper, tmp_path, "crash")
    yield c
    c.stop()


def truncations(broker, topic: str) -> list[tuple[int, int]]:
    return [(int(end), int(to)) for name, _, end, to in _TRUNCATING.findall(broker.output())
            if name == topic]


def crashAndCut(cluster, topic: str, leaderIsController: bool, settings: dict) -> dict:
    """
    One attempt: a new topic led by the controller (or by another
    broker), 1,000 records acknowledged on every replica, the leader
    killed, cut back to offset 500 and started again at once.

    @return: what the attempt saw (lost records, truncations below 1,000).
    """
    from tests.replication.cluster import StaticCluster

    probe = StaticCluster.__new__(StaticCluster)
    probe.brokers = cluster.brokers
    # A client of the brokers' current ports: every broker restarts on a
    # new one over the attempts.
    admin = cluster.admin(1, 2, 3)
    controller = waitUntil(lambda: admin.list_topics(timeout=10).controller_id in (1, 2, 3)
                           and admin.list_topics(timeout=10).controller_id, what="a controller")
    others = [i for i in (1, 2, 3) if i != controller]
    first = controller if leaderIsController else others[0]
    order = [first] + [i for i in (1, 2, 3) if i != first]
    # confluent-kafka 2.16 refuses a replica assignment: kafka-python sends it.
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as PlainNewTopic

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1, 2, 3))
    try:
        client.create_topics([PlainNewTopic(topic, -1, -1, replica_assignments={0: order},
                                            topic_configs={"min.insync.replicas": "2"})])
    finally:
        client.close()
    waitUntil(lambda: (partitions(admin, topic) or {}).get(0, (None, (), ()))[0] == first
              and len(partitions(admin, topic)[0][2]) == 3, what=f"{topic}-0 led by {first}, ISR of 3")

    producer = Producer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked: list[bytes] = []
    failed: list = []

    def delivered(error, message):
        (failed if error is not None else acked).append(error or message.value())

    # Two flushes: a batch boundary at offset 500.
    for half in (range(CUT), range(CUT, RECORDS)):
        for n in half:
            producer.produce(topic, value=b"%06d" % n, on_delivery=delivered)
        assert producer.flush(60) == 0
    assert not failed and len(acked) == RECORDS, (failed[:3], len(acked))

    def everywhere():
        states = [probe.state(i, topic) for i in (1, 2, 3)]
        return all(s is not None and s["leo"] == RECORDS and s["hw"] == RECORDS for s in states)

    waitUntil(everywhere, what=f"{RECORDS} records on every replica of {topic}-0")
    leader = first
    assert partitions(admin, topic)[0][0] == leader
    # The checkpoints say 1,000 (written every 500 ms in these tests).
    broker = cluster.brokers[leader]
    dataDir = os.path.join(broker.directory, "data")
    from kafkatwist.log.checkpoint import readCheckpoint

    waitUntil(lambda: readCheckpoint(os.path.join(dataDir, "replication-offset-checkpoint")).get((topic, 0))
              == RECORDS, what="the leader's high-watermark checkpoint at 1,000")
    before = {i: len(truncations(b, topic)) for i, b in cluster.brokers.items()}
    broker.kill()
    cut = cutActiveSegment(os.path.join(dataDir, f"{topic}-0"), CUT)
    assert cut > 0
    cluster.startBroker(leader, **settings)

    admin = cluster.admin(1, 2, 3)
    try:
        waitUntil(lambda: len((partitions(admin, topic) or {}).get(0, (0, (), ()))[2]) == 3
                  and partitions(admin, topic)[0][0] in (1, 2, 3), timeout=120,
                  what=f"{topic}-0 led again with an ISR of 3")
    except AssertionError as e:
        views = {}
        for i in (1, 2, 3):
            try:
                views[i] = (partitions(cluster.admin(i), topic), probe.state(i, topic))
            except Exception as error:  # noqa: BLE001 -- said in the message
                views[i] = repr(error)
        raise AssertionError(f"{e}; each broker's view (metadata, replica state): {views}") from e
    seen = readAll(cluster.bootstrap(1, 2, 3), topic, RECORDS)
    lost = sorted(set(acked) - seen)
    below = {i: [t for t in truncations(b, topic)[before[i]:] if t[1] < RECORDS]
             for i, b in cluster.brokers.items()}
    return {"lost": len(lost), "firstLost": lost[:3], "below": {i: t for i, t in below.items() if t},
            "leader": leader, "controller": controller}


@pytest.mark.parametrize("leaderIsController", [True, False], ids=["leader-is-controller", "leader-not-controller"])
def test_crashed_leader_restarted_at_once_loses_nothing(cluster, leaderIsController):

    attempts = int(os.environ.get("KAFKATWIST_CRASH_ATTEMPTS", "2"))
    settings, admin = startThree(cluster)
    # An idle topic with many partitions keeps the controller busy after a
    # broker change, which widens the window the issue describes.
    idle = int(os.environ.get("KAFKATWIST_CRASH_IDLE_PARTITIONS", "60"))
    if idle:
        from confluent_kafka.admin import NewTopic

        admin.create_topics([NewTopic("idle", num_partitions=idle, replication_factor=3)],
                            request_timeout=120)["idle"].result()
        waitUntil(lambda: all(len(isr) == 3 for _, _, isr in (partitions(admin, "idle") or {0: (0, (), ())}).values())
                  and len(partitions(admin, "idle")) == idle, timeout=120, what="the idle topic replicated")
    results = []
    for n in range(attempts):
        result = crashAndCut(cluster, f"crash{n}", leaderIsController, settings)
        results.append(result)
        print(f"attempt {n}: {result}")
        assert result["lost"] == 0, f"attempt {n}: {result['lost']} acknowledged records lost: {result}"
        assert not result["below"], f"attempt {n}: replicas truncated below {RECORDS}: {result}"
    for i, broker in cluster.brokers.items():
        assert not tracebacks(broker), f"broker {i} logged tracebacks: {tracebacks(broker)[:5]}"
