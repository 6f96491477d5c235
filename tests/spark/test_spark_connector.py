"""
The C{kafkatwist} data source in a real local SparkSession against a real
broker: batch reads, streams, the sink, TLS, and options refused through
Spark.
"""

import math
import time

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from kafkatwist.protocol.records import Record  # noqa: E402
from kafkatwist_spark import kafkaSchema  # noqa: E402
from kafkatwist_spark.writer import keyPartition  # noqa: E402

from .helpers import (  # noqa: E402
    BASE_TIMESTAMP,
    NO_JAVA,
    arrowRows,
    createPartitions,
    deleteRecords,
    expectedRow,
    javaMissing,
    produce,
)

if javaMissing():
    pytest.skip(NO_JAVA, allow_module_level=True)

pytestmark = pytest.mark.spark


def reader(spark, kafka, **options):
    r = spark.read.format("kafkatwist").option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def streamReader(spark, kafka, **options):
    r = spark.readStream.format("kafkatwist").option("kafka.bootstrap.servers", kafka.bootstrap)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def positions(df):
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


# -- batch ---------------------------------------------------------------------


def test_batch_read_every_record(spark, kafka, admin, newTopic):
    """
    100,000 records over 4 partitions (each partition in another codec) come
    back once each, with their offsets, keys, values, timestamps and headers,
    one Spark partition per Kafka partition.
    """
    topic = newTopic(4)
    perPartition = 25_000
    for p in range(4):
        produce(admin, topic, p, perPartition)
    df = reader(spark, kafka, subscribe=topic, includeHeaders="true").load()
    assert df.schema == kafkaSchema(includeHeaders=True)
    assert df.rdd.getNumPartitions() == 4
    table = df.toArrow()
    assert table.num_rows == 4 * perPartition
    assert set(table.column("topic").to_pylist()) == {topic}
    assert arrowRows(table) == [
        expectedRow(p, i) for p in range(4) for i in range(perPartition)
    ]


def test_batch_offsets_and_timestamps(spark, kafka, admin, newTopic):
    topic = newTopic(2)
    for p in (0, 1):
        produce(admin, topic, p, 200)
    df = reader(
        spark, kafka, subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":50,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":60,"1":-1}}}}',
    ).load()
    assert positions(df) == [(0, o) for o in range(50, 60)] + [(1, o) for o in range(200)]
    # record i is stamped BASE_TIMESTAMP + 10 i
    df = reader(
        spark, kafka, subscribe=topic,
        startingTimestamp=str(BASE_TIMESTAMP + 1000), endingTimestamp=str(BASE_TIMESTAMP + 1095),
    ).load()
    assert positions(df) == [(p, o) for p in (0, 1) for o in range(100, 110)]
    df = reader(
        spark, kafka, assign=f'{{"{topic}":[1]}}',
        startingOffsetsByTimestamp=f'{{"{topic}":{{"1":{BASE_TIMESTAMP + 1985}}}}}',
    ).load()
    assert positions(df) == [(1, o) for o in range(199, 200)]


def test_min_partitions_splits(spark, kafka, admin, newTopic):
    topic = newTopic(2)
    produce(admin, topic, 0, 9000)
    produce(admin, topic, 1, 1000)
    df = reader(spark, kafka, subscribe=topic, minPartitions="10").load()
    assert df.rdd.getNumPartitions() == 10
    assert positions(df) == [(0, o) for o in range(9000)] + [(1, o) for o in range(1000)]
    capped = reader(spark, kafka, subscribe=topic, maxRecordsPerPartition="2500").load()
    assert capped.rdd.getNumPartitions() == 5
    assert capped.count() == 10_000


def test_empty_read(spark, kafka, newTopic):
    topic = newTopic(2)
    assert reader(spark, kafka, subscribe=topic).load().count() == 0
    # A topic that does not exist fails the batch query (issue 27): see
    # test_unknown_topic_fails_as_sparks_kafka_source_does.


def test_value_field_group_by(spark, kafka, admin, newTopic):
    """
    What jobs do with the source: decode values, group on a field.
    """
    topic = newTopic(3)
    for p in range(3):
        admin.produce(topic, p, [
            Record(timestamp=BASE_TIMESTAMP, value=b'{"kind": "k%d", "n": %d}' % (i % 4, i))
            for i in range(300)
        ])
    df = reader(spark, kafka, subscribe=topic).load()
    counts = {
        r["kind"]: r["count"]
        for r in df.selectExpr("get_json_object(cast(value as string), '$.kind') as kind")
        .groupBy("kind").count().collect()
    }
    assert counts == {"k0": 225, "k1": 225, "k2": 225, "k3": 225}


# -- streaming -------------------------------------------------------------------


def nonEmptyBatches(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_stream_available_now_rate_limit_and_restart(spark, kafka, admin, newTopic, tmp_path):
    """
    Trigger.AvailableNow with maxOffsetsPerTrigger=N reads a backlog of B
    offsets in ceil(B/N) micro-batches of N; a query stopped in the middle
    and restarted on its checkpoint goes on where it was: no record twice,
    none missing.
    """
    topic = newTopic(3)
    sizes = [500, 300, 200]
    for p, size in enumerate(sizes):
        produce(admin, topic, p, size)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start(trigger, limit=None):
        options = {"subscribe": topic, "startingOffsets": "earliest"}
        if limit:
            options["maxOffsetsPerTrigger"] = str(limit)
        writer = (
            streamReader(spark, kafka, **options).load()
            .select("partition", "offset")
            .writeStream.format("parquet")
            .option("path", out).option("checkpointLocation", checkpoint)
        )
        return writer.trigger(**trigger).start()

    query = start({"availableNow": True}, limit=300)
    query.awaitTermination(120)
    assert nonEmptyBatches(query) == [300, 300, 300, 100]
    assert len(nonEmptyBatches(query)) == math.ceil(sum(sizes) / 300)

    # more data; a query that reads some of it, then is stopped
    for p in range(3):
        produce(admin, topic, p, 400, start=sizes[p])
    query = start({"processingTime": "100 milliseconds"}, limit=150)
    deadline = time.monotonic() + 60
    while len(nonEmptyBatches(query)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    query.stop()
    assert len(nonEmptyBatches(query)) >= 2

    query = start({"availableNow": True})
    query.awaitTermination(120)
    written = spark.read.parquet(out)
    assert written.count() == sum(sizes) + 3 * 400
    assert positions(written) == [
        (p, o) for p in range(3) for o in range(sizes[p] + 400)
    ]


def test_stream_picks_up_new_partitions_and_topics(spark, kafka, admin, newTopic):
    prefix = f"grow{time.monotonic_ns()}"
    first = newTopic(1, prefix=prefix)
    produce(admin, first, 0, 10)
    query = (
        streamReader(spark, kafka, subscribePattern=f"{prefix}.*", startingOffsets="earliest")
        .load()
        .selectExpr("topic", "partition", "offset")
        .writeStream.format("memory").queryName(prefix).start()
    )
    try:
        query.processAllAvailable()
        second = newTopic(2, prefix=prefix)
        produce(admin, second, 1, 5)
        createPartitions(admin, first, 2)
        produce(admin, first, 1, 7)
        produce(admin, first, 0, 3, start=10)
        deadline = time.monotonic() + 60
        while spark.table(prefix).count() < 25 and time.monotonic() < deadline:
            query.processAllAvailable()
        rows = sorted(tuple(r) for r in spark.table(prefix).collect())
    finally:
        query.stop()
    assert rows == sorted(
        [(first, 0, o) for o in range(13)] + [(first, 1, o) for o in range(7)]
        + [(second, 1, o) for o in range(5)]
    )


def test_stream_data_loss(spark, kafka, admin, newTopic, tmp_path):
    """
    Records aged out before the stream got to them fail the query, with the
    way out in the message; with failOnDataLoss=false it skips past them.
    """
    topic = newTopic(1)
    produce(admin, topic, 0, 100)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(failOnDataLoss):
        query = (
            streamReader(spark, kafka, subscribe=topic, startingOffsets="earliest",
                         failOnDataLoss=failOnDataLoss)
            .load().select("offset")
            .writeStream.format("parquet").option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start()
        )
        try:
            finished = query.awaitTermination(300)
        except Exception:
            finished = True  # failed: the test looks at query.exception()
        if not finished:
            # (reading the output of a query still running would say rows were lost)
            query.stop()
            pytest.fail(f"the availableNow query (failOnDataLoss={failOnDataLoss}) did not end in 300 s")
        return query

    run("true")
    produce(admin, topic, 0, 100, start=100)
    deleteRecords(admin, topic, 0, 150)
    produce(admin, topic, 0, 50, start=200)
    failed = run("true")
    assert failed.exception() is not None
    assert "failOnDataLoss" in str(failed.exception())
    assert "earliest available offset is now 150" in str(failed.exception())
    run("false")
    offsets = sorted(r.offset for r in spark.read.parquet(out).collect())
    assert offsets == list(range(100)) + list(range(150, 250))


# -- sink ------------------------------------------------------------------------


def test_sink_round_trip(spark, kafka, admin, newTopic):
    """
    Rows written through the sink read back the same: keys, values,
    headers, explicit partitions, and key-hashed partitions where the Java
    producer would put them.
    """
    topic = newTopic(3)
    rows = [
        (f"key-{i}" if i % 5 else None, f"value-{i}".encode(),
         [("n", b"%d" % i), ("none", None)] if i % 2 else [], 2 if i % 7 == 0 else None)
        for i in range(2000)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, value binary, headers array<struct<key:string,value:binary>>, partition int",
    )
    df.repartition(3).write.format("kafkatwist").mode("append").option(
        "kafka.bootstrap.servers", kafka.bootstrap
    ).option("topic", topic).option("kafka.compression.type", "lz4").save()

    back = reader(spark, kafka, subscribe=topic, includeHeaders="true").load().collect()
    assert len(back) == len(rows)
    got = {r.value: r for r in back}
    for key, value, headers, partition in rows:
        r = got[value]
        assert r.key == (key.encode() if key is not None else None)
        assert [(h.key, h.value) for h in r.headers] == headers
        if partition is not None:
            assert r.partition == partition
        elif key is not None:
            assert r.partition == keyPartition(key.encode(), 3)


def test_sink_topic_column(spark, kafka, newTopic):
    a, b = newTopic(1), newTopic(1)
    df = spark.createDataFrame(
        [(a if i % 2 else b, f"v{i}") for i in range(100)], "topic string, value string"
    )
    df.write.format("kafkatwist").mode("append").option(
        "kafka.bootstrap.servers", kafka.bootstrap
    ).save()
    for topic, parity in ((a, 1), (b, 0)):
        values = {r.v for r in reader(spark, kafka, subscribe=topic).load()
                  .selectExpr("cast(value as string) as v").collect()}
        assert values == {f"v{i}" for i in range(100) if i % 2 == parity}


def test_streaming_sink(spark, kafka, admin, newTopic, tmp_path):
    """
    A stream from one topic into another, through both halves of the
    connector.
    """
    source, target = newTopic(2), newTopic(2)
    for p in (0, 1):
        produce(admin, source, p, 500)
    query = (
        streamReader(spark, kafka, subscribe=source, startingOffsets="earliest",
                     maxOffsetsPerTrigger="400")
        .load()
        .selectExpr("key", "upper(cast(value as string)) as value")
        .writeStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = reader(spark, kafka, subscribe=target).load().selectExpr(
        "cast(value as string) as v"
    ).collect()
    assert sorted(r.v for r in got) == sorted(
        expectedRow(p, i)[1].decode().upper() for p in (0, 1) for i in range(500)
    )


# -- TLS -------------------------------------------------------------------------


def test_read_over_tls(spark, kafka, admin, newTopic, pki):
    """
    The SSL listener, trusting the test CA from a PEM file and checking the
    broker's certificate names 127.0.0.1.
    """
    topic = newTopic(2)
    for p in (0, 1):
        produce(admin, topic, p, 300)
    df = (
        spark.read.format("kafkatwist")
        .option("kafka.bootstrap.servers", f"127.0.0.1:{kafka.ports['SSL']}")
        .option("kafka.security.protocol", "SSL")
        .option("kafka.ssl.truststore.location", pki.caFile)
        .option("kafka.ssl.truststore.type", "PEM")
        .option("subscribe", topic)
        .load()
    )
    assert positions(df) == [(p, o) for p in (0, 1) for o in range(300)]


def test_mutual_tls(spark, brokerFactory, pki):
    """
    A broker that requires client certificates, with every PEM given inline
    as Kafka's kafka.ssl.*.certificates / .key options allow.
    """
    broker = brokerFactory(
        {"ssl.keystore.location": pki.serverKeystore, "ssl.truststore.location": pki.caFile,
         "ssl.client.auth": "required"},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    )
    broker.start()
    from kafkatwist.client import KafkaWireClient

    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({"secure": 1})
        produce(client, "secure", 0, 50)

    def read(path):
        with open(path) as f:
            return f.read()

    df = (
        spark.read.format("kafkatwist")
        .option("kafka.bootstrap.servers", f"127.0.0.1:{broker.ports['SSL']}")
        .option("kafka.security.protocol", "SSL")
        .option("kafka.ssl.truststore.type", "PEM")
        .option("kafka.ssl.truststore.certificates", read(pki.caFile))
        .option("kafka.ssl.keystore.type", "PEM")
        .option("kafka.ssl.keystore.certificate.chain", read(pki.clientCert))
        .option("kafka.ssl.keystore.key", read(pki.clientKey))
        .option("subscribe", "secure")
        .load()
    )
    assert df.count() == 50


# -- options, through Spark ------------------------------------------------------------


def test_bad_options_fail_at_load(spark, kafka):
    """
    A broken option stops the query where it is defined, and the message
    Spark shows names the option.
    """
    with pytest.raises(Exception, match="kafka.bootstrap.servers' must be set"):
        spark.read.format("kafkatwist").option("subscribe", "t").load()
    with pytest.raises(Exception, match="only one of 'subscribe', 'subscribePattern' and 'assign'"):
        reader(spark, kafka, subscribe="t", assign='{"t":[0]}').load()
    with pytest.raises(Exception, match="option 'startingOffsets' is not valid JSON"):
        reader(spark, kafka, subscribe="t", startingOffsets='{"t":').load()
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("kafkatwist").schema("value string").option(
            "kafka.bootstrap.servers", kafka.bootstrap
        ).option("subscribe", "t").load().collect()


def test_unknown_topic_fails_as_sparks_kafka_source_does(spark, kafka):
    # Not 0 rows: Spark's Kafka source fails with UnknownTopicOrPartition.
    with pytest.raises(Exception) as e:
        reader(spark, kafka, subscribe="no-such-topic").load().count()
    message = str(e.value)
    assert "UnknownTopicOrPartitionException: This server does not host this topic-partition: " \
        "'no-such-topic'" in message
    assert "Traceback" not in message


def test_an_option_error_is_one_line(spark, kafka):
    with pytest.raises(Exception) as e:
        reader(spark, kafka, subscribe="t", startingOffset="earliest").load()
    message = str(e.value)
    assert "did you mean 'startingOffsets'?" in message
    assert "Traceback" not in message and len(message.strip().splitlines()) <= 2, message


def test_stream_options_fail(spark, kafka, tmp_path):
    """
    A stream's options fail at load() where they are wrong for any query,
    and when the query starts where they are wrong for a stream.
    """
    with pytest.raises(Exception, match="kafka.bootstrap.servers' must be set"):
        spark.readStream.format("kafkatwist").option("subscribe", "t").load()
    with pytest.raises(Exception, match="option 'maxOffsetsPerTrigger' must be a positive"):
        streamReader(spark, kafka, subscribe="t", maxOffsetsPerTrigger="-1").load()
    query = (
        streamReader(spark, kafka, subscribe="t", endingOffsets="latest").load()
        .writeStream.format("memory").queryName("refused")
        .option("checkpointLocation", str(tmp_path / "cp")).start()
    )
    with pytest.raises(Exception, match="option 'endingOffsets' is not valid in streaming"):
        query.awaitTermination(60)


def test_bad_sink_fails_at_save(spark, kafka):
    df = spark.createDataFrame([("a",)], "payload string")
    with pytest.raises(Exception, match="has no 'value' column"):
        df.write.format("kafkatwist").mode("append").option(
            "kafka.bootstrap.servers", kafka.bootstrap
        ).option("topic", "t").save()
    with pytest.raises(Exception, match="use mode\\('append'\\)"):
        df.selectExpr("payload as value").write.format("kafkatwist").mode("overwrite").option(
            "kafka.bootstrap.servers", kafka.bootstrap
        ).option("topic", "t").save()
