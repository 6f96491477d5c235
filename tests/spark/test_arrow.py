"""
The Arrow decoder's vectorized paths (runs of records of one length,
guessed and checked; records of varied lengths, walked) against the row
decoder of L{kafkatwist.protocol.records}, on compressed, transactional,
compacted and header-carrying fetches.
"""

import random
import struct

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
pytest.importorskip("pyspark")

from crc32c import crc32c  # noqa: E402

from kafkatwist.protocol.records import (  # noqa: E402
    CorruptRecordError,
    Record,
    buildBatch,
    controlRecord,
    decodeBatches,
)
from kafkatwist_spark.columnar import ArrowRecordDecoder, kafkaArrowSchema  # noqa: E402

from .helpers import decodeBothWays  # noqa: E402

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000


def rowPath(raw, fromOffset, untilOffset, aborted=None):
    """
    The rows a consumer reads, record by record with the row decoder: for a
    read_committed fetch (C{aborted} given), a producer's transactional
    records are left out from the first offset of an aborted transaction
    of it up to its ABORT marker.
    """
    pending = sorted(aborted or (), key=lambda a: a[1])
    abortedProducers = set()
    rows = []
    for batch in decodeBatches(raw):
        while pending and pending[0][1] <= batch.baseOffset:
            abortedProducers.add(pending.pop(0)[0])
        if batch.isControl:
            # the marker's key: version, then type (0 abort, 1 commit)
            if aborted is not None and struct.unpack(">hh", batch.records[0].key)[1] == 0:
                abortedProducers.discard(batch.producerId)
            continue
        if aborted is not None and batch.isTransactional and batch.producerId in abortedProducers:
            continue
        for r in batch.records:
            if fromOffset <= r.offset < untilOffset:
                rows.append((r.key, r.value, r.offset, r.timestamp, batch.timestampType,
                             [(k, v) for k, v in r.headers]))
    return rows


def arrowPath(raw, fromOffset, untilOffset, aborted=None, headers=True):
    decoder = ArrowRecordDecoder("t", 1, kafkaArrowSchema(headers))
    result = decodeBothWays(decoder, raw, fromOffset, untilOffset, aborted)
    if result.batch is None:
        return [], result
    b = result.batch
    assert b.schema == kafkaArrowSchema(headers)
    b.validate(full=True)
    for name in ("key", "value"):
        # no all-valid bitmap: the layout of a ready-made column
        column = b.column(name)
        assert (column.buffers()[0] is None) == (column.null_count == 0), name
    rows = list(zip(
        b.column("key").to_pylist(),
        b.column("value").to_pylist(),
        b.column("offset").to_pylist(),
        [t.value // 1000 for t in b.column("timestamp")],
        b.column("timestampType").to_pylist(),
        [[(h["key"], h["value"]) for h in hs] for hs in b.column("headers").to_pylist()]
        if headers else [[]] * b.num_rows,
    ))
    assert result.lastOffset == rows[-1][2]
    return rows, result


def uniform(count, start=0, size=100, key=None, headers=()):
    """
    Records of one value size: one length, but for the offset delta's
    varint, which grows a byte at delta 64 (and 8192).
    """
    return [Record(offset=start + i, timestamp=T0 + i % 3, key=key,
                   value=bytes([i % 251]) * size, headers=list(headers))
            for i in range(count)]


def varied(rng, count, start=0):
    records = []
    for i in range(count):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.choice([0, 3, 30]))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 300))
        headers = []
        if rng.random() < 0.3:
            headers = [(f"h{j}", None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 9)))
                       for j in range(rng.randint(1, 3))]
        records.append(Record(offset=start + i, timestamp=T0 + rng.randint(-5000, 5000), key=key,
                              value=value, headers=headers))
    return records


@pytest.mark.parametrize(
    "codec,count",
    [(codec, count) for codec in CODECS for count in (1, 15, 16, 64, 65, 200)]
    + [("none", 9000), ("zstd", 9000)],
)
def test_runs_of_one_length(codec, count):
    """
    Batches of records of one value size (the guessed runs, across the
    offset delta's varint growing at 64 and 8192) in every codec.
    """
    raw = buildBatch(uniform(count), codec) + buildBatch(uniform(count, count, 7), codec,
                                                         baseOffset=count)
    rows, result = arrowPath(raw, 0, 2 * count)
    assert rows == rowPath(raw, 0, 2 * count)
    assert result.nextOffset == 2 * count


@pytest.mark.parametrize("codec", CODECS)
def test_runs_then_varied_lengths(codec):
    """
    Runs of one length broken by records of other lengths, short runs, and
    batches of varied lengths: what the guesses miss is walked.
    """
    rng = random.Random(codec)
    records = (uniform(100) + varied(rng, 5, 100) + uniform(40, 105, 30)
               + [Record(offset=145 + i, timestamp=T0, value=b"x" * (i % 2)) for i in range(60)]
               + uniform(300, 205, 1))
    for i, r in enumerate(records):
        assert r.offset == i
    raw = b"".join(
        buildBatch(records[i : i + 170], codec, baseOffset=i) for i in range(0, len(records), 170)
    ) + buildBatch(varied(rng, 500, 505), codec, baseOffset=505)
    rows, _ = arrowPath(raw, 0, 10_000)
    assert rows == rowPath(raw, 0, 10_000)
    assert len(rows) == 1005


@pytest.mark.parametrize("fromOffset,untilOffset", [(0, 1), (63, 65), (100, 4000), (3999, 4000)])
def test_range_cuts_runs(fromOffset, untilOffset):
    raw = b"".join(buildBatch(uniform(1000, i), "none", baseOffset=i) for i in range(0, 4000, 1000))
    rows, result = arrowPath(raw, fromOffset, untilOffset)
    assert rows == rowPath(raw, fromOffset, untilOffset)
    assert [r[2] for r in rows] == list(range(fromOffset, untilOffset))


@pytest.mark.parametrize("codec", CODECS)
def test_compacted_transactional_headers(codec):
    """
    One fetch of everything at once: compacted batches (offset gaps), keys,
    headers on every record, transactions of two producers, one aborted,
    control batches, log-append time; read_committed and read_uncommitted.
    """

    def txn(offset, pid, records):
        return buildBatch(records, codec, baseOffset=offset, producerId=pid, producerEpoch=0,
                          baseSequence=offset, isTransactional=True)

    def marker(offset, pid, commit):
        return buildBatch([controlRecord(commit)], baseOffset=offset, producerId=pid,
                          producerEpoch=0, isControl=True, isTransactional=True)

    compacted = [Record(offset=o, timestamp=T0 + o, key=b"k%04d" % o, value=b"v" * 50,
                        headers=[("trace", b"%d" % o), ("empty", None)])
                 for o in range(0, 400, 3)]
    raw = (
        buildBatch(compacted, codec, baseOffset=0, useRecordOffsets=True)
        + txn(400, 7, uniform(100, 400, 20, key=b"aborted", headers=[("h", b"1")]))
        + txn(500, 8, uniform(100, 500, 20, key=b"kept"))
        + buildBatch(uniform(50, 600, 20), codec, baseOffset=600, timestampType=1,
                     maxTimestamp=T0 + 99)
        + marker(650, 7, False)
        + marker(651, 8, True)
        + txn(652, 7, uniform(30, 652, 20, key=b"later"))
        + marker(682, 7, True)
    )
    aborted = [(7, 400)]
    committed, result = arrowPath(raw, 0, 1000, aborted)
    assert committed == rowPath(raw, 0, 1000, aborted)
    assert not any(r[0] == b"aborted" for r in committed)
    assert sum(r[0] == b"kept" for r in committed) == 100
    assert sum(r[0] == b"later" for r in committed) == 30
    assert result.nextOffset == 683
    uncommitted, _ = arrowPath(raw, 0, 1000)
    assert uncommitted == rowPath(raw, 0, 1000)
    assert len(uncommitted) == len(committed) + 100
    # from inside the compacted batch, headers left out
    rows, _ = arrowPath(raw, 200, 520, aborted, headers=False)
    assert rows == [row[:5] + ([],) for row in rowPath(raw, 200, 520, aborted)]


def _resign(raw: bytearray) -> bytes:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return bytes(raw)


@pytest.mark.parametrize("record", [1, 40, 99])
@pytest.mark.parametrize("delta", [-2, 2, 4])
def test_corrupt_length_inside_a_run(record, delta):
    """
    A record in a run of one length whose length prefix is off (CRC valid):
    refused, wherever it is in the run.
    """
    records = uniform(100, size=10)
    raw = bytearray(buildBatch(records))
    # every record is 1 + (2 or 3) + 1 + 1 + 10 + 1 bytes, prefix included
    pos = 61
    for i in range(record):
        pos += 1 + (raw[pos] >> 1)
    raw[pos] += delta
    with pytest.raises(CorruptRecordError):
        arrowPath(_resign(raw), 0, 100)


@pytest.mark.parametrize("count", [3, 100])
@pytest.mark.parametrize("which", ["first", "second", "last"])
def test_negative_record_length_frames_like_a_positive_one(count, which):
    """
    A record length whose zigzag sign bit is set frames the records exactly
    as the positive length one less would (the walk reads lengths without
    the sign): refused all the same, in a batch walked (3 records) or
    guessed in runs (100), wherever the record is.
    """
    raw = bytearray(buildBatch(uniform(count, size=10)))
    record = {"first": 0, "second": 1, "last": count - 1}[which]
    pos = 61
    for i in range(record):
        pos += 1 + (raw[pos] >> 1)
    assert not raw[pos] & 1
    raw[pos] |= 1
    with pytest.raises(CorruptRecordError):
        arrowPath(_resign(raw), 0, count)


def _fields(key, value, timestampDelta):
    return [Record(offset=i, timestamp=T0 + timestampDelta(i), key=key(i), value=value(i))
            for i in range(40)]


@pytest.mark.parametrize(
    "records",
    [
        # the timestamp delta's varint grows by a byte as the value shrinks
        # by one: one length, two layouts
        _fields(lambda i: None, lambda i: b"v" * (30 - (i >= 20)), lambda i: 100 * (i >= 20)),
        # key and value lengths trade a byte
        _fields(lambda i: b"k" * (3 + i % 2), lambda i: b"v" * (10 - i % 2), lambda i: 0),
        # a null key where the others have an empty one (both one byte)
        _fields(lambda i: None if i == 30 else b"", lambda i: b"v" * 9, lambda i: 0),
        # a negative timestamp delta among positive ones of the same width
        _fields(lambda i: None, lambda i: b"v" * 5, lambda i: -1 if i == 17 else 1),
    ],
    ids=["timestamp-width", "key-value-trade", "null-key", "negative-delta"],
)
def test_runs_of_one_length_other_layouts(records):
    """
    Records of one length whose fields are laid out differently (varints
    of other widths, lengths traded between key and value) are decoded as
    the row decoder decodes them.
    """
    for codec in ("none", "zstd"):
        raw = buildBatch(records, codec)
        rows, _ = arrowPath(raw, 0, 100)
        assert rows == rowPath(raw, 0, 100)


@pytest.mark.parametrize("field", [1, 2, 3, 4, 5, 6, 10, 17])
@pytest.mark.parametrize("bit", [0x80, 0x01, 0x02])
def test_corrupt_field_inside_a_run_of_one_layout(field, bit):
    """
    A record of a run whose field bytes are changed (the length prefix
    untouched, the CRC valid): refused as the row decoder refuses it, or
    decoded as it decodes it.
    """
    records = uniform(100, size=10)
    raw = bytearray(buildBatch(records))
    # record 70: 64 records of 17 bytes (prefix, attributes, timestamp
    # delta, offset delta, key length, value length, value, header count),
    # then 18 (the offset delta two bytes)
    raw[61 + 64 * 17 + 6 * 18 + field] ^= bit
    raw = _resign(raw)
    try:
        rows, _ = arrowPath(raw, 0, 100)
    except CorruptRecordError:
        with pytest.raises(CorruptRecordError):
            rowPath(raw, 0, 100)
    else:
        assert rows == rowPath(raw, 0, 100)
