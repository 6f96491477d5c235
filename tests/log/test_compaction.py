"""
Batch-level compaction (L{kafkatwist.log.compaction}), the dedupe map, the
throttler and segment grouping, without a log.
"""

from __future__ import annotations

import pytest

from kafkatwist.log.cleaning import SourceSegment, Throttler, groupSegmentsBySize
from kafkatwist.log.compaction import (
    DELETE_HORIZON_BIT,
    BatchFilter,
    emptyBatch,
    mapRecords,
    recordsOf,
)
from kafkatwist.log.offsetmap import BYTES_PER_ENTRY, OffsetMap, keyHash
from kafkatwist.protocol.batch import HEADER, HEADER_SIZE, batchError
from kafkatwist.protocol.records import CorruptRecordError, Record, buildBatch, decodeBatches

NOW = 1_700_000_000_000


def batch(pairs, baseOffset=0, timestamps=None, **kw) -> bytes:
    records = [
        Record(
            timestamp=(timestamps[i] if timestamps else NOW + i),
            key=None if k is None else k.encode(),
            value=None if v is None else v.encode(),
        )
        for i, (k, v) in enumerate(pairs)
    ]
    return buildBatch(records, baseOffset=baseOffset, **kw)


def run(data: bytes, offsetMap: dict, *, latest=100, firstDirty=0, now=NOW, retention=1000,
        producers=None, upper=1000):
    f = BatchFilter(offsetMap, latest, firstDirty, now, retention, producers or {}, upper, 1 << 26)
    return f.filter(memoryview(data), 0, HEADER.unpack_from(data, 0))


def decoded(data) -> list:
    (b,) = decodeBatches(bytes(data))
    return b


def test_offset_map():
    m = OffsetMap(BYTES_PER_ENTRY * 10, loadFactor=0.5)
    assert m.slots == 10 and m.capacity == 5
    m.put(b"a", 3)
    m.put(b"a", 7)
    assert m.get(b"a") == 7 and m.get(b"b") == -1 and len(m) == 1
    assert m.utilization == 0.1
    assert keyHash(b"a") != keyHash(b"b")


def test_map_records_stops_when_full():
    data = batch([("a", "1"), ("b", "2"), ("c", "3")], baseOffset=10)
    payload = memoryview(data)[HEADER_SIZE:]
    entries = {}
    assert mapRecords(payload, 3, 10, 2, 11, entries, 10) is False
    assert sorted(entries.values()) == [11, 12]  # offset 10 is before fromOffset
    entries = {}
    assert mapRecords(payload, 3, 10, 2, 0, entries, 2) is True
    assert len(entries) == 2


def test_whole_batch_kept_verbatim():
    data = batch([("a", "1"), ("b", "2")], baseOffset=5)
    entries = {keyHash(b"a"): 5, keyHash(b"b"): 6}
    kept = run(data, entries)
    assert bytes(kept.data) == data and kept.records == 2


def test_partial_batch_keeps_offsets_and_sequence():
    data = batch(
        [("a", "1"), ("b", "2"), ("a", "3")],
        baseOffset=10,
        timestamps=[NOW + 5, NOW + 9, NOW + 7],
        producerId=4,
        producerEpoch=1,
        baseSequence=20,
    )
    entries = {keyHash(b"a"): 12, keyHash(b"b"): 50}
    kept = run(data, entries)
    out = decoded(kept.data)
    assert [(r.offset, r.key, r.timestamp) for r in out.records] == [(12, b"a", NOW + 7)]
    assert out.baseOffset == 10 and out.lastOffset == 12
    assert (out.producerId, out.producerEpoch, out.baseSequence) == (4, 1, 20)
    # The max timestamp is the kept records'.
    assert out.maxTimestamp == NOW + 7 == kept.maxTimestamp
    header, error = batchError(memoryview(bytes(kept.data)), 0, len(kept.data), cleaned=True)
    assert error is None
    # Not a batch a producer could send, though.
    assert batchError(memoryview(bytes(kept.data)), 0, len(kept.data))[1] is not None


def test_tombstone_gets_delete_horizon():
    data = batch([("a", None), ("b", "x")], baseOffset=0, timestamps=[NOW - 100, NOW - 50])
    entries = {keyHash(b"a"): 0, keyHash(b"b"): 9}
    kept = run(data, entries, now=NOW, retention=1000)
    out = decoded(kept.data)
    assert out.attributes & DELETE_HORIZON_BIT
    assert out.baseTimestamp == NOW + 1000 == kept.horizon
    assert [(r.key, r.value, r.timestamp) for r in out.records] == [(b"a", None, NOW - 100)]
    # Cleaned again before the horizon: kept as it is; after: gone.
    again = run(bytes(kept.data), entries, now=NOW + 999)
    assert bytes(again.data) == bytes(kept.data)
    assert run(bytes(kept.data), entries, now=NOW + 1000).data is None


def test_tombstone_horizon_with_compression():
    data = batch([("a", None), ("a", None)], compression="zstd")
    kept = run(data, {keyHash(b"a"): 1})
    out = decoded(kept.data)
    assert out.compression == "zstd" and out.attributes & DELETE_HORIZON_BIT
    assert [(r.offset, r.value) for r in out.records] == [(1, None)]


def test_log_append_time_keeps_max_timestamp():
    data = bytearray(batch([("a", "1"), ("a", "2")], timestampType=1, maxTimestamp=NOW + 500))
    kept = run(bytes(data), {keyHash(b"a"): 1})
    assert decoded(kept.data).maxTimestamp == NOW + 500


def test_empty_batches():
    data = batch([("a", "1")], baseOffset=3, producerId=9, producerEpoch=0, baseSequence=4)
    entries = {keyHash(b"a"): 8}
    assert run(data, entries).data is None
    kept = run(data, entries, producers={9: 3})
    out = decoded(kept.data)
    assert out.recordCount == 0 and out.records == []
    assert (out.baseOffset, out.lastOffset, out.baseSequence) == (3, 3, 4)
    assert out.baseTimestamp == -1
    assert batchError(memoryview(bytes(kept.data)), 0, len(kept.data), cleaned=True)[1] is None
    # The last batch of the cleaned range is kept too.
    assert run(data, entries, upper=4).data is not None
    assert len(emptyBatch(HEADER.unpack_from(data, 0))) == HEADER_SIZE


def test_records_above_latest_offset_kept():
    data = batch([("a", "1"), ("a", "2")], baseOffset=100)
    kept = run(data, {keyHash(b"a"): 50}, latest=100)
    assert [r.offset for r in decoded(kept.data).records] == [101]


def test_clean_section_records_checked_by_key():
    data = batch([("a", "1"), ("b", "2")], baseOffset=0)
    kept = run(data, {keyHash(b"a"): 40}, latest=50, firstDirty=20)
    assert [r.key for r in decoded(kept.data).records] == [b"b"]


def test_keyless_records_dropped():
    data = batch([(None, "1"), ("a", "2")], baseOffset=0)
    kept = run(data, {keyHash(b"a"): 1})
    assert [r.key for r in decoded(kept.data).records] == [b"a"]


def test_corrupt_records():
    data = bytearray(batch([("a", "1")]))
    data[HEADER_SIZE] = 0x7E  # a record length past the end
    with pytest.raises(CorruptRecordError):
        recordsOf(memoryview(data)[HEADER_SIZE:], 1, 0)
    with pytest.raises(CorruptRecordError):
        recordsOf(memoryview(batch([("a", "1")]))[HEADER_SIZE:], 2, 1)
    # Offset deltas must increase within the batch.
    twice = batch([("a", "1"), ("b", "2")], useRecordOffsets=False)
    with pytest.raises(CorruptRecordError):
        recordsOf(memoryview(twice)[HEADER_SIZE:], 2, 0)
    with pytest.raises(CorruptRecordError):
        mapRecords(memoryview(twice)[HEADER_SIZE:], 2, 0, 0, 0, {}, 10)


def test_throttler():
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    throttler = Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    throttler.maybeThrottle(50)
    assert slept == []
    now[0] = 0.1
    throttler.maybeThrottle(450)  # 500 bytes in 0.1 s at 1000 B/s: 0.4 s early
    assert slept == [pytest.approx(0.4)]
    # A burst within one period is held back as well.
    throttler.maybeThrottle(1000)
    assert slept[-1] == pytest.approx(1.0)
    unlimited = Throttler(1.7976931348623157e308, clock=lambda: 5.0, sleep=sleep)
    unlimited.maybeThrottle(10**12)
    assert len(slept) == 2


def test_group_segments_by_size():
    sizes = [(0, 10), (5, 10), (9, 99), (20, 1), (30, 1)]
    segments = [SourceSegment(base, size, 0) for base, size in sizes]
    nextBases = [5, 9, 20, 30, 40]
    groups = groupSegmentsBySize(segments, nextBases, 100, 10**6, 4096)
    assert [[s.baseOffset for s in g] for g in groups] == [[0, 5], [9, 20], [30]]
    # Index room limits groups too (at most one entry per 61-byte batch).
    segments = [SourceSegment(base, 100, 0) for base in (0, 5, 9)]
    groups = groupSegmentsBySize(segments, nextBases, 10**6, 16, 0)
    assert [len(g) for g in groups] == [1, 1, 1]
