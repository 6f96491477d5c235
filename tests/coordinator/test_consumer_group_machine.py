"""
KIP-848 consumer groups in the sans-io coordinator, by their effects, and
the server-side assignors as pure functions.
"""

from __future__ import annotations

import itertools
import uuid

from kafkatwist.coordinator import CommitRequest, GroupCoordinator, JoinRequest, OffsetAndMetadata
from kafkatwist.coordinator.assignors import AssignmentMember, rangeAssign, uniformAssign
from kafkatwist.coordinator.consumer_group import HeartbeatRequest, TopicImage
from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer

from .helpers import E, sub

T = uuid.uuid4()
U = uuid.uuid4()
IMAGE = TopicImage({"t": (T, 6), "u": (U, 3), "other": (uuid.uuid4(), 2)})


def machine(**kw):
    ids = iter(range(1000))
    return GroupCoordinator(
        numPartitions=5,
        newMemberId=lambda: str(next(ids)),
        consumerGroups={"sessionTimeoutMs": 45000, "heartbeatIntervalMs": 5000},
        **kw,
    )


def answer(effects):
    (respond,) = [e for e in effects if isinstance(e, Respond)]
    return respond.result


def hb(m, now, member, epoch, owned=(), topics=("t",), full=True, group="g", **kw):
    request = HeartbeatRequest(
        groupId=group,
        memberId=member,
        memberEpoch=epoch,
        rebalanceTimeoutMs=30000 if full else -1,
        subscribedTopicNames=tuple(topics) if full else None,
        owned=None if owned is None else frozenset(owned),
        image=kw.pop("image", IMAGE),
        **kw,
    )
    fx = m.consumerGroupHeartbeat(now, "r", request)
    return settle(m, now, fx), fx


#: every record appended by the machines of this module, in order
WRITTEN: list = []


def settle(m, now, fx):
    """
    Complete the effects' appends (successfully) and return the answer.
    """
    responds = [e for e in fx if isinstance(e, Respond)]
    for append in [e for e in fx if isinstance(e, Append)]:
        WRITTEN.extend(append.records)
        responds += [e for e in m.appendCompleted(now, append.token, E.none) if isinstance(e, Respond)]
    (respond,) = responds
    return respond.result


def tps(assignment):
    return {(t, p) for t, ps in (assignment or {}).items() for p in ps}


# -- assignors ---------------------------------------------------------------------


def test_uniform_balances_and_is_sticky():
    members = [AssignmentMember(m, None, frozenset({"t", "u"})) for m in "abc"]
    first = uniformAssign(members, {"t": 6, "u": 3})
    sizes = sorted(len(tps(a)) for a in first.values())
    assert sizes == [3, 3, 3]
    assert set().union(*(tps(a) for a in first.values())) == {("t", p) for p in range(6)} | {
        ("u", p) for p in range(3)
    }
    # A fourth member takes from the others without moving anything else.
    members = [AssignmentMember(m, None, frozenset({"t", "u"}), first[m]) for m in "abc"]
    members.append(AssignmentMember("d", None, frozenset({"t", "u"})))
    second = uniformAssign(members, {"t": 6, "u": 3})
    assert sorted(len(tps(a)) for a in second.values()) == [2, 2, 2, 3]
    for m in "abc":
        assert tps(second[m]) <= tps(first[m])


def test_uniform_heterogeneous_only_assigns_subscribed_topics():
    members = [
        AssignmentMember("a", None, frozenset({"t"})),
        AssignmentMember("b", None, frozenset({"t", "u"})),
    ]
    result = uniformAssign(members, {"t": 6, "u": 3})
    assert {t for t, _ in tps(result["a"])} == {"t"}
    assert {("u", p) for p in range(3)} <= tps(result["b"])
    assert len(tps(result["a"]) | tps(result["b"])) == 9


def test_range_copartitions_by_member_id():
    members = [AssignmentMember(m, None, frozenset({"t", "u"})) for m in ("b", "a")]
    result = rangeAssign(members, {"t": 4, "u": 4})
    assert result["a"] == {"t": frozenset({0, 1}), "u": frozenset({0, 1})}
    assert result["b"] == {"t": frozenset({2, 3}), "u": frozenset({2, 3})}
    # Static members first.
    members = [AssignmentMember("a", None, frozenset({"t"})), AssignmentMember("b", "i", frozenset({"t"}))]
    assert rangeAssign(members, {"t": 3})["b"] == {"t": frozenset({0, 1})}


# -- the machine ---------------------------------------------------------------------


def test_join_gets_everything_and_session_timer():
    m = machine()
    r, fx = hb(m, 0, "m1", 0)
    assert r.errorCode == E.none and r.memberId == "m1" and r.memberEpoch == 1
    assert tps(r.assignment) == {("t", p) for p in range(6)}
    assert r.heartbeatIntervalMs == 5000
    assert SetTimer(("cg-session", "g", "m1"), 45000) in fx
    # Nothing new: no assignment in a light heartbeat.
    r, _ = hb(m, 1, "m1", 1, owned=None, full=False)
    assert (r.errorCode, r.memberEpoch, r.assignment) == (E.none, 1, None)


def test_second_member_waits_for_revocation_never_two_owners():
    m = machine()
    hb(m, 0, "m1", 0)
    r2, _ = hb(m, 1, "m2", 0)
    # m1 still holds everything: m2 gets nothing yet, at the new epoch.
    assert r2.memberEpoch == 2 and tps(r2.assignment) == set()
    all6 = {("t", p) for p in range(6)}
    r1, fx = hb(m, 2, "m1", 1, owned=all6)
    # Revocation first: epoch unchanged, a smaller assignment, a rebalance timer.
    assert r1.memberEpoch == 1 and len(tps(r1.assignment)) == 3
    assert SetTimer(("cg-rebalance", "g", "m1", 1), 30000) in fx
    kept = tps(r1.assignment)
    # m2 still gets nothing while m1 owns the revoked ones.
    r2, _ = hb(m, 3, "m2", 2, owned=set())
    assert tps(r2.assignment) == set()
    # m1 acknowledges: it moves to epoch 2.
    r1, fx = hb(m, 4, "m1", 1, owned=kept)
    assert r1.memberEpoch == 2 and tps(r1.assignment) == kept
    assert CancelTimer(("cg-rebalance", "g", "m1", 1)) in fx
    r2, _ = hb(m, 5, "m2", 2, owned=set())
    assert tps(r2.assignment) == all6 - kept
    d = answer(m.consumerGroupDescribe(6, "d", ["g"]))[0]
    assert (d.state, d.groupEpoch, d.assignmentEpoch, d.assignorName) == ("Stable", 2, 2, "uniform")


def test_leave_and_session_timeout_give_partitions_back():
    m = machine()
    hb(m, 0, "m1", 0)
    hb(m, 0, "m2", 0)
    r1, _ = hb(m, 1, "m1", 1, owned={("t", p) for p in range(6)})
    hb(m, 2, "m1", 1, owned=tps(r1.assignment))
    r2, _ = hb(m, 3, "m2", 2, owned=set())
    assert len(tps(r2.assignment)) == 3
    r, fx = hb(m, 4, "m2", -1, owned=None, full=False)
    assert r.memberEpoch == -1 and CancelTimer(("cg-session", "g", "m2")) in fx
    r1, _ = hb(m, 5, "m1", 2, owned=None, full=False)
    assert len(tps(r1.assignment)) == 6 and r1.memberEpoch == 3
    # m1 goes silent: its session ends, the group is empty.
    m.timerFired(50000, ("cg-session", "g", "m1"))
    d = answer(m.consumerGroupDescribe(50001, "d", ["g"]))[0]
    assert (d.state, d.members) == ("Empty", ())


def test_epoch_errors():
    m = machine()
    r, _ = hb(m, 0, "m1", 0)
    assert hb(m, 1, "m1", 5, owned=None, full=False)[0].errorCode == E.fenced_member_epoch
    assert hb(m, 1, "nobody", 1, owned=None, full=False)[0].errorCode == E.unknown_member_id
    assert hb(m, 1, "x", 3, owned=None, full=False, group="unknown")[0].errorCode == E.unknown_member_id
    # Bad requests.
    assert hb(m, 1, "", 0)[0].errorCode == E.invalid_request
    assert hb(m, 1, "m9", 0, owned={("t", 0)})[0].errorCode == E.invalid_request
    assert hb(m, 1, "m9", 0, serverAssignor="sticky")[0].errorCode == E.unsupported_assignor
    r, _ = hb(m, 1, "m9", 0, topics=(), subscribedTopicRegex="(")
    assert r.errorCode == E.invalid_regular_expression


def test_regex_subscription_full_match():
    m = machine()
    r, _ = hb(m, 0, "m1", 0, topics=(), subscribedTopicRegex="t|u")
    assert {t for t, _ in tps(r.assignment)} == {"t", "u"}
    # A new topic the regex does not match changes nothing.
    image = TopicImage(dict(IMAGE.topics, tt=(uuid.uuid4(), 1)))
    r, _ = hb(m, 1, "m1", 1, owned=None, full=False, image=image)
    assert r.assignment is None and r.memberEpoch == 1
    # A new regex: u is revoked first, then tt comes at the next epoch.
    r, _ = hb(m, 1, "m1", 1, owned=None, full=False, subscribedTopicRegex="t.*", image=image)
    assert {t for t, _ in tps(r.assignment)} == {"t"} and r.memberEpoch == 1
    r, _ = hb(m, 2, "m1", 1, owned=tps(r.assignment), full=False, image=image)
    assert {t for t, _ in tps(r.assignment)} == {"t", "tt"} and r.memberEpoch == 2
    # Full match only: "t" alone does not match "tt".
    r, _ = hb(m, 3, "m1", 2, owned=tps(r.assignment), full=False, subscribedTopicRegex="t", image=image)
    assert {t for t, _ in tps(r.assignment)} == {"t"}


def test_classic_and_consumer_groups_share_ids():
    m = machine()
    m.joinGroup(0, "join", JoinRequest("classic", "", None, "c", "/h", 30000, 10000, "consumer", (("range", sub("t")),)))
    r, _ = hb(m, 0, "m1", 0, group="classic")
    assert r.errorCode == E.group_id_not_found
    hb(m, 0, "m1", 0, group="new")
    fx = m.joinGroup(0, "join2", JoinRequest("new", "", None, "c", "/h", 30000, 10000, "consumer", (("range", sub("t")),)))
    assert answer(fx).errorCode == E.inconsistent_group_protocol
    d = answer(m.consumerGroupDescribe(1, "d", ["classic", "nope"]))
    assert [x.errorCode for x in d] == [E.group_id_not_found, E.group_id_not_found]


def test_commit_checks_member_epoch():
    m = machine()
    hb(m, 0, "m1", 0)
    offsets = {("t", 0): OffsetAndMetadata(offset=5)}

    def commit(member, epoch, version=9):
        fx = m.commitOffsets(1, "c", CommitRequest("g", epoch, member, None, offsets, version))
        responds = [e for e in fx if isinstance(e, Respond)]
        if responds:
            return responds[0].result[("t", 0)]
        (append,) = [e for e in fx if isinstance(e, Append)]
        return answer(m.appendCompleted(2, append.token, E.none))[("t", 0)]

    assert commit("m1", 0) == E.stale_member_epoch
    assert commit("zz", 1) == E.unknown_member_id
    assert commit("", -1) == E.unknown_member_id
    assert commit("m1", 1, version=8) == E.unsupported_version
    assert commit("m1", 1) == E.none
    fetched = answer(m.fetchOffsets(3, "f", "g", [("t", 0)]))
    assert fetched.offsets[("t", 0)].offset == 5


def test_unique_owner_under_churn():
    """
    Random joins, leaves and acknowledgements: no partition is ever in two
    members' answered assignments at once.
    """
    import random

    rnd = random.Random(7)
    m = machine()
    owned: dict[str, set] = {}
    epochs: dict[str, int] = {}
    ids = itertools.count()
    for step in range(400):
        action = rnd.random()
        if action < 0.15 or not owned:
            mid = f"m{next(ids)}"
            r, _ = hb(m, step, mid, 0)
        elif action < 0.25:
            mid = rnd.choice(sorted(owned))
            hb(m, step, mid, -1, owned=None, full=False)
            del owned[mid], epochs[mid]
            continue
        else:
            mid = rnd.choice(sorted(owned))
            r, _ = hb(m, step, mid, epochs[mid], owned=owned[mid], full=False)
        assert r.errorCode == E.none, r
        epochs[mid] = r.memberEpoch
        if r.assignment is not None:
            owned[mid] = tps(r.assignment)
        else:
            owned.setdefault(mid, set())
        seen: set = set()
        for parts in owned.values():
            assert not (parts & seen)
            seen |= parts


# -- records and restart -----------------------------------------------------------------


def test_records_replay_into_a_new_coordinator_and_damage_is_skipped():
    from kafkatwist.coordinator.consumer_group_records import (
        ConsumerGroupRecords,
        currentAssignmentRecord,
    )
    from kafkatwist.coordinator.formats import decodeKey

    del WRITTEN[:]
    m = machine()
    hb(m, 0, "m1", 0, rackId="r1")
    hb(m, 0, "m2", 0)
    r1, _ = hb(m, 1, "m1", 1, owned={("t", p) for p in range(6)})
    r1, _ = hb(m, 2, "m1", 1, owned=tps(r1.assignment))
    r2, _ = hb(m, 3, "m2", 2, owned=set())
    hb(m, 4, "m3", 0, topics=("u",))
    hb(m, 5, "m3", -1, owned=None, full=False)
    versions = {decodeKey(k)[1] for k, _ in WRITTEN}
    assert versions == {3, 5, 6, 7, 8}
    loaded = ConsumerGroupRecords()
    for key, value in WRITTEN:
        assert loaded.apply(decodeKey(key)[1], key, value)
    # A damaged value and a value of an unknown version are refused with
    # CorruptGroupRecord (the replay skips them with one log line).
    import pytest

    from kafkatwist.coordinator.formats import CorruptGroupRecord

    key, value = WRITTEN[-1]
    for bad in (b"\x00\x00\x00", b"\x00\x07" + (value or b"")[2:]):
        with pytest.raises(CorruptGroupRecord):
            loaded.apply(8, currentAssignmentRecord("g", type("M", (), dict(memberId="m1", memberEpoch=1, previousMemberEpoch=0, state="stable"))(), {}, {})[0], bad)
    stored = loaded.groups["g"]
    assert set(stored.members) == {"m1", "m2"}
    fresh = machine()
    fx = fresh.load(10, [], {}, loaded.groups, IMAGE)
    assert SetTimer(("cg-session", "g", "m1"), 45000) in fx
    d = answer(fresh.consumerGroupDescribe(11, "d", ["g"]))[0]
    # m3 left after the last assignment: the next heartbeat assigns again.
    assert (d.state, d.groupEpoch, d.assignmentEpoch) == ("Assigning", 4, 3)
    assert d == answer(m.consumerGroupDescribe(11, "d", ["g"]))[0]
    byId = {x.memberId: x for x in d.members}
    assert tps(byId["m1"].assignment) == tps(r1.assignment)
    assert byId["m1"].rackId == "r1"
    # The members go on where they were: their partitions stay, at the
    # new epoch.
    r, _ = hb(fresh, 12, "m2", r2.memberEpoch, owned=tps(r2.assignment), full=False)
    assert (r.errorCode, r.memberEpoch, r.assignment) == (E.none, 4, None)


def test_list_describe_delete_see_consumer_groups():
    m = machine()
    hb(m, 0, "m1", 0)
    commit = CommitRequest("g", 1, "m1", None, {("t", 0): OffsetAndMetadata(offset=5)})
    settle_fx = m.commitOffsets(1, "c", commit)
    settle(m, 1, settle_fx)
    (listed,) = answer(m.listGroups(2, "l")).groups
    assert (listed.groupId, listed.protocolType, listed.state, listed.groupType) == (
        "g", "consumer", "Stable", "consumer",
    )
    # The classic DescribeGroups does not describe it.
    assert answer(m.describeGroups(2, "d", ["g"]))[0].state == "Dead"
    assert answer(m.deleteGroups(2, "x", ["g"])) == {"g": E.non_empty_group}
    hb(m, 3, "m1", -1, owned=None, full=False)
    fx = m.deleteGroups(4, "x", ["g"])
    assert settle(m, 4, fx) == {"g": E.none}
    assert answer(m.listGroups(5, "l")).groups == ()
    assert answer(m.consumerGroupDescribe(5, "d", ["g"]))[0].errorCode == E.group_id_not_found
    assert answer(m.fetchOffsets(5, "f", "g", [("t", 0)])).offsets[("t", 0)].offset == -1


def test_rebalance_timeout_fences_a_member_that_keeps_revoked_partitions():
    m = machine()
    hb(m, 0, "m1", 0)
    hb(m, 1, "m2", 0)
    all6 = {("t", p) for p in range(6)}
    r1, fx = hb(m, 2, "m1", 1, owned=all6)
    assert SetTimer(("cg-rebalance", "g", "m1", 1), 30000) in fx
    # Still holding on: the timer is not re-armed by later heartbeats.
    _, fx = hb(m, 3, "m1", 1, owned=all6, full=False)
    assert not [e for e in fx if isinstance(e, SetTimer) and e.key[0] == "cg-rebalance"]
    fx = m.timerFired(30002, ("cg-rebalance", "g", "m1", 1))
    assert [e for e in fx if isinstance(e, Append)]
    assert CancelTimer(("cg-session", "g", "m1")) in fx
    assert hb(m, 30003, "m1", 1, owned=None, full=False)[0].errorCode == E.unknown_member_id
    r2, _ = hb(m, 30004, "m2", 2, owned=set())
    assert tps(r2.assignment) == all6


def test_offset_fetch_v9_checks_the_member_epoch():
    m = machine()
    hb(m, 0, "m1", 0)
    results = answer(m.fetchOffsetsOfGroups(1, "f", [
        ("g", None, "m1", 1), ("g", None, "m1", 0), ("g", None, "zz", 1), ("g", None, None, -1),
        ("g", None),
    ]))
    assert [r.errorCode for r in results] == [
        E.none, E.stale_member_epoch, E.unknown_member_id, E.none, E.none,
    ]


def test_static_member_leaves_for_a_while_and_comes_back_with_its_partitions():
    m = machine()
    r, _ = hb(m, 0, "m1", 0, instanceId="i1")
    hb(m, 0, "m2", 0)
    r1, _ = hb(m, 1, "m1", 1, owned={("t", p) for p in range(6)}, instanceId="i1")
    r1, _ = hb(m, 2, "m1", 1, owned=tps(r1.assignment), instanceId="i1")
    mine = tps(r1.assignment)
    # Another process with the same instance id while m1 is active.
    assert hb(m, 3, "m9", 0, instanceId="i1")[0].errorCode == E.unreleased_instance_id
    r, _ = hb(m, 4, "m1", -2, owned=None, full=False, instanceId="i1")
    assert (r.errorCode, r.memberEpoch) == (E.none, -2)
    # Its partitions are not given to m2 meanwhile.
    r2, _ = hb(m, 5, "m2", 2, owned=set())
    assert not (tps(r2.assignment) & mine)
    # Back under a new id: same partitions, no rebalance.
    r, _ = hb(m, 6, "m1b", 0, instanceId="i1")
    assert r.errorCode == E.none and tps(r.assignment) == mine and r.memberEpoch == 2
    # The old id is fenced.
    assert hb(m, 7, "m1", 2, owned=None, full=False, instanceId="i1")[0].errorCode == E.fenced_instance_id
    d = answer(m.consumerGroupDescribe(8, "d", ["g"]))[0]
    assert sorted(x.memberId for x in d.members) == ["m1b", "m2"] and d.groupEpoch == 2


def test_offsets_of_subscribed_topics_do_not_expire():
    m = machine(offsetsRetentionMinutes=1)
    hb(m, 0, "m1", 0)
    offsets = {("t", 0): OffsetAndMetadata(offset=5), ("u", 0): OffsetAndMetadata(offset=7)}
    settle(m, 0, m.commitOffsets(0, "c", CommitRequest("g", 1, "m1", None, offsets)))
    fx = m.expireOffsets(120_000, "e")
    assert settle(m, 120_000, fx) == 1
    fetched = answer(m.fetchOffsets(120_001, "f", "g", None)).offsets
    assert {tp: o.offset for tp, o in fetched.items()} == {("t", 0): 5}


def test_an_empty_consumer_group_gives_way_to_a_classic_one():
    m = machine(initialRebalanceDelayMs=0)
    hb(m, 0, "m1", 0)
    hb(m, 1, "m1", -1, owned=None, full=False)
    fx = m.joinGroup(2, "join", JoinRequest("g", "", None, "c", "/h", 30000, 10000, "consumer", (("range", sub("t")),)))
    (tombstones,) = [e for e in fx if isinstance(e, Append)]
    assert all(v is None for _, v in tombstones.records)
    assert answer(m.consumerGroupDescribe(3, "d", ["g"]))[0].errorCode == E.group_id_not_found
    assert [g.groupType for g in answer(m.listGroups(3, "l")).groups] == ["classic"]


def test_v0_join_gets_a_member_id_from_the_coordinator():
    m = machine()
    r, _ = hb(m, 0, "", 0, version=0)
    assert r.errorCode == E.none and r.memberEpoch == 1
    uuid.UUID(r.memberId)  # a random UUID, as Kafka's
    # v1: the client must bring its own (KIP-1082).
    assert hb(m, 0, "", 0, version=1)[0].errorCode == E.invalid_request
