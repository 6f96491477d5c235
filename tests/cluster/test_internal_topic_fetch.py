"""
Follower fetches of the internal topics: each broker creates
C{__consumer_offsets} and C{__transaction_state} itself, with an id of its
own, yet a follower fetches them as every topic -- by the cluster's id, in
the one Fetch v15 of its round, with its broker epoch (KIP-903) -- and
their leader resolves the cluster's id for a replica's fetch.  One request
a round: a second long-poll after the first would hold an acks=all produce
or an offset commit up to C{replica.fetch.wait.max.ms} longer.
"""

from __future__ import annotations

import time
import types
import uuid

import pytest

from twisted.internet import task

from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS
from kafkatwist.log import MemoryLogManager
from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.replication.fetcher import FETCH_VERSION, ReplicaFetcher
from kafkatwist.replication.manager import ReplicaManager, StaticDirectory
from tests.cluster.epochhelpers import CONFIG, NEW, NoFetcher

OFFSETS = "__consumer_offsets"

FETCHER_CONFIG = {
    "replica.fetch.max.bytes": 1 << 20,
    "replica.fetch.response.max.bytes": 10 << 20,
    "replica.fetch.wait.max.ms": 5000,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.backoff.ms": 1000,
    "replica.socket.timeout.ms": 30_000,
}


class ClusterDirectory(StaticDirectory):
    """The cluster's ids: a data topic's is the local one, an internal topic's not."""

    locallyCreatedTopics = INTERNAL_TOPICS

    def __init__(self, ids):
        super().__init__({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)})
        self.ids = ids

    def topicId(self, name):
        return self.ids.get(name)

    def brokerEpoch(self, brokerId):
        return NEW if brokerId == 2 else 0x10


class Connection:
    """Records the requests; answers nothing."""

    def __init__(self):
        self.requests = []

    def request(self, api, version, request, timeout=None):
        self.requests.append((version, request))
        return types.SimpleNamespace(responses=())


def _follower():
    logManager = MemoryLogManager()
    data = logManager.createTopic("t", 1, {}).topicId
    local = logManager.createTopic(OFFSETS, 1, {}).topicId
    clusterOffsets = uuid.uuid4()
    assert clusterOffsets != local
    directory = ClusterDirectory({"t": data, OFFSETS: clusterOffsets})
    manager = ReplicaManager(2, logManager, CONFIG, task.Clock(), directory=directory, fetcherFactory=NoFetcher)
    return logManager, manager, directory, data, clusterOffsets


def test_an_internal_topic_is_fetched_by_the_clusters_id():
    _, manager, directory, data, clusterOffsets = _follower()
    assert manager._topicIdOf(OFFSETS) == clusterOffsets
    assert manager._topicIdOf("t") == data
    # A data topic whose local id is not the cluster's (an earlier
    # incarnation) is still not fetched.
    directory.ids["t"] = uuid.uuid4()
    manager._topicIds = {}
    assert manager._topicIdOf("t") is None


def test_a_round_sends_one_fetch_with_every_topic_by_id_and_the_broker_epoch():
    logManager, manager, directory, data, clusterOffsets = _follower()
    fetcher = ReplicaFetcher(2, 1, 0, directory, FETCHER_CONFIG)
    fetcher.brokerEpoch = lambda: NEW
    fetcher.topicIdOf = manager._topicIdOf
    for topic in ("t", OFFSETS):
        fetcher.addPartition((topic, 0), logManager.getLog(topic, 0), 3)
    states = list(fetcher._partitions.values())
    for state in states:
        state.truncating = False
    connection = Connection()
    fetcher._fetch(connection, states)
    assert len(connection.requests) == 1
    version, request = connection.requests[0]
    assert version == FETCH_VERSION
    assert request.replica_state.replica_epoch == NEW
    assert {t.topic_id for t in request.topics} == {data, clusterOffsets}


def _leaderHandler(logManager, directory):
    broker = types.SimpleNamespace(
        config={"connections.max.idle.ms": 600_000, "fetch.max.bytes": 57671680},
        fetchSessions=None,
        logManager=logManager,
        replicaManager=types.SimpleNamespace(directory=directory),
        replicationQuotas=None,
        authorizer=None,
    )
    return FetchHandler(broker)


def test_the_leader_resolves_the_clusters_id_of_an_internal_topic_for_a_replica():
    logManager = MemoryLogManager()
    local = logManager.createTopic(OFFSETS, 1, {}).topicId
    clusterOffsets = uuid.uuid4()
    handler = _leaderHandler(logManager, ClusterDirectory({OFFSETS: clusterOffsets}))
    context = types.SimpleNamespace(clock=None, listenerName="PLAINTEXT")
    entries = [(clusterOffsets, 0, 0, 1 << 20, -1)]
    [(topicKey, [wanted])] = handler._plan(FETCH_VERSION, entries, context, replicaId=2)
    assert topicKey == clusterOffsets
    assert wanted.key == (OFFSETS, 0) and wanted.log is logManager.getLog(OFFSETS, 0)
    assert wanted.error is None
    # A consumer's fetch by that id is not resolved (only replicas use it);
    # the local id still answers.
    [(_, [wanted])] = handler._plan(FETCH_VERSION, entries, context, replicaId=-1)
    assert wanted.log is None
    [(_, [wanted])] = handler._plan(FETCH_VERSION, [(local, 0, 0, 1 << 20, -1)], context, replicaId=2)
    assert wanted.log is logManager.getLog(OFFSETS, 0)



@pytest.fixture
def cluster(zookeeper, tmp_path):
    from tests.cluster.helpers import ClusterUnderTest

    c = ClusterUnderTest(zookeeper, tmp_path, "internalfetch")
    yield c
    c.stop()


def test_acks_all_is_not_held_behind_an_internal_topics_long_poll(cluster):
    """
    Three real brokers, C{replica.fetch.wait.max.ms} 10 s: a data topic led
    by the broker leading C{__consumer_offsets}-0, so each follower's one
    fetcher replicates both.  Every follower joins the internal topic's
    ISR, and acks=all produces are acknowledged without waiting out a
    second long-poll (which held each about 10 s: a round fetched the
    internal topic in a request of its own after the data topic's).
    """
    confluent = pytest.importorskip("confluent_kafka")
    from tests.cluster.helpers import createPlaced, partitions, startThree

    from kafkatwist.testing import waitUntil

    admin = startThree(cluster, **{
        "replica.fetch.wait.max.ms": "10000",
        "replica.lag.time.max.ms": "60000",
        "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "3",
    })
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "group.id": "g"})
    try:
        # The group's first commit creates __consumer_offsets.
        consumer.commit(offsets=[confluent.TopicPartition("absent", 0, 0)], asynchronous=False)
    except confluent.KafkaException:
        pass
    finally:
        consumer.close()
    waitUntil(lambda: len((partitions(admin, OFFSETS) or {}).get(0, (None, (), ()))[2]) == 3,
              timeout=90, what=f"{OFFSETS}-0 with an ISR of 3")
    leader = partitions(admin, OFFSETS)[0][0]
    others = [b for b in (1, 2, 3) if b != leader]
    createPlaced(cluster, "data", {0: [leader, *others]})
    waitUntil(lambda: (partitions(admin, "data") or {}).get(0, (None, (), ()))[0] == leader
              and len(partitions(admin, "data")[0][2]) == 3, timeout=90, what="data-0 with an ISR of 3")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "acks": "all"})
    assert producer.flush(0) == 0
    started = time.monotonic()
    for n in range(3):
        producer.produce("data", value=b"%d" % n)
        assert producer.flush(60) == 0
    # Each was held about 10 s with two polls a round; a few ms each now:
    # 15 s for all three is far from either.
    assert time.monotonic() - started < 15
