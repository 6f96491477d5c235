"""
Replication throttles (KIP-73) on three real brokers driven by the static
controller: C{follower.replication.throttled.rate} with a topic's
C{follower.replication.throttled.replicas}, and
C{leader.replication.throttled.rate} with
C{leader.replication.throttled.replicas}, set with confluent-kafka's
AdminClient.  A throttled follower catches up at about the rate while the
unthrottled ones are not slowed.  The bounds are loose: a loaded 2-core
machine only makes things slower, and a throttle only has to keep the
rate below about twice its bound.
"""

from __future__ import annotations

import time

import pytest

from kafkatwist.testing import waitUntil
from tests.replication.cluster import produce

from tests.integration.helpers import incremental

pytestmark = [pytest.mark.timeout(240)]

RATE = 300_000
VALUE = b"x" * 10_000


def admin(c, nodeId):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap(nodeId)})


def fill(c, topic, count, configs=None):
    """
    A topic led by broker 1 alone, holding C{count} records of 10 kB.

    @return: its log end offset.
    """
    c.createTopic(topic, configs=configs)
    c.elect(topic, 0, leader=1, epoch=1, isr=[1], replicas=[1])
    waitUntil(lambda: (c.state(1, topic) or {}).get("role") == "leader", what="leader")
    assert produce(c.bootstrap(1), topic, [VALUE] * count, acks="1") == [None] * count
    return c.state(1, topic)["leo"]


def leo(c, nodeId, topic):
    return (c.state(nodeId, topic) or {}).get("leo", 0)


def caughtUp(c, nodeId, topic, end, timeout=90.0):
    """
    @return: the monotonic time at which broker C{nodeId} had C{end}.
    """
    waitUntil(lambda: leo(c, nodeId, topic) >= end, timeout, f"broker {nodeId} to replicate {topic}")
    return time.monotonic()


def test_follower_and_leader_throttles(cluster):
    c = cluster(3, {"replica.fetch.max.bytes": "65536"})
    # Broker 3 throttles its fetches of ft-0; broker 1 what it sends of lt-0.
    ftEnd = fill(c, "ft", 300, {"follower.replication.throttled.replicas": "0:3"})
    ltEnd = fill(c, "lt", 150, {"leader.replication.throttled.replicas": "0:1"})
    uEnd = fill(c, "u", 150)
    size = len(VALUE) * ftEnd
    from confluent_kafka.admin import ConfigResource, ConfigSource

    resource = ConfigResource("topic", "ft")
    leaderAdmin = admin(c, 1)
    entry = leaderAdmin.describe_configs([resource])[resource].result(timeout=15)[
        "follower.replication.throttled.replicas"]
    assert (entry.value, entry.source) == ("0:3", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert incremental(admin(c, 3), "3", follower_replication_throttled_rate=str(RATE)) == (0, None)
    assert incremental(admin(c, 1), "1", leader_replication_throttled_rate=str(2 * RATE)) == (0, None)
    code, message = incremental(admin(c, 1), "1", leader_replication_throttled_rate="-1")
    assert code == 42 and "leader.replication.throttled.rate" in message

    # The follower side: brokers 2 and 3 start replicating ft at once.
    started = time.monotonic()
    c.elect("ft", 0, leader=1, epoch=2, isr=[1], replicas=[1, 2, 3])
    unthrottled = caughtUp(c, 2, "ft", ftEnd) - started
    behind = leo(c, 3, "ft")
    throttled = caughtUp(c, 3, "ft", ftEnd) - started
    expected = size / RATE  # 10 s
    assert behind < ftEnd * 0.75, (behind, ftEnd, unthrottled)
    assert throttled > expected / 2, (throttled, expected)
    assert unthrottled < throttled / 2, (unthrottled, throttled)
    c.waitInSync("ft")

    # The leader side: both followers are out of the ISR for lt (throttled
    # together at 2 x RATE), while u on the same leader is not held back.
    started = time.monotonic()
    c.elect("lt", 0, leader=1, epoch=2, isr=[1], replicas=[1, 2, 3])
    c.elect("u", 0, leader=1, epoch=2, isr=[1], replicas=[1, 2, 3])
    free = max(caughtUp(c, n, "u", uEnd) for n in (2, 3)) - started
    behind = max(leo(c, n, "lt") for n in (2, 3))
    held = max(caughtUp(c, n, "lt", ltEnd) for n in (2, 3)) - started
    expected = 2 * len(VALUE) * ltEnd / (2 * RATE)  # 5 s
    assert behind < ltEnd * 0.75, (behind, ltEnd, free)
    assert held > expected / 2, (held, expected)
    assert free < held / 2, (free, held)
    c.waitInSync("lt")
    # Once in the ISR a follower is not held back: new data flows at once.
    waitUntil(lambda: c.state(1, "lt")["isr"] == [1, 2, 3], what="ISR expansion")
    assert produce(c.bootstrap(1), "lt", [b"after"], acks="all", timeoutMs=5000) == [None]
    for nodeId in c.alive():
        assert "Traceback" not in c.brokers[nodeId].output()
