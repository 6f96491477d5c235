"""
Admin paths of the cluster with three real broker processes, a real
ZooKeeper and real clients: topic deletion across brokers (Kafka's
ZooKeeper-era TopicDeletionManager), DeleteRecords, topic-level unclean
leader election.
"""

from __future__ import annotations

import os
import signal

import pytest
from kazoo.client import KazooClient

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import controllerId, createPlaced, partitions, startThree

pytest.importorskip("kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic as PlainNewTopic  # noqa: E402
from kafka.errors import TopicAlreadyExistsError  # noqa: E402


def zookeeper(cluster):
    zk = KazooClient(cluster.connect)
    zk.start()
    return zk


def localDirs(broker, topic):
    return sorted(d for d in os.listdir(os.path.join(broker.directory, "data"))
                  if d.startswith(topic + "-"))


def produce(bootstrap, topic, count, partition=None):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    errors = []
    for i in range(count):
        kwargs = {} if partition is None else {"partition": partition}
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: e and errors.append(e), **kwargs)
    assert producer.flush(30) == 0
    assert not errors


def watermarks(bootstrap, topic, partition):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_deletion_waits_for_a_broker_that_is_down(cluster):  # noqa: F811
    """
    Kafka's TopicDeletionManager: the topic leaves the metadata at once
    (DeleteTopics answers), its znodes only once every replica's broker
    deleted its replicas; a broker that was down deletes them when it
    returns and never brings the topic back; the name cannot be created
    again meanwhile; a topic created again under the name starts empty on
    every broker (a new topic id).
    """
    admin = startThree(cluster)
    admin.create_topics([NewTopic("doomed", num_partitions=2, replication_factor=3)],
                        request_timeout=20)["doomed"].result()
    produce(cluster.bootstrap(), "doomed", 20)
    zk = zookeeper(cluster)
    try:
        oldId = zk.get("/brokers/topics/doomed")[0]
        cluster.brokers[3].kill()
        live = cluster.admin(1, 2)
        waitUntil(lambda: 3 not in live.list_topics(timeout=10).brokers, what="broker 3 gone")
        live.delete_topics(["doomed"], request_timeout=20)["doomed"].result()
        for i in (1, 2):
            assert partitions(cluster.admin(i), "doomed") is None
            waitUntil(lambda: localDirs(cluster.brokers[i], "doomed") == [], what=f"deleted on {i}")
        # Broker 3 still holds its replicas: the topic stays queued.
        waitUntil(lambda: sorted(zk.exists("/kafkatwist/deleted_replicas/doomed") and
                                 zk.get_children("/kafkatwist/deleted_replicas/doomed") or []) == ["1", "2"],
                  what="brokers 1 and 2 said they deleted theirs")
        assert zk.exists("/brokers/topics/doomed") is not None
        assert zk.get_children("/admin/delete_topics") == ["doomed"]
        assert localDirs(cluster.brokers[3], "doomed") == ["doomed-0", "doomed-1"]
        # The name is not free yet: Kafka's answer, to both clients.
        with pytest.raises(KafkaException) as refused:
            live.create_topics([NewTopic("doomed", num_partitions=1, replication_factor=2)],
                               request_timeout=20)["doomed"].result()
        assert "marked for deletion" in str(refused.value)
        plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1, 2))
        try:
            with pytest.raises(TopicAlreadyExistsError):
                plain.create_topics([PlainNewTopic("doomed", 1, 2)])
        finally:
            plain.close()
        # Broker 3 returns: it deletes its replicas, then the topic is gone.
        cluster.startBroker(3)
        waitUntil(lambda: zk.exists("/brokers/topics/doomed") is None, what="znodes removed")
        assert zk.get_children("/admin/delete_topics") == []
        assert zk.exists("/kafkatwist/deleted_replicas/doomed") is None
        assert localDirs(cluster.brokers[3], "doomed") == []
        assert partitions(cluster.admin(3), "doomed") is None
        # Created again: a new topic id, and no replica serves the old data.
        waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="broker 3 back")
        admin.create_topics([NewTopic("doomed", num_partitions=2, replication_factor=3)],
                            request_timeout=20)["doomed"].result()
        assert zk.get("/brokers/topics/doomed")[0] != oldId
        for p in (0, 1):
            assert watermarks(cluster.bootstrap(), "doomed", p) == (0, 0)
        assert localDirs(cluster.brokers[3], "doomed") == ["doomed-0", "doomed-1"]
        # Deleted with every broker up (kafka-python): gone everywhere.
        plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(2))
        try:
            plain.delete_topics(["doomed"], timeout_ms=20000)
        finally:
            plain.close()
        waitUntil(lambda: zk.exists("/brokers/topics/doomed") is None, what="deleted again")
        for broker in cluster.brokers.values():
            waitUntil(lambda: localDirs(broker, "doomed") == [], what="replicas deleted")
    finally:
        zk.stop()
        zk.close()


def test_delete_records_waits_for_every_live_replica(cluster):  # noqa: F811
    """
    Kafka's DelayedDeleteRecords: the answer once every live replica's log
    start offset reached the offset (followers take the leader's from its
    fetch responses), REQUEST_TIMED_OUT when one does not in time; a broker
    that does not lead the partition answers NOT_LEADER_OR_FOLLOWER.
    """
    # Sessions long enough that the paused follower below stays registered.
    admin = startThree(cluster, **{"zookeeper.session.timeout.ms": "10000"})
    createPlaced(cluster, "trim", {0: [1, 2, 3]})
    waitUntil(lambda: (partitions(admin, "trim") or {}).get(0, (None, None, ()))[2] == (1, 2, 3),
              what="the ISR")
    produce(cluster.bootstrap(), "trim", 100)
    deleted = admin.delete_records([TopicPartition("trim", 0, 40)], request_timeout=30)
    assert deleted[TopicPartition("trim", 0, 40)].result(timeout=30).low_watermark == 40
    # kafka-python, sent to a follower: Kafka's answer.
    from kafka.errors import NotLeaderForPartitionError
    from kafka.structs import TopicPartition as PlainPartition

    plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1, 2, 3))
    try:
        with pytest.raises(NotLeaderForPartitionError):
            plain.delete_records({PlainPartition("trim", 0): 50}, partition_leader_id=2)
        assert plain.delete_records({PlainPartition("trim", 0): 50})[PlainPartition("trim", 0)][
            "low_watermark"] == 50
    finally:
        plain.close()
    # A follower that cannot fetch (paused, still registered): the answer
    # times out.
    follower = cluster.brokers[3]
    follower.process.send_signal(signal.SIGSTOP)
    try:
        late = admin.delete_records([TopicPartition("trim", 0, 60)], operation_timeout=1,
                                    request_timeout=20)
        with pytest.raises(KafkaException) as timedOut:
            late[TopicPartition("trim", 0, 60)].result(timeout=20)
        assert "REQUEST_TIMED_OUT" in str(timedOut.value) or "timed out" in str(timedOut.value).lower()
    finally:
        follower.process.send_signal(signal.SIGCONT)
    # The followers did move: a new leader starts where the old one did.
    cluster.brokers[1].kill()
    survivors = cluster.admin(2, 3)
    waitUntil(lambda: (partitions(survivors, "trim") or {}).get(0, (1,))[0] in (2, 3), timeout=40,
              what="a new leader")
    # (A client's first metadata may come from broker 3, just resumed and
    # not yet at the new leader: asked again until it answers.)
    low, _ = waitUntil(lambda: watermarks(cluster.bootstrap(2, 3), "trim", 0), timeout=30,
                       what="the new leader's watermarks")
    assert low == 60


def test_unclean_leader_election_per_topic(cluster):  # noqa: F811
    """
    unclean.leader.election.enable as a topic config (overriding the
    broker's false): set on a partition left without a live ISR member,
    the controller elects the live replica outside the ISR; ElectLeaders
    with the UNCLEAN type does it for one partition on demand; a topic
    without the override stays offline; the value is validated.
    """
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = startThree(cluster)
    for name in ("u", "v", "w"):
        createPlaced(cluster, name, {0: [1, 2]})
    with pytest.raises(KafkaException) as invalid:
        admin.create_topics([NewTopic("bad", 1, 1, config={"unclean.leader.election.enable": "maybe"})],
                            request_timeout=20)["bad"].result()
    assert "INVALID_CONFIG" in str(invalid.value)
    # Broker 2 dies: the ISRs shrink to {1}; then broker 1 dies: offline,
    # with broker 1 as the last ISR member; broker 2 returns out of sync.
    cluster.brokers[2].kill()
    waitUntil(lambda: all(partitions(cluster.admin(1, 3), t)[0][2] == (1,) for t in "uvw"), what="ISR {1}")
    cluster.brokers[1].kill()
    three = cluster.admin(3)
    waitUntil(lambda: all(partitions(three, t)[0][0] == -1 for t in "uvw"), what="offline")
    cluster.startBroker(2)
    waitUntil(lambda: 2 in three.list_topics(timeout=10).brokers, what="broker 2 back")
    assert all(partitions(three, t)[0][0] == -1 for t in "uvw")
    # ElectLeaders UNCLEAN for u.
    survivors = cluster.admin(2, 3)
    elected = survivors.elect_leaders(ElectionType.UNCLEAN, [TopicPartition("u", 0)]).result(timeout=20)
    assert elected[TopicPartition("u", 0)] is None
    waitUntil(lambda: partitions(three, "u")[0][:3] == (2, (1, 2), (2,)), what="u led by 2")
    # The topic's override for v (an invalid value refused first).
    with pytest.raises(KafkaException) as refused:
        bad = ConfigResource("topic", "v", incremental_configs=[
            ConfigEntry("unclean.leader.election.enable", "sometimes",
                        incremental_operation=AlterConfigOpType.SET)])
        survivors.incremental_alter_configs([bad])[bad].result(timeout=20)
    assert "INVALID_CONFIG" in str(refused.value)
    allow = ConfigResource("topic", "v", incremental_configs=[
        ConfigEntry("unclean.leader.election.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    survivors.incremental_alter_configs([allow])[allow].result(timeout=20)
    waitUntil(lambda: partitions(three, "v")[0][0] == 2, what="v led by 2")
    # w has no override: the broker's false keeps it offline, until
    # kafka-python's AlterConfigs sets one.
    assert partitions(three, "w")[0][0] == -1
    from kafka.admin import ConfigResource as PlainResource
    from kafka.admin import ConfigResourceType

    plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(2, 3))
    try:
        plain.alter_configs([PlainResource(ConfigResourceType.TOPIC, "w",
                                           configs={"unclean.leader.election.enable": "true"})])
    finally:
        plain.close()
    waitUntil(lambda: partitions(three, "w")[0][0] == 2, what="w led by 2")


def test_partition_reassignment(cluster):  # noqa: F811
    """
    KIP-455 with kafka-python's admin client, as ZooKeeper-mode Kafka 3.x:
    a replica moved to another broker (the leader with it), a reassignment
    listed while its new replica cannot catch up and then cancelled, Kafka's
    errors, and one asked through /admin/reassign_partitions.
    """
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )
    from kafka.structs import TopicPartition as Partition

    for i in (1, 2, 3):
        # Long sessions: a broker paused below stays registered.
        cluster.startBroker(i, **{"zookeeper.session.timeout.ms": "15000"})
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    # c: the controller (it answers these requests, so it is never paused);
    # x's replica moves to y, then x hosts nothing of the topic.
    c = controllerId(admin)
    x, y = sorted({1, 2, 3} - {c})
    createPlaced(cluster, "moving", {0: [x, c], 1: [c, y]})
    waitUntil(lambda: all(len(isr) == 2 for _, _, isr in (partitions(admin, "moving") or {0: (0, 0, ())}).values()),
              what="full ISRs")
    produce(cluster.bootstrap(), "moving", 50, partition=0)
    plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1, 2, 3))
    zk = zookeeper(cluster)
    try:
        # x's replica (the leader) moves to y.
        assert plain.alter_partition_reassignments({Partition("moving", 0): [y, c]}) == {
            Partition("moving", 0): None}
        waitUntil(lambda: partitions(admin, "moving")[0][:2] == (y, (y, c)), what="moved")
        waitUntil(lambda: sorted(partitions(admin, "moving")[0][2]) == sorted([y, c]), what="ISR of the target")
        assert plain.list_partition_reassignments() == {}
        assert watermarks(cluster.bootstrap(), "moving", 0) == (0, 50)
        waitUntil(lambda: localDirs(cluster.brokers[x], "moving") == [], what="x's replica deleted")
        # A new replica that cannot catch up: listed until cancelled.
        paused = cluster.brokers[x]
        paused.process.send_signal(signal.SIGSTOP)
        try:
            assert plain.alter_partition_reassignments({Partition("moving", 1): [c, y, x]}) == {
                Partition("moving", 1): None}
            listed = plain.list_partition_reassignments()
            assert listed == {Partition("moving", 1): {
                "replicas": [c, y, x], "adding_replicas": [x], "removing_replicas": []}}
            assert plain.alter_partition_reassignments({Partition("moving", 1): None}) == {
                Partition("moving", 1): None}
            assert plain.list_partition_reassignments() == {}
            assert plain.alter_partition_reassignments({Partition("moving", 1): None}) == {
                Partition("moving", 1): NoReassignmentInProgressError}
        finally:
            paused.process.send_signal(signal.SIGCONT)
        waitUntil(lambda: partitions(admin, "moving")[1][1:] == ((c, y), (c, y)), what="back to [c, y]")
        answers = plain.alter_partition_reassignments({
            Partition("moving", 0): [y, 9], Partition("moving", 1): [c, c], Partition("nowhere", 0): [1]})
        assert answers == {Partition("moving", 0): InvalidReplicationAssignmentError,
                           Partition("moving", 1): InvalidReplicationAssignmentError,
                           Partition("nowhere", 0): UnknownTopicOrPartitionError}
        # The ZooKeeper way (old tools): started, and the znode goes when done.
        zk.create("/admin/reassign_partitions", (
            '{"version":1,"partitions":[{"topic":"moving","partition":1,"replicas":[%d,%d]}]}' % (y, x)
        ).encode())
        waitUntil(lambda: partitions(admin, "moving")[1][1] == (y, x), timeout=30, what="reassigned by znode")
        waitUntil(lambda: zk.exists("/admin/reassign_partitions") is None, what="znode removed")
        assert sorted(partitions(admin, "moving")[1][2]) == sorted([x, y])
    finally:
        plain.close()
        zk.stop()
        zk.close()
