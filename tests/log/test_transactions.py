"""
Transactions in the partition log: verification guards, markers, the last
stable offset, read_committed reads with their aborted transactions, the
aborted-transaction index (in memory and as C{.txnindex} files), and all of
it surviving clean restarts, crashes and damaged index files.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.producerstate import (
    ProducerStateEntry,
    ProducerStateManager,
    decodeSnapshot,
    encodeSnapshot,
)
from kafkatwist.log.txnindex import AbortedTxn, CorruptTxnIndex, TransactionIndex, decodeEntries
from kafkatwist.protocol.batch import CONTROL_BIT, TRANSACTIONAL_BIT, iterBatchHeaders
from kafkatwist.protocol.markers import ABORT, COMMIT, buildMarkerBatch, readMarker

from .batches import makeBatch, records
from .test_partition import NOW, newLog

P1, P2 = 100, 200


def txn(seq, count=2, pid=P1, epoch=0):
    return makeBatch(
        count, producerId=pid, producerEpoch=epoch, baseSequence=seq,
        baseTimestamp=NOW, attributes=TRANSACTIONAL_BIT,
    )


def plain(count=1):
    return makeBatch(count, baseTimestamp=NOW)


def begin(log, seq=0, count=2, pid=P1, epoch=0):
    guard = log.producerState.newGuard(pid)
    return log.append(txn(seq, count, pid, epoch), NOW, verificationGuard=guard)


def marker(log, commit, pid=P1, epoch=0, coordinatorEpoch=0):
    return log.appendMarker(pid, epoch, commit, coordinatorEpoch, NOW)


def committedOffsets(log, offset=0):
    """
    Offsets of the data batches a read_committed read from C{offset}
    returns, and its aborted list.
    """
    info = log.read(offset, 1 << 30, readCommitted=True)
    data = records(info.records)
    return [h.baseOffset for _, h in iterBatchHeaders(data)], info.abortedTransactions


def refused(call, code):
    with pytest.raises(KafkaError) as e:
        call()
    assert e.value.code == code, e.value


def txnIndexFiles(disk, topic="t", partition=0):
    directory = os.path.join(disk.directory, f"{topic}-{partition}")
    return sorted(n for n in os.listdir(directory) if n.endswith(".txnindex"))


# -- markers --------------------------------------------------------------------------


def test_marker_batch():
    batch = buildMarkerBatch(7, 3, True, 5, NOW)
    ((_, header),) = iterBatchHeaders(batch)
    assert header.attributes == CONTROL_BIT | TRANSACTIONAL_BIT
    assert (header.producerId, header.producerEpoch, header.baseSequence) == (7, 3, -1)
    assert readMarker(batch) == (COMMIT, 5)
    assert readMarker(buildMarkerBatch(7, 3, False, 0, NOW)).controlType == ABORT


# -- the rules ---------------------------------------------------------------------------


def test_transactional_batch_needs_verification(harness):
    _, log = newLog(harness)
    refused(lambda: log.append(txn(0), NOW), ErrorCode.invalid_txn_state)
    # A guard for another producer, or a stale one, does not do either.
    other = log.producerState.newGuard(P2)
    refused(lambda: log.append(txn(0), NOW, verificationGuard=other), ErrorCode.invalid_txn_state)
    stale = log.producerState.newGuard(P1)
    log.producerState.newGuard(P1)
    refused(lambda: log.append(txn(0), NOW, verificationGuard=stale), ErrorCode.invalid_txn_state)
    assert log.logEndOffset == 0


def test_open_transaction_holds_the_last_stable_offset(harness):
    _, log = newLog(harness)
    log.append(plain(2), NOW)
    begin(log)
    # Later batches of the same transaction need no guard.
    log.append(txn(2), NOW)
    log.append(plain(1), NOW)
    assert (log.logEndOffset, log.lastStableOffset) == (7, 2)
    assert committedOffsets(log) == ([0], ())
    assert committedOffsets(log, 2) == ([], ())
    # read_uncommitted sees everything.
    info = log.read(0, 1 << 30)
    assert info.abortedTransactions is None and info.lastStableOffset == 2
    assert [h.baseOffset for _, h in iterBatchHeaders(records(info.records))] == [0, 2, 4, 6]


def test_commit(harness):
    _, log = newLog(harness)
    begin(log)
    info = marker(log, commit=True)
    assert info.firstOffset == 2
    assert log.lastStableOffset == log.logEndOffset == 3
    assert committedOffsets(log) == ([0, 2], ())
    assert log.producerState.ongoing == {}


def test_abort_is_indexed(harness):
    _, log = newLog(harness)
    log.append(plain(), NOW)
    begin(log)
    marker(log, commit=False)
    assert log.lastStableOffset == 4
    offsets, aborted = committedOffsets(log)
    # The batches come back (the consumer drops them), with the list.
    assert offsets == [0, 1, 3]
    assert aborted == ((P1, 1),)
    index = log.txnIndexOf(log.activeSegment)
    assert index.entries == (AbortedTxn(P1, 1, 3, 4),)
    # A fetch past the aborted transaction does not get it.
    assert committedOffsets(log, 4) == ([], ())


def test_interleaved_producers(harness):
    _, log = newLog(harness)
    begin(log, pid=P1)  # 0-1
    begin(log, pid=P2)  # 2-3
    assert log.lastStableOffset == 0
    marker(log, commit=True, pid=P2)  # 4
    assert log.lastStableOffset == 0
    marker(log, commit=False, pid=P1)  # 5
    assert log.lastStableOffset == 6
    offsets, aborted = committedOffsets(log)
    assert aborted == ((P1, 0),)
    # P2's commit came when P1's transaction still held the LSO at 0.
    assert log.txnIndexOf(log.activeSegment).entries == (AbortedTxn(P1, 0, 5, 6),)


def test_non_transactional_batch_during_transaction(harness):
    _, log = newLog(harness)
    begin(log)
    idempotent = makeBatch(1, producerId=P1, producerEpoch=0, baseSequence=2, baseTimestamp=NOW)
    refused(lambda: log.append(idempotent, NOW), ErrorCode.invalid_txn_state)


def test_marker_fences_old_epoch(harness):
    _, log = newLog(harness)
    begin(log)
    # The coordinator aborted with a bumped epoch (a timeout, a new
    # producer instance): the old epoch's late data is refused.
    marker(log, commit=False, epoch=1)
    refused(lambda: log.append(txn(2), NOW), ErrorCode.invalid_producer_epoch)
    refused(lambda: marker(log, commit=False, epoch=0), ErrorCode.invalid_producer_epoch)
    assert log.lastStableOffset == log.logEndOffset


def test_marker_from_older_coordinator(harness):
    _, log = newLog(harness)
    begin(log)
    marker(log, commit=True, coordinatorEpoch=3)
    refused(lambda: marker(log, commit=True, coordinatorEpoch=2),
            ErrorCode.transaction_coordinator_fenced)


def test_marker_without_transaction_changes_nothing(harness):
    _, log = newLog(harness)
    marker(log, commit=False)
    marker(log, commit=False)
    assert log.lastStableOffset == log.logEndOffset == 2
    assert getattr(log.activeSegment, "txnIndex", None) is None


def test_marker_drops_guard(harness):
    """
    Data verified before an abort must not open a transaction after the
    abort's marker: nobody would ever end it (a hanging transaction).
    """
    _, log = newLog(harness)
    guard = log.producerState.newGuard(P1)
    marker(log, commit=False)
    refused(lambda: log.append(txn(0), NOW, verificationGuard=guard), ErrorCode.invalid_txn_state)
    assert log.lastStableOffset == log.logEndOffset


def test_clients_cannot_write_markers(harness):
    _, log = newLog(harness)
    refused(lambda: log.append(buildMarkerBatch(P1, 0, True, 0, NOW), NOW),
            ErrorCode.invalid_record)


def test_open_transaction_is_not_expired(harness):
    _, log = newLog(harness)
    begin(log)
    assert log.expireProducers(NOW + 10 * 86_400_000) == 0
    marker(log, commit=True)
    assert log.expireProducers(NOW + 10 * 86_400_000) == 1


def test_read_committed_across_segments(harness):
    _, log = newLog(harness)
    begin(log)          # 0-1
    log.roll(NOW)
    log.append(txn(2), NOW)  # 2-3
    log.roll(NOW)
    log.append(plain(), NOW)  # 4
    assert log.lastStableOffset == 0
    marker(log, commit=False)  # 5, in the third segment
    assert log.lastStableOffset == 6
    # From the first segment: its batches, and the abort found in the
    # third segment's index.
    assert committedOffsets(log, 0) == ([0], ((P1, 0),))
    assert committedOffsets(log, 2) == ([2], ((P1, 0),))
    assert committedOffsets(log, 5) == ([5], ((P1, 0),))


def test_read_committed_stops_at_the_last_stable_offset_inside_a_segment(harness):
    _, log = newLog(harness)
    for _ in range(3):
        log.append(plain(), NOW)
    begin(log, pid=P1)
    log.append(plain(), NOW)
    offsets, aborted = committedOffsets(log)
    assert offsets == [0, 1, 2] and aborted == ()


# -- on disk -------------------------------------------------------------------------------


def test_index_file_and_clean_restart(disk):
    manager, log = newLog(disk)
    begin(log)
    marker(log, commit=False)
    begin(log, seq=2, pid=P1)  # open at the restart
    assert txnIndexFiles(disk) == ["00000000000000000000.txnindex"]
    manager = disk.restart(manager)
    log = manager.getLog("t", 0)
    assert log.lastStableOffset == 3
    assert log.producerState.ongoing == {P1: 3}
    assert committedOffsets(log) == ([0, 2], ((P1, 0),))
    marker(log, commit=True)
    assert log.lastStableOffset == log.logEndOffset == 6


@pytest.mark.parametrize("rolled", [False, True])
def test_crash_rebuilds_index_and_open_transactions(disk, rolled):
    manager, log = newLog(disk)
    begin(log, pid=P2)  # 0-1, open across the crash
    if rolled:
        log.roll(NOW)
    begin(log, pid=P1)  # 2-3
    marker(log, commit=False)  # 4
    log.flush()
    path = os.path.join(disk.directory, "t-0", txnIndexFiles(disk)[-1])
    os.unlink(path)
    manager = disk.restart(manager, clean=False)
    log = manager.getLog("t", 0)
    assert log.producerState.ongoing == {P2: 0}
    assert log.lastStableOffset == 0
    marker(log, commit=True, pid=P2)
    assert log.lastStableOffset == log.logEndOffset
    offsets, aborted = committedOffsets(log, 2)
    assert aborted == ((P1, 2),)


def test_damaged_index_is_rebuilt(disk, capturedLog):
    manager, log = newLog(disk)
    begin(log)
    marker(log, commit=False)
    manager.close()
    path = os.path.join(disk.directory, "t-0", "00000000000000000000.txnindex")
    with open(path, "ab") as f:
        f.write(b"\x00" * 5)
    manager = disk.make(disk.defaults, **disk.kw)
    log = manager.getLog("t", 0)
    assert capturedLog.count("rebuilding the aborted-transaction indexes") == 1
    assert committedOffsets(log) == ([0, 2], ((P1, 0),))
    assert decodeEntries(open(path, "rb").read()) == [AbortedTxn(P1, 0, 2, 3)]


def test_retention_deletes_index_files(disk):
    manager, log = newLog(disk)
    begin(log)
    marker(log, commit=False)
    log.roll(NOW)
    log.append(plain(), NOW)
    log.roll(NOW)
    log.deleteRecordsBefore(4)
    assert txnIndexFiles(disk) == []


# -- formats -----------------------------------------------------------------------------


def test_txn_index_format(tmp_path):
    path = str(tmp_path / "x.txnindex")
    index = TransactionIndex(0, path)
    index.append(AbortedTxn(1, 0, 5, 6))
    index.append(AbortedTxn(2, 3, 9, 10))
    data = open(path, "rb").read()
    assert len(data) == 68 and data[:2] == b"\x00\x00"
    with pytest.raises(ValueError):
        index.append(AbortedTxn(3, 0, 9, 10))
    assert TransactionIndex(0, path).collect(6, 100) == ([AbortedTxn(2, 3, 9, 10)], False)
    assert TransactionIndex(0, path).collect(0, 4) == ([AbortedTxn(1, 0, 5, 6)], True)
    index.truncateTo(9)
    assert TransactionIndex(0, path).entries == (AbortedTxn(1, 0, 5, 6),)
    with pytest.raises(CorruptTxnIndex):
        decodeEntries(b"\x01" + data[1:34])


def test_snapshot_carries_transactions():
    entry = ProducerStateEntry(P1, 2, [], NOW, coordinatorEpoch=4, currentTxnFirstOffset=17)
    state = ProducerStateManager()
    state.loadSnapshot(encodeSnapshot([entry, ProducerStateEntry(P2, 0, [], NOW)]))
    assert state.get(P1) == entry
    assert state.ongoing == {P1: 17} and state.firstUnstableOffset == 17


def test_snapshot_version1_loads_with_no_open_transactions():
    import struct

    from crc32c import crc32c

    body = struct.pack(">i", 1) + struct.pack(">qhqb", P1, 3, NOW, 0)
    data = struct.pack(">4shI", b"KTPS", 1, crc32c(body)) + body
    (entry,) = decodeSnapshot(data)
    assert (entry.producerId, entry.epoch, entry.currentTxnFirstOffset) == (P1, 3, -1)


# -- compaction ------------------------------------------------------------------------------


def _keyedTxn(log, pid, key, value, seq=0):
    from kafkatwist.protocol.records import Record, buildBatch

    batch = buildBatch(
        [Record(timestamp=NOW, key=key, value=value)], producerId=pid, producerEpoch=0,
        baseSequence=seq, isTransactional=True,
    )
    guard = log.producerState.newGuard(pid)
    return log.append(batch, NOW, verificationGuard=guard).firstOffset


@pytest.mark.parametrize("inProcess", [True, False])
def test_compaction_drops_aborted_records(harness, inProcess):
    """
    An aborted record must not hide the committed value of its key, and
    goes; markers and committed records stay; the aborted transaction is
    still indexed for readers of what is left; nothing past the last
    stable offset is cleaned.
    """
    if not inProcess and not harness.onDisk:
        pytest.skip("the in-memory log cleans in-process")
    from tests.log.compacted import append as appendKeyed, readAll
    from tests.log.test_cleaner import COMPACT, cleaner

    manager = harness.make()
    manager.createTopic("c", 1, COMPACT)
    log = manager.getLog("c", 0)
    appendKeyed(log, [("k", "good")], NOW)                 # 0
    _keyedTxn(log, P1, b"k", b"bad")                       # 1
    log.appendMarker(P1, 0, False, 0, NOW)                 # 2: abort
    _keyedTxn(log, P2, b"j", b"committed")                 # 3
    log.appendMarker(P2, 0, True, 0, NOW)                  # 4: commit
    log.roll(NOW)
    _keyedTxn(log, P2, b"k", b"open", seq=1)               # 5: still open
    log.roll(NOW)
    appendKeyed(log, [("k", "after")], NOW)                # 6
    log.roll(NOW)
    appendKeyed(log, [("x", "active")], NOW)
    c = cleaner(manager, inProcess=inProcess)
    try:
        assert c.cleanOnce() is not None
    finally:
        c.stop()
    kept = [(o, k, v) for o, k, v in readAll(log)]
    values = [(k, v) for _, k, v in kept]
    assert (b"k", b"good") in values and (b"k", b"bad") not in values
    assert (b"j", b"committed") in values
    # The open transaction's record is not cleaned (nor anything after the
    # last stable offset), and markers stay.
    assert (b"k", b"open") in values and (b"k", b"after") in values
    markers = [h.baseOffset for _, h in iterBatchHeaders(records(log.read(0, 1 << 30).records))
               if h.attributes & CONTROL_BIT]
    assert markers == [2, 4]
    log.appendMarker(P2, 0, True, 0, NOW)
    assert committedOffsets(log)[1] == ((P1, 1),)


def test_stale_index_file_of_a_truncated_segment_is_not_reused(disk):
    """
    Recovery may truncate segments away and a later roll reuse a base
    offset: an index file left under that name must not come back.
    """
    manager, log = newLog(disk)
    log.append(plain(3), NOW)
    stale = os.path.join(disk.directory, "t-0", "00000000000000000003.txnindex")
    with open(stale, "wb") as f:
        f.write(AbortedTxn(99, 0, 50, 51).encode())
    log.roll(NOW)
    begin(log)
    marker(log, commit=False)
    assert log.txnIndexOf(log.activeSegment).entries == (AbortedTxn(P1, 3, 5, 6),)
    assert committedOffsets(log, 3)[1] == ((P1, 3),)
