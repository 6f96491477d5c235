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
from .helpers import NOW, P1, P2, newLog, txn



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
    from .helpers import COMPACT, cleaner

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


def _markerBatches(log):
    from tests.log.compacted import readBatches

    return [b for b in readBatches(log) if b.attributes & CONTROL_BIT]


@pytest.mark.parametrize("inProcess", [True, False])
def test_compaction_removes_markers_after_delete_retention(harness, inProcess):
    """
    Kafka's LogCleaner rules for markers: an ABORT marker stays while its
    transaction's data is there, a COMMIT marker while the pass saw any of
    its transaction's batches; once removable a marker gets a delete
    horizon (KIP-534), and a pass after it drops the marker.  The aborted
    transaction's index entry leaves with its data, so a read_committed
    read of what is left loses none of the producer's later, committed
    records; and a restart that rebuilds the producers from the log finds
    no open transaction (the last stable offset is the log end).
    """
    if not inProcess and not harness.onDisk:
        pytest.skip("the in-memory log cleans in-process")
    from tests.log.compacted import append as appendKeyed, readAll
    from .helpers import COMPACT, cleaner
    from kafkatwist.log.compaction import DELETE_HORIZON_BIT

    manager = harness.make()
    manager.createTopic("c", 1, dict(COMPACT, **{"delete.retention.ms": "1000"}))
    log = manager.getLog("c", 0)
    appendKeyed(log, [("k", "good")], NOW)                 # 0
    _keyedTxn(log, P1, b"k", b"bad")                       # 1: aborted
    marker(log, False, pid=P1)                             # 2: ABORT
    _keyedTxn(log, P2, b"j", b"old")                       # 3: committed, superseded
    marker(log, True, pid=P2)                              # 4: COMMIT
    appendKeyed(log, [("j", "new")], NOW)                  # 5
    _keyedTxn(log, P1, b"y", b"p1-later", seq=1)           # 6: P1's later committed txn
    marker(log, True, pid=P1)                              # 7
    _keyedTxn(log, P2, b"x", b"p2-later", seq=1)           # 8
    marker(log, True, pid=P2)                              # 9
    log.roll(NOW)
    appendKeyed(log, [("z", "active")], NOW)               # 10

    def markers():
        return {b.baseOffset: bool(b.attributes & DELETE_HORIZON_BIT) for b in _markerBatches(log)}

    def dirty(value):
        appendKeyed(log, [("z", value)], NOW)
        log.roll(NOW)

    now = [NOW]
    c = cleaner(manager, inProcess=inProcess, clock=lambda: now[0])
    try:
        # Pass 1: the aborted record and the superseded committed one go;
        # both markers stay (their transactions' batches were seen), the
        # aborted transaction stays indexed.
        assert c.cleanOnce() is not None
        values = [(k, v) for _, k, v in readAll(log)]
        assert (b"k", b"bad") not in values and (b"j", b"old") not in values
        assert markers() == {2: False, 4: False, 7: False, 9: False}
        assert log.abortedTransactions(1 << 30) == [(P1, 1, 2)]
        # Pass 2: their data is gone: both get a horizon, the index entry goes.
        dirty("1")
        now[0] = NOW + 10
        assert c.cleanOnce() is not None
        assert markers() == {2: True, 4: True, 7: False, 9: False}
        assert log.abortedTransactions(1 << 30) == []
        # A reader in the meantime still sees no aborted record.
        offsets, aborted = committedOffsets(log)
        assert 1 not in offsets and aborted == ()
        # Before the horizon they stay; after it they go.
        dirty("2")
        now[0] = NOW + 500
        c.cleanOnce()
        assert set(markers()) == {2, 4, 7, 9}
        dirty("3")
        now[0] = NOW + 10 + 1000
        assert c.cleanOnce() is not None
        assert markers() == {7: False, 9: False}
    finally:
        c.stop()
    values = [(k, v) for _, k, v in readAll(log)]
    assert (b"y", b"p1-later") in values and (b"x", b"p2-later") in values
    assert (b"k", b"good") in values and (b"j", b"new") in values
    info = log.read(0, 1 << 30, readCommitted=True)
    assert info.abortedTransactions == ()
    assert log.lastStableOffset == log.logEndOffset
    if harness.onDisk:
        # Rebuilt from the log (no snapshot): no transaction left open.
        manager = harness.restart(manager, clean=False)
        log = manager.getLog("c", 0)
        assert log.lastStableOffset == log.logEndOffset
        assert log.abortedTransactions(1 << 30) == []


def test_marker_of_a_producer_without_data_stays(harness):
    """
    A producer whose last batch is a marker of a newer epoch (a timeout
    abort bumps it) keeps that marker: it carries the epoch that fences
    the producer's zombie after a restart.
    """
    from tests.log.compacted import append as appendKeyed
    from .helpers import COMPACT, cleaner

    manager = harness.make()
    manager.createTopic("c", 1, dict(COMPACT, **{"delete.retention.ms": "0"}))
    log = manager.getLog("c", 0)
    _keyedTxn(log, P1, b"k", b"bad")                       # 0
    log.appendMarker(P1, 1, False, 0, NOW)                 # 1: ABORT, epoch bumped
    appendKeyed(log, [("k", "good")], NOW)                 # 2
    log.roll(NOW)
    appendKeyed(log, [("z", "active")], NOW)
    now = [NOW]
    c = cleaner(manager, clock=lambda: now[0])
    try:
        for step in range(4):
            now[0] = NOW + 10 * step
            appendKeyed(log, [("z", str(step))], NOW)
            log.roll(NOW)
            c.cleanOnce()
    finally:
        c.stop()
    assert [b.baseOffset for b in _markerBatches(log)] == [1]
    assert log.producerState.get(P1).epoch == 1


def test_list_offsets_answers_the_last_stable_offset_to_read_committed(harness):
    """
    ListOffsets: latest is the last stable offset for read_committed, and
    a timestamp lookup never answers an offset at or past it (Kafka's
    lastFetchableOffset).
    """
    from kafkatwist.plugins.list_offsets import LATEST, ListOffsetsHandler

    manager, log = newLog(harness)
    log.append(makeBatch(2, baseTimestamp=NOW - 100), NOW)   # 0-1
    begin(log, pid=P1)                                        # 2-3: open, at NOW
    lookup = ListOffsetsHandler.lookup
    assert lookup(log, LATEST, True) == (-1, 2)
    assert lookup(log, LATEST, False) == (-1, 4)
    assert lookup(log, NOW - 100, True)[1] == 0
    assert lookup(log, NOW, False)[1] == 2
    assert lookup(log, NOW, True) == (-1, -1)
    marker(log, commit=True)                                  # 4
    assert lookup(log, LATEST, True) == (-1, 5)
    assert lookup(log, NOW, True)[1] == 2
