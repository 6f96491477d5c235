"""
The Spark connector over a compacted topic: offsets the cleaner removed are
gaps, not data loss, in batch reads and in streams (with failOnDataLoss on,
the default), including ranges that start or end inside a gap.
"""

import re
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from kafkatwist.client import KafkaWireClient  # noqa: E402
from kafkatwist.protocol.records import Record  # noqa: E402
from kafkatwist.testing import Broker  # noqa: E402

from .helpers import NO_JAVA, javaMissing  # noqa: E402

if javaMissing():
    pytest.skip(NO_JAVA, allow_module_level=True)

pytestmark = pytest.mark.spark

ROUNDS, KEYS = 30, 20


@pytest.fixture(scope="module")
def compactedBroker(tmp_path_factory):
    broker = Broker(str(tmp_path_factory.mktemp("compacted")), {"log.cleaner.backoff.ms": "50"})
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def compacted(compactedBroker):
    """
    A broker and a topic of ROUNDS x KEYS updates, cleaned once: the
    module's tests only read it.

    @return: (broker, topic, {offset: (key, value)} of what is left).
    """
    broker = compactedBroker
    topic = "table"
    configs = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({topic: (1, configs)})
        for r in range(ROUNDS):
            client.produce(
                topic, 0, [Record(key=b"k%d" % k, value=b"v%d-%d" % (r, k)) for k in range(KEYS)]
            )
        # Cleaned, and no more to clean: the cleaner has gone quiet.
        deadline = time.monotonic() + 60
        passes, quietSince = 0, time.monotonic()
        while not passes or time.monotonic() - quietSince < 1.5:
            assert time.monotonic() < deadline, "not cleaned"
            found = len(re.findall(rf"cleaned {topic}-0 up to", broker.output()))
            if found != passes:
                passes, quietSince = found, time.monotonic()
            time.sleep(0.05)
        left = {}
        offset = 0
        while offset < ROUNDS * KEYS:
            result = client.fetch(topic, 0, offset)
            for record in result.records:
                left[record.offset] = (record.key, record.value)
            offset = result.nextOffset
    assert len(left) < ROUNDS * KEYS
    return broker, topic, left


def reader(spark, broker, **options):
    r = spark.read.format("kafkatwist").option("kafka.bootstrap.servers", broker.bootstrap)
    for name, value in options.items():
        r = r.option(name, value)
    return r


def test_batch_read_of_compacted_topic(spark, compacted):
    broker, topic, left = compacted
    rows = reader(spark, broker, subscribe=topic).load().select("offset", "key", "value").collect()
    assert {r.offset: (bytes(r.key), bytes(r.value)) for r in rows} == left
    # Ranges split on offsets, so some start and end inside gaps.
    rows = (
        reader(spark, broker, subscribe=topic, minPartitions="37", maxRecordsPerPartition="7")
        .load().select("offset").collect()
    )
    assert sorted(r.offset for r in rows) == sorted(left)


def test_batch_range_ending_in_gap(spark, compacted):
    broker, topic, left = compacted
    gaps = [o for o in range(1, ROUNDS * KEYS) if o not in left and o - 1 not in left]
    end = gaps[len(gaps) // 2]
    rows = (
        reader(
            spark, broker, assign=f'{{"{topic}":[0]}}', startingOffsets="earliest",
            endingOffsets=f'{{"{topic}":{{"0":{end}}}}}',
        )
        .load().select("offset").collect()
    )
    assert sorted(r.offset for r in rows) == sorted(o for o in left if o < end)


def test_stream_over_compacted_topic(spark, compacted, tmp_path):
    broker, topic, left = compacted
    query = (
        spark.readStream.format("kafkatwist")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "90")
        .load()
        .select("offset")
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    written = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.offset for r in written.collect()) == sorted(left)
