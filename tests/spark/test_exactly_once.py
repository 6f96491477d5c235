"""
The sink's exactly-once mode (C{kafka.transactional.id}): a job's rows
become visible to read_committed readers only when the job commits, once;
a job that fails half way leaves nothing visible (its tasks' transactions
aborted at once, not at their timeout), and running it again writes each
row exactly once; the streaming sink commits each micro-batch's
transactions.  Read back with a read_committed confluent-kafka consumer.
"""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from kafkatwist.client import KafkaWireClient  # noqa: E402

from .helpers import NO_JAVA, javaMissing, produce  # noqa: E402

if javaMissing():
    pytest.skip(NO_JAVA, allow_module_level=True)

pytestmark = pytest.mark.spark

ROWS = 600
#: rows each task attempt saw (in the Python worker that runs the UDF)
_seen: dict = {}


def readCommitted(bootstrap, topic, partitions, isolation="read_committed"):
    """
    Every value of C{topic} a consumer with C{isolation} sees, up to the
    partitions' ends.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    with KafkaWireClient(bootstrap) as client:
        level = 1 if isolation == "read_committed" else 0
        ends = {p: client.listOffsets(topic, [p], isolationLevel=level)[p][0] for p in partitions}
    assigned = [TopicPartition(topic, p, 0) for p in partitions]
    consumer.assign(assigned)
    values = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
                continue
            # The position moves past aborted records and markers too.
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(assigned)):
                break
    finally:
        consumer.close()
    return values


def stable(bootstrap, topic, partitions):
    with KafkaWireClient(bootstrap) as client:
        return all(
            client.listOffsets(topic, [p], isolationLevel=1)[p][0]
            == client.listOffsets(topic, [p])[p][0]
            for p in partitions
        )


def frame(spark, rows=ROWS):
    return spark.createDataFrame(
        [(f"k{i}", f"v{i}") for i in range(rows)], "key string, value string"
    ).repartition(3)


def write(df, kafka, topic, prefix, **options):
    w = (
        df.write.format("kafkatwist").mode("append")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", topic)
        .option("kafka.transactional.id", prefix)
        # Small requests: a task produces many times before it ends.
        .option("kafka.batch.size", "200")
    )
    for name, value in options.items():
        w = w.option(name, value)
    w.save()


def test_exactly_once_commit(spark, kafka, newTopic):
    topic = newTopic(2)
    write(frame(spark), kafka, topic, f"eos-{topic}")
    values = readCommitted(kafka.bootstrap, topic, [0, 1])
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(ROWS))
    assert stable(kafka.bootstrap, topic, [0, 1])


def test_failed_job_leaves_nothing_and_a_rerun_writes_once(spark, kafka, newTopic, tmp_path):
    """
    One task fails after writing part of its rows: the job fails, its
    tasks' transactions are aborted (the failed task's by fencing its id),
    nothing is visible; the same job run again writes every row exactly
    once.
    """
    from pyspark.sql.functions import udf

    topic = newTopic(2)
    flag = str(tmp_path / "failed-once")

    @udf("string")
    def failOnce(value):
        # On the first run, partition 1's task fails at its 150th row, after
        # writing the rows before it (in small requests).
        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1 and not os.path.exists(flag):
            seen = _seen.setdefault(TaskContext.get().taskAttemptId(), [0])
            seen[0] += 1
            if seen[0] == 150:
                open(flag, "w").close()
                raise RuntimeError("this task fails once")
        return value

    df = frame(spark).selectExpr("key", "value").withColumn("value", failOnce("value"))
    # Small Arrow batches: the writer gets (and produces) rows before the
    # failing one is computed.
    previous = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")
    try:
        with pytest.raises(Exception, match="this task fails once"):
            write(df, kafka, topic, f"eos-{topic}", **{"kafka.transaction.timeout.ms": "3000"})
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", previous)
    # The failed attempt wrote records, none of them visible.
    assert readCommitted(kafka.bootstrap, topic, [0, 1], isolation="read_uncommitted")
    assert readCommitted(kafka.bootstrap, topic, [0, 1]) == []
    # A task Spark was still cancelling when the driver aborted may have
    # opened a transaction after that: its timeout (or the rerun) ends it.
    deadline = time.monotonic() + 30
    while not stable(kafka.bootstrap, topic, [0, 1]):
        assert time.monotonic() < deadline, "a transaction stayed open past its timeout"
        time.sleep(0.5)
    assert readCommitted(kafka.bootstrap, topic, [0, 1]) == []
    write(df, kafka, topic, f"eos-{topic}")
    values = readCommitted(kafka.bootstrap, topic, [0, 1])
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(ROWS))
    # The connector's own source, read_committed, agrees; read_uncommitted
    # also sees the failed attempt's rows.
    committed = [
        r.value for r in spark.read.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap).option("subscribe", topic)
        .option("kafka.isolation.level", "read_committed").load().collect()
    ]
    assert sorted(committed) == sorted(values)
    everything = spark.read.format("kafkatwist").option(
        "kafka.bootstrap.servers", kafka.bootstrap
    ).option("subscribe", topic).load().count()
    assert everything > ROWS


def test_retried_task_fences_its_predecessor(kafka, newTopic):
    """
    What a task retry does, without Spark: the second attempt's
    InitProducerId on the same id aborts the first attempt's open
    transaction, and only the second attempt's rows are committed.
    """
    from kafkatwist_spark.encoding import encodeBatch
    from kafkatwist_spark.transactional import (
        TransactionalProducer,
        commitTransactions,
    )

    topic = newTopic(1)
    tid = f"retry-{topic}"
    with KafkaWireClient(kafka.bootstrap) as client:
        first = TransactionalProducer(client, tid, 60000, 30000)
        first.beforeWrite(topic, 0)
        batch = encodeBatch([None], [b"first"], None, 1000, "none",
                            (first.producerId, first.producerEpoch, first.nextSequence(topic, 0, 1)))
        client.produce(topic, 0, batch, acks=-1, transactionalId=tid)
        second = TransactionalProducer(client, tid, 60000, 30000)
        assert second.producerEpoch > first.producerEpoch
        second.beforeWrite(topic, 0)
        batch = encodeBatch([None], [b"second"], None, 1000, "none",
                            (second.producerId, second.producerEpoch, second.nextSequence(topic, 0, 1)))
        client.produce(topic, 0, batch, acks=-1, transactionalId=tid)
        with pytest.raises(Exception):
            commitTransactions(client, [first.handle], 30000)
        assert commitTransactions(client, [second.handle], 30000) == 1
    assert readCommitted(kafka.bootstrap, topic, [0]) == [b"second"]


def test_streaming_exactly_once(spark, kafka, admin, newTopic, tmp_path):
    source, target = newTopic(2), newTopic(2)
    for p in (0, 1):
        produce(admin, source, p, 300)
    query = (
        spark.readStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .load()
        .selectExpr("key", "value")
        .writeStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", target)
        .option("kafka.transactional.id", f"stream-{target}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    values = readCommitted(kafka.bootstrap, target, [0, 1])
    assert len(values) == 600 and len(set(values)) == len(set(
        readCommitted(kafka.bootstrap, source, [0, 1], isolation="read_uncommitted")
    ))
    assert stable(kafka.bootstrap, target, [0, 1])


def test_options(spark, kafka):
    from kafkatwist_spark.options import OptionError, parseSinkOptions

    base = {"kafka.bootstrap.servers": kafka.bootstrap, "topic": "t"}
    config = parseSinkOptions({**base, "kafka.transactional.id": "x",
                               "kafka.transaction.timeout.ms": "5000"})
    assert (config.transactionalIdPrefix, config.transactionTimeoutMs) == ("x", 5000)
    with pytest.raises(OptionError, match="kafka.acks"):
        parseSinkOptions({**base, "kafka.transactional.id": "x", "kafka.acks": "1"})
    with pytest.raises(OptionError, match="empty"):
        parseSinkOptions({**base, "kafka.transactional.id": ""})
