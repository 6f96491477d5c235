"""
Review 3, D2, with real brokers and a real ZooKeeper: ISR {L,F}; L (also
the controller) is killed with its log intact, F is killed, loses its
unflushed tail (its active segment cut back to offset 500: a power loss)
and restarts at once (broker C, a replica outside the ISR, is paused
until then, so the new controller handles L's death and F's restart
together).  F must not be elected over L: the partition waits offline with L as
its ISR, L leads again when it returns, and F and C catch up from it --
none of the 1,000 acknowledged records is lost.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.crashhelpers import CUT, RECORDS, cutActiveSegment, readAll, startThree
from tests.cluster.helpers import ClusterUnderTest, createPlaced, partitions
from tests.replication.cluster import StaticCluster

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = ClusterUnderTest(zookeeper, tmp_path, "deadleader")
    yield c
    c.stop()


def test_a_restarted_follower_is_not_elected_over_a_killed_leader(cluster):
    settings, admin = startThree(cluster)
    probe = StaticCluster.__new__(StaticCluster)
    probe.brokers = cluster.brokers
    L = waitUntil(lambda: admin.list_topics(timeout=10).controller_id in (1, 2, 3)
                  and admin.list_topics(timeout=10).controller_id, what="a controller")
    F, C = [i for i in (1, 2, 3) if i != L]
    createPlaced(cluster, "d2", {0: [L, F, C]}, {"min.insync.replicas": "2"})
    waitUntil(lambda: (partitions(admin, "d2") or {}).get(0, (None, (), ()))[0] == L
              and len(partitions(admin, "d2")[0][2]) == 3, what="an ISR of 3")
    # C falls out of the ISR (paused): the ISR is {L, F}.
    cluster.brokers[C].pause()
    waitUntil(lambda: sorted(probe.state(L, "d2")["isr"]) == sorted([L, F]), timeout=60,
              what="ISR {L, F}")
    producer = Producer({"bootstrap.servers": cluster.bootstrap(L, F), "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5})
    acked, failed = [], []
    for half in (range(CUT), range(CUT, RECORDS)):  # a batch starts at CUT
        for n in half:
            producer.produce("d2", value=b"%06d" % n,
                             on_delivery=lambda e, m: (failed if e else acked).append(e or m.value()))
        assert producer.flush(60) == 0
    assert len(acked) == RECORDS and not failed
    waitUntil(lambda: probe.state(F, "d2")["leo"] == RECORDS, what="F has every record")
    cluster.brokers[L].kill()
    cluster.brokers[F].kill()
    assert cutActiveSegment(os.path.join(cluster.brokers[F].directory, "data", "d2-0"), CUT) > 0
    # F is back (C still paused): F's new registration, L's gone, is what the
    # new controller (F itself) sees first -- L's death and F's restart are
    # handled together.  The partition goes offline keeping L, not F.
    cluster.startBroker(F, **settings)
    admin = cluster.admin(F)
    waitUntil(lambda: (partitions(admin, "d2") or {}).get(0, (None, (), ()))[0] == -1
              and partitions(admin, "d2")[0][2] == (L,), timeout=120, what="d2 offline, waiting for L")
    cluster.brokers[C].resume()
    admin = cluster.admin(F, C)
    assert probe.state(F, "d2")["role"] != "leader"
    cluster.startBroker(L, **settings)
    waitUntil(lambda: (partitions(admin, "d2") or {}).get(0, (None,))[0] == L, timeout=120,
              what="L leads again")
    waitUntil(lambda: probe.state(F, "d2")["leo"] == probe.state(L, "d2")["leo"] >= RECORDS,
              timeout=60, what="F caught up from L")
    seen = readAll(cluster.bootstrap(1, 2, 3), "d2", RECORDS, timeout=30)
    assert sorted(set(acked) - seen) == []
