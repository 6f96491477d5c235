"""
Idempotent producer state: duplicates, sequence gaps, epochs, snapshots,
recovery and expiry -- over the in-memory and on-disk logs alike where the
behaviour is the same.
"""

from __future__ import annotations

import os

import pytest
from twisted.logger import globalLogPublisher

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.producerstate import (
    BatchMetadata,
    CorruptSnapshot,
    ProducerStateEntry,
    ProducerStateManager,
    decodeSnapshot,
    encodeSnapshot,
    lastSequence,
)

from .batches import makeBatch
from .helpers import NOW, newLog, readAll

PID = 4242
INT32_MAX = 2**31 - 1


def idem(seq, count=2, epoch=0, pid=PID, ts=NOW):
    return makeBatch(count, producerId=pid, producerEpoch=epoch, baseSequence=seq, baseTimestamp=ts)


def clocked(harness, configs=None, defaults=None):
    # Producer expiry compares batch timestamps (NOW) with the manager's
    # clock: keep them together.
    return newLog(harness, configs, defaults, clock=lambda: NOW)


def refused(log, batch, code):
    with pytest.raises(KafkaError) as e:
        log.append(batch, NOW)
    assert e.value.code == code, e.value
    return e.value


def snapshots(disk, topic="t", partition=0):
    directory = os.path.join(disk.directory, f"{topic}-{partition}")
    return sorted(int(n.split(".")[0]) for n in os.listdir(directory) if n.endswith(".snapshot"))


# -- the rules -------------------------------------------------------------------------


def test_in_sequence_appends(harness):
    _, log = clocked(harness)
    for i in range(4):
        info = log.append(idem(2 * i), NOW)
        assert (info.firstOffset, info.lastOffset, info.duplicate) == (2 * i, 2 * i + 1, False)
    entry = log.producerState.get(PID)
    assert entry.epoch == 0 and entry.lastSeq == 7 and entry.lastOffset == 7


def test_duplicate_of_each_of_last_five(harness):
    _, log = clocked(harness)
    originals = [log.append(idem(2 * i), NOW) for i in range(6)]
    before = readAll(log, 0)
    for i in range(1, 6):
        info = log.append(idem(2 * i), NOW)
        assert info.duplicate
        assert (info.firstOffset, info.lastOffset) == (
            originals[i].firstOffset,
            originals[i].lastOffset,
        )
        assert info.numRecords == 0
        assert log.logEndOffset == 12
    assert readAll(log, 0) == before
    # The producer carries on where it was.
    assert log.append(idem(12), NOW).firstOffset == 12


def test_duplicate_older_than_five_is_out_of_order(harness):
    # Kafka: not in the cache, so checked as a new batch: a sequence below
    # the last one is OUT_OF_ORDER_SEQUENCE_NUMBER.
    _, log = clocked(harness)
    for i in range(6):
        log.append(idem(2 * i), NOW)
    refused(log, idem(0), ErrorCode.out_of_order_sequence_number)
    assert log.logEndOffset == 12


def test_duplicate_must_match_whole_range(harness):
    _, log = clocked(harness)
    log.append(idem(0, count=3), NOW)
    # Same first sequence, different length: not a retry of that batch.
    refused(log, idem(0, count=2), ErrorCode.out_of_order_sequence_number)


def test_gap_is_out_of_order(harness):
    _, log = clocked(harness)
    log.append(idem(0), NOW)
    error = refused(log, idem(3), ErrorCode.out_of_order_sequence_number)
    assert "3 (incoming), 1 (current end)" in error.message
    assert log.logEndOffset == 2
    assert log.append(idem(2), NOW).firstOffset == 2


def test_fenced_epoch(harness):
    _, log = clocked(harness)
    log.append(idem(0, epoch=3), NOW)
    refused(log, idem(2, epoch=2), ErrorCode.invalid_producer_epoch)
    # A retry from the fenced epoch is not a duplicate either.
    refused(log, idem(0, epoch=2), ErrorCode.invalid_producer_epoch)
    assert log.logEndOffset == 2


def test_epoch_bump_resets_sequence(harness):
    _, log = clocked(harness)
    log.append(idem(0), NOW)
    log.append(idem(2), NOW)
    # A new epoch must start at 0 ...
    refused(log, idem(4, epoch=1), ErrorCode.out_of_order_sequence_number)
    info = log.append(idem(0, epoch=1), NOW)
    assert (info.firstOffset, info.duplicate) == (4, False)
    entry = log.producerState.get(PID)
    assert (entry.epoch, entry.lastSeq, len(entry.batches)) == (1, 1, 1)
    # ... the old epoch is fenced, even for what was a duplicate.
    refused(log, idem(2, epoch=0), ErrorCode.invalid_producer_epoch)
    assert log.append(idem(0, epoch=1), NOW).duplicate
    assert log.append(idem(2, epoch=1), NOW).firstOffset == 6


def test_unknown_producer_accepted_at_any_sequence(harness):
    # Kafka >= 2.5 (KIP-360): state may have been lost to retention or
    # expiry, so a producer the partition does not know may start anywhere.
    _, log = clocked(harness)
    assert log.append(idem(57), NOW).firstOffset == 0
    refused(log, idem(60), ErrorCode.out_of_order_sequence_number)
    assert log.append(idem(59), NOW).firstOffset == 2


def test_negative_sequence_with_producer_id_is_invalid(harness):
    _, log = clocked(harness)
    refused(log, idem(-1), ErrorCode.invalid_record)


def test_sequence_wraps(harness):
    assert lastSequence(INT32_MAX - 1, 2) == 0
    assert lastSequence(INT32_MAX, 0) == INT32_MAX
    _, log = clocked(harness)
    log.append(idem(INT32_MAX - 1, count=2), NOW)
    assert log.producerState.get(PID).lastSeq == INT32_MAX
    log.append(idem(0, count=3), NOW)
    assert log.producerState.get(PID).lastSeq == 2
    assert log.append(idem(0, count=3), NOW).duplicate
    log.append(idem(3), NOW)


def test_producers_are_independent(harness):
    _, log = clocked(harness)
    log.append(idem(0, pid=1), NOW)
    log.append(idem(0, pid=2), NOW)
    log.append(idem(2, pid=1), NOW)
    assert log.append(idem(0, pid=2), NOW).firstOffset == 2
    assert log.append(idem(0, pid=1), NOW).firstOffset == 0
    assert len(log.producerState) == 2


def test_non_idempotent_batches_untouched(harness):
    _, log = clocked(harness)
    for _ in range(3):
        assert not log.append(makeBatch(2), NOW).duplicate
    assert log.logEndOffset == 6 and len(log.producerState) == 0


def test_duplicate_on_log_append_time_topic(harness):
    _, log = clocked(harness, {"message.timestamp.type": "LogAppendTime"})
    first = log.append(idem(0), NOW + 5)
    assert first.logAppendTime == NOW + 5
    again = log.append(idem(0), NOW + 99)
    assert again.duplicate
    assert (again.firstOffset, again.logAppendTime) == (0, NOW + 5)


def test_duplicate_in_multi_batch_set(harness):
    # Kafka returns the first duplicate found and appends nothing.
    _, log = clocked(harness)
    log.append(idem(0), NOW)
    info = log.append(idem(0) + idem(2), NOW)
    assert info.duplicate and info.firstOffset == 0
    assert log.logEndOffset == 2
    info = log.append(idem(2) + idem(4), NOW)
    assert (info.firstOffset, info.lastOffset) == (2, 5)
    assert log.producerState.get(PID).lastSeq == 5


def test_refused_append_leaves_state_unchanged(harness):
    _, log = clocked(harness)
    log.append(idem(0), NOW)
    # The first batch is fine, the second has a gap: nothing is applied.
    refused(log, idem(2) + idem(9), ErrorCode.out_of_order_sequence_number)
    assert log.producerState.get(PID).lastSeq == 1
    assert log.append(idem(2), NOW).firstOffset == 2


# -- expiry ---------------------------------------------------------------------------------


def test_expiry(harness):
    manager, log = clocked(harness, defaults={"producer.id.expiration.ms": 1000})
    # Expiry goes by the last batch's max timestamp, as in Kafka.
    log.append(idem(0, count=1, ts=NOW), NOW)
    log.append(idem(0, count=1, pid=7, ts=NOW + 500), NOW)
    manager.runRetention(NOW + 999)
    assert log.producerState.get(PID) is not None
    manager.runRetention(NOW + 1000)
    assert log.producerState.get(PID) is None
    assert log.producerState.get(7) is not None
    assert log.expireProducers(NOW + 1500) == 1
    assert len(log.producerState) == 0
    # Forgotten: the producer carries on at any sequence.
    assert log.append(idem(2), NOW).firstOffset == 2


def test_expiry_default_is_one_day(harness):
    manager, log = clocked(harness)
    assert log.producerState.expirationMs == 86_400_000
    log.append(idem(0, count=1), NOW)
    manager.runRetention(NOW + 86_400_000 - 1)
    assert log.producerState.get(PID) is not None
    manager.runRetention(NOW + 86_400_000)
    assert log.producerState.get(PID) is None


def test_expiry_config_validated(harness):
    with pytest.raises(KafkaError):
        harness.make({"producer.id.expiration.ms": "soon"})


# -- snapshots and recovery (on disk) --------------------------------------------------------


def test_snapshot_round_trip():
    entries = [
        ProducerStateEntry(1, 0, [BatchMetadata(0, 1, 0, 1, NOW)], NOW),
        ProducerStateEntry(
            2**62, 32767, [BatchMetadata(i, i, 10 + i, 10 + i, NOW + i) for i in range(5)], NOW + 4
        ),
        ProducerStateEntry(3, 2, [], -1),
    ]
    data = encodeSnapshot(entries)
    assert decodeSnapshot(data) == entries
    for bad in (b"", data[:-1], data[:10] + bytes([data[10] ^ 1]) + data[11:], b"XXXX" + data[4:]):
        with pytest.raises(CorruptSnapshot):
            decodeSnapshot(bad)
    manager = ProducerStateManager()
    manager.loadSnapshot(data)
    assert manager.get(2**62).lastSeq == 4


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "kill"])
def test_restart_keeps_producer_state(disk, clean):
    manager, log = clocked(disk, {"segment.bytes": "400"})
    originals = [log.append(idem(2 * i), NOW) for i in range(12)]
    log.append(idem(0, pid=9), NOW)
    assert len(log.segments) > 2
    before = {pid: entry.copy() for pid, entry in log.producerState.producers.items()}
    if not clean:
        assert snapshots(disk)  # written when segments rolled
    manager = disk.restart(manager, clean=clean)
    log = manager.getLog("t", 0)
    assert log.producerState.producers == before
    for i in range(7, 12):
        info = log.append(idem(2 * i), NOW)
        assert info.duplicate and info.firstOffset == originals[i].firstOffset
    refused(log, idem(12), ErrorCode.out_of_order_sequence_number)
    refused(log, idem(26), ErrorCode.out_of_order_sequence_number)
    assert log.append(idem(24), NOW).firstOffset == 26
    assert log.append(idem(0, pid=9), NOW).duplicate


def test_clean_restart_uses_snapshot_at_end(disk):
    manager, log = clocked(disk)
    log.append(idem(0), NOW)
    manager.close()
    assert snapshots(disk) == [2]
    manager = disk.make(disk.defaults, **disk.kw)
    assert manager.getLog("t", 0).producerState.get(PID).lastSeq == 1


def test_rebuild_without_snapshots(disk):
    # A directory written before producer state existed: replay everything.
    manager, log = clocked(disk, {"segment.bytes": "400"})
    for i in range(8):
        log.append(idem(2 * i), NOW)
    manager.close()
    directory = os.path.join(disk.directory, "t-0")
    for offset in snapshots(disk):
        os.unlink(os.path.join(directory, f"{offset:020d}.snapshot"))
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert log.producerState.get(PID).lastSeq == 15
    assert len(log.producerState.get(PID).batches) == 5
    assert log.append(idem(14), NOW).duplicate


def test_corrupt_snapshot_falls_back(disk):
    manager, log = clocked(disk, {"segment.bytes": "400"})
    for i in range(8):
        log.append(idem(2 * i), NOW)
    manager.close()
    directory = os.path.join(disk.directory, "t-0")
    newest = snapshots(disk)[-1]
    with open(os.path.join(directory, f"{newest:020d}.snapshot"), "r+b") as f:
        f.seek(12)
        f.write(b"\xff\xff")
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert newest not in snapshots(disk)
    assert log.producerState.get(PID).lastSeq == 15
    assert log.append(idem(16), NOW).firstOffset == 16


def test_snapshot_past_end_is_deleted(disk):
    manager, log = clocked(disk)
    log.append(idem(0), NOW)
    manager.abandon()
    directory = os.path.join(disk.directory, "t-0")
    # As if the tail it describes had been truncated away by recovery.
    state = ProducerStateManager()
    state.producers[PID] = ProducerStateEntry(PID, 0, [BatchMetadata(0, 99, 0, 99, NOW)], NOW)
    with open(os.path.join(directory, f"{100:020d}.snapshot"), "wb") as f:
        f.write(state.snapshot())
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert 100 not in snapshots(disk)
    assert log.producerState.get(PID).lastSeq == 1


def test_torn_tail_recovery(disk):
    manager, log = clocked(disk, {"segment.bytes": "400"})
    for i in range(8):
        log.append(idem(2 * i), NOW)
    end = log.logEndOffset
    active = log.activeSegment.logPath
    manager.abandon()
    # The last batch was only half written when the process died.
    size = os.path.getsize(active)
    with open(active, "r+b") as f:
        f.truncate(size - 10)
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert log.logEndOffset == end - 2
    assert log.producerState.get(PID).lastSeq == 13
    # The lost batch is not a duplicate: the producer's retry is appended.
    info = log.append(idem(14), NOW)
    assert not info.duplicate and info.firstOffset == end - 2


def test_expired_producers_not_loaded(disk):
    manager, log = newLog(disk, defaults={"producer.id.expiration.ms": 1000}, clock=lambda: NOW)
    log.append(idem(0, ts=NOW - 2000), NOW)
    log.append(idem(0, pid=5, ts=NOW), NOW)
    manager.close()
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert log.producerState.get(PID) is None and log.producerState.get(5) is not None


def test_retention_deletes_old_snapshots_but_keeps_state(disk):
    manager, log = clocked(disk, {"segment.bytes": "400"})
    for i in range(14):
        log.append(idem(2 * i), NOW)
    assert len(snapshots(disk)) >= 3
    log.deleteRecordsBefore(log.logEndOffset)
    first = log.segments[0].baseOffset
    assert all(offset >= first for offset in snapshots(disk))
    assert log.append(idem(26), NOW).duplicate
    manager = disk.restart(manager, clean=False)
    log = manager.getLog("t", 0)
    assert log.producerState.get(PID).lastSeq == 27
    assert log.append(idem(26), NOW).duplicate
    assert log.append(idem(28), NOW).firstOffset == 28


def test_no_recovery_warning_on_first_start(disk):
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        manager = disk.make()
        manager.createTopic("t", 1, {})
        manager.abandon()
        warnedEarly = [e for e in events if "no clean shutdown" in e.get("log_format", "")]
        disk.make()
    finally:
        globalLogPublisher.removeObserver(events.append)
    warned = [e for e in events if "no clean shutdown" in e.get("log_format", "")]
    assert warnedEarly == []
    assert len(warned) == 1


def test_broker_appends_update_state_unchecked(harness):
    # The broker's own writes are not validated but keep the state in step.
    _, log = clocked(harness)
    log.append(idem(5, epoch=1), NOW, isFromClient=False)
    assert log.producerState.get(PID).lastSeq == 6
    assert log.append(idem(5, epoch=1), NOW).duplicate
