"""
Transactions on three real brokers with a real ZooKeeper: the transaction
coordinator takes its end markers to the leaders of the transaction's
partitions (WriteTxnMarkers between brokers, Kafka's
C{TransactionMarkerChannelManager}).  A topic with one partition led by
each broker: a committed transaction is seen, an aborted one is not, by
read_committed consumers of confluent-kafka and kafka-python; kill -9 of
the coordinator's broker right after EndTxn returned, or while a marker
waits for a paused leader, leaves the new coordinator to finish the
transaction (the next InitProducerId works); a partition leader paused and
then killed while its marker is on the way gets the marker at its
successor; a topic deleted under an open transaction does not hold it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kafkatwist.coordinator.transaction.formats import partitionOf
from kafkatwist.testing import waitUntil
from tests.cluster.helpers import SESSION_MS, ClusterUnderTest, partitions

pytest.importorskip("kafka")
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKER = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "log.cleaner.enable": "false",
    "min.insync.replicas": "2",
    "request.timeout.ms": "10000",
}
TOPIC = "txn"
#: partition p is led first by broker p + 1
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]


@pytest.fixture
def cluster(zookeeper, tmp_path, request):
    c = ClusterUnderTest(zookeeper, tmp_path, "txn").startAll(**{**BROKER, **getattr(request, "param", {})})
    admin = c.admin(1, 2, 3)
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replica_assignment=ASSIGNMENT)],
                        request_timeout=30)[TOPIC].result()
    waitUntil(
        lambda: (parts := partitions(admin, TOPIC)) is not None
        and {p: lead for p, (lead, _, isr) in parts.items() if len(isr) == 3} == {0: 1, 1: 2, 2: 3},
        timeout=60, what="each partition led by its first replica, ISR of 3",
    )
    yield c
    c.stop()


def transactionalProducer(bootstrap, tid):
    producer = Producer({
        "bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5,
        "transaction.timeout.ms": 60000, "message.timeout.ms": 60000,
    })
    producer.init_transactions(60)
    return producer


def writeTxn(producer, values, commit=True):
    """
    One transaction with C{values} in every partition.
    """
    producer.begin_transaction()
    for partition in range(3):
        for value in values:
            producer.produce(TOPIC, value=value, partition=partition)
    assert producer.flush(60) == 0
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


def consumeConfluent(bootstrap, count, timeout=60):
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}",
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False,
    })
    # Assigned, not subscribed: what is checked is the partitions' last
    # stable offsets, not a consumer group's fail-over.
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(3)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(got) < count:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append((message.partition(), message.value()))
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append((message.partition(), message.value()))
    finally:
        consumer.close()
    return got


def consumeKafkaPython(bootstrap):
    from kafka import KafkaConsumer, TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest",
        isolation_level="read_committed", consumer_timeout_ms=6000,
    )
    consumer.assign([KTopicPartition(TOPIC, p) for p in range(3)])
    try:
        return [(m.partition, m.value) for m in consumer]
    finally:
        consumer.close()


def stableOffsets(bootstrap):
    """
    Each partition's (log end offset, last stable offset), from its leader.
    """
    from kafkatwist.client import KafkaWireClient

    with KafkaWireClient(bootstrap) as client:
        ends = client.listOffsets(TOPIC, [0, 1, 2])
        stable = client.listOffsets(TOPIC, [0, 1, 2], isolationLevel=1)
    return {p: (ends[p][0], stable[p][0]) for p in range(3)}


def expected(values):
    return sorted((p, v) for p in range(3) for v in values)


def coordinatorOf(cluster, tid, *ids):
    return stateReplicas(cluster, tid, *ids)[0]


def stateReplicas(cluster, tid, *ids):
    """
    (leader, replicas) of the id's C{__transaction_state} partition.
    """
    admin = cluster.admin(*ids)
    state = partitions(admin, "__transaction_state")
    leader, replicas, _ = state[partitionOf(tid, 3)]
    return leader, replicas


def initAgain(bootstrap, tid):
    """
    A new producer with the same id: its InitProducerId succeeds only once
    the previous transaction reached CompleteCommit or CompleteAbort.
    """
    producer = transactionalProducer(bootstrap, tid)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"next", partition=0)
    assert producer.flush(60) == 0
    producer.commit_transaction(60)


def test_commit_visible_abort_invisible_on_every_leader(cluster):
    bootstrap = cluster.bootstrap(1, 2, 3)
    producer = transactionalProducer(bootstrap, "spread")
    writeTxn(producer, [b"c1", b"c2"], commit=True)
    writeTxn(producer, [b"a1", b"a2"], commit=False)
    writeTxn(producer, [b"c3"], commit=True)
    want = expected([b"c1", b"c2", b"c3"])
    # Every partition got its markers: each one's last stable offset
    # passed both transactions, so a read_committed reader gets the
    # committed records of all three (and none of the aborted ones).
    assert sorted(consumeConfluent(bootstrap, len(want))) == want
    assert sorted(consumeKafkaPython(bootstrap)) == want
    initAgain(bootstrap, "spread")


def test_coordinator_killed_after_end_txn(cluster):
    tid = "survivor"
    bootstrap = cluster.bootstrap(1, 2, 3)
    producer = transactionalProducer(bootstrap, tid)
    writeTxn(producer, [b"before"], commit=True)
    coordinator = coordinatorOf(cluster, tid, 1, 2, 3)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(TOPIC, value=b"committed", partition=partition)
    assert producer.flush(60) == 0
    producer.commit_transaction(60)
    # EndTxn returned: PrepareCommit is in the ISR of __transaction_state;
    # the markers may or may not be out.
    cluster.brokers[coordinator].kill()
    survivors = [i for i in (1, 2, 3) if i != coordinator]
    others = cluster.bootstrap(*survivors)
    waitUntil(lambda: coordinatorOf(cluster, tid, *survivors) in survivors, timeout=60,
              what="a new coordinator")
    # The new coordinator loaded PrepareCommit and finished it: the next
    # InitProducerId is answered (not CONCURRENT_TRANSACTIONS for ever).
    initAgain(others, tid)
    # Every partition's last stable offset reaches its end (nothing open).
    waitUntil(lambda: all(end == lso for end, lso in stableOffsets(others).values()),
              timeout=30, what="every partition stable")
    want = expected([b"before", b"committed"]) + [(0, b"next")]
    assert sorted(consumeConfluent(others, len(want))) == sorted(want)
    assert sorted(consumeKafkaPython(others)) == sorted(want)


@pytest.mark.parametrize(
    "cluster", [{"transaction.state.log.replication.factor": "2", "min.insync.replicas": "1"}],
    indirect=True,
)
def test_coordinator_killed_while_its_markers_are_on_the_way(cluster):
    tid = "interrupted"
    bootstrap = cluster.bootstrap(1, 2, 3)
    producer = transactionalProducer(bootstrap, tid)
    coordinator, replicas = stateReplicas(cluster, tid, 1, 2, 3)
    (paused,) = {1, 2, 3} - set(replicas)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(TOPIC, value=b"finished", partition=partition)
    assert producer.flush(60) == 0
    # The marker to the paused leader is under way when the coordinator
    # dies; the leader comes back before its ZooKeeper session ends.
    os.kill(cluster.brokers[paused].process.pid, signal.SIGSTOP)
    try:
        producer.commit_transaction(90)
        time.sleep(0.5)
        cluster.brokers[coordinator].kill()
    finally:
        os.kill(cluster.brokers[paused].process.pid, signal.SIGCONT)
    survivors = [i for i in (1, 2, 3) if i != coordinator]
    others = cluster.bootstrap(*survivors)
    waitUntil(lambda: coordinatorOf(cluster, tid, *survivors) in survivors, timeout=60,
              what="a new coordinator")
    # The new coordinator found PrepareCommit and sent every marker again
    # (a partition that had one already takes the second as a no-op).
    waitUntil(lambda: all(end == lso for end, lso in stableOffsets(others).values()),
              timeout=60, what="every partition stable")
    successor = coordinatorOf(cluster, tid, *survivors)
    resent = f"transactional id {tid}: completing its PrepareCommit"
    assert resent in cluster.brokers[successor].output()
    initAgain(others, tid)
    want = expected([b"finished"]) + [(0, b"next")]
    assert sorted(consumeConfluent(others, len(want))) == sorted(want)
    assert sorted(consumeKafkaPython(others)) == sorted(want)


@pytest.mark.parametrize("cluster", [{"transaction.state.log.replication.factor": "2"}],
                         indirect=True)
def test_leader_killed_while_its_marker_is_on_the_way(cluster):
    tid = "moving"
    bootstrap = cluster.bootstrap(1, 2, 3)
    producer = transactionalProducer(bootstrap, tid)
    coordinator, replicas = stateReplicas(cluster, tid, 1, 2, 3)
    # The broker that is no replica of the id's __transaction_state
    # partition (so the commit does not wait for it) leads a data partition.
    (victim,) = {1, 2, 3} - set(replicas)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(TOPIC, value=b"moved", partition=partition)
    assert producer.flush(60) == 0
    # The victim stops answering, still registered (for the ZooKeeper
    # session timeout): the marker is sent to it and waits...
    os.kill(cluster.brokers[victim].process.pid, signal.SIGSTOP)
    paused = time.monotonic()
    try:
        producer.commit_transaction(90)
        time.sleep(0.5)
    finally:
        # ... until it dies: the marker goes to the partition's new leader.
        cluster.brokers[victim].kill()
        killedAfter = time.monotonic() - paused
    survivors = [i for i in (1, 2, 3) if i != victim]
    others = cluster.bootstrap(*survivors)
    waitUntil(lambda: partitions(cluster.admin(*survivors), TOPIC)[victim - 1][0] in survivors,
              timeout=60, what="a new leader of the victim's partition")
    waitUntil(lambda: all(end == lso for end, lso in stableOffsets(others).values()),
              timeout=60, what="every partition stable")
    if killedAfter < SESSION_MS / 1000 - 0.5:
        # The victim was still registered as the leader: the coordinator
        # sent it the marker and lost it with the connection.
        unsent = f"transaction markers to broker {victim} not sent"
        assert unsent in cluster.brokers[coordinator].output()
    want = expected([b"moved"])
    assert sorted(consumeConfluent(others, len(want))) == want
    initAgain(others, tid)
    assert sorted(consumeKafkaPython(others)) == sorted(want + [(0, b"next")])


def test_deleted_topic_does_not_hold_the_transaction(cluster):
    tid = "orphan"
    bootstrap = cluster.bootstrap(1, 2, 3)
    admin = cluster.admin(1, 2, 3)
    admin.create_topics([NewTopic("doomed", num_partitions=2, replication_factor=3)],
                        request_timeout=30)["doomed"].result()
    waitUntil(lambda: (parts := partitions(admin, "doomed")) is not None and len(parts) == 2
              and all(lead > 0 for lead, _, _ in parts.values()), timeout=60, what="doomed led")
    producer = transactionalProducer(bootstrap, tid)
    producer.begin_transaction()
    for partition in range(3):
        producer.produce(TOPIC, value=b"kept", partition=partition)
    for partition in range(2):
        producer.produce("doomed", value=b"lost", partition=partition)
    assert producer.flush(60) == 0
    admin.delete_topics(["doomed"], request_timeout=30)["doomed"].result()
    # The markers of the deleted partitions are dropped; the others are
    # written and the transaction completes.
    producer.commit_transaction(60)
    waitUntil(lambda: all(end == lso for end, lso in stableOffsets(bootstrap).values()),
              timeout=30, what="every partition stable")
    assert any("doomed-0 no longer exists" in b.output() for b in cluster.brokers.values())
    initAgain(bootstrap, tid)
    want = expected([b"kept"]) + [(0, b"next")]
    assert sorted(consumeConfluent(bootstrap, len(want))) == sorted(want)


def test_offsets_in_a_transaction_reach_another_brokers_group_coordinator(cluster):
    from confluent_kafka import TopicPartition as TP

    from kafkatwist.coordinator.formats import partitionFor

    tid = "offsets"
    bootstrap = cluster.bootstrap(1, 2, 3)
    admin = cluster.admin(1, 2, 3)
    producer = transactionalProducer(bootstrap, tid)
    coordinator = coordinatorOf(cluster, tid, 1, 2, 3)

    def consumer(group):
        return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False})

    # __consumer_offsets exists once a group was looked up.
    probe = consumer("probe")
    probe.committed([TP(TOPIC, 0)], timeout=30)
    probe.close()
    waitUntil(lambda: (parts := partitions(admin, "__consumer_offsets")) is not None
              and all(lead > 0 for lead, _, _ in parts.values()), timeout=60,
              what="__consumer_offsets led")
    leaders = partitions(admin, "__consumer_offsets")
    # A group whose offsets another broker than the transaction's
    # coordinator leads: its marker goes over the network.
    group = next(g for g in (f"g{i}" for i in range(100))
                 if leaders[partitionFor(g, 3)][0] != coordinator)
    source = consumer(group)
    source.assign([TP(TOPIC, 0)])
    metadata = source.consumer_group_metadata()
    for offset, commit in ((42, True), (99, False)):
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"out", partition=1)
        producer.send_offsets_to_transaction([TP(TOPIC, 0, offset)], metadata, 30)
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    source.close()
    # The committed offsets are the group's (read_committed asks with
    # require_stable: answered once the marker reached the group's
    # partition); the aborted ones never are.
    check = consumer(group)
    try:
        (committed,) = check.committed([TP(TOPIC, 0)], timeout=30)
    finally:
        check.close()
    assert committed.offset == 42


def test_first_write_verified_with_the_coordinator_on_another_broker(cluster):
    """
    KIP-890 part 1 across brokers: a leader asks the transactional id's
    coordinator (another broker) whether the partition is in the
    transaction before it appends the producer's first transactional batch
    there; one that is not is refused (no hanging transaction).
    """
    from kafkatwist.client import KafkaWireClient
    from kafkatwist.errors import ErrorCode, KafkaError
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import make, ms, nested
    from kafkatwist.protocol.records import Record, buildBatch

    tid = "unlisted"
    bootstrap = cluster.bootstrap(1, 2, 3)
    transactionalProducer(bootstrap, tid)
    coordinator = coordinatorOf(cluster, tid, 1, 2, 3)
    partition = next(p for p in range(3) if ASSIGNMENT[p][0] != coordinator)
    with KafkaWireClient(bootstrap) as client:
        _, init = client.call(22, lambda version, cls: make(
            cls, transactional_id=tid, transaction_timeout=ms(60000), producer_id=-1,
            producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False,
        ), nodeId=coordinator)
        assert init.error_code == ErrorCode.none
        pid, epoch = int(init.producer_id), int(init.producer_epoch)

        def batch(sequence):
            return buildBatch([Record(value=b"v")], producerId=pid, producerEpoch=epoch,
                              baseSequence=sequence, isTransactional=True)

        with pytest.raises(KafkaError) as refused:
            client.produce(TOPIC, partition, batch(0), acks=-1, transactionalId=tid)
        assert refused.value.code == ErrorCode.invalid_txn_state

        def add(version, cls):
            # v3: a producer's form (v4+ is the brokers')
            cls = requestType(24, 3)
            Topic = nested(cls, "AddPartitionsToTxnTopic")
            return 3, make(
                cls, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=(Topic(name=TOPIC, partitions=(partition,)),),
            )

        _, added = client.call(24, add, nodeId=coordinator)
        (result,) = added.results_by_topic_v3_and_below
        assert [p.partition_error_code for p in result.results_by_partition] == [ErrorCode.none]
        client.produce(TOPIC, partition, batch(0), acks=-1, transactionalId=tid)
