"""
Driver-side arithmetic without a broker: offset JSON, micro-batch sizing,
splitting ranges into tasks, the sink's partitioner and column checks.
"""

import math
import random

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kafkatwist_spark.offsets import (  # noqa: E402
    OffsetRange,
    fromJson,
    rateLimit,
    splitRanges,
    toJson,
)
from kafkatwist_spark.options import OptionError, parseSinkOptions  # noqa: E402
from kafkatwist_spark.writer import checkSinkSchema, keyPartition, murmur2  # noqa: E402


def test_offset_json_is_canonical():
    """
    Spark compares offsets as JSON text: one order whatever the input's.
    """
    offsets = {("b", 10): 5, ("a", 2): 1, ("b", 9): 4, ("a", 10): 3}
    assert list(toJson(offsets)) == ["a", "b"]
    assert list(toJson(offsets)["a"]) == ["2", "10"]
    assert list(toJson(offsets)["b"]) == ["9", "10"]
    assert fromJson(toJson(offsets)) == offsets
    assert fromJson({}) == {}
    with pytest.raises(ValueError):
        fromJson({"a": 5})


def test_rate_limit_exact():
    """
    Each trigger takes exactly min(limit, backlog) offsets, so a backlog of
    B takes ceil(B / limit) triggers however it is spread.
    """
    rng = random.Random(7)
    for _ in range(200):
        parts = rng.randint(1, 6)
        start = {("t", p): rng.randint(0, 50) for p in range(parts)}
        latest = {tp: o + rng.choice([0, 1, 3, 17, 250]) for tp, o in start.items()}
        limit = rng.randint(1, 100)
        backlog = sum(latest[tp] - start[tp] for tp in start)
        triggers = 0
        position = dict(start)
        while position != latest:
            end = rateLimit(position, latest, limit)
            taken = sum(end[tp] - position[tp] for tp in end)
            assert taken == min(limit, sum(latest[tp] - position[tp] for tp in end))
            assert all(position[tp] <= end[tp] <= latest[tp] for tp in end)
            position = end
            triggers += 1
        assert triggers == math.ceil(backlog / limit)


def test_rate_limit_proportional():
    end = rateLimit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 900, ("t", 1): 100}, 100)
    assert end == {("t", 0): 90, ("t", 1): 10}


def test_rate_limit_new_partition():
    """
    A partition missing from the start has no backlog of its own here (the
    caller supplies its earliest offset as start).
    """
    end = rateLimit({("t", 0): 0}, {("t", 0): 10, ("t", 1): 4}, 100)
    assert end == {("t", 0): 10, ("t", 1): 4}


def test_split_nothing():
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5)]
    assert splitRanges(ranges, None, None) == [OffsetRange("t", 0, 0, 10)]


def test_split_min_partitions():
    """
    Like Spark's KafkaOffsetRangeCalculator: bigger ranges get more tasks,
    and together the pieces cover every offset once.
    """
    ranges = [OffsetRange("t", 0, 0, 9000), OffsetRange("t", 1, 100, 1100)]
    pieces = splitRanges(ranges, 10, None)
    assert len([p for p in pieces if p.partition == 0]) == 9
    assert len([p for p in pieces if p.partition == 1]) == 1
    for original in ranges:
        mine = sorted(p for p in pieces if p.partition == original.partition)
        assert mine[0].fromOffset == original.fromOffset
        assert mine[-1].untilOffset == original.untilOffset
        assert all(a.untilOffset == b.fromOffset for a, b in zip(mine, mine[1:]))
    # already enough partitions: left alone
    assert splitRanges(ranges, 2, None) == ranges


def test_split_max_records():
    pieces = splitRanges([OffsetRange("t", 0, 0, 1001)], None, 250)
    assert [p.size for p in pieces] == [200, 200, 200, 200, 201]
    tiny = splitRanges([OffsetRange("t", 0, 0, 3)], 10, None)
    assert [p.size for p in tiny] == [1, 1, 1]


def test_murmur2_matches_java_client():
    """
    Keyed rows land where Kafka's Java producer would put them; Kafka's own
    test vectors (UtilsTest), and kafka-python's port on random keys.
    """
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in vectors.items():
        assert murmur2(data) == expected
    kafkaPython = pytest.importorskip("kafka.partitioner.default")
    rng = random.Random(3)
    for _ in range(500):
        key = rng.randbytes(rng.randint(0, 40))
        assert murmur2(key) & 0x7FFFFFFF == kafkaPython.murmur2(key) & 0x7FFFFFFF
        assert keyPartition(key, 7) == (kafkaPython.murmur2(key) & 0x7FFFFFFF) % 7


HEADERS = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)
WITH_TOPIC = parseSinkOptions({"kafka.bootstrap.servers": "h:1", "topic": "t"})
WITHOUT_TOPIC = parseSinkOptions({"kafka.bootstrap.servers": "h:1"})


def schema(**columns):
    return StructType([StructField(name, dataType) for name, dataType in columns.items()])


def test_sink_columns():
    columns = checkSinkSchema(
        schema(Value=StringType(), KEY=BinaryType(), topic=StringType(), partition=IntegerType(),
               headers=HEADERS, extra=LongType()),
        WITHOUT_TOPIC,
    )
    assert (columns.value, columns.key, columns.topic, columns.partition, columns.headers) == (
        "Value", "KEY", "topic", "partition", "headers"
    )


@pytest.mark.parametrize(
    "columns,config,option,words",
    [
        (schema(key=StringType()), WITH_TOPIC, "value", "has no 'value' column"),
        (schema(value=LongType()), WITH_TOPIC, "value", "must be a string or binary"),
        (schema(value=StringType(), key=IntegerType()), WITH_TOPIC, "key",
         "must be a string or binary"),
        (schema(value=StringType(), topic=BinaryType()), WITH_TOPIC, "topic", "must be a string"),
        (schema(value=StringType(), partition=LongType()), WITH_TOPIC, "partition",
         "must be an int"),
        (schema(value=StringType(), headers=StringType()), WITH_TOPIC, "headers",
         "array<struct<key:string,value:binary>>"),
        (schema(value=StringType()), WITHOUT_TOPIC, "topic", "set the 'topic' option"),
    ],
    ids=["no-value", "value-type", "key-type", "topic-type", "partition-type", "headers-type",
         "no-topic"],
)
def test_sink_columns_refused(columns, config, option, words):
    with pytest.raises(OptionError) as caught:
        checkSinkSchema(columns, config)
    assert caught.value.option == option
    assert f"'{option}'" in str(caught.value) and words in str(caught.value)
