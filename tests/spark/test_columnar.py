"""
The Arrow record decoder against the reference decoder of
L{kafkatwist.protocol.records}, on batches of every shape.
"""

import random
import struct

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")

from crc32c import crc32c  # noqa: E402

from kafkatwist.protocol.records import (  # noqa: E402
    CorruptRecordError,
    CrcMismatchError,
    Record,
    buildBatch,
    controlRecord,
    decodeBatches,
)
from kafkatwist_spark.columnar import ArrowRecordDecoder, kafkaArrowSchema  # noqa: E402

from .helpers import decodeBothWays  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def randomRecords(rng, count, start=0):
    records = []
    timestamp = 1_700_000_000_000
    for i in range(count):
        # wander backwards too: timestamp deltas are signed
        timestamp += rng.randint(-5_000, 100_000)
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 1, 8, 200]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 5, 100, 20_000]))
        headers = []
        if rng.random() < 0.3:
            headers = [
                (f"h{j}-é", None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 40)))
                for j in range(rng.randint(1, 3))
            ]
        records.append(Record(offset=start + i, timestamp=timestamp, key=key, value=value,
                              headers=headers))
    return records


def reference(raw, fromOffset, untilOffset):
    """
    What the decoder must return: (key, value, offset, ms, type, headers).
    """
    rows = []
    for batch in decodeBatches(raw):
        if batch.isControl:
            continue
        for r in batch.records:
            if fromOffset <= r.offset < untilOffset:
                rows.append((r.key, r.value, r.offset, r.timestamp, batch.timestampType,
                             [(k, v) for k, v in r.headers]))
    return rows


def decoded(raw, fromOffset, untilOffset, headers=True, topic="t", partition=3, aborted=None):
    decoder = ArrowRecordDecoder(topic, partition, kafkaArrowSchema(headers))
    result = decodeBothWays(decoder, raw, fromOffset, untilOffset, aborted)
    if result.batch is None:
        return [], result
    b = result.batch
    assert b.schema == kafkaArrowSchema(headers)
    assert set(b.column("topic").to_pylist()) == {topic}
    assert set(b.column("partition").to_pylist()) == {partition}
    micros = [t.value for t in b.column("timestamp")]
    rows = list(zip(
        b.column("key").to_pylist(),
        b.column("value").to_pylist(),
        b.column("offset").to_pylist(),
        [m // 1000 for m in micros],
        b.column("timestampType").to_pylist(),
        [[(h["key"], h["value"]) for h in hs] for hs in b.column("headers").to_pylist()]
        if headers else [[]] * b.num_rows,
    ))
    if not headers:
        rows = [row[:5] + ([],) for row in rows]
    return rows, result


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec(codec):
    rng = random.Random(codec)
    records = randomRecords(rng, 600)
    raw = b"".join(
        buildBatch(records[i : i + 150], codec, baseOffset=i) for i in range(0, 600, 150)
    )
    rows, result = decoded(raw, 0, 600)
    assert rows == reference(raw, 0, 600)
    assert result.nextOffset == 600 and result.lastOffset == 599


@pytest.mark.parametrize("fromOffset,untilOffset", [(0, 10), (7, 23), (55, 200), (99, 100)])
def test_range_cuts_batches(fromOffset, untilOffset):
    """
    Records before the start of the range in the first batch, and after its
    end, are left out; nextOffset is past the last batch looked at.
    """
    rng = random.Random(fromOffset)
    records = randomRecords(rng, 100)
    raw = b"".join(buildBatch(records[i : i + 20], "lz4", baseOffset=i) for i in range(0, 100, 20))
    rows, result = decoded(raw, fromOffset, untilOffset)
    assert rows == reference(raw, fromOffset, untilOffset)
    assert [r[2] for r in rows] == list(range(fromOffset, min(untilOffset, 100)))
    assert result.nextOffset >= min(untilOffset, 100)


def test_without_headers():
    rng = random.Random(5)
    records = randomRecords(rng, 200)
    raw = buildBatch(records, "zstd")
    rows, _ = decoded(raw, 0, 200, headers=False)
    assert rows == [row[:5] + ([],) for row in reference(raw, 0, 200)]
    assert "headers" not in ArrowRecordDecoder("t", 0, kafkaArrowSchema(False)).schema.names


def test_log_append_time():
    records = [Record(timestamp=1000 + i, key=b"k", value=b"v") for i in range(5)]
    raw = buildBatch(records, timestampType=1, maxTimestamp=1_700_000_000_123)
    rows, _ = decoded(raw, 0, 5)
    assert {(r[3], r[4]) for r in rows} == {(1_700_000_000_123, 1)}


def test_gaps_and_control_batches():
    """
    Compacted batches (offset gaps) and transaction markers: markers are
    skipped but still move nextOffset on.
    """
    compacted = [Record(offset=o, timestamp=5, key=b"%d" % o, value=b"x") for o in (10, 13, 17)]
    raw = (
        buildBatch(compacted, baseOffset=10, useRecordOffsets=True)
        + buildBatch([controlRecord(True)], baseOffset=18, isControl=True, isTransactional=True)
    )
    rows, result = decoded(raw, 0, 100)
    assert [r[2] for r in rows] == [10, 13, 17]
    assert result.nextOffset == 19
    onlyMarker = buildBatch([controlRecord(True)], baseOffset=18, isControl=True,
                            isTransactional=True)
    rows, result = decoded(onlyMarker, 18, 100)
    assert rows == [] and result.batch is None and result.nextOffset == 19


def test_read_committed_leaves_out_aborted_transactions():
    """
    A read_committed fetch's aborted transactions: their batches go, up to
    their producer's ABORT marker; the same producer's later transaction
    and other producers' batches stay.
    """

    def data(offset, pid, value):
        return buildBatch([Record(timestamp=1, value=value)], baseOffset=offset, producerId=pid,
                          producerEpoch=0, baseSequence=offset, isTransactional=True)

    def marker(offset, pid, commit):
        return buildBatch([controlRecord(commit)], baseOffset=offset, producerId=pid,
                          producerEpoch=0, isControl=True, isTransactional=True)

    raw = (
        data(0, 1, b"aborted-1")
        + data(1, 2, b"committed-2")
        + buildBatch([Record(timestamp=1, value=b"plain")], baseOffset=2)
        + data(3, 1, b"aborted-2")
        + marker(4, 1, False)
        + marker(5, 2, True)
        + data(6, 1, b"later")
        + marker(7, 1, True)
    )
    rows, result = decoded(raw, 0, 100, aborted=[(1, 0)])
    assert [r[1] for r in rows] == [b"committed-2", b"plain", b"later"]
    assert result.nextOffset == 8
    # Without the list (read_uncommitted) everything but markers is read.
    rows, _ = decoded(raw, 0, 100)
    assert len(rows) == 5


def test_partial_trailing_batch():
    """
    A fetch cut at its size limit ends in part of a batch: ignored.
    """
    first = buildBatch([Record(timestamp=1, value=b"a")], baseOffset=0)
    second = buildBatch([Record(timestamp=1, value=b"b" * 100)], baseOffset=1)
    rows, result = decoded(first + second[:50], 0, 10)
    assert [r[1] for r in rows] == [b"a"] and result.nextOffset == 1
    rows, result = decoded(second[:50], 1, 10)
    assert rows == [] and result.nextOffset == 1


def test_big_varints():
    """
    Lengths and deltas that take three or more varint bytes take the
    decoder's slow paths.
    """
    records = [
        Record(timestamp=0, key=b"k" * 70_000, value=b"v" * 300_000),
        Record(timestamp=2**40, key=None, value=b""),
        Record(timestamp=-(2**40), key=b"", value=None),
    ]
    raw = buildBatch(records)
    rows, _ = decoded(raw, 0, 3)
    assert rows == reference(raw, 0, 3)


def test_crc_mismatch():
    raw = bytearray(buildBatch([Record(timestamp=1, value=b"hello")]))
    raw[-1] ^= 0xFF
    with pytest.raises(CrcMismatchError):
        decoded(bytes(raw), 0, 1)


def _resign(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize(
    "mutate",
    [
        # the value's length varint says 100 bytes; the record holds 5
        lambda b: b.__setitem__(len(b) - 7, 200),
        # the record length says one byte more than there is
        lambda b: b.__setitem__(61, b[61] + 2),
        # record count one higher than the records
        lambda b: struct.pack_into(">i", b, 57, 2),
    ],
    ids=["value-overruns", "length-overruns", "count"],
)
def test_corrupt_records_raise(mutate):
    """
    Malformed records (with a valid CRC) raise instead of producing a
    column over the wrong bytes.
    """
    raw = bytearray(buildBatch([Record(timestamp=1, key=b"k", value=b"hello")]))
    mutate(raw)
    with pytest.raises(CorruptRecordError):
        decoded(_resign(raw), 0, 1)


def test_schema_is_py_sparks():
    """
    The Arrow schema is exactly what PySpark checks data source batches
    against.
    """
    from pyspark.sql.pandas.types import to_arrow_schema

    from kafkatwist_spark import kafkaSchema

    for headers in (False, True):
        assert to_arrow_schema(kafkaSchema(headers), timezone="UTC") == kafkaArrowSchema(headers)


def test_one_decoder_across_fetches_of_other_sizes():
    """
    A task's decoder reuses its topic, partition and CreateTime columns for
    a fetch of as many records as the last: each batch still has exactly
    its own rows, whatever sizes come in turn; a log-append-time batch
    among them still says so.
    """
    decoder = ArrowRecordDecoder("topic-x", 7, kafkaArrowSchema(False))
    small = buildBatch([Record(timestamp=5, value=b"s%d" % i) for i in range(20)])
    large = buildBatch([Record(timestamp=6, value=b"l%d" % i) for i in range(50)])
    appended = buildBatch([Record(timestamp=7, value=b"a%d" % i) for i in range(20)],
                          timestampType=1, maxTimestamp=9_999)
    for raw, n, kind in [(small, 20, 0), (large, 50, 0), (small, 20, 0), (appended, 20, 1),
                         (small, 20, 0)]:
        batch = decodeBothWays(decoder, raw, 0, 1000).batch
        batch.validate(full=True)
        assert batch.num_rows == n
        assert batch.column("topic").to_pylist() == ["topic-x"] * n
        assert batch.column("partition").to_pylist() == [7] * n
        assert batch.column("timestampType").to_pylist() == [kind] * n
