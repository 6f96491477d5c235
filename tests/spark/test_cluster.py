"""
The Spark connector against a cluster: three brokers on loopback with a real
ZooKeeper (the fixtures of L{tests.cluster}), topics with replication
factor 3.  A batch write and read; and a streaming query (source and sink)
that keeps running while the broker leading every partition it reads and
writes is killed with kill -9 -- afterwards each row is in the output once,
and the source read every offset without reporting data loss.
"""

from __future__ import annotations

import json
import threading

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest, partitions

from .helpers import readCommitted

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

BROKER = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "log.cleaner.enable": "false",
    "min.insync.replicas": "2",
}


@pytest.fixture(scope="module")
def sharedCluster(zookeeper, tmp_path_factory):
    c = ClusterUnderTest(zookeeper, tmp_path_factory.mktemp("spark-cluster"), "spark").startAll(**BROKER)
    yield c
    c.stop()


@pytest.fixture
def cluster(sharedCluster):
    """
    The module's three brokers, each running: a broker an earlier test
    killed is started again on its data (topics are the tests' own).
    """
    dead = [n for n, b in sharedCluster.brokers.items() if not b.running()]
    for n in dead:
        sharedCluster.restart(n)
    if dead:
        sharedCluster.waitReady()
    return sharedCluster


def createTopics(cluster, names, partitionCount, leader=None):
    """
    RF 3 topics; with C{leader}, that broker is every partition's preferred
    (so first) leader.
    """
    admin = cluster.admin(1, 2, 3)
    specs = []
    for name in names:
        if leader is None:
            specs.append(NewTopic(name, num_partitions=partitionCount, replication_factor=3))
        else:
            others = [i for i in (1, 2, 3) if i != leader]
            assignment = [[leader] + (others if p % 2 else others[::-1]) for p in range(partitionCount)]
            specs.append(NewTopic(name, num_partitions=partitionCount, replica_assignment=assignment))
    for future in admin.create_topics(specs, request_timeout=30).values():
        future.result()
    for name in names:
        waitUntil(
            lambda name=name: (parts := partitions(admin, name)) is not None
            and len(parts) == partitionCount
            and all(len(isr) == 3 and lead >= 0 for lead, _, isr in parts.values()),
            timeout=60, what=f"{name}: every partition led, ISR of 3",
        )
    return admin


def test_batch_write_and_read_rf3(spark, cluster):
    createTopics(cluster, ["batch"], 3)
    bootstrap = cluster.bootstrap(1, 2, 3)
    (
        spark.range(3000).selectExpr("CAST(id AS STRING) AS key", "CAST(id AS STRING) AS value")
        .write.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "batch")
        .mode("append").save()
    )
    rows = (
        spark.read.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "batch")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(value AS STRING) AS value", "partition")
        .collect()
    )
    assert sorted(int(r.value) for r in rows) == list(range(3000))
    assert {r.partition for r in rows} == {0, 1, 2}


def _produceInput(bootstrap, topic, first, count):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "message.timeout.ms": 120000})
    for n in range(first, first + count):
        producer.produce(topic, key=b"%d" % n, value=b"%08d" % n)
        if n % 200 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


@pytest.mark.parametrize("mode", ["idempotent", "exactly-once"])
def test_stream_rides_through_leader_kill(spark, cluster, tmp_path, mode):
    """
    Broker 1 leads every partition of the input and output topics; it is
    killed with kill -9 while the query runs and more input arrives.  The
    query keeps going on the new leaders: every input row is in the output
    once, and the source reports no data loss (its default
    failOnDataLoss=true would fail the query).
    """
    source, target = f"in-{mode}", f"out-{mode}"
    createTopics(cluster, [source, target], 2, leader=1)
    bootstrap = cluster.bootstrap(1, 2, 3)
    _produceInput(bootstrap, source, 0, 2000)
    sink = (
        spark.readStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "400")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
    )
    if mode == "exactly-once":
        sink = sink.option("kafka.transactional.id", "riding")
    query = sink.start()
    late = threading.Thread(target=_produceInput, args=(cluster.bootstrap(2, 3), source, 2000, 1000))
    try:
        # Three micro-batches (1,200 of the first 2,000 rows) before the kill.
        waitUntil(lambda: (query.lastProgress or {}).get("batchId", 0) >= 2 or query.exception(),
                  timeout=120, what="a few micro-batches")
        assert query.exception() is None, query.exception()
        cluster.brokers[1].kill()
        late.start()
        survivors = cluster.admin(2, 3)
        waitUntil(
            lambda: all(
                lead in (2, 3) for t in (source, target) for lead, _, _ in partitions(survivors, t).values()
            ),
            timeout=60, what="new leaders",
        )
        late.join(120)
        # Everything produced is read (processAllAvailable would hide a
        # failed query behind its exception; poll instead).
        waitUntil(lambda: _caughtUp(query, cluster, source) or query.exception() is not None,
                  timeout=180, what="the query caught up with its input")
        assert query.exception() is None, query.exception()
    finally:
        query.stop()
        if late.ident is not None:
            late.join(120)
    values = readCommitted(
        cluster.bootstrap(2, 3), target, [0, 1],
        isolation="read_committed" if mode == "exactly-once" else "read_uncommitted",
    )
    expected = [b"%08d" % n for n in range(3000)]
    assert len(values) == len(set(values)), f"{len(values) - len(set(values))} rows written twice"
    assert sorted(values) == expected


def _caughtUp(query, cluster, source):
    progress = query.lastProgress
    if not progress:
        return False
    from kafkatwist.client import KafkaWireClient

    with KafkaWireClient(cluster.bootstrap(2, 3)) as client:
        ends = client.listOffsets(source, [0, 1])
    read = progress["sources"][0].get("endOffset") or {}
    if isinstance(read, str):
        read = json.loads(read)
    read = read.get(source, {})
    return all(int(read.get(str(p), -1)) >= ends[p][0] for p in (0, 1)) and (
        progress.get("numInputRows", 1) == 0
    )
