"""
The cluster metrics an operator alerts on, scraped from three real brokers
on a real ZooKeeper while replicas die and come back, each held to Kafka's
meaning and to what clients' metadata says at the same time:

  - kafka.server:type=ReplicaManager: UnderReplicatedPartitions,
    UnderMinIsrPartitionCount, AtMinIsrPartitionCount, LeaderCount,
    PartitionCount, IsrShrinksPerSec, IsrExpandsPerSec;
  - kafka.controller:type=KafkaController: ActiveControllerCount (one in
    the cluster), OfflinePartitionsCount, GlobalTopicCount,
    GlobalPartitionCount (only the active controller counts).
"""

from __future__ import annotations

import re
import urllib.request

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import REPLICATION, ClusterUnderTest, createPlaced, partitions
from tests.integration.test_metrics_broker_gauges import undocumented

confluent = pytest.importorskip("confluent_kafka")

METRICS = {"metrics.http.listener": "127.0.0.1:0"}
#: m's placement: each broker leads one partition and follows the others
PLACED = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = ClusterUnderTest(zookeeper, tmp_path, "metrics")
    yield c
    c.stop()


def exposition(broker) -> str:
    """
    A broker's scrape, from its latest run's metrics listener.
    """
    port = re.findall(r"metrics on http://[^:]+:(\d+)/metrics", broker.output())[-1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def scrape(broker) -> dict[str, float]:
    """
    A broker's unlabelled samples.
    """
    text = exposition(broker)
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split(" ")
            samples[name] = float(value)
    return samples


def total(cluster, ids, name) -> float:
    return sum(scrape(cluster.brokers[i])[name] for i in ids)


RM = "kafka_server_replicamanager_"
KC = "kafka_controller_kafkacontroller_"


def expected(admin, minIsr) -> dict[str, int]:
    """
    What the brokers' gauges must add up to, from a client's metadata:
    led partitions whose ISR is short of their replicas, below or at their
    effective min ISR (min.insync.replicas, at most the replication
    factor), and those without a leader.
    """
    md = admin.list_topics(timeout=10)
    counts = dict.fromkeys(("under", "underMin", "atMin", "offline", "partitions", "led"), 0)
    for name, topic in md.topics.items():
        for p in topic.partitions.values():
            counts["partitions"] += 1
            if p.leader < 0:
                counts["offline"] += 1
                continue
            counts["led"] += 1
            effective = min(minIsr.get(name, 1), len(p.replicas))
            counts["under"] += len(p.isrs) < len(p.replicas)
            counts["underMin"] += len(p.isrs) < effective
            counts["atMin"] += len(p.isrs) == effective
    counts["topics"] = len(md.topics)
    return counts


def agrees(cluster, ids, admin, minIsr) -> dict | None:
    """
    The scraped sums over C{ids} when they match the metadata, else None.
    """
    want = expected(admin, minIsr)
    got = {
        "under": total(cluster, ids, RM + "underreplicatedpartitions"),
        "underMin": total(cluster, ids, RM + "underminisrpartitioncount"),
        "atMin": total(cluster, ids, RM + "atminisrpartitioncount"),
        "led": total(cluster, ids, RM + "leadercount"),
        "offline": total(cluster, ids, KC + "offlinepartitionscount"),
        "partitions": total(cluster, ids, KC + "globalpartitioncount"),
        "topics": total(cluster, ids, KC + "globaltopiccount"),
        "controllers": total(cluster, ids, KC + "activecontrollercount"),
    }
    want["controllers"] = 1
    return got if got == want else None


def replicated(cluster, ids, admin, minIsr) -> dict | None:
    """
    L{agrees}, once nothing is under-replicated.
    """
    got = agrees(cluster, ids, admin, minIsr)
    return got if got and got["under"] == 0 else None


#: ZooKeeper sessions that outlast a pause: a paused follower stays
#: registered, so its ISRs are shrunk by their leaders (IsrShrinksPerSec),
#: not by the controller
LONG_SESSION = {"zookeeper.session.timeout.ms": "30000"}


def test_replica_and_controller_gauges_follow_failures(cluster):
    for i in (1, 2, 3):
        cluster.startBroker(i, **REPLICATION, **METRICS, **LONG_SESSION)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    createPlaced(cluster, "m", PLACED, {"min.insync.replicas": "2"})
    createPlaced(cluster, "solo", {0: [3]})
    minIsr = {"m": 2}
    waitUntil(lambda: (partitions(admin, "m") or {}).keys() == {0, 1, 2}
              and all(len(isr) == 3 for _, _, isr in partitions(admin, "m").values()),
              what="m fully replicated")
    healthy = waitUntil(lambda: replicated(cluster, (1, 2, 3), admin, minIsr),
                        what="the gauges agreeing with the metadata, nothing under-replicated")
    assert healthy["offline"] == 0
    assert healthy["led"] == healthy["partitions"] >= 4
    # Every broker hosts m's three partitions and leads one of them.
    for i in (1, 2, 3):
        samples = scrape(cluster.brokers[i])
        assert samples[RM + "partitioncount"] >= 3
        assert samples[RM + "leadercount"] >= 1

    # Broker 3 stops answering (paused, still registered): the leaders of
    # m-0 and m-1 shrink their ISRs to two, m's min ISR; once it is back
    # and caught up they expand them again.
    survivors = cluster.admin(1, 2)
    shrinks = total(cluster, (1, 2), RM + "isrshrinks_total")
    expands = total(cluster, (1, 2), RM + "isrexpands_total")
    cluster.pause(3)
    try:
        waitUntil(lambda: all(len(partitions(survivors, "m")[p][2]) == 2 for p in (0, 1)),
                  timeout=120, what="m-0 and m-1 without broker 3 in their ISRs")
        # (the metadata may show the new ISR before its leader heard the
        # controller's answer)
        waitUntil(lambda: total(cluster, (1, 2), RM + "isrshrinks_total") >= shrinks + 2
                  and total(cluster, (1, 2), RM + "underreplicatedpartitions") >= 2
                  and total(cluster, (1, 2), RM + "atminisrpartitioncount") >= 2,
                  what="the leaders counting their ISR shrinks, m-0 and m-1 under-replicated")
    finally:
        cluster.resume(3)
    waitUntil(lambda: all(len(isr) == 3 for _, _, isr in partitions(admin, "m").values()),
              timeout=120, what="m fully replicated again")
    waitUntil(lambda: total(cluster, (1, 2), RM + "isrexpands_total") >= expands + 2,
              what="the leaders counting their ISR expansions")
    # (the internal topics' followers on broker 3 may catch up later)
    healed = waitUntil(lambda: replicated(cluster, (1, 2, 3), admin, minIsr), timeout=120,
                       what="the gauges agreeing with the metadata, broker 3 back, nothing under-replicated")
    assert healed["offline"] == 0

    # Broker 3 stops: m is under-replicated (at its min ISR) and solo, whose
    # only replica it was, is offline.
    cluster.brokers[3].stop()
    degraded = waitUntil(lambda: partitions(survivors, "solo")[0][0] < 0
                         and all(len(isr) == 2 for _, _, isr in partitions(survivors, "m").values())
                         and agrees(cluster, (1, 2), survivors, minIsr),
                         timeout=120, what="the gauges agreeing with the metadata, broker 3 stopped")
    assert degraded["under"] >= 3 and degraded["atMin"] >= 3 and degraded["underMin"] == 0
    assert degraded["offline"] == 1

    # Broker 2 stops too: broker 1 leads m alone, below its min ISR.
    cluster.brokers[2].stop()
    alone = cluster.admin(1)
    waitUntil(lambda: all(leader == 1 and isr == (1,) for leader, _, isr in partitions(alone, "m").values()),
              timeout=120, what="broker 1 leading m alone")
    last = waitUntil(lambda: agrees(cluster, (1,), alone, minIsr), timeout=120,
                     what="the gauges agreeing with the metadata, broker 1 alone")
    assert last["underMin"] >= 3 and last["controllers"] == 1


def labelled(broker, name, **labels) -> float:
    text = exposition(broker)
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{{{want}}} not in the scrape")


def test_session_expiry_and_unclean_election(cluster):
    """
    Broker 2, u-0's only follower, is paused past its ZooKeeper session
    (out of u-0's ISR); u-0's leader, broker 1, dies meanwhile.  Back, broker
    2 counts its expired session (ZooKeeperExpiresPerSec) and is connected
    again; with unclean.leader.election.enable the controller makes it u-0's
    leader from outside the ISR (UncleanLeaderElectionsPerSec).
    """
    for i in (1, 2, 3):
        cluster.startBroker(i, **REPLICATION, **METRICS)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    createPlaced(cluster, "u", {0: [1, 2]}, {"unclean.leader.election.enable": "true"})
    waitUntil(lambda: (partitions(admin, "u") or {}).get(0, (0, 0, ()))[2] == (1, 2),
              what="u-0 with both replicas in its ISR")
    assert scrape(cluster.brokers[3])["kafka_server_sessionexpirelistener_zookeepersyncconnects_total"] == 1
    others = cluster.admin(1, 3)
    cluster.pause(2)
    try:
        waitUntil(lambda: 2 not in others.list_topics(timeout=10).brokers
                  and partitions(others, "u")[0][2] == (1,), timeout=120,
                  what="broker 2's session gone and u-0's ISR without it")
        cluster.kill(1)
    finally:
        cluster.resume(2)
    survivors = cluster.admin(2, 3)
    waitUntil(lambda: (partitions(survivors, "u") or {}).get(0, (None,))[0] == 2, timeout=120,
              what="broker 2 leading u-0")
    waitUntil(lambda: total(cluster, (2, 3), "kafka_controller_controllerstats_uncleanleaderelections_total") == 1,
              timeout=60, what="the controller counting one unclean election")
    back = scrape(cluster.brokers[2])
    assert back["kafka_server_sessionexpirelistener_zookeeperexpires_total"] >= 1
    assert back["kafka_server_sessionexpirelistener_zookeepersyncconnects_total"] >= 2
    assert labelled(cluster.brokers[2], "kafka_server_sessionexpirelistener_sessionstate", state="CONNECTED") == 1
    assert labelled(cluster.brokers[2], "kafka_server_sessionexpirelistener_sessionstate", state="CLOSED") == 0
    steady = scrape(cluster.brokers[3])
    assert steady["kafka_server_sessionexpirelistener_zookeeperexpires_total"] == 0
    # A cluster broker's families are documented too.
    assert not undocumented(exposition(cluster.brokers[3]))


def test_a_throttled_follower_shows_its_lag(cluster):
    """
    ReplicaFetcherManager MaxLag: broker 2, t-0's follower, is paused while
    300 records of 10 kB are written and leaves the ISR (its leader's high
    watermark is then its log end).  Back, it fetches under a replication
    throttle, one record a fetch (as in Kafka, a throttle holds back only a
    replica out of the ISR), so its MaxLag is how many records it lacks; the
    leader, following nothing behind, shows 0.
    """
    from confluent_kafka import Producer

    cluster.startBroker(1, **REPLICATION, **METRICS, **LONG_SESSION)
    cluster.startBroker(2, **REPLICATION, **METRICS, **LONG_SESSION, **{
        "follower.replication.throttled.rate": "20000", "replica.fetch.max.bytes": "10000"})
    admin = cluster.admin(1, 2)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 2, what="two brokers")
    createPlaced(cluster, "t", {0: [1, 2]}, {"follower.replication.throttled.replicas": "0:2"})
    waitUntil(lambda: (partitions(admin, "t") or {}).get(0, (0, 0, ()))[2] == (1, 2),
              what="t-0 with both replicas in its ISR")
    maxLag = "kafka_server_replicafetchermanager_maxlag"
    assert labelled(cluster.brokers[2], maxLag, clientId="Replica") == 0
    leader = cluster.admin(1)
    cluster.pause(2)
    try:
        producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": "1", "linger.ms": 5})
        for _ in range(300):
            producer.produce("t", b"x" * 10_000, partition=0)
            producer.poll(0)
        assert producer.flush(60) == 0
        waitUntil(lambda: partitions(leader, "t")[0][2] == (1,), timeout=120,
                  what="t-0's ISR without broker 2")
    finally:
        cluster.resume(2)
    lag = waitUntil(lambda: labelled(cluster.brokers[2], maxLag, clientId="Replica"),
                    timeout=120, what="broker 2's lag showing")
    assert 0 < lag <= 300
    assert labelled(cluster.brokers[1], maxLag, clientId="Replica") == 0
