"""
Two real brokers, the leader alone in its ISR, a follower caught up and its
way into the ISR written slowly (an injected ZooKeeper delay): acks=all
records produced while that write is in flight wait for the follower, so
when the leader is killed and the follower, now in the ISR, leads, every
acknowledged record is there (review 3, D1).
"""

from __future__ import annotations

import pytest

from kafkatwist.testing import waitUntil
from tests.replication.cluster import StaticCluster, produce


@pytest.fixture
def cluster(tmp_path):
    c = StaticCluster(tmp_path, 2, {"replica.lag.time.max.ms": "30000"}).start()
    yield c
    c.stop()


def test_acks_all_during_an_isr_expansion_survives_the_leaders_death(cluster):
    c = cluster
    c.createTopic("r")
    assert c.command(1, {"op": "delayIsrWrites", "seconds": 4})["ok"]
    c.elect("r", 0, leader=1, epoch=1, isr=[1], replicas=[1, 2])
    waitUntil(lambda: (c.state(2, "r") or {}).get("role") == "follower", what="broker 2 follows")
    assert produce(c.bootstrap(1), "r", [b"a%d" % i for i in range(10)]) == [None] * 10
    waitUntil(lambda: c.state(1, "r")["pendingIsr"] == [1, 2], 30, "the expansion in flight")
    c.pause(2)  # the follower fetches nothing more
    answers = produce(c.bootstrap(1), "r", [b"b%d" % i for i in range(5)], timeoutMs=2500)
    acked = sum(1 for error in answers if error is None)
    # They wait for broker 2, which fetches nothing more, and time out.
    # (Before the fix they were acknowledged at once.)
    assert acked == 0
    waitUntil(lambda: c.state(1, "r")["isr"] == [1, 2], 30, "the expansion written")
    c.kill(1)
    c.resume(2)
    c.elect("r", 0, leader=2, epoch=2, isr=[2], replicas=[1, 2], nodes=[2])
    waitUntil(lambda: (c.state(2, "r") or {}).get("role") == "leader", what="broker 2 leads")
    assert c.state(2, "r")["leo"] >= 10 + acked
