"""
Replication throttles: which replicas a topic's list names, and the rate
each side measures (Kafka's simple rate: at least one window).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkatwist.config import BrokerConfig
from kafkatwist.errors import KafkaError
from kafkatwist.log.config import validateTopicConfigs
from kafkatwist.replication.quota import UNLIMITED, ReplicationQuota, ReplicationQuotas, throttles


def test_throttled_replica_lists():
    assert throttles(("*",), 7, 3)
    assert throttles(("0:1", "1:3"), 1, 3)
    assert not throttles(("0:1", "1:3"), 0, 3)
    assert not throttles((), 0, 1)
    assert validateTopicConfigs({"leader.replication.throttled.replicas": " 0:1 , 1:2"}) == {
        "leader.replication.throttled.replicas": "0:1 , 1:2"}
    for bad in ("0-1", "*,0:1", "a:b"):
        with pytest.raises(KafkaError) as e:
            validateTopicConfigs({"follower.replication.throttled.replicas": bad})
        assert "must be the literal '*' or a list of replicas" in e.value.message


def test_quota_is_a_simple_rate():
    now = [0]
    quota = ReplicationQuota("follower", 1, bound=1000, samples=11, windowSeconds=1, clock=lambda: now[0])
    quota.record(900)
    assert not quota.exceeded()  # 900 bytes over (at least) one second
    quota.record(200)
    assert quota.exceeded()
    now[0] = 2000
    assert not quota.exceeded()  # 1100 bytes over two seconds
    quota.bound = UNLIMITED
    quota.record(10**9)
    assert not quota.exceeded()


def test_leader_throttles_only_out_of_sync_followers():
    quotas = ReplicationQuotas(BrokerConfig({"node.id": "1", "leader.replication.throttled.rate": "10"}))
    quotas.leader.clock = lambda: 0
    log = SimpleNamespace(
        config=SimpleNamespace(leaderThrottledReplicas=("0:1",)), inSyncReplicas=frozenset({1, 2})
    )
    assert quotas.leaderThrottle(log, 1, 3) is None  # partition 1 is not listed
    inSync, outOfSync = quotas.leaderThrottle(log, 0, 2), quotas.leaderThrottle(log, 0, 3)
    assert not inSync.holdsBack() and not outOfSync.holdsBack()
    inSync.record(100)  # what in-sync followers get counts too
    assert outOfSync.holdsBack() and not inSync.holdsBack()
