"""
JoinGroup / SyncGroup / Heartbeat / LeaveGroup state machine tests on a
fake clock.
"""

from __future__ import annotations

from kafkatwist.coordinator import JoinGroupMember, JoinRequest, SyncRequest

from .helpers import E, sub

# -- initial rebalance delay --------------------------------------------------


def test_first_join_waits_for_initial_delay(harness):
    h = harness(initialRebalanceDelayMs=3000)
    a = h.join()
    assert h.state() == "PreparingRebalance"
    h.advance(2999)
    assert not a.fired
    h.advance(1)
    r = a.value
    assert r.errorCode == E.none
    assert r.generationId == 1
    assert r.leaderId == r.memberId
    assert r.protocolType == "consumer" and r.protocolName == "range"
    assert r.members == (JoinGroupMember(r.memberId, None, sub("t1")),)
    assert r.memberId.startswith("client-")
    assert h.state() == "CompletingRebalance"
    s = h.sync(r.memberId, 1, {r.memberId: b"assignment"})
    assert s.value.errorCode == E.none and s.value.assignment == b"assignment"
    assert s.value.protocolType == "consumer" and s.value.protocolName == "range"
    assert h.state() == "Stable"


def test_initial_delay_extended_by_new_members(harness):
    h = harness(initialRebalanceDelayMs=3000)
    a = h.join()
    h.advance(2000)
    b = h.join()
    h.advance(1000)  # t=3000: B arrived meanwhile, so wait another delay
    assert not a.fired and not b.fired
    h.advance(3000)  # t=6000
    ra, rb = a.value, b.value
    assert ra.generationId == rb.generationId == 1
    assert ra.leaderId == rb.leaderId == ra.memberId
    assert {m.memberId for m in ra.members} == {ra.memberId, rb.memberId}
    assert rb.members == ()


def test_initial_delay_capped_by_rebalance_timeout(harness):
    h = harness(initialRebalanceDelayMs=3000)
    a = h.join(rebalance=5000)
    h.advance(1000)
    h.join(rebalance=5000)
    h.advance(2000)  # t=3000: extend by min(3000, 2000)
    h.advance(1000)
    h.join(rebalance=5000)  # t=4000: another arrival; no time left to extend
    h.advance(999)
    assert not a.fired
    h.advance(1)  # t=5000
    assert a.value.generationId == 1
    assert len(a.value.members) == 3


# -- joining and rejoining ------------------------------------------------------


def test_second_member_joins_stable_group(h):
    (a,), gen = h.stableGroup(1)
    b = h.join(clientId="other")
    assert h.state() == "PreparingRebalance"
    assert not b.fired
    assert h.heartbeat(a, gen) == E.rebalance_in_progress
    ra = h.join(member=a)
    rb = b.value
    assert ra.value.generationId == rb.generationId == gen + 1
    assert ra.value.leaderId == a
    assert len(ra.value.members) == 2 and rb.members == ()
    assert rb.memberId.startswith("other-")


def test_member_joining_during_rebalance_is_included(h):
    (a, b), gen = h.stableGroup(2)
    ra = h.join(member=a)  # the leader rejoining starts a rebalance
    c = h.join()
    assert not ra.fired and not c.fired
    rb = h.join(member=b)
    assert ra.value.generationId == rb.value.generationId == c.value.generationId == gen + 1
    assert len(ra.value.members) == 3


def test_members_that_do_not_rejoin_are_removed_after_rebalance_timeout(h):
    (a, b), gen = h.stableGroup(2, rebalance=20000)
    c = h.join(rebalance=20000)
    ra = h.join(member=a, rebalance=20000)
    # B stays alive by heartbeating, but never rejoins.
    for _ in range(6):
        h.advance(3000)
        assert h.heartbeat(b, gen) == E.rebalance_in_progress
    assert not ra.fired
    h.advance(2000)  # 20 s after the rebalance started
    assert ra.value.generationId == gen + 1
    assert {m.memberId for m in ra.value.members} == {a, c.value.memberId}
    assert h.heartbeat(b, gen) == E.unknown_member_id


def test_follower_rejoin_with_same_metadata_in_stable_returns_current_generation(h):
    (a, b), gen = h.stableGroup(2)
    rb = h.join(member=b)
    assert rb.value.errorCode == E.none and rb.value.generationId == gen
    assert rb.value.leaderId == a and rb.value.members == ()
    assert h.state() == "Stable"
    # ... and its SyncGroup in Stable returns its assignment.
    assert h.sync(b, gen).value.assignment == b.encode()


def test_rejoin_in_completing_rebalance_with_same_metadata(h):
    a = h.join()
    gen = a.value.generationId
    again = h.join(member=a.value.memberId)
    assert again.value.generationId == gen
    assert again.value.members == a.value.members  # still the leader
    assert h.state() == "CompletingRebalance"


def test_changed_metadata_triggers_rebalance(h):
    (a, b), gen = h.stableGroup(2)
    rb = h.join(member=b, protocols=[("range", sub("t1", "t2"))])
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(a, gen) == E.rebalance_in_progress
    ra = h.join(member=a)
    assert ra.value.generationId == rb.value.generationId == gen + 1


def test_rejoin_after_rebalance_with_old_generation(h):
    (a, b), gen = h.stableGroup(2)
    ra = h.join(member=a)
    rb = h.join(member=b)
    gen2 = ra.value.generationId
    assert gen2 == gen + 1 and rb.value.generationId == gen2
    # B acts on the old generation: refused everywhere.
    assert h.heartbeat(b, gen) == E.illegal_generation
    assert h.sync(b, gen).value.errorCode == E.illegal_generation
    assert h.commit({("t1", 0): 5}, member=b, generation=gen) == {("t1", 0): E.illegal_generation}
    # With the new one all is well.
    assert h.heartbeat(b, gen2) == E.none


def test_join_unknown_member_id(h):
    # Unknown group with a member id: stale member.
    assert h.join(member="ghost").value.errorCode == E.unknown_member_id
    (_a,), _gen = h.stableGroup(1)
    r = h.join(member="ghost")
    assert r.value.errorCode == E.unknown_member_id
    assert r.value.memberId == "ghost" and r.value.generationId == -1


def test_request_validation_errors(h):
    assert h.join(session=5999).value.errorCode == E.invalid_session_timeout
    assert h.join(session=1800001).value.errorCode == E.invalid_session_timeout
    assert h.join(group="").value.errorCode == E.invalid_group_id
    assert h.heartbeat("m", 1, group="") == E.invalid_group_id
    assert h.sync("m", 1, group="").value.errorCode == E.invalid_group_id
    assert h.heartbeat("m", 1, group="nope") == E.unknown_member_id
    assert h.sync("m", 1, group="nope").value.errorCode == E.unknown_member_id


def test_sync_and_heartbeat_unknown_member(h):
    (_a,), gen = h.stableGroup(1)
    assert h.heartbeat("ghost", gen) == E.unknown_member_id
    assert h.sync("ghost", gen).value.errorCode == E.unknown_member_id


def test_sync_during_preparing_rebalance(h):
    (a, b), gen = h.stableGroup(2)
    h.join(member=a)
    assert h.sync(b, gen).value.errorCode == E.rebalance_in_progress


def test_sync_protocol_checks(h):
    a = h.join().value
    m = a.memberId
    assert h.sync(m, 1, ptype="connect").value.errorCode == E.inconsistent_group_protocol
    assert h.sync(m, 1, pname="roundrobin").value.errorCode == E.inconsistent_group_protocol
    ok = h.sync(m, 1, {m: b"x"}, ptype="consumer", pname="range").value
    assert ok.errorCode == E.none and ok.assignment == b"x"


def test_follower_waits_for_leader_and_missing_assignment_is_empty(h):
    a = h.join()
    b = h.join()
    ra = h.join(member=a.value.memberId)
    gen, leader, follower = ra.value.generationId, ra.value.memberId, b.value.memberId
    fs = h.sync(follower, gen)
    assert not fs.fired
    assert h.heartbeat(follower, gen) == E.none  # normal while completing
    ls = h.sync(leader, gen, {leader: b"L", "stranger": b"?"})
    assert ls.value.assignment == b"L"
    assert fs.value.errorCode == E.none and fs.value.assignment == b""


def test_rebalance_while_completing_fails_parked_syncs(h):
    a = h.join()
    b = h.join()
    ra = h.join(member=a.value.memberId)
    gen = ra.value.generationId
    fs = h.sync(b.value.memberId, gen)
    h.join()  # a new member arrives before the leader syncs
    assert fs.value.errorCode == E.rebalance_in_progress
    assert h.state() == "PreparingRebalance"


# -- protocol selection ----------------------------------------------------------


def _protocols(*names):
    return [(n, sub("t1")) for n in names]


def test_protocol_selection_by_votes(h):
    a = h.join(protocols=_protocols("range", "roundrobin"))
    b = h.join(protocols=_protocols("range", "roundrobin"))
    c = h.join(protocols=_protocols("roundrobin", "range"))
    ra = h.join(member=a.value.memberId, protocols=_protocols("range", "roundrobin"))
    assert ra.value.protocolName == "range"
    assert b.value.protocolName == c.value.protocolName == "range"


def test_protocol_selection_only_among_common_protocols(h):
    a = h.join(protocols=_protocols("range", "roundrobin"))
    h.join(protocols=_protocols("range", "roundrobin"))
    h.join(protocols=_protocols("roundrobin"))
    ra = h.join(member=a.value.memberId, protocols=_protocols("range", "roundrobin"))
    assert ra.value.protocolName == "roundrobin"


def test_inconsistent_group_protocol(h):
    (_a,), _gen = h.stableGroup(1, protocols=_protocols("range", "roundrobin"))
    r = h.join(protocols=_protocols("sticky"))
    assert r.value.errorCode == E.inconsistent_group_protocol
    assert r.value.memberId == ""
    r = h.join(protocols=_protocols("range"), ptype="connect")
    assert r.value.errorCode == E.inconsistent_group_protocol
    # A new group needs a protocol type and at least one protocol.
    assert h.join(group="g2", ptype="").value.errorCode == E.inconsistent_group_protocol
    assert h.join(group="g3", protocols=[]).value.errorCode == E.inconsistent_group_protocol
    assert h.state() == "Stable"


# -- MEMBER_ID_REQUIRED -------------------------------------------------------------


def test_member_id_required_flow(h):
    first = h.join(requireKnown=True)
    assert first.value.errorCode == E.member_id_required
    memberId = first.value.memberId
    assert memberId.startswith("client-")
    assert h.state() == "Empty"
    second = h.join(member=memberId, requireKnown=True)
    assert second.value.errorCode == E.none
    assert second.value.memberId == memberId and second.value.leaderId == memberId


def test_pending_member_holds_rebalance_until_it_joins(h):
    (a,), gen = h.stableGroup(1)
    pending = h.join(requireKnown=True).value.memberId
    ra = h.join(member=a)  # leader rejoin: rebalance, waits for the pending id
    assert not ra.fired
    rb = h.join(member=pending, requireKnown=True)
    assert ra.value.generationId == rb.value.generationId == gen + 1
    assert len(ra.value.members) == 2


def test_pending_member_expires_after_session_timeout(h):
    (a,), gen = h.stableGroup(1)
    pending = h.join(requireKnown=True, session=10000).value.memberId
    ra = h.join(member=a)
    h.advance(9999)
    assert not ra.fired
    h.advance(1)
    assert ra.value.generationId == gen + 1 and len(ra.value.members) == 1
    # Too late now: the id was forgotten.
    assert h.join(member=pending, requireKnown=True).value.errorCode == E.unknown_member_id


# -- leaving, session expiry, sync expiry -----------------------------------------------


def test_leader_leaving_elects_new_leader(h):
    (a, b), gen = h.stableGroup(2)
    res = h.coord.leaveGroup("g", [(a, None)])
    assert res.errorCode == E.none and res.members[0].errorCode == E.none
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(b, gen) == E.rebalance_in_progress
    rb = h.join(member=b)
    assert rb.value.generationId == gen + 1
    assert rb.value.leaderId == b
    assert [m.memberId for m in rb.value.members] == [b]


def test_last_member_leaving_empties_group(h):
    (a,), gen = h.stableGroup(1)
    h.coord.leaveGroup("g", [(a, None)])
    assert h.state() == "Empty"
    assert h.stored()[0]["g"].members == ()
    assert h.stored()[0]["g"].generationId == gen + 1


def test_batched_leave_by_member_and_instance_id(h):
    a = h.join(instance="i-a")
    b = h.join(instance="i-b")
    ra = h.join(member=a.value.memberId, instance="i-a")
    assert ra.value.generationId == b.value.generationId
    res = h.coord.leaveGroup(
        "g", [("", "i-b"), (ra.value.memberId, "i-a"), ("ghost", None), ("", "i-z")]
    )
    assert [m.errorCode for m in res.members] == [
        E.none,
        E.none,
        E.unknown_member_id,
        E.unknown_member_id,
    ]
    assert h.state() == "Empty"
    res = h.coord.leaveGroup("nope", [("m", None)])
    assert res.errorCode == E.none and res.members[0].errorCode == E.unknown_member_id


def test_leave_of_parked_joiner_answers_its_join(h):
    (a, _b), _gen = h.stableGroup(2)
    ra = h.join(member=a)
    h.coord.leaveGroup("g", [(a, None)])
    assert ra.value.errorCode == E.unknown_member_id


def test_session_expiry_removes_member(h):
    (a, b), gen = h.stableGroup(2, session=10000)
    for _ in range(3):
        h.advance(3000)
        assert h.heartbeat(a, gen) == E.none
    h.advance(1000)  # B silent for 10 s
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(b, gen) == E.unknown_member_id
    assert h.heartbeat(a, gen) == E.rebalance_in_progress
    ra = h.join(member=a)
    assert ra.value.generationId == gen + 1 and len(ra.value.members) == 1


def test_heartbeat_keeps_member_alive(h):
    (a,), gen = h.stableGroup(1, session=10000)
    for _ in range(10):
        h.advance(9000)
        assert h.heartbeat(a, gen) == E.none
    assert h.state() == "Stable"


def test_member_that_never_syncs_but_heartbeats_is_removed_after_rebalance_timeout(h):
    a = h.join(rebalance=20000)
    b = h.join(rebalance=20000)
    ra = h.join(member=a.value.memberId, rebalance=20000)
    gen, leader, lazy = ra.value.generationId, ra.value.memberId, b.value.memberId
    assert h.sync(leader, gen, {leader: b"1", lazy: b"2"}).value.errorCode == E.none
    assert h.state() == "Stable"
    for _ in range(6):
        h.advance(3000)
        assert h.heartbeat(leader, gen) == E.none
        assert h.heartbeat(lazy, gen) == E.none
    h.advance(2000)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(lazy, gen) == E.unknown_member_id
    assert h.heartbeat(leader, gen) == E.rebalance_in_progress


def test_member_that_never_syncs_nor_heartbeats_is_removed_after_session_timeout(h):
    a = h.join(session=10000)
    b = h.join(session=10000)
    ra = h.join(member=a.value.memberId, session=10000)
    gen, leader = ra.value.generationId, ra.value.memberId
    h.sync(leader, gen, {leader: b"1"})
    h.advance(5000)
    assert h.heartbeat(leader, gen) == E.none
    h.advance(5000)
    assert h.state() == "PreparingRebalance"
    assert h.heartbeat(b.value.memberId, gen) == E.unknown_member_id


def test_new_member_parked_in_join_expires_after_join_timeout(harness):
    h = harness(newMemberJoinTimeoutMs=60000)
    (a,), gen = h.stableGroup(1, session=10000, rebalance=300000)
    b = h.join(session=10000, rebalance=300000)
    # A keeps heartbeating but never rejoins; B waits in JoinGroup.
    for _ in range(20):
        h.advance(3000)
        h.heartbeat(a, gen)
    assert b.value.errorCode == E.unknown_member_id


# -- static membership ----------------------------------------------------------------


def test_static_member_replacement_fences_old_id(h):
    (old,), gen = h.stableGroup(1, instance="i-1")
    r = h.join(instance="i-1").value
    assert r.errorCode == E.none
    new = r.memberId
    assert new != old and new.startswith("i-1-")
    # No rebalance: same generation, and the old leader id so the new
    # incarnation does not run the assignor.
    assert r.generationId == gen and r.leaderId == old and r.members == ()
    assert h.state() == "Stable"
    assert h.heartbeat(old, gen, instance="i-1") == E.fenced_instance_id
    assert h.sync(old, gen, instance="i-1").value.errorCode == E.fenced_instance_id
    assert h.join(member=old, instance="i-1").value.errorCode == E.fenced_instance_id
    s = h.sync(new, gen, instance="i-1").value
    assert s.errorCode == E.none and s.assignment == old.encode()
    assert h.heartbeat(new, gen, instance="i-1") == E.none
    assert h.stored()[0]["g"].members[0].memberId == new


def test_static_replacement_fences_parked_join(h):
    (old, other), gen = h.stableGroup(2, instance=None)
    # A static member joins, then its new incarnation replaces it while the
    # first one is still parked in the rebalance.
    first = h.join(instance="i-9")
    second = h.join(instance="i-9")
    assert first.value.errorCode == E.fenced_instance_id
    h.join(member=old)
    h.join(member=other)
    assert second.value.errorCode == E.none
    assert second.value.generationId == gen + 1


def test_static_member_not_rejoining_is_kept(h):
    a = h.join(instance="i-a", rebalance=20000)
    b = h.join(instance="i-b", rebalance=20000)
    ra = h.join(member=a.value.memberId, instance="i-a", rebalance=20000)
    gen = ra.value.generationId
    leader, bid = ra.value.memberId, b.value.memberId
    h.sync(leader, gen, {leader: b"1", bid: b"2"})
    h.sync(bid, gen, instance="i-b")
    # The leader asks for a rebalance; B (restarting, say) does not rejoin
    # but keeps its session.
    again = h.join(member=leader, instance="i-a", rebalance=20000)
    for _ in range(6):
        h.advance(3000)
        h.heartbeat(bid, gen, instance="i-b")
    h.advance(2000)
    assert again.value.generationId == gen + 1
    assert {m.memberId for m in again.value.members} == {leader, bid}
    assert h.heartbeat(bid, gen + 1, instance="i-b") == E.none


# -- re-entrancy ------------------------------------------------------------------------


def test_answers_may_reenter_coordinator(h):
    """
    Answers are given after the coordinator's turn: a C{replyTo} that
    syncs straight away is served after it, not inside it.
    """
    seen = []

    def onJoin(r):
        h.service.syncGroup(
            seen.append, SyncRequest("g", r.generationId, r.memberId, assignments={r.memberId: b"a"})
        )

    h.service.joinGroup(
        onJoin, JoinRequest("g", "", None, "c", "h", 30000, 10000, "consumer", (("range", b""),))
    )
    assert seen[0].errorCode == E.none and seen[0].assignment == b"a"
