"""
Partition log behaviour, over the in-memory and on-disk logs alike.
"""

from __future__ import annotations

import itertools
import threading

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IFileRegion, IPartitionLog
from kafkatwist.protocol.batch import (
    TIMESTAMP_LOG_APPEND_TIME,
    iterBatchHeaders,
    timestampType,
    validateRecordSet,
)

from .batches import makeBatch, records
from .helpers import NOW, headers, newLog, offsets, readAll


def fill(log, batches: int, count: int = 1, valueSize: int = 10, ts: int = NOW, step: int = 1):
    for i in range(batches):
        log.append(makeBatch(count, valueSize=valueSize, baseTimestamp=ts + i * step), NOW)


def test_provides(harness):
    _, log = newLog(harness)
    assert IPartitionLog.providedBy(log)
    assert (log.topic, log.partition) == ("t", 0)


def test_append_and_read(harness):
    _, log = newLog(harness)
    first = log.append(makeBatch(3), NOW)
    second = log.append(makeBatch(2) + makeBatch(4), NOW)
    assert (first.firstOffset, first.lastOffset, first.logAppendTime, first.logStartOffset) == (
        0,
        2,
        -1,
        0,
    )
    assert (second.firstOffset, second.lastOffset, second.numRecords) == (3, 8, 6)
    assert log.logEndOffset == log.highWatermark == log.lastStableOffset == 9
    info = log.read(0, 1 << 20)
    assert (info.highWatermark, info.logStartOffset, info.lastStableOffset) == (9, 0, 9)
    if harness.onDisk:
        assert IFileRegion.providedBy(info.records)
    data = records(info.records)
    assert offsets(data) == [(0, 2), (3, 4), (5, 8)]
    validateRecordSet(data)  # offsets rewritten, CRC untouched and valid
    assert log.size == len(data)


def test_read_inside_batch(harness):
    _, log = newLog(harness)
    log.append(makeBatch(5), NOW)
    log.append(makeBatch(5), NOW)
    assert offsets(readAll(log, 7)) == [(5, 9)]
    assert offsets(readAll(log, 4)) == [(0, 4), (5, 9)]


def test_min_one_batch(harness):
    _, log = newLog(harness)
    batch = makeBatch(10, valueSize=200)
    log.append(batch, NOW)
    log.append(batch, NOW)
    data = records(log.read(0, 100).records)
    assert offsets(data) == [(0, 9)]
    assert log.read(0, 100, minOneBatch=False).records == b""


def test_max_bytes(harness):
    _, log = newLog(harness)
    batch = makeBatch(1, valueSize=100)
    for _ in range(10):
        log.append(batch, NOW)
    size = len(batch)
    for n in (1, 3, 7):
        data = records(log.read(0, size * n + size // 2).records)
        assert len(data) == size * n
        assert len(headers(data)) == n
    assert offsets(records(log.read(4, size * 2).records)) == [(4, 4), (5, 5)]


def test_read_at_end_and_out_of_range(harness):
    _, log = newLog(harness)
    assert log.read(0, 100).records == b""
    log.append(makeBatch(3), NOW)
    assert log.read(3, 100).records == b""
    for offset in (4, -1):
        with pytest.raises(KafkaError) as e:
            log.read(offset, 100)
        assert e.value.code == ErrorCode.offset_out_of_range


def test_roll_by_bytes(harness):
    batch = makeBatch(2, valueSize=100)
    _, log = newLog(harness, {"segment.bytes": str(len(batch) * 3)})
    for _ in range(10):
        log.append(batch, NOW)
    assert [s.baseOffset for s in log.segments] == [0, 6, 12, 18]
    assert [s.size for s in log.segments] == [len(batch) * 3] * 3 + [len(batch)]
    # A read returns batches from one segment only.
    assert offsets(readAll(log, 2)) == [(2, 3), (4, 5)]
    assert offsets(readAll(log, 18)) == [(18, 19)]


def test_roll_by_broker_default(harness):
    batch = makeBatch(1)
    _, log = newLog(harness, defaults={"log.segment.bytes": len(batch) * 2})
    fill(log, 5)
    assert len(log.segments) == 3


def test_roll_by_time(harness):
    _, log = newLog(harness, {"segment.ms": "1000"})
    log.append(makeBatch(1, baseTimestamp=NOW), NOW)
    log.append(makeBatch(1, baseTimestamp=NOW + 1000), NOW)
    assert len(log.segments) == 1
    log.append(makeBatch(1, baseTimestamp=NOW + 1001), NOW)
    assert [s.baseOffset for s in log.segments] == [0, 2]


def test_roll_jitter(harness):
    """
    segment.jitter.ms takes up to that much off segment.ms, the same amount
    for a segment every time it is asked.
    """
    _, log = newLog(harness, {"segment.ms": "1000", "segment.jitter.ms": "600"})
    jitter = log._rollJitter(log.activeSegment, log.config)
    assert 0 <= jitter < 600
    assert jitter == log._rollJitter(log.activeSegment, log.config)
    log.append(makeBatch(1, baseTimestamp=NOW), NOW)
    log.append(makeBatch(1, baseTimestamp=NOW + 1000 - jitter), NOW)
    assert len(log.segments) == 1
    log.append(makeBatch(1, baseTimestamp=NOW + 1001 - jitter), NOW)
    assert [s.baseOffset for s in log.segments] == [0, 2]


def test_roll_by_time_without_timestamps(harness):
    _, log = newLog(harness, {"segment.ms": "1000"})
    segment = log.activeSegment
    log.append(makeBatch(1, baseTimestamp=-1, timestampStep=0), segment.createdMs + 10)
    log.append(makeBatch(1, baseTimestamp=-1, timestampStep=0), segment.createdMs + 1001)
    assert len(log.segments) == 2


def test_index_lookups_across_segments(harness):
    _, log = newLog(harness, {"segment.bytes": "1500", "index.interval.bytes": "200"})
    sizes = [1, 3, 2, 5]
    expected = []
    offset = 0
    for i in range(200):
        count = sizes[i % 4]
        log.append(makeBatch(count, valueSize=7), NOW)
        expected.append((offset, offset + count - 1))
        offset += count
    assert len(log.segments) > 10
    byOffset = {o: batch for batch in expected for o in range(batch[0], batch[1] + 1)}
    for target in range(offset):
        got = offsets(records(log.read(target, 1).records))
        assert got == [byOffset[target]], target


def test_offset_for_timestamp(harness):
    _, log = newLog(harness, {"segment.bytes": "600", "index.interval.bytes": "100"})
    for i in range(50):
        log.append(makeBatch(2, baseTimestamp=NOW + i * 100, timestampStep=10), NOW)
    assert len(log.segments) > 3
    # Batch i holds offsets 2i, 2i+1 and max timestamp NOW + 100i + 10.
    assert log.offsetForTimestamp(NOW) == (0, NOW + 10)
    assert log.offsetForTimestamp(NOW + 10) == (0, NOW + 10)
    assert log.offsetForTimestamp(NOW + 11) == (2, NOW + 110)
    assert log.offsetForTimestamp(NOW + 2505) == (50, NOW + 2510)
    assert log.offsetForTimestamp(NOW + 4910) == (98, NOW + 4910)
    assert log.offsetForTimestamp(NOW + 4911) is None
    assert log.offsetForTimestamp(0) == (0, NOW + 10)


def test_max_timestamp(harness):
    _, log = newLog(harness, {"segment.bytes": "300"})
    assert log.maxTimestamp() is None
    log.append(makeBatch(2, baseTimestamp=NOW), NOW)
    log.append(makeBatch(3, baseTimestamp=NOW + 500), NOW)
    log.append(makeBatch(2, baseTimestamp=NOW + 100), NOW)
    log.append(makeBatch(1, baseTimestamp=NOW + 502), NOW)
    assert log.maxTimestamp() == (4, NOW + 502)


def test_append_errors(harness):
    _, log = newLog(harness, {"max.message.bytes": "1000", "segment.bytes": "5000"})
    good = makeBatch(2)
    bad = bytearray(good)
    bad[-1] ^= 1
    cases = [
        (bytes(bad), ErrorCode.corrupt_message),
        (good[:-3], ErrorCode.corrupt_message),
        (makeBatch(1, magic=1), ErrorCode.unsupported_for_message_format),
        (makeBatch(1, attributes=0x20), ErrorCode.invalid_record),
        (makeBatch(1, valueSize=1200), ErrorCode.message_too_large),
        (makeBatch(1, valueSize=900) * 6, ErrorCode.record_list_too_large),
        (good + bytes(bad), ErrorCode.corrupt_message),
    ]
    for data, code in cases:
        with pytest.raises(KafkaError) as e:
            log.append(data, NOW)
        assert e.value.code == code
    assert log.logEndOffset == 0 and log.size == 0
    log.append(good, NOW)
    assert log.logEndOffset == 2


def test_log_append_time(harness):
    _, log = newLog(harness, {"message.timestamp.type": "LogAppendTime"})
    info = log.append(makeBatch(3, baseTimestamp=5), NOW)
    assert info.logAppendTime == NOW
    (header,) = headers(readAll(log, 0))
    assert header.maxTimestamp == NOW
    assert timestampType(header.attributes) == TIMESTAMP_LOG_APPEND_TIME
    validateRecordSet(readAll(log, 0))
    assert log.maxTimestamp()[1] == NOW


def test_retention_by_time(harness):
    manager, log = newLog(harness, {"segment.bytes": "250", "retention.ms": "1000"})
    for i in range(20):
        log.append(makeBatch(1, baseTimestamp=NOW + i * 100), NOW)
    segments = log.segments
    assert len(segments) > 4
    cutoff = segments[2].largestTimestamp + 1000 + 1
    assert manager.runRetention(cutoff) == 3
    assert log.logStartOffset == segments[3].baseOffset
    assert log.segments[0] is segments[3]
    with pytest.raises(KafkaError) as e:
        log.read(0, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
    # Everything expired: the active segment is rolled and deleted too.
    assert manager.runRetention(NOW + 100_000) > 0
    assert log.logStartOffset == log.logEndOffset == 20
    assert log.size == 0
    log.append(makeBatch(1), NOW)
    assert offsets(readAll(log, 20)) == [(20, 20)]


def test_retention_by_bytes(harness):
    batch = makeBatch(1, valueSize=50, baseTimestamp=NOW)
    manager, log = newLog(
        harness, {"segment.bytes": str(len(batch) * 2), "retention.bytes": str(len(batch) * 5)}
    )
    for _ in range(11):
        log.append(batch, NOW)
    assert log.size == len(batch) * 11
    manager.runRetention(NOW)
    # Whole segments of 2 batches go while what is left stays >= 5 batches.
    assert log.size == len(batch) * 5
    assert log.logStartOffset == 6


def test_retention_only_with_delete_policy(harness):
    manager, log = newLog(
        harness, {"segment.bytes": "200", "retention.ms": "1", "cleanup.policy": "compact"}
    )
    for i in range(10):
        log.append(makeBatch(key=b"k", baseTimestamp=NOW + i), NOW)
    assert manager.runRetention(NOW + 10**9) == 0
    assert log.logStartOffset == 0


def test_delete_records_before(harness):
    batch = makeBatch(2)
    _, log = newLog(harness, {"segment.bytes": str(len(batch) * 2)})
    for _ in range(5):
        log.append(batch, NOW)
    assert [s.baseOffset for s in log.segments] == [0, 4, 8]
    assert log.deleteRecordsBefore(5) == 5
    assert [s.baseOffset for s in log.segments] == [4, 8]
    assert log.logStartOffset == 5
    assert offsets(records(log.read(5, 1).records)) == [(4, 5)]
    with pytest.raises(KafkaError):
        log.read(3, 100)
    assert log.deleteRecordsBefore(2) == 5
    assert log.deleteRecordsBefore(10) == 10
    assert [s.baseOffset for s in log.segments] == [8]
    assert log.read(10, 100).records == b""
    with pytest.raises(KafkaError) as e:
        log.deleteRecordsBefore(11)
    assert e.value.code == ErrorCode.offset_out_of_range
    assert log.append(batch, NOW).logStartOffset == 10


def test_fsync_before_ack(harness):
    _, log = newLog(harness, {"flush.messages": "1"})
    log.append(makeBatch(3), NOW)
    assert log.recoveryPoint == log.logEndOffset == 3
    assert log.flushCount == 1


def test_flush_messages(harness):
    _, log = newLog(harness, {"flush.messages": "5"})
    fill(log, 4)
    assert log.recoveryPoint == 0
    fill(log, 1)
    assert log.recoveryPoint == 5


def test_flush_ms_and_default(harness):
    manager, log = newLog(harness, {"flush.ms": "1000"})
    manager.createTopic("lazy", 1, {})
    lazy = manager.getLog("lazy", 0)
    log.append(makeBatch(1), NOW)
    lazy.append(makeBatch(1), NOW)
    assert manager.flushDirty(NOW + 999) == 0
    assert log.recoveryPoint == 0
    assert manager.flushDirty(NOW + 1000) == 1
    assert log.recoveryPoint == 1
    assert lazy.recoveryPoint == 0


def test_flush_on_roll(harness):
    manager, log = newLog(harness, {"segment.bytes": "200"})
    fill(log, 10)
    assert log.recoveryPoint == 0
    manager.flushDirty(NOW)
    assert log.recoveryPoint == log.activeSegment.baseOffset > 0


def test_concurrent_appends_and_reads(harness):
    _, log = newLog(harness, {"segment.bytes": "20000", "index.interval.bytes": "500"})
    writers, perWriter = 4, 150
    stop = threading.Event()
    errors = []

    def write(n):
        try:
            for i in range(perWriter):
                log.append(makeBatch(1 + (i + n) % 4, valueSize=20), NOW)
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def read():
        try:
            while not stop.is_set():
                end = log.logEndOffset
                offset = 0
                while offset < end:
                    data = records(log.read(offset, 3000).records)
                    batches = validateRecordSet(data)  # never a torn batch
                    first = batches[0].header
                    assert first.baseOffset <= offset <= first.lastOffset
                    offset = batches[-1].header.lastOffset + 1
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    threads += [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads[:writers]:
        t.join()
    stop.set()
    for t in threads[writers:]:
        t.join()
    assert not errors, errors[:3]
    total = sum(1 + (i + n) % 4 for n in range(writers) for i in range(perWriter))
    assert log.logEndOffset == total
    seen, offset = [], 0
    while offset < total:
        for _, h in iterBatchHeaders(records(log.read(offset, 1 << 20).records)):
            seen.append((h.baseOffset, h.lastOffset))
            offset = h.lastOffset + 1
    assert seen[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in itertools.pairwise(seen))


def test_roll_when_index_full(harness):
    _, log = newLog(harness, {"segment.index.bytes": "24", "index.interval.bytes": "0"})
    fill(log, 12)
    # 24 bytes hold 3 offset entries (2 time entries): a segment indexes
    # batches 2..3 before its time index is full.
    assert len(log.segments) > 3
    for offset in range(12):
        assert offsets(readAll(log, offset))[0] == (offset, offset)


def test_no_reactor_imported():
    import subprocess
    import sys

    code = (
        "import sys, kafkatwist.log, kafkatwist.protocol.batch;"
        "assert 'twisted.internet.reactor' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_retention_deletions_logged_with_their_reason(harness, capturedLog):
    """
    Kafka's UnifiedLog logs each segment it deletes at INFO with the
    reason: retention time, retention size, the log start offset.
    """
    manager, log = newLog(harness, {"segment.bytes": "250", "retention.ms": "1000"})
    for i in range(20):
        log.append(makeBatch(1, baseTimestamp=NOW + i * 100), NOW)
    segments = log.segments
    cutoff = segments[2].largestTimestamp + 1000 + 1
    assert manager.runRetention(cutoff) == 3
    lines = capturedLog.matching("due to log retention time 1000ms breach")
    assert len(lines) == 3
    assert lines[0].startswith("[UnifiedLog partition=t-0")
    assert f"Deleting segment LogSegment(baseOffset={segments[0].baseOffset}, size=" in lines[0]
    assert lines[0].endswith("based on the largest record timestamp in the segment")

    limit = log.size - log.segments[0].size
    manager.alterTopicConfigs(
        "t", [("retention.ms", "DELETE", None), ("retention.bytes", "SET", str(limit))]
    )
    assert manager.runRetention(cutoff) == 1
    [line] = capturedLog.matching("due to log retention size")
    assert f"due to log retention size {limit} breach. Log size after deletion will be {limit}." in line

    start = log.segments[1].baseOffset
    log.deleteRecordsBefore(start)
    [line] = capturedLog.matching("due to log start offset")
    assert f"Deleting segments due to log start offset {start} breach: LogSegment(baseOffset=" in line


def test_cleaner_deletions_logged(harness, capturedLog):
    from kafkatwist.log.cleaner import LogCleaner

    manager, log = newLog(
        harness, {"segment.bytes": "250", "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}
    )
    for i in range(20):
        log.append(makeBatch(1, key=b"k", baseTimestamp=NOW + i), NOW)
    LogCleaner(manager, inProcess=True, clock=lambda: NOW).cleanOnce()
    lines = capturedLog.matching("Deleting segment files LogSegment(baseOffset=0,")
    assert len(lines) == 1 and "log cleaning replaced them with LogSegment(baseOffset=0," in lines[0]
