"""
Offsets committed inside transactions, in the group coordinator: pending
until the transaction's marker, UNSTABLE_OFFSET_COMMIT for require_stable
meanwhile, visible on commit and dropped on abort, never winning over a
newer commit, fenced by the log's epoch check, and the same after a
restart.
"""

from __future__ import annotations

from kafkatwist.coordinator import OffsetAndMetadata
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.coordinator.txnoffsets import TxnCommitRequest
from kafkatwist.errors import ErrorCode

from .helpers import Harness

E = ErrorCode
PID, EPOCH = 500, 3
TP = ("t1", 0)


def txnCommit(h, offsets, pid=PID, epoch=EPOCH, group="g", generation=-1, member=""):
    return h.coord.commitTransactionalOffsets(
        TxnCommitRequest(
            group, pid, epoch,
            {tp: OffsetAndMetadata(o) for tp, o in offsets.items()},
            generationId=generation, memberId=member,
        )
    )


def marker(h, commit, pid=PID, epoch=EPOCH, group="g"):
    partition = h.service.machine.partitionOf(group)
    return h.coord.completeTransaction(partition, pid, epoch, commit, 0)


def fetched(h, tp=TP, group="g", requireStable=False):
    result = h.coord.fetchOffsets(group, [tp], requireStable)
    got = result.offsets[tp]
    return got.offset, got.errorCode


def reloaded(h):
    pending: dict = {}
    _, offsets = loadGroups(h.log, pendingTxn=pending)
    return offsets, pending


def test_pending_until_committed():
    h = Harness()
    assert txnCommit(h, {TP: 10}) == {TP: E.none}
    assert fetched(h) == (-1, E.none)
    assert fetched(h, requireStable=True) == (-1, E.unstable_offset_commit)
    # Another partition of the group is stable.
    assert fetched(h, ("t1", 1), requireStable=True) == (-1, E.none)
    assert marker(h, commit=True) == E.none
    assert fetched(h, requireStable=True) == (10, E.none)


def test_abort_drops_them():
    h = Harness()
    h.commit({TP: 5})
    txnCommit(h, {TP: 10})
    assert marker(h, commit=False) == E.none
    assert fetched(h, requireStable=True) == (5, E.none)


def test_newer_plain_commit_wins():
    h = Harness()
    txnCommit(h, {TP: 10})
    h.commit({TP: 20})
    marker(h, commit=True)
    assert fetched(h) == (20, E.none)
    offsets, pending = reloaded(h)
    assert offsets["g"][TP].offset == 20 and pending == {}


def test_older_transaction_loses_to_newer():
    h = Harness()
    txnCommit(h, {TP: 10}, pid=1, epoch=0)
    txnCommit(h, {TP: 20}, pid=2, epoch=0)
    marker(h, True, pid=2, epoch=0)
    marker(h, True, pid=1, epoch=0)
    assert fetched(h) == (20, E.none)
    assert reloaded(h)[0]["g"][TP].offset == 20


def test_member_checks_with_generation():
    h = Harness()
    members, generation = h.stableGroup(1)
    assert txnCommit(h, {TP: 1}, generation=generation + 1, member=members[0]) == {
        TP: E.illegal_generation
    }
    assert txnCommit(h, {TP: 1}, generation=generation, member="nobody") == {
        TP: E.unknown_member_id
    }
    assert txnCommit(h, {TP: 1}, generation=generation, member=members[0]) == {TP: E.none}
    # Unknown group with a generation: a stale member.
    assert txnCommit(h, {TP: 1}, group="other", generation=1, member="m") == {
        TP: E.illegal_generation
    }


def test_fenced_epoch_is_refused_by_the_log():
    h = Harness()
    txnCommit(h, {TP: 10}, epoch=EPOCH)
    marker(h, commit=False, epoch=EPOCH + 1)
    assert txnCommit(h, {TP: 11}, epoch=EPOCH) == {TP: E.invalid_producer_epoch}


def test_restart():
    h = Harness()
    txnCommit(h, {TP: 10}, pid=1, epoch=0)
    marker(h, True, pid=1, epoch=0)
    txnCommit(h, {("t1", 1): 7}, pid=2, epoch=0)
    marker(h, False, pid=2, epoch=0)
    txnCommit(h, {("t1", 2): 9}, pid=3, epoch=0)
    offsets, pending = reloaded(h)
    assert offsets["g"] == {TP: OffsetAndMetadata(10, commitTimestampMs=offsets["g"][TP].commitTimestampMs)}
    assert list(pending) == [3] and pending[3]["g"][("t1", 2)][0].offset == 9
    again = Harness(log=h.log)
    again.service.load()
    assert fetched(again) == (10, E.none)
    assert fetched(again, ("t1", 2), requireStable=True) == (-1, E.unstable_offset_commit)
    assert marker(again, True, pid=3, epoch=0) == E.none
    assert fetched(again, ("t1", 2), requireStable=True) == (9, E.none)


def test_deleted_offsets_take_pending_ones_along():
    h = Harness()
    txnCommit(h, {TP: 10})
    result = h.coord.deleteOffsets("g", [TP])
    assert result.errorCode == E.none
    assert fetched(h, requireStable=True) == (-1, E.none)
    marker(h, commit=True)
    assert fetched(h) == (-1, E.none)
