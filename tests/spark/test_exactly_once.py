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

from kafkatwist.client import KafkaWireClient  # noqa: E402

from .helpers import NO_JAVA, javaMissing, produce, readCommitted  # noqa: E402

if javaMissing():
    pytest.skip(NO_JAVA, allow_module_level=True)

pytestmark = pytest.mark.spark

ROWS = 600
#: rows each task attempt saw (in the Python worker that runs the UDF)
_seen: dict = {}


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


def _failingUdf(flag: str, once: bool, partition: int = 1, at: int = 150):
    """
    A UDF passing values through that raises at the C{at}th row the task
    of C{partition} sees: if C{once}, while the file C{flag} does not exist
    (creating it as it raises: the task's next attempt goes through), else
    while it exists.
    """
    from pyspark.sql.functions import udf

    @udf("string")
    def fail(value):
        from pyspark import TaskContext

        context = TaskContext.get()
        if context.partitionId() == partition and os.path.exists(flag) != once:
            seen = _seen.setdefault(context.taskAttemptId(), [0])
            seen[0] += 1
            if seen[0] == at:
                if once:
                    open(flag, "w").close()
                raise RuntimeError("this task fails")
        return value

    return fail


class _SmallArrowBatches:
    """
    The writer gets (and produces) rows before the failing one is
    computed.
    """

    def __init__(self, spark):
        self.spark = spark

    def __enter__(self):
        self.previous = self.spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
        self.spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "20")

    def __exit__(self, *exc):
        self.spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", self.previous)


def test_task_failing_once_leaves_no_duplicates(spark, kafka, newTopic, tmp_path):
    """
    One task fails once after writing part of its rows; Spark runs it
    again (the session allows a task two attempts), the job succeeds: the
    retry's InitProducerId fenced the failed attempt and aborted its
    transaction, so read_committed readers see every row exactly once,
    read_uncommitted readers the failed attempt's rows too.
    """
    topic = newTopic(2)
    flag = str(tmp_path / "failed-once")
    df = frame(spark).withColumn("value", _failingUdf(flag, once=True, at=190)("value"))
    with _SmallArrowBatches(spark):
        write(df, kafka, topic, f"eos-{topic}")
    assert os.path.exists(flag), "the task did not fail"
    values = readCommitted(kafka.bootstrap, topic, [0, 1])
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(ROWS))
    # (How many rows the failed attempt produced before the failing row
    # was computed depends on Spark's pipelining: usually some.)
    everything = readCommitted(kafka.bootstrap, topic, [0, 1], isolation="read_uncommitted")
    assert len(everything) >= ROWS
    assert stable(kafka.bootstrap, topic, [0, 1])


def test_failed_job_leaves_nothing_and_a_rerun_writes_once(spark, kafka, newTopic, tmp_path):
    """
    One task fails on every attempt after writing part of its rows: the
    job fails, its tasks' transactions are aborted (the failed task's by
    fencing its id), nothing is visible; the same job run again writes
    every row exactly once.
    """
    topic = newTopic(2)
    flag = str(tmp_path / "fail")
    open(flag, "w").close()
    df = frame(spark).withColumn("value", _failingUdf(flag, once=False)("value"))
    with _SmallArrowBatches(spark):
        with pytest.raises(Exception, match="this task fails"):
            write(df, kafka, topic, f"eos-{topic}", **{"kafka.transaction.timeout.ms": "3000"})
    os.unlink(flag)
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
    from kafkatwist.errors import KafkaError
    from kafkatwist_spark.transactional import (
        TransactionHandle,
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
        # An attempt that starts late (InitProducerId after its successor
        # wrote) fences it: the driver's commit refuses, with a clear error.
        third = TransactionalProducer(client, tid, 60000, 30000)
        with pytest.raises(KafkaError, match="cannot be committed"):
            commitTransactions(client, [TransactionHandle(tid, second.producerId,
                                                          second.producerEpoch)], 30000)
        assert third.producerEpoch > second.producerEpoch
    assert readCommitted(kafka.bootstrap, topic, [0]) == [b"second"]


def _stream(spark, kafka, source, target, checkpoint, transform=None):
    """
    Run a streaming query from C{source} to C{target} (exactly-once) until
    it has read everything there is.

    @return: the finished query.
    """
    frame = (
        spark.readStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "250")
        .load()
        .selectExpr("key", "CAST(value AS STRING) AS value")
    )
    if transform is not None:
        frame = transform(frame)
    query = (
        frame.writeStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", target)
        .option("kafka.transactional.id", f"stream-{target}")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return query


def _sourceValues(kafka, source):
    return sorted(readCommitted(kafka.bootstrap, source, [0, 1], isolation="read_uncommitted"))


def test_streaming_exactly_once(spark, kafka, admin, newTopic, tmp_path):
    source, target = newTopic(2), newTopic(2)
    for p in (0, 1):
        produce(admin, source, p, 300)
    _stream(spark, kafka, source, target, str(tmp_path / "checkpoint"))
    values = readCommitted(kafka.bootstrap, target, [0, 1])
    assert sorted(values) == _sourceValues(kafka, source) and len(values) == 600
    assert stable(kafka.bootstrap, target, [0, 1])


def test_streaming_task_failing_once_leaves_no_duplicates(spark, kafka, admin, newTopic, tmp_path):
    """
    A micro-batch's task fails once after writing part of its rows and is
    run again: the micro-batch commits the retry's transaction only.
    """
    source, target = newTopic(2), newTopic(2)
    for p in (0, 1):
        produce(admin, source, p, 300)
    flag = str(tmp_path / "failed-once")
    fail = _failingUdf(flag, once=True, at=50)
    with _SmallArrowBatches(spark):
        _stream(spark, kafka, source, target, str(tmp_path / "checkpoint"),
                lambda df: df.withColumn("value", fail("value")))
    assert os.path.exists(flag), "the task did not fail"
    values = readCommitted(kafka.bootstrap, target, [0, 1])
    assert sorted(values) == _sourceValues(kafka, source) and len(values) == 600
    assert len(readCommitted(kafka.bootstrap, target, [0, 1], isolation="read_uncommitted")) >= 600
    assert stable(kafka.bootstrap, target, [0, 1])


def test_streaming_restart_after_the_driver_died_committing(spark, kafka, admin, newTopic, tmp_path):
    """
    The driver dies after recording its commit of the last micro-batch in
    the sink's commit log, before Spark recorded the micro-batch as done:
    the restarted query finishes the commit (EndTxn again: NONE) and runs
    the micro-batch again, whose tasks write nothing -- no duplicates.
    """
    from kafkatwist_spark.transactional import COMMITTING, CommitLog, _describe, TransactionHandle

    source, target = newTopic(2), newTopic(2)
    for p in (0, 1):
        produce(admin, source, p, 300)
    checkpoint = str(tmp_path / "checkpoint")
    first = _stream(spark, kafka, source, target, checkpoint)
    last = max(p["batchId"] for p in first.recentProgress if p["numInputRows"])
    prefix = f"stream-{target}"
    log = CommitLog(admin, f"kafkatwist-sink-commits.{prefix}")
    assert log.latest() == {"batch": last, "state": "committed", "done": [0, 1]}
    # What the dying driver had written: the micro-batch's handles, as the
    # coordinator still has them (committed).
    described = _describe(admin, [TransactionHandle(f"{prefix}-{i}", -1, -1) for i in (0, 1)])
    log.append({
        "batch": last, "state": COMMITTING, "done": [],
        "handles": [[i, f"{prefix}-{i}", described[f"{prefix}-{i}"][2],
                     described[f"{prefix}-{i}"][3]] for i in (0, 1)],
    })
    # ... and Spark had not recorded the micro-batch as committed.
    for name in (str(last), f".{last}.crc"):
        path = os.path.join(checkpoint, "commits", name)
        if os.path.exists(path):
            os.unlink(path)
    again = _stream(spark, kafka, source, target, checkpoint)
    assert [p["batchId"] for p in again.recentProgress][:1] == [last]
    assert log.latest() == {"batch": last, "state": "committed", "done": [0, 1]}
    values = readCommitted(kafka.bootstrap, target, [0, 1])
    assert sorted(values) == _sourceValues(kafka, source) and len(values) == 600
    assert stable(kafka.bootstrap, target, [0, 1])


def _openTransaction(client, topic, tid, partitionId, value, timeoutMs=60000):
    from kafkatwist_spark.encoding import encodeBatch
    from kafkatwist_spark.transactional import TransactionalProducer

    producer = TransactionalProducer(client, tid, timeoutMs, 30000, partitionId)
    producer.beforeWrite(topic, 0)
    batch = encodeBatch([None], [value], None, 1000, "none",
                        (producer.producerId, producer.producerEpoch,
                         producer.nextSequence(topic, 0, 1)))
    client.produce(topic, 0, batch, acks=-1, transactionalId=tid)
    return producer.handle


def test_recovery_finishes_a_half_done_commit(kafka, newTopic):
    """
    Without Spark: the driver recorded three tasks' transactions in the
    commit log and committed the first before dying; the second passed its
    timeout meanwhile (aborted by the coordinator); the third is still
    open.  Recovery commits the third, and says that tasks 0 and 2 of the
    micro-batch are done and task 1 must write again.
    """
    from kafkatwist_spark.transactional import (
        COMMITTING,
        CommitLog,
        Recovered,
        commitTransactions,
        recoverStream,
    )

    topic = newTopic(1)
    logTopic = f"commits-{topic}"
    with KafkaWireClient(kafka.bootstrap) as client:
        handles = [
            _openTransaction(client, topic, f"half-{topic}-0", 0, b"zero"),
            _openTransaction(client, topic, f"half-{topic}-1", 1, b"one", timeoutMs=1000),
            _openTransaction(client, topic, f"half-{topic}-2", 2, b"two"),
        ]
        log = CommitLog(client, logTopic)
        log.create()
        log.append({
            "batch": 7, "state": COMMITTING, "done": [3],
            "handles": [[h.partitionId, h.transactionalId, h.producerId, h.producerEpoch]
                        for h in handles],
        })
        commitTransactions(client, handles[:1], 30000)
        deadline = time.monotonic() + 30
        while client.listOffsets(topic, [0], isolationLevel=1)[0][0] < 2:
            # The coordinator aborts task 1's transaction at its timeout;
            # task 2's holds the last stable offset then.
            assert time.monotonic() < deadline
            time.sleep(0.3)
        assert recoverStream(client, logTopic, 30000) == Recovered(7, frozenset({0, 2, 3}))
        assert log.latest() == {"batch": 7, "state": "committed", "done": [0, 2, 3]}
        # Recovering again changes nothing.
        assert recoverStream(client, logTopic, 30000) == Recovered(7, frozenset({0, 2, 3}))
    assert sorted(readCommitted(kafka.bootstrap, topic, [0])) == [b"two", b"zero"]


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
    assert config.commitLogTopic == "kafkatwist-sink-commits.x"
    config = parseSinkOptions({**base, "kafka.transactional.id": "x", "commitLogTopic": "mine"})
    assert config.commitLogTopic == "mine"
    with pytest.raises(OptionError, match="commitLogTopic"):
        parseSinkOptions({**base, "kafka.transactional.id": "a b"})
    with pytest.raises(OptionError, match="needs 'kafka.transactional.id'"):
        parseSinkOptions({**base, "commitLogTopic": "mine"})
