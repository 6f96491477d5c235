"""
The group coordinator's state machine with plain inputs and outputs: no
clock, no log, no threads -- the effects it returns are the whole story.
"""

from __future__ import annotations

from kafkatwist.coordinator import (
    CommitRequest,
    GroupCoordinator,
    JoinRequest,
    OffsetAndMetadata,
    SyncRequest,
)
from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer
from kafkatwist.coordinator.formats import decodeKey, partitionFor

from .helpers import E, sub


def machine(**kw):
    kw.setdefault("initialRebalanceDelayMs", 3000)
    ids = iter(range(1000))
    return GroupCoordinator(numPartitions=5, newMemberId=lambda: str(next(ids)), **kw)


def joinRequest(member="", group="g", **kw):
    kw.setdefault("protocols", (("range", sub("t")),))
    return JoinRequest(group, member, None, "c", "/h", 30000, 10000, "consumer", **kw)


def only(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def answers(effects):
    return {e.replyTo: e.result for e in only(effects, Respond)}


def stable(m, now=0):
    """
    One member through the initial delay, sync and the group record.

    @return: member id, generation.
    """
    m.joinGroup(now, "join", joinRequest())
    joined = answers(m.timerFired(now + 3000, ("join", "g")))["join"]
    fx = m.syncGroup(now + 3000, "sync", SyncRequest("g", joined.generationId, joined.memberId, assignments={joined.memberId: b"a"}))
    (append,) = only(fx, Append)
    assert answers(m.appendCompleted(now + 3000, append.token, E.none))["sync"].errorCode == E.none
    return joined.memberId, joined.generationId


def test_first_join_arms_the_initial_delay_and_answers_nothing_yet():
    m = machine()
    fx = m.joinGroup(0, "r1", joinRequest())
    assert only(fx, Respond) == []
    assert SetTimer(("join", "g"), 3000) in fx
    # The new member's session runs on the (long) new-member timeout.
    assert SetTimer(("heartbeat", "g", "c-0"), 5 * 60 * 1000) in fx
    fx = m.timerFired(3000, ("join", "g"))
    result = answers(fx)["r1"]
    assert (result.errorCode, result.generationId, result.leaderId) == (E.none, 1, "c-0")
    # Now the member's own session timeout: an earlier deadline, re-armed.
    assert SetTimer(("heartbeat", "g", "c-0"), 10000) in fx
    assert SetTimer(("sync", "g"), 30000) in fx


def test_leader_assignment_takes_effect_when_its_record_is_appended():
    m = machine()
    m.joinGroup(0, "join", joinRequest())
    joined = answers(m.timerFired(3000, ("join", "g")))["join"]
    fx = m.syncGroup(3000, "sync", SyncRequest("g", 1, joined.memberId, assignments={joined.memberId: b"a"}))
    (append,) = only(fx, Append)
    assert only(fx, Respond) == []
    assert append.partition == partitionFor("g", 5)
    ((key, value),) = append.records
    assert decodeKey(key) == ("group", "g") and value is not None
    # Not Stable before the append finished.
    assert answers(m.describeGroups(3001, "d", ["g"]))["d"][0].state == "CompletingRebalance"
    fx = m.appendCompleted(3002, append.token, E.none)
    assert answers(fx)["sync"].assignment == b"a"
    assert answers(m.describeGroups(3003, "d", ["g"]))["d"][0].state == "Stable"


def test_failed_assignment_append_answers_mapped_error_and_rebalances():
    m = machine()
    m.joinGroup(0, "join", joinRequest())
    joined = answers(m.timerFired(3000, ("join", "g")))["join"]
    (append,) = only(m.syncGroup(3000, "sync", SyncRequest("g", 1, joined.memberId)), Append)
    fx = m.appendCompleted(3001, append.token, E.kafka_storage_error)
    assert answers(fx)["sync"].errorCode == E.not_coordinator
    assert answers(m.describeGroups(3002, "d", ["g"]))["d"][0].state == "PreparingRebalance"


def test_heartbeat_costs_no_timer_effect():
    m = machine()
    member, gen = stable(m)
    for t in (4000, 7000, 10000):
        fx = m.heartbeat(t, "hb", "g", gen, member)
        assert fx == [Respond("hb", E.none)]
    # The timer armed at the sync (due at 13000) fires before the deadline
    # the heartbeats moved (20000), and re-arms for the rest.
    fx = m.timerFired(13000, ("heartbeat", "g", member))
    assert fx == [SetTimer(("heartbeat", "g", member), 7000)]


def test_session_expiry_empties_the_group_and_stores_it():
    m = machine()
    member, gen = stable(m)
    fx = m.timerFired(13000, ("heartbeat", "g", member))
    (append,) = only(fx, Append)
    ((key, value),) = append.records
    assert decodeKey(key) == ("group", "g")
    assert answers(m.describeGroups(13000, "d", ["g"]))["d"][0].state == "Empty"
    assert answers(m.heartbeat(13001, "hb", "g", gen, member))["hb"] == E.unknown_member_id


def test_commit_is_visible_once_appended():
    m = machine()
    request = CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(5)})
    fx = m.commitOffsets(100, "commit", request)
    (append,) = only(fx, Append)
    assert only(fx, Respond) == []
    assert answers(m.fetchOffsets(101, "f", "s", None))["f"].offsets == {}
    assert m.publishedGroups()["s"].offsets == {}
    fx = m.appendCompleted(102, append.token, E.none)
    assert answers(fx) == {"commit": {("t", 0): E.none}}
    assert answers(m.fetchOffsets(103, "f", "s", None))["f"].offsets[("t", 0)].offset == 5
    assert dict(m.publishedGroups()["s"].offsets) == {("t", 0): 5}


def test_commit_completing_after_offset_delete_is_not_applied():
    m = machine()
    (first,) = only(m.commitOffsets(0, "c1", CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(1)})), Append)
    (second,) = only(m.commitOffsets(1, "c2", CommitRequest("s", -1, "", None, {("t", 1): OffsetAndMetadata(2)})), Append)
    # Delete before either append completed: the tombstones go after the
    # commits (same partition, in order), and so does memory.
    fx = m.deleteOffsets(2, "del", "s", [("t", 1)])
    (tombstones,) = only(fx, Append)
    assert tombstones.partition == first.partition
    m.appendCompleted(3, first.token, E.none)
    assert answers(m.appendCompleted(4, second.token, E.none)) == {"c2": {("t", 1): E.none}}
    m.appendCompleted(5, tombstones.token, E.none)
    assert set(answers(m.fetchOffsets(6, "f", "s", None))["f"].offsets) == {("t", 0)}


def test_delete_group_tombstones_committed_and_pending_offsets():
    m = machine()
    (committed,) = only(m.commitOffsets(0, "c", CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(1)})), Append)
    m.appendCompleted(1, committed.token, E.none)
    m.commitOffsets(2, "c", CommitRequest("s", -1, "", None, {("t", 1): OffsetAndMetadata(1)}))
    fx = m.deleteGroups(3, "del", ["s"])
    assert only(fx, Respond) == []
    (append,) = only(fx, Append)
    assert [decodeKey(k) for k, v in append.records] == [
        ("offset", "s", ("t", 0)),
        ("offset", "s", ("t", 1)),
        ("group", "s"),
    ]
    assert all(v is None for _, v in append.records)
    assert answers(m.appendCompleted(4, append.token, E.none)) == {"del": {"s": E.none}}
    assert "s" not in m.publishedGroups()


def test_pending_member_timer_and_cancellation():
    m = machine(initialRebalanceDelayMs=0)
    fx = m.joinGroup(0, "r", joinRequest(requireKnownMemberId=True))
    assert answers(fx)["r"].errorCode == E.member_id_required
    assert SetTimer(("pending-member", "g", "c-0"), 10000) in fx
    fx = m.joinGroup(1, "r2", joinRequest("c-0", requireKnownMemberId=True))
    assert CancelTimer(("pending-member", "g", "c-0")) in fx


def test_shutdown_answers_parked_and_disarms():
    m = machine()
    m.load(0, [], {})
    m.joinGroup(0, "r", joinRequest())
    fx = m.shutdown(1)
    assert answers(fx)["r"].errorCode == E.not_coordinator
    assert {e.key for e in only(fx, CancelTimer)} >= {
        ("join", "g"),
        ("heartbeat", "g", "c-0"),
        ("offsets-expiry",),
    }
    assert answers(m.joinGroup(2, "r2", joinRequest()))["r2"].errorCode == E.coordinator_not_available


def test_expiry_leaves_a_partition_with_a_commit_on_its_way():
    m = machine(offsetsRetentionMinutes=1)
    (old,) = only(m.commitOffsets(0, "c", CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(1)})), Append)
    m.appendCompleted(0, old.token, E.none)
    (new,) = only(m.commitOffsets(60000, "c", CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(2)})), Append)
    assert answers(m.expireOffsets(60000, "x")) == {"x": 0}
    m.appendCompleted(60001, new.token, E.none)
    assert answers(m.fetchOffsets(60002, "f", "s", None))["f"].offsets[("t", 0)].offset == 2
