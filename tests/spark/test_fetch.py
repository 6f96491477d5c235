"""
The connector's broker-facing pieces against a real broker, without Spark:
resolving offsets on the driver, and the fetch loop executors run.
"""

import pytest

pytest.importorskip("pyspark")
pa = pytest.importorskip("pyarrow")

from kafkatwist_spark.columnar import kafkaArrowSchema  # noqa: E402
from kafkatwist_spark.offsets import DataLossError, OffsetRange, OffsetReader  # noqa: E402
from kafkatwist_spark.options import OptionError, parseSourceOptions  # noqa: E402
from kafkatwist_spark.reader import readRange  # noqa: E402

from .helpers import BASE_TIMESTAMP, deleteRecords, produce, recordFor  # noqa: E402


def config(kafka, streaming=False, **options):
    return parseSourceOptions(
        {"kafka.bootstrap.servers": kafka.bootstrap, **options}, streaming=streaming
    )


def ranges(kafka, admin, **options):
    return OffsetReader(config(kafka, **options), admin).batchRanges()


def offsets(batches):
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_read_range_across_fetches(kafka, admin, newTopic):
    """
    A range bigger than one fetch comes back in several Arrow batches, each
    exactly the requested offsets, records decoded whatever their codec.
    """
    topic = newTopic(1)
    produce(admin, topic, 0, 5000, perBatch=700, compression="none")
    c = config(kafka, subscribe=topic, **{"kafka.max.partition.fetch.bytes": "65536"})
    batches = list(readRange(c, OffsetRange(topic, 0, 123, 4567), kafkaArrowSchema(False)))
    assert len(batches) > 1
    assert offsets(batches) == list(range(123, 4567))
    table = pa.Table.from_batches(batches)
    assert table.column("value").to_pylist()[0] == recordFor(0, 123).value


def test_resolve_offsets(kafka, admin, newTopic):
    topic = newTopic(2)
    for p in (0, 1):
        produce(admin, topic, p, 100)
    assert ranges(kafka, admin, subscribe=topic) == [
        OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 1, 0, 100)
    ]
    assert ranges(
        kafka, admin, subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":10,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":-1,"1":50}}}}',
    ) == [OffsetRange(topic, 0, 10, 100), OffsetRange(topic, 1, 0, 50)]
    # timestamps: record i has BASE_TIMESTAMP + 10 i
    assert ranges(
        kafka, admin, assign=f'{{"{topic}":[1]}}',
        startingTimestamp=str(BASE_TIMESTAMP + 205), endingTimestamp=str(BASE_TIMESTAMP + 500),
    ) == [OffsetRange(topic, 1, 21, 50)]
    assert ranges(
        kafka, admin, subscribe=topic,
        startingOffsetsByTimestamp=(
            f'{{"{topic}":{{"0":{BASE_TIMESTAMP},"1":{BASE_TIMESTAMP + 990}}}}}'
        ),
        endingTimestamp=str(BASE_TIMESTAMP + 10**9),  # after everything: the latest offset
    ) == [OffsetRange(topic, 0, 0, 100), OffsetRange(topic, 1, 99, 100)]


def test_subscribe_pattern(kafka, admin, newTopic):
    a = newTopic(1, prefix="pattern-a")
    b = newTopic(2, prefix="pattern-b")
    newTopic(1, prefix="other")
    found = OffsetReader(config(kafka, subscribePattern="pattern-.*"), admin).partitions()
    assert {(a, 0), (b, 0), (b, 1)} <= set(found)
    assert all(t.startswith("pattern-") for t, _ in found)


@pytest.mark.parametrize(
    "options,option,words",
    [
        ({"startingOffsets": '{"TOPIC":{"0":1,"1":1,"7":1}}'}, "startingOffsets",
         "names partitions outside the subscription"),
        ({"endingOffsets": '{"TOPIC":{"0":1}}'}, "endingOffsets",
         "must give every partition of the subscription"),
        ({"startingTimestamp": str(BASE_TIMESTAMP + 10**9)}, "startingTimestamp",
         "matches no record"),
        ({"startingOffsets": '{"TOPIC":{"0":20,"1":1}}',
          "endingOffsets": '{"TOPIC":{"0":10,"1":5}}'},
         "startingOffsets", "is after its ending offset"),
    ],
    ids=["outside-subscription", "partition-left-out", "timestamp-no-match", "start-after-end"],
)
def test_offsets_refused_against_cluster(kafka, admin, newTopic, options, option, words):
    """
    Option values that are well-formed but do not fit the cluster fail
    when the query is planned, naming the option.
    """
    topic = newTopic(2)
    for p in (0, 1):
        produce(admin, topic, p, 30)
    options = {k: v.replace("TOPIC", topic) for k, v in options.items()}
    with pytest.raises(OptionError) as caught:
        ranges(kafka, admin, subscribe=topic, **options)
    assert caught.value.option == option and words in str(caught.value)


def test_timestamp_strategy_latest(kafka, admin, newTopic):
    topic = newTopic(1)
    produce(admin, topic, 0, 30)
    assert ranges(
        kafka, admin, subscribe=topic, startingTimestamp=str(BASE_TIMESTAMP + 10**9),
        startingOffsetsByTimestampStrategy="latest",
    ) == [OffsetRange(topic, 0, 30, 30)]


def test_assign_missing_partition(kafka, admin, newTopic):
    topic = newTopic(1)
    with pytest.raises(OptionError) as caught:
        ranges(kafka, admin, assign=f'{{"{topic}":[0,3]}}')
    assert caught.value.option == "assign" and f"{topic}-3" in str(caught.value)


def test_data_loss_while_planning(kafka, admin, newTopic):
    """
    Offsets asked for that retention already removed: an error that says
    what happened and how to go on, or (failOnDataLoss=false) the earliest
    offset instead.
    """
    topic = newTopic(1)
    produce(admin, topic, 0, 100)
    deleteRecords(admin, topic, 0, 40)
    start = f'{{"{topic}":{{"0":10}}}}'
    with pytest.raises(DataLossError) as caught:
        ranges(kafka, admin, subscribe=topic, startingOffsets=start)
    assert "earliest available offset 40" in str(caught.value)
    assert "'failOnDataLoss' to 'false'" in str(caught.value)
    assert ranges(kafka, admin, subscribe=topic, startingOffsets=start, failOnDataLoss="false") == [
        OffsetRange(topic, 0, 40, 100)
    ]


def test_data_loss_while_fetching(kafka, admin, newTopic):
    """
    Records removed after the range was planned: the executor fails with
    the data loss message, or skips to what is left.
    """
    topic = newTopic(1)
    produce(admin, topic, 0, 100, perBatch=10)
    deleteRecords(admin, topic, 0, 60)
    planned = OffsetRange(topic, 0, 20, 100)
    with pytest.raises(DataLossError) as caught:
        list(readRange(config(kafka, subscribe=topic), planned, kafkaArrowSchema(False)))
    assert "Cannot fetch offset 20" in str(caught.value)
    tolerant = config(kafka, subscribe=topic, failOnDataLoss="false")
    assert offsets(readRange(tolerant, planned, kafkaArrowSchema(False))) == list(range(60, 100))


def test_read_range_one_fetch_at_a_time(kafka, admin, newTopic):
    """
    A task fetches on its own thread and connection, one Fetch at a time:
    no thread of its own to send the next Fetch ahead (whose responses,
    allocated in that thread's malloc arena and freed by this one, were
    faulted in anew each time: 60% more CPU).
    """
    import threading

    topic = newTopic(1)
    produce(admin, topic, 0, 3000, perBatch=500, compression="none")
    c = config(kafka, subscribe=topic, **{"kafka.max.partition.fetch.bytes": "65536"})
    before = set(threading.enumerate())
    batches = list(readRange(c, OffsetRange(topic, 0, 0, 3000), kafkaArrowSchema(False)))
    assert len(batches) > 1
    assert offsets(batches) == list(range(3000))
    assert set(threading.enumerate()) - before == set()


def test_read_range_decodes_the_received_frame(kafka, admin, newTopic, monkeypatch):
    """
    The records are decoded where the response was received, a view of
    it: not copied out of the frame first (fetchRaw(view=True)).
    """
    from kafkatwist_spark.columnar import ArrowRecordDecoder

    seen = []
    decode = ArrowRecordDecoder.decode

    def recording(self, raw, *args):
        seen.append(type(raw))
        return decode(self, raw, *args)

    monkeypatch.setattr(ArrowRecordDecoder, "decode", recording)
    topic = newTopic(1)
    produce(admin, topic, 0, 1000, perBatch=100, compression="none")
    c = config(kafka, subscribe=topic, **{"kafka.max.partition.fetch.bytes": "16384"})
    batches = list(readRange(c, OffsetRange(topic, 0, 5, 1000), kafkaArrowSchema(False)))
    assert offsets(batches) == list(range(5, 1000))
    assert len(seen) > 1 and set(seen) == {memoryview}
