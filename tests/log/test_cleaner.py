"""
The log cleaner over the in-memory and on-disk logs, one pass at a time on
the test's thread (C{LogCleaner.cleanOnce}).
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.cleaner import CLEANER_CHECKPOINT, _Runner
from kafkatwist.log.compaction import DELETE_HORIZON_BIT
from kafkatwist.protocol.records import Record, buildBatch

from tests.log.compacted import append, expectedLatest, readAll, readBatches
from .helpers import COMPACT, NOW, cleaner


def fill(log, rounds: int, keys: int = 10, nowMs: int = NOW):
    for r in range(rounds):
        for k in range(keys):
            append(log, [(f"k{k}", f"v{r}-{k}")], nowMs)


def settle(c) -> int:
    """
    Clean until nothing is left to do (merges included).

    @return: passes run.
    """
    passes = 0
    while c.cleanOnce() is not None:
        passes += 1
        assert passes < 20
    return passes


def test_keeps_latest_per_key_and_offsets(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 20)
    before = readAll(log)
    stats = cleaner(manager).cleanOnce()
    assert stats is not None and stats.bytesWritten < stats.bytesRead
    after = readAll(log)
    assert len(after) < len(before)
    assert set(after) <= set(before)
    assert expectedLatest(after) == expectedLatest(before)
    active = log.activeSegment.baseOffset
    # Everything in the active segment is untouched; below it one per key.
    assert [r for r in after if r[0] >= active] == [r for r in before if r[0] >= active]
    below = [r for r in after if r[0] < active]
    assert len({key for _, key, _ in below}) == len(below)
    assert log.logEndOffset == before[-1][0] + 1


def test_small_cleaned_segments_merge(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 30)
    segmentsBefore = len(log.segments)
    c = cleaner(manager)
    c.cleanOnce()
    # Grouped by their size before cleaning: each was nearly full.
    assert len(log.segments) == segmentsBefore
    fill(log, 10)
    c.cleanOnce()
    # Now the small cleaned segments go together into one.
    assert len(log.segments) < segmentsBefore
    assert all(s.size <= 2048 for s in log.segments)
    if harness.onDisk:
        # The producer snapshots of segments merged away went with them.
        bases = {s.baseOffset for s in log.segments}
        snapshots = {int(n[:20]) for n in os.listdir(log.directory) if n.endswith(".snapshot")}
        assert snapshots <= bases | {max(snapshots)}


def test_below_dirty_ratio_nothing_happens(harness):
    manager = harness.make()
    manager.createTopic("t", 1, dict(COMPACT, **{"min.cleanable.dirty.ratio": "0.99"}))
    log = manager.getLog("t", 0)
    fill(log, 20)
    c = cleaner(manager)
    # Never cleaned: all of it is dirty.
    assert settle(c) >= 1
    fill(log, 3)
    assert c.cleanOnce() is None
    assert 10 < c.metrics()["max-dirty-percent"] < 99


def test_delete_topic_not_cleaned(harness):
    manager = harness.make()
    manager.createTopic("t", 1, {"segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"})
    fill(manager.getLog("t", 0), 20)
    assert cleaner(manager).cleanOnce() is None


def test_second_pass_only_maps_new_data(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 20)
    c = cleaner(manager)
    first = c.cleanOnce()
    assert c.checkpoint("t", 0) == first.endOffset
    fill(log, 20)
    before = readAll(log)
    second = c.cleanOnce()
    assert second.mapBytesRead < first.mapBytesRead * 2
    assert expectedLatest(readAll(log)) == expectedLatest(before)
    assert second.endOffset > first.endOffset


def test_tombstones_kept_then_removed_after_delete_retention(harness):
    manager = harness.make()
    manager.createTopic("t", 1, dict(COMPACT, **{"delete.retention.ms": "1000"}))
    log = manager.getLog("t", 0)
    fill(log, 5)
    append(log, [("k3", None)], NOW, timestamp=NOW - 5)
    fill(log, 10, keys=2)
    now = [NOW]
    c = cleaner(manager, clock=lambda: now[0])
    c.cleanOnce()
    records = readAll(log)
    assert (b"k3", None) in [(k, v) for _, k, v in records]
    (batch,) = [b for b in readBatches(log) if any(r.key == b"k3" for r in b.records)]
    assert batch.attributes & DELETE_HORIZON_BIT
    assert batch.baseTimestamp == NOW + 1000
    # The record keeps its own timestamp, rebased on the horizon.
    assert batch.records[0].timestamp == NOW - 5
    # Not yet: still within delete.retention.ms.
    now[0] = NOW + 999
    c.cleanOnce()
    assert (b"k3", None) in [(k, v) for _, k, v in readAll(log)]
    now[0] = NOW + 1000
    assert c.cleanOnce() is not None  # the due horizon alone makes it cleanable
    assert b"k3" not in [k for _, k, _ in readAll(log)]


def test_min_compaction_lag(harness):
    manager = harness.make()
    manager.createTopic("t", 1, dict(COMPACT, **{"min.compaction.lag.ms": "60000"}))
    log = manager.getLog("t", 0)
    fill(log, 20)
    now = [NOW + 1000]
    c = cleaner(manager, clock=lambda: now[0])
    assert c.cleanOnce() is None
    now[0] = NOW + 60_001
    assert c.cleanOnce() is not None


def test_max_compaction_lag_cleans_below_ratio(harness):
    manager = harness.make()
    manager.createTopic(
        "t",
        1,
        dict(COMPACT, **{"min.cleanable.dirty.ratio": "0.99", "max.compaction.lag.ms": "60000"}),
    )
    log = manager.getLog("t", 0)
    fill(log, 20)
    now = [NOW + 1000]
    c = cleaner(manager, clock=lambda: now[0])
    assert settle(c) >= 1
    fill(log, 3, nowMs=NOW + 2000)
    log.roll(NOW + 2000)
    assert c.cleanOnce() is None
    assert c.metrics()["max-compaction-delay-secs"] == 0
    # The oldest dirty batch (timestamp NOW) is now 62 s past the lag.
    now[0] = NOW + 122_000
    assert c.cleanOnce() is not None
    assert c.metrics()["max-compaction-delay-secs"] == 62


def test_dedupe_map_bound_ends_pass_early(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    for i in range(300):
        append(log, [(f"unique-{i}", "x")], NOW)
    # Room for about 40 keys.
    c = cleaner(manager, dedupeBufferSize=160 * 45, loadFactor=0.9)
    stats = c.cleanOnce()
    assert stats.endOffset < log.activeSegment.baseOffset
    assert stats.bufferUtilization > 0.85
    while c.cleanOnce() is not None:
        pass
    assert c.checkpoint("t", 0) == log.activeSegment.baseOffset
    assert len(readAll(log)) == 300


def test_keyless_records_refused(harness):
    manager = harness.make()
    manager.createTopic("c", 1, {"cleanup.policy": "compact"})
    manager.createTopic("d", 1)
    keyless = buildBatch([Record(key=b"a", value=b"1"), Record(key=None, value=b"2")])
    with pytest.raises(KafkaError) as e:
        manager.getLog("c", 0).append(keyless, NOW)
    assert e.value.code == ErrorCode.invalid_record
    assert "without key" in str(e.value)
    assert manager.getLog("c", 0).logEndOffset == 0
    manager.getLog("d", 0).append(keyless, NOW)
    compressed = buildBatch([Record(key=None, value=b"2")], compression="lz4")
    with pytest.raises(KafkaError):
        manager.getLog("c", 0).append(compressed, NOW)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_rewritten(harness, codec):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    for r in range(10):
        append(log, [(f"k{k}", f"v{r}-{k}" * 5) for k in range(r % 4, 8)], NOW, compression=codec)
    log.roll(NOW)
    before = readAll(log)
    cleaner(manager).cleanOnce()
    after = readAll(log)
    assert expectedLatest(after) == expectedLatest(before)
    assert len(after) < len(before)
    assert {b.compression for b in readBatches(log)} == {codec}


def test_idempotent_producer_state_survives(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    producerId, epoch = 7, 0
    for seq in range(30):
        batch = buildBatch(
            [Record(key=b"same", value=b"v%d" % seq)],
            producerId=producerId,
            producerEpoch=epoch,
            baseSequence=seq,
        )
        log.append(batch, NOW)
    log.roll(NOW)
    lastBefore = log.producerState.get(producerId).lastSeq
    cleaner(manager).cleanOnce()
    batches = readBatches(log)
    # The producer's last batch is there (with its one, latest record).
    assert batches[-1].producerId == producerId and batches[-1].baseSequence == 29
    assert len(readAll(log)) == 1
    if harness.onDisk:
        directory = log.directory
        manager = harness.restart(manager)
        for name in os.listdir(directory):
            assert not name.endswith((".cleaned", ".swap"))
        log = manager.getLog("t", 0)
    assert log.producerState.get(producerId).lastSeq == lastBefore
    # A retry of the last batch is still recognised as a duplicate.
    retry = buildBatch(
        [Record(key=b"same", value=b"v29")], producerId=producerId, producerEpoch=epoch, baseSequence=29
    )
    assert log.append(retry, NOW).duplicate


def test_empty_batch_kept_for_producer(harness):
    """
    A producer's last batch whose records are all superseded stays as an
    empty batch header, so its sequence numbers survive a rebuild.
    """
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    log.append(
        buildBatch([Record(key=b"a", value=b"1")], producerId=3, producerEpoch=0, baseSequence=0),
        NOW,
    )
    append(log, [("a", "2")], NOW)
    append(log, [("b", "x")], NOW)
    log.roll(NOW)
    append(log, [("c", "x")], NOW)
    cleaner(manager).cleanOnce()
    batches = readBatches(log)
    assert batches[0].producerId == 3 and batches[0].recordCount == 0
    assert batches[0].baseOffset == 0 and batches[0].lastOffset == 0
    assert [r[1:] for r in readAll(log)] == [(b"a", b"2"), (b"b", b"x"), (b"c", b"x")]


def test_reads_cope_with_gaps(harness):
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    for i in range(40):
        append(log, [("k", f"v{i}")], NOW + i, timestamp=NOW + i)
        append(log, [(f"u{i}", "x")], NOW + i, timestamp=NOW + i)
    cleaner(manager).cleanOnce()
    # Offset 0 held k=v0, gone: a read there starts at the next batch.
    data = log.read(0, 1 << 20)
    first = readBatches(log)[0]
    assert first.baseOffset == 1
    assert data.records
    assert log.offsetForTimestamp(NOW + 10)[0] >= 20
    assert log.maxTimestamp() is not None


def test_checkpoint_file_per_log_dir(disk):
    manager = disk.make()
    manager.createTopic("t", 1, COMPACT)
    fill(manager.getLog("t", 0), 20)
    c = cleaner(manager)
    stats = c.cleanOnce()
    path = os.path.join(disk.directory, CLEANER_CHECKPOINT)
    with open(path) as f:
        assert f.read().splitlines() == ["0", "1", f"t 0 {stats.endOffset}"]
    manager = disk.restart(manager)
    c = cleaner(manager)
    assert c.checkpoint("t", 0) == stats.endOffset
    # A recreated topic does not inherit the old checkpoint.
    manager.deleteTopic("t")
    manager.createTopic("t", 1, COMPACT)
    assert c.checkpoint("t", 0) is None
    with open(path) as f:
        assert f.read().splitlines() == ["0", "0"]


def test_cleaned_log_recovers_after_crash(disk):
    """
    Recovery re-validates segments with gaps and emptied batches.
    """
    manager = disk.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    log.append(
        buildBatch([Record(key=b"a", value=b"1")], producerId=3, producerEpoch=0, baseSequence=0),
        NOW,
    )
    fill(log, 20)
    cleaner(manager).cleanOnce()
    before = readAll(log)
    manager = disk.restart(manager, clean=False)
    # No recovery point: every segment is checked again.
    os.unlink(os.path.join(disk.directory, "recovery-point-offset-checkpoint"))
    manager = disk.restart(manager, clean=False)
    assert readAll(manager.getLog("t", 0)) == before


def test_cleaner_process(disk):
    """
    The on-disk log's passes run in a cleaner process.
    """
    manager = disk.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 20)
    before = readAll(log)
    c = cleaner(manager, inProcess=False)
    try:
        stats = c.cleanOnce()
        assert stats is not None and stats.messagesWritten < stats.messagesRead
        worker = c._runners[0].worker
        assert worker.pid is not None and worker.pid != os.getpid()
    finally:
        c.stop()
    assert expectedLatest(readAll(log)) == expectedLatest(before)
    assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]


def test_retention_during_pass_aborts_swap(harness):
    """
    compact,delete: segments retention deletes while a pass runs are not
    swapped back; the pass stops and the log stays whole.
    """
    manager = harness.make()
    manager.createTopic("t", 1, dict(COMPACT, **{"cleanup.policy": "compact,delete"}))
    log = manager.getLog("t", 0)
    fill(log, 20)
    c = cleaner(manager)
    original = log.replaceSegments
    calls = []

    def racing(replaced, cleaned, goneAborted=()):
        if not calls:
            # Retention got there first.
            log.deleteRecordsBefore(log.segments[1].baseOffset)
        calls.append(replaced)
        return original(replaced, cleaned, goneAborted)

    log.replaceSegments = racing
    assert c.cleanOnce() is None
    assert len(calls) == 1
    records = readAll(log)
    assert records[0][0] == log.logStartOffset == log.segments[0].baseOffset
    if harness.onDisk:
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    # The checkpoint did not move: the next pass cleans it all.
    assert c.checkpoint("t", 0) is None
    log.replaceSegments = original
    assert c.cleanOnce() is not None


def test_cleaner_process_dies_mid_pass(disk):
    """
    A cleaner process that dies mid-pass costs the pass, nothing else: the
    cleaned files it was writing go, the log is as it was, and the next pass
    starts a new process.
    """
    manager = disk.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 20)
    before = readAll(log)
    c = cleaner(manager, inProcess=False)
    try:
        ltc = c.grabFilthiestLog()
        runner = _Runner(c, inProcess=False)
        c._runners.append(runner)
        pid = runner.worker._start().pid
        # Frozen before it gets to the pass, then killed while the broker
        # waits for it.
        os.kill(pid, signal.SIGSTOP)
        # What it would have left had it been writing a cleaned segment.
        open(os.path.join(log.directory, "00000000000000000000.log.cleaned"), "wb").close()
        threading.Timer(0.3, lambda: os.kill(pid, signal.SIGKILL)).start()
        assert c.cleanLog(ltc, runner) is None
        assert readAll(log) == before
        assert not [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
        assert c.cleanOnce() is not None
        assert expectedLatest(readAll(log)) == expectedLatest(before)
    finally:
        c.stop()


def test_smallCleanedSegmentsMergedWithoutNewData(harness):
    """
    A first pass over full segments of one key's updates leaves near-empty
    segments; the next pass merges them without waiting for dirt.
    """
    manager = harness.make()
    manager.createTopic("t", 1, COMPACT)
    log = manager.getLog("t", 0)
    fill(log, 300, keys=1)
    before = len(log.segments)
    c = cleaner(manager)
    c.cleanOnce()
    assert len(log.segments) == before > 8
    merge = c.cleanOnce()
    assert merge is not None and merge.mapBytesRead == 0
    assert len(log.segments) == 2
    assert c.cleanOnce() is None
    active = log.activeSegment.baseOffset
    assert len([r for r in readAll(log) if r[0] < active]) == 1


def test_converges_after_every_delete_horizon_has_passed(harness):
    """
    A batch that keeps live records beside its tombstones carries a delete
    horizon after the tombstones have gone: once every horizon has passed,
    the cleaner finds nothing to do however often it looks, until new data
    arrives (issue 26: it re-cleaned such a log fifty times a second).
    """
    manager = harness.make()
    manager.createTopic("t", 1, dict(COMPACT, **{"delete.retention.ms": "1000"}))
    log = manager.getLog("t", 0)
    fill(log, 3)
    # One batch of live values and tombstones, as librdkafka's 0077 writes.
    append(log, [("k5", None), ("k6", "live"), ("k7", None), ("k8", "live")], NOW)
    fill(log, 40, keys=2, nowMs=NOW)
    now = [NOW]
    c = cleaner(manager, clock=lambda: now[0])
    settle(c)
    assert any(b.attributes & DELETE_HORIZON_BIT for b in readBatches(log))
    # Every horizon passes; the tombstones go.
    now[0] = NOW + 1000
    settle(c)
    assert (b"k6", b"live") in [(k, v) for _, k, v in readAll(log)]
    assert b"k5" not in [k for _, k, _ in readAll(log)]
    passes = c.passes
    for step in range(1, 200):
        now[0] = NOW + 1000 + step * 500
        c.cleanOnce()
    assert c.passes == passes
    # New data makes the log due again.
    fill(log, 40, keys=2, nowMs=now[0])
    assert c.cleanOnce() is not None
