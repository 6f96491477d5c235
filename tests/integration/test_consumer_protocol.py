"""
KIP-848 consumer groups through a real broker with librdkafka
(confluent-kafka, C{group.protocol=consumer}): two consumers split the
partitions, one leaves and the other gets them all, and committed offsets
survive a broker restart.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PARTITIONS = 6
TOPIC = "kip848"
GROUP = "kip848-group"


@pytest.fixture
def broker(brokerFactory):
    b = brokerFactory(
        {
            "num.partitions": str(PARTITIONS),
            "offsets.topic.num.partitions": "3",
            "group.consumer.session.timeout.ms": "4000",
            "group.consumer.heartbeat.interval.ms": "500",
        }
    )

    def start():
        if os.path.exists(b.logPath):
            os.replace(b.logPath, b.logPath + f".{time.monotonic_ns()}")
        # Back on the same port: the members' clients know the broker there.
        b.pinPorts()
        b.start()
        return b

    b.restart = start
    return start()


def _consumer(bootstrap, assignor="uniform", topics=(TOPIC,), **extra):
    from confluent_kafka import Consumer

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": GROUP,
        "group.protocol": "consumer",
        "group.remote.assignor": assignor,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    conf.update(extra)
    c = Consumer(conf)
    c.subscribe(list(topics))
    return c


def _produce(bootstrap, count):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        p.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    assert p.flush(20) == 0


#: records consumed, by id(consumer)
SEEN: dict[int, int] = {}


def _pollUntil(consumers, predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                SEEN[id(c)] = SEEN.get(id(c), 0) + 1
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}: {[_owned(c) for c in consumers]}")


def _owned(c) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_two_consumers_split_then_one_takes_all(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    _produce(broker.bootstrap, 60)
    a = _consumer(broker.bootstrap)
    b = _consumer(broker.bootstrap)
    try:
        _pollUntil([a, b], lambda: len(_owned(a)) == 3 and len(_owned(b)) == 3, 60, "a 3/3 split")
        assert _owned(a).isdisjoint(_owned(b))
        described = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
        from confluent_kafka import ConsumerGroupType

        assert described.type == ConsumerGroupType.CONSUMER
        assert len(described.members) == 2
        assert sorted(
            tp.partition for m in described.members for tp in m.assignment.topic_partitions
        ) == list(range(PARTITIONS))
        b.close()
        _pollUntil([a], lambda: _owned(a) == set(range(PARTITIONS)), 60, "one member with all")
    finally:
        a.close()


def test_commits_survive_restart(broker):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    _produce(broker.bootstrap, 60)
    c = _consumer(broker.bootstrap)
    try:
        _pollUntil([c], lambda: len(_owned(c)) == PARTITIONS, 60, "all partitions")
        c.commit(
            offsets=[TopicPartition(TOPIC, p, 5) for p in range(PARTITIONS)], asynchronous=False
        )
    finally:
        c.close()
    broker.stop()
    broker.restart()
    c = _consumer(broker.bootstrap)
    try:
        _pollUntil([c], lambda: len(_owned(c)) == PARTITIONS, 60, "all partitions after restart")
        committed = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
        assert [tp.offset for tp in committed] == [5] * PARTITIONS
        # Fetching resumes at the committed offsets: 10 per partition, 5 left each.
        _pollUntil([c], lambda: SEEN.get(id(c), 0) >= 30, 30, "the rest of the records")
    finally:
        c.close()


def test_member_keeps_its_partitions_across_a_restart(broker):
    """
    The group is read back from __consumer_offsets: the member heartbeats
    on with the same id and epoch, and its partitions are not moved.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    c = _consumer(broker.bootstrap)
    try:
        _pollUntil([c], lambda: len(_owned(c)) == PARTITIONS, 60, "all partitions")
        before = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
        (member,) = before.members
        broker.stop()
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        after = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
        assert [m.member_id for m in after.members] == [member.member_id]
        _produce(broker.bootstrap, 12)
        _pollUntil([c], lambda: SEEN.get(id(c), 0) >= 12, 60, "records after the restart")
        assert _owned(c) == set(range(PARTITIONS))
        after = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
        assert [m.member_id for m in after.members] == [member.member_id]
    finally:
        c.close()


CONSUMER = r"""
import sys
from confluent_kafka import Consumer

c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
              "auto.offset.reset": "earliest"})
c.subscribe([sys.argv[3]])
while True:
    c.poll(0.2)
    print(len(c.assignment()), flush=True)
"""


def test_a_killed_member_is_removed_after_the_session_timeout(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    child = subprocess.Popen(
        [sys.executable, "-c", CONSUMER, broker.bootstrap, GROUP, TOPIC],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    a = _consumer(broker.bootstrap)
    try:
        _pollUntil([a], lambda: len(_owned(a)) == 3, 60, "a 3/3 split with the child")
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        killed = time.monotonic()
        _pollUntil([a], lambda: len(_owned(a)) == PARTITIONS, 30, "the killed member's partitions")
        # Not before its session ran out (4 s), give or take a heartbeat.
        assert time.monotonic() - killed > 3
    finally:
        if child.poll() is None:
            child.kill()
        a.close()


def test_regex_subscription_and_range_assignor(broker):
    """
    A regex subscription (ConsumerGroupHeartbeat v1) picks up a topic
    created later; the range assignor co-partitions two topics.
    """
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("rx-a", 2, 1), NewTopic("other", 2, 1)])["rx-a"].result(20)
    a = _consumer(broker.bootstrap, assignor="range", topics=("^rx-.*",))
    b = _consumer(broker.bootstrap, assignor="range", topics=("^rx-.*",))
    try:
        def topics(c):
            return {tp.topic for tp in c.assignment()}

        _pollUntil([a, b], lambda: len(_owned(a)) == 1 and len(_owned(b)) == 1, 60, "rx-a split")
        assert topics(a) == topics(b) == {"rx-a"}
        admin.create_topics([NewTopic("rx-b", 2, 1)])["rx-b"].result(20)

        def both():
            return topics(a) == topics(b) == {"rx-a", "rx-b"}

        _pollUntil([a, b], both, 60, "rx-b picked up")
        # Range: the same partition number of each topic to one member.
        for c in (a, b):
            parts = {}
            for tp in c.assignment():
                parts.setdefault(tp.topic, set()).add(tp.partition)
            assert parts["rx-a"] == parts["rx-b"]
        described = admin.describe_consumer_groups([GROUP])[GROUP].result(20)
        assert described.partition_assignor == "range"
        # The regex went to the broker (v1), not resolved by the client.
        from tests.rawclient import RawConnection

        conn = RawConnection(broker.port)
        try:
            (g,) = conn.request(69, 0, group_ids=(GROUP,), include_authorized_operations=False).groups
            (g1,) = conn.request(69, 1, group_ids=(GROUP,), include_authorized_operations=False).groups
        finally:
            conn.close()
        # v1 (Kafka 4.x) adds the member type: 1, the consumer protocol.
        assert [m.member_type for m in g1.members] == [1, 1]
        assert {m.member_id for m in g1.members} == {m.member_id for m in g.members}
        # (librdkafka joins its regexes into one.)
        assert {m.subscribed_topic_regex for m in g.members} == {"(^rx-.*)"}
        assert {m.subscribed_topic_names for m in g.members} == {()}
    finally:
        a.close()
        b.close()


def test_static_member_comes_back_to_its_partitions(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
    a = _consumer(broker.bootstrap, **{"group.instance.id": "ia"})
    b = _consumer(broker.bootstrap, **{"group.instance.id": "ib"})
    try:
        _pollUntil([a, b], lambda: len(_owned(a)) == 3 and len(_owned(b)) == 3, 60, "a 3/3 split")
        mine = _owned(a)
        a.close()
        a = _consumer(broker.bootstrap, **{"group.instance.id": "ia"})
        seenByB = set()

        def back():
            seenByB.update(_owned(b))
            return _owned(a) == mine

        _pollUntil([a, b], back, 30, "the same partitions back")
        # b was never handed a's partitions meanwhile.
        assert len(seenByB) == 3 and seenByB.isdisjoint(mine)
    finally:
        a.close()
        b.close()
