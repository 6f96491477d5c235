"""
OffsetCommit / OffsetFetch / OffsetDelete, offset expiry, and group
administration (DescribeGroups, ListGroups, DeleteGroups).
"""

from __future__ import annotations

import pytest

from kafkatwist.coordinator import FetchedOffset, OffsetAndMetadata
from kafkatwist.coordinator.formats import decodeKey

from .helpers import E, FailingLog, Harness, memoryLog, sub

DAY = 24 * 3600 * 1000


# -- commit / fetch ---------------------------------------------------------------------


def test_member_commit_and_fetch_round_trips_metadata(h):
    (a,), gen = h.stableGroup(1)
    offsets = {
        ("t1", 0): OffsetAndMetadata(42, leaderEpoch=3, metadata="hello \u00e9"),
        ("t1", 1): OffsetAndMetadata(7),
    }
    assert h.commit(offsets, member=a, generation=gen) == {("t1", 0): E.none, ("t1", 1): E.none}
    res = h.coord.fetchOffsets("g", [("t1", 0), ("t1", 1), ("t1", 2)])
    assert res.errorCode == E.none
    assert res.offsets == {
        ("t1", 0): FetchedOffset(42, 3, "hello \u00e9"),
        ("t1", 1): FetchedOffset(7, -1, ""),
        ("t1", 2): FetchedOffset(-1, -1, ""),
    }
    assert set(h.coord.fetchOffsets("g", None).offsets) == {("t1", 0), ("t1", 1)}
    stored = h.stored()[1]["g"][("t1", 0)]
    assert stored.metadata == "hello \u00e9" and stored.commitTimestampMs == 0


def test_simple_commit_creates_empty_group(h):
    assert h.commit({("t", 0): 10}, group="simple", now=1234) == {("t", 0): E.none}
    assert h.coord.fetchOffsets("simple").offsets[("t", 0)].offset == 10
    d = h.coord.describeGroups(["simple"])[0]
    assert (d.state, d.protocolType) == ("Empty", "")
    assert h.stored()[1]["simple"][("t", 0)].commitTimestampMs == 1234


def test_commit_with_generation_for_unknown_group(h):
    assert h.commit({("t", 0): 1}, member="m", generation=3, group="x") == {
        ("t", 0): E.illegal_generation
    }


def test_simple_commit_refused_while_group_has_members(h):
    (_a,), gen = h.stableGroup(1)
    assert h.commit({("t", 0): 1}) == {("t", 0): E.unknown_member_id}
    assert h.commit({("t", 0): 1}, member="ghost", generation=gen) == {
        ("t", 0): E.unknown_member_id
    }


def test_commit_during_completing_rebalance(h):
    a = h.join().value
    assert h.commit({("t", 0): 1}, member=a.memberId, generation=a.generationId) == {
        ("t", 0): E.rebalance_in_progress
    }


def test_commit_during_preparing_rebalance_is_accepted(h):
    (a, b), gen = h.stableGroup(2)
    h.join(member=a)
    assert h.commit({("t", 0): 1}, member=b, generation=gen) == {("t", 0): E.none}


def test_commit_metadata_too_large(harness):
    h = harness(offsetMetadataMaxBytes=10)
    res = h.commit(
        {("t", 0): OffsetAndMetadata(1, metadata="x" * 11), ("t", 1): OffsetAndMetadata(2)}
    )
    assert res == {("t", 0): E.offset_metadata_too_large, ("t", 1): E.none}


def test_commit_store_failure_is_reported(harness):
    h = harness(log=FailingLog(memoryLog(), lambda records: True, E.request_timed_out))
    assert h.commit({("t", 0): 1}) == {("t", 0): E.request_timed_out}
    assert h.coord.fetchOffsets("g").offsets == {}


def test_storage_errors_are_mapped_as_kafka_does(harness):
    h = harness(log=FailingLog(memoryLog(), lambda records: True, E.kafka_storage_error))
    assert h.commit({("t", 0): 1}) == {("t", 0): E.not_coordinator}
    h = harness(log=FailingLog(memoryLog(), lambda records: True, E.message_too_large))
    assert h.commit({("t", 0): 1}) == {("t", 0): E.invalid_commit_offset_size}


def test_fetch_unknown_group(h):
    res = h.coord.fetchOffsets("nope", [("t", 0)])
    assert res.errorCode == E.none and res.offsets == {("t", 0): FetchedOffset(-1, -1, "")}
    assert h.coord.fetchOffsets("nope").offsets == {}


# -- expiry -------------------------------------------------------------------------------


def test_offsets_of_empty_group_expire_after_retention(harness):
    h = harness(offsetsRetentionMinutes=60 * 24, maxSessionTimeoutMs=3 * DAY)
    (a,), gen = h.stableGroup(1, session=3 * DAY)
    h.commit({("t1", 0): 5}, member=a, generation=gen)
    h.advance(2 * DAY)  # old commit, but the group is active: kept
    assert h.heartbeat(a, gen) == E.none
    assert h.coord.expireOffsets() == 0
    h.coord.leaveGroup("g", [(a, None)])
    assert h.state() == "Empty"
    h.advance(DAY - 1)
    assert h.coord.expireOffsets() == 0
    h.advance(1)
    assert h.coord.expireOffsets() == 1
    # Nothing left: the group goes too.
    assert h.state() == "Dead"
    groups, offsets = h.stored()
    assert "g" not in groups and "g" not in offsets
    assert h.coord.listGroups().groups == ()


def test_simple_consumer_offsets_expire_by_commit_time(harness):
    h = harness(offsetsRetentionMinutes=1)
    h.commit({("t", 0): 1}, group="s", now=0)
    h.commit({("t", 1): 1}, group="s", now=30000)
    h.advance(60000)
    assert h.coord.expireOffsets() == 1
    assert set(h.coord.fetchOffsets("s").offsets) == {("t", 1)}
    h.advance(30000)
    assert h.coord.expireOffsets() == 1
    assert h.coord.describeGroups(["s"])[0].state == "Dead"


def test_explicit_expire_timestamp_wins(harness):
    h = harness(offsetsRetentionMinutes=60)
    h.commit({("t", 0): OffsetAndMetadata(1, expireTimestampMs=1000)}, group="s", now=0)
    h.advance(999)
    assert h.coord.expireOffsets() == 0
    h.advance(1)
    assert h.coord.expireOffsets() == 1


def test_stable_group_expires_only_unsubscribed_topics(harness):
    h = harness(offsetsRetentionMinutes=1)
    (a,), gen = h.stableGroup(1, protocols=[("range", sub("t1"))], session=120000)
    h.commit({("t1", 0): 1, ("gone", 0): 1}, member=a, generation=gen, now=0)
    h.advance(60000)
    assert h.coord.expireOffsets() == 1
    assert set(h.coord.fetchOffsets("g").offsets) == {("t1", 0)}


def test_periodic_expiry_after_load(harness):
    h = harness(offsetsRetentionMinutes=1, offsetsRetentionCheckIntervalMs=10000)
    h.coord.load()
    h.commit({("t", 0): 1}, group="s")
    h.advance(60000)
    assert h.coord.fetchOffsets("s").offsets == {}
    h.coord.shutdown()
    assert h.clock.getDelayedCalls() == []


# -- OffsetDelete ---------------------------------------------------------------------------


def test_delete_offsets_subscribed_topic_refused(h):
    (a,), gen = h.stableGroup(1, protocols=[("range", sub("t1"))])
    h.commit({("t1", 0): 1, ("t2", 0): 1}, member=a, generation=gen)
    res = h.coord.deleteOffsets("g", [("t1", 0), ("t2", 0)])
    assert res.errorCode == E.none
    assert res.partitions == {("t1", 0): E.group_subscribed_to_topic, ("t2", 0): E.none}
    assert set(h.coord.fetchOffsets("g").offsets) == {("t1", 0)}
    assert set(h.stored()[1]["g"]) == {("t1", 0)}


def test_delete_offsets_unparseable_subscription_is_conservative(h):
    (a,), gen = h.stableGroup(1, protocols=[("range", b"\x00")])
    h.commit({("t2", 0): 1}, member=a, generation=gen)
    res = h.coord.deleteOffsets("g", [("t2", 0)])
    assert res.partitions == {("t2", 0): E.group_subscribed_to_topic}


def test_delete_offsets_of_non_consumer_group_with_members(h):
    h.stableGroup(1, ptype="connect")
    assert h.coord.deleteOffsets("g", [("t", 0)]).errorCode == E.non_empty_group


def test_delete_offsets_empty_group_and_unknown_group(h):
    h.commit({("t", 0): 1, ("t", 1): 1}, group="s")
    res = h.coord.deleteOffsets("s", [("t", 0)])
    assert res.partitions == {("t", 0): E.none}
    assert h.coord.deleteOffsets("nope", [("t", 0)]).errorCode == E.group_id_not_found
    # Deleting the last offset of an empty group removes the group.
    h.coord.deleteOffsets("s", [("t", 1)])
    assert h.coord.describeGroups(["s"])[0].state == "Dead"


# -- describe / list / delete groups ----------------------------------------------------------------


def test_describe_groups(h):
    (a, b), _gen = h.stableGroup(2)
    h.join(group="other")
    d, other, missing = h.coord.describeGroups(["g", "other", "missing"])
    assert (d.errorCode, d.state, d.protocolType, d.protocolData) == (
        E.none,
        "Stable",
        "consumer",
        "range",
    )
    assert [(m.memberId, m.metadata, m.assignment) for m in d.members] == [
        (a, sub("t1"), a.encode()),
        (b, sub("t1"), b.encode()),
    ]
    assert d.members[0].clientId == "client" and d.members[0].clientHost == "/127.0.0.1"
    # Not stable: no protocol, no metadata or assignment.
    assert (other.state, other.protocolData) == ("CompletingRebalance", "")
    assert other.members[0].metadata == b"" and other.members[0].assignment == b""
    assert (missing.errorCode, missing.state) == (E.none, "Dead")


def test_list_groups_with_states_filter(h):
    h.stableGroup(1)
    h.join(group="completing")
    h.commit({("t", 0): 1}, group="simple")
    every = h.coord.listGroups()
    assert every.errorCode == E.none
    assert {(g.groupId, g.state, g.protocolType) for g in every.groups} == {
        ("g", "Stable", "consumer"),
        ("completing", "CompletingRebalance", "consumer"),
        ("simple", "Empty", ""),
    }
    assert {g.groupId for g in h.coord.listGroups(["Stable", "empty"]).groups} == {"g", "simple"}
    assert h.coord.listGroups(["Dead"]).groups == ()


def test_delete_groups(h):
    (a,), _gen = h.stableGroup(1)
    h.commit({("t", 0): 1}, group="simple")
    res = h.coord.deleteGroups(["g", "simple", "missing"])
    assert res == {"g": E.non_empty_group, "simple": E.none, "missing": E.group_id_not_found}
    assert "simple" not in h.stored()[1]
    assert h.coord.fetchOffsets("simple").offsets == {}
    assert h.coord.deleteGroups(["simple"]) == {"simple": E.group_id_not_found}
    h.coord.leaveGroup("g", [(a, None)])
    assert h.coord.deleteGroups(["g"]) == {"g": E.none}
    assert "g" not in h.stored()[0]
    # A deleted group can be used again from scratch.
    assert h.join().value.generationId == 1


# -- persistence -------------------------------------------------------------------------------------


def test_load_restores_stable_group_and_offsets():
    first = Harness()
    (a, b), gen = first.stableGroup(2)
    first.commit({("t1", 0): OffsetAndMetadata(9, metadata="m")}, member=a, generation=gen)
    first.commit({("t", 0): 3}, group="simple")
    first.coord.shutdown()

    second = Harness(log=first.log)
    second.coord.load()
    d = second.coord.describeGroups(["g"])[0]
    assert d.state == "Stable" and [m.memberId for m in d.members] == [a, b]
    assert [m.assignment for m in d.members] == [a.encode(), b.encode()]
    assert second.coord.fetchOffsets("g").offsets[("t1", 0)] == FetchedOffset(9, -1, "m")
    assert second.coord.describeGroups(["simple"])[0].state == "Empty"
    # Members carry on with their generation ...
    assert second.heartbeat(a, gen) == E.none
    assert second.sync(b, gen).value.assignment == b.encode()
    # ... and the silent ones expire.
    second.advance(6000)
    assert second.heartbeat(a, gen) == E.none
    second.advance(4000)
    assert second.heartbeat(b, gen) == E.unknown_member_id
    assert second.state() == "PreparingRebalance"
    ra = second.join(member=a)
    assert ra.value.generationId == gen + 1


def test_leader_sync_store_failure_restarts_rebalance(harness):
    def groupRecord(records):
        return any(value is not None and decodeKey(key)[0] == "group" for key, value in records)

    h = harness(log=FailingLog(memoryLog(), groupRecord))
    a = h.join()
    b = h.join()
    ra = h.join(member=a.value.memberId)
    gen = ra.value.generationId
    fs = h.sync(b.value.memberId, gen)
    ls = h.sync(ra.value.memberId, gen, {ra.value.memberId: b"x"})
    assert ls.value.errorCode == fs.value.errorCode == E.not_coordinator
    assert ls.value.assignment == b""
    assert h.state() == "PreparingRebalance"


def test_shutdown_answers_parked_requests_and_cancels_timers(h):
    (a, _b), _gen = h.stableGroup(2)
    ra = h.join(member=a)
    h.coord.shutdown()
    assert ra.value.errorCode == E.not_coordinator
    assert h.clock.getDelayedCalls() == []
    assert h.join().value.errorCode == E.coordinator_not_available
    assert h.coord.listGroups().errorCode == E.coordinator_not_available


@pytest.mark.parametrize("ids", [[""], ["x"]])
def test_describe_and_delete_accept_any_group_id(h, ids):
    assert h.coord.describeGroups(ids)[0].errorCode == E.none
    assert h.coord.deleteGroups(ids) == {ids[0]: E.group_id_not_found}
