"""
The internal topics' ids on disk in a cluster: every replica of
C{__consumer_offsets} holds the controller's topic id in its topic
metadata (C{topic-metadata.json}, Kafka's C{partition.metadata}), as in Kafka (the controller made the topic with that
id), though each broker creates the internal topics' logs itself.  A data
directory written with a locally made id (by an earlier version) takes the
cluster's id on start -- the same topic, so its data stays: committed
offsets survive, also after a C{kill -9} and restart.
"""

from __future__ import annotations

import glob
import json
import os
import uuid

import pytest

from kafkatwist.log.manager import TOPIC_METADATA
from kafkatwist.testing import waitUntil

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

OFFSETS = "__consumer_offsets"


@pytest.fixture
def cluster(zookeeper, tmp_path):
    from tests.cluster.helpers import ClusterUnderTest

    c = ClusterUnderTest(zookeeper, tmp_path, "internalids", overrides={
        "offsets.topic.num.partitions": "2",
        "offsets.topic.replication.factor": "3",
        "replica.lag.time.max.ms": "3000",
        "replica.fetch.wait.max.ms": "200",
    })
    yield c
    c.stop()


def idsOnDisk(broker, topic=OFFSETS) -> dict[str, str]:
    """partition directory -> the topic id its topic metadata holds."""
    found = {}
    for path in glob.glob(os.path.join(broker.overrides["log.dir"], f"{topic}-*", TOPIC_METADATA)):
        with open(path) as f:
            found[os.path.basename(os.path.dirname(path))] = json.load(f)["topicId"]
    return found


def clusterId(cluster, topic=OFFSETS):
    from kafkatwist.client import KafkaWireClient

    with KafkaWireClient(cluster.bootstrap(1, 2, 3)) as client:
        meta = client.metadata([topic]).topics.get(topic)
    return None if meta is None or meta.topicId is None else str(meta.topicId)


def commit(cluster, group, topic, offsets):
    confluent = pytest.importorskip("confluent_kafka")
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "group.id": group,
                                   "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent.TopicPartition(topic, p, o) for p, o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def committed(cluster, group, topic, partitions):
    confluent = pytest.importorskip("confluent_kafka")
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "group.id": group,
                                   "enable.auto.commit": False})
    try:
        got = consumer.committed([confluent.TopicPartition(topic, p) for p in partitions], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def everyBrokerHolds(cluster, wanted, partitions=2):
    return all(
        (ids := idsOnDisk(cluster.brokers[n])) and len(ids) == partitions and set(ids.values()) == {wanted}
        for n in (1, 2, 3)
    )


def test_every_replica_of_the_offsets_topic_holds_the_clusters_id(cluster):
    from tests.cluster.helpers import createPlaced, startThree

    pytest.importorskip("confluent_kafka")
    startThree(cluster)
    createPlaced(cluster, "data", {0: [1, 2, 3], 1: [2, 3, 1]})
    waitUntil(lambda: clusterId(cluster, "data") is not None, timeout=60, what="data created")
    # The first commit makes the cluster create __consumer_offsets.
    waitUntil(lambda: _tryCommit(cluster, "g", "data", {0: 5, 1: 7}), timeout=90, what="a commit")
    wanted = waitUntil(lambda: clusterId(cluster), timeout=60, what=f"{OFFSETS}'s id in the cluster")
    waitUntil(lambda: everyBrokerHolds(cluster, wanted), timeout=60,
              what=f"every broker's {OFFSETS} topic metadata holding the cluster's id {wanted}")
    assert committed(cluster, "g", "data", (0, 1)) == {0: 5, 1: 7}


def _tryCommit(cluster, group, topic, offsets) -> bool:
    confluent = pytest.importorskip("confluent_kafka")
    try:
        commit(cluster, group, topic, offsets)
    except confluent.KafkaException:
        return False
    return True


def forgeLocalIds(broker) -> str:
    """
    Write a locally made id (one per broker, as earlier versions did) into
    every C{__consumer_offsets} topic metadata copy of a stopped broker.
    """
    from kafkatwist.log.manager import _checksum

    local = str(uuid.uuid4())
    for path in glob.glob(os.path.join(broker.overrides["log.dir"], f"{OFFSETS}-*", TOPIC_METADATA)):
        with open(path) as f:
            meta = json.load(f)
        meta.pop("crc", None)
        meta["topicId"] = local
        meta["crc"] = _checksum(meta)
        with open(path, "w") as f:
            json.dump(meta, f, sort_keys=True)
    return local


def test_a_locally_made_id_takes_the_clusters_and_commits_survive_kill_9(cluster):
    from tests.cluster.helpers import createPlaced, startThree

    pytest.importorskip("confluent_kafka")
    startThree(cluster)
    createPlaced(cluster, "data", {0: [1, 2, 3], 1: [2, 3, 1]})
    waitUntil(lambda: clusterId(cluster, "data") is not None, timeout=60, what="data created")
    waitUntil(lambda: _tryCommit(cluster, "g", "data", {0: 11, 1: 13}), timeout=90, what="a commit")
    wanted = waitUntil(lambda: clusterId(cluster), timeout=60, what=f"{OFFSETS}'s id in the cluster")
    # Every replica has the commit (acks=all) before the brokers die.
    waitUntil(lambda: committed(cluster, "g", "data", (0, 1)) == {0: 11, 1: 13}, timeout=60,
              what="the commit read back")

    # kill -9 all three; their directories carry ids of their own, as an
    # earlier version wrote them.
    for n in (1, 2, 3):
        cluster.kill(n)
    forged = {forgeLocalIds(cluster.brokers[n]) for n in (1, 2, 3)}
    assert wanted not in forged and len(forged) == 3
    for n in (1, 2, 3):
        cluster.brokers[n].launch()
    for n in (1, 2, 3):
        cluster.brokers[n].waitStarted(60)
    cluster.waitReady(60)
    waitUntil(lambda: everyBrokerHolds(cluster, wanted), timeout=90,
              what=f"every broker's {OFFSETS} topic metadata back on the cluster's id {wanted}")
    assert clusterId(cluster) == wanted
    assert waitUntil(lambda: committed(cluster, "g", "data", (0, 1)) == {0: 11, 1: 13}, timeout=90,
                     what="the commit made before the restart")

    # Once more: a commit after the change of id, then kill -9 and restart.
    waitUntil(lambda: _tryCommit(cluster, "g", "data", {0: 21, 1: 23}), timeout=90, what="a second commit")
    for n in (1, 2, 3):
        cluster.kill(n)
    for n in (1, 2, 3):
        cluster.brokers[n].launch()
    for n in (1, 2, 3):
        cluster.brokers[n].waitStarted(60)
    cluster.waitReady(60)
    assert everyBrokerHolds(cluster, wanted)
    assert waitUntil(lambda: committed(cluster, "g", "data", (0, 1)) == {0: 21, 1: 23}, timeout=90,
                     what="the second commit")
    for n in (1, 2, 3):
        assert "Traceback" not in cluster.brokers[n].output()
