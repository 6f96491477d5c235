"""
The group and offset request handlers (C{kafkatwist.plugins.groups},
C{kafkatwist.plugins.group_offsets}) against a real coordinator on a fake
clock, with fake request contexts.

Every request goes through the wire codec (encoded as a client would, then
decoded) and every response is encoded and decoded again, so each test also
checks that the handler's entities are valid for the version.
"""

from __future__ import annotations

import pytest
from twisted.internet.defer import Deferred

from kafkatwist.coordinator import encodeSubscription
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.plugins import groups
from kafkatwist.protocol.apis import knownVersions, requestType
from kafkatwist.protocol.entities import OPERATIONS_OMITTED, make, nested
from tests.coordinator.grouphelpers import (
    E,
    HANDLERS,
    GroupBroker,
    commit,
    fetchV7,
    fired,
    join,
    joinAndSync,
    offsetsOf,
    req,
    result,
    sync,
)


@pytest.fixture
def broker():
    return GroupBroker()


# -- FindCoordinator ------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_single_key(broker, version):
    r = broker.call(10, version, listener="INTERNAL", key="g", key_type=0)
    assert (r.error_code, r.node_id, r.host, r.port) == (E.none, 7, "10.0.0.1", 9093)


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_batched(broker, version):
    r = broker.call(10, version, key_type=0, coordinator_keys=("a", "b", "c"))
    assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
        (k, E.none, 7, "127.0.0.1", 9092) for k in "abc"
    ]


def test_find_coordinator_transaction_and_bad_type(broker):
    r = broker.call(10, 3, key="tx", key_type=1)
    assert (r.error_code, r.node_id) == (E.none, 7)
    r = broker.call(10, 3, key="x", key_type=5)
    assert (r.error_code, r.node_id, r.host, r.port) == (E.invalid_request, -1, "", -1)


def test_find_coordinator_without_coordinator():
    broker = GroupBroker(coordinator=False)
    assert broker.call(10, 0, key="g").error_code == E.coordinator_not_available
    r = broker.call(10, 6, key_type=0, coordinator_keys=("g",))
    assert r.coordinators[0].error_code == E.coordinator_not_available
    assert r.coordinators[0].node_id == -1
    # Transactions need the transaction coordinator.
    r = broker.call(10, 6, key_type=1, coordinator_keys=("t",))
    assert r.coordinators[0].error_code == E.coordinator_not_available
    broker.transactionCoordinator = object()
    assert broker.call(10, 6, key_type=1, coordinator_keys=("t",)).coordinators[0].error_code == E.none


# -- JoinGroup / SyncGroup ------------------------------------------------------


@pytest.mark.parametrize("version", knownVersions(11))
def test_join_sync_every_join_version(broker, version):
    d = join(broker, version)
    # Decided on the handler's thread: answered at once, no Deferred.
    assert not isinstance(d, Deferred)
    r = result(d)
    if version >= 4:
        # KIP-394: a member without an id is given one first.
        assert r.error_code == E.member_id_required
        assert r.member_id.startswith("cli-")
        assert r.generation_id == -1 and r.leader == ""
        r = result(join(broker, version, memberId=r.member_id))
    assert r.error_code == E.none
    assert r.generation_id == 1 and r.leader == r.member_id
    assert r.protocol_name == "roundrobin"
    if version >= 7:
        assert r.protocol_type == "consumer"
    assert [m.member_id for m in r.members] == [r.member_id]
    assert r.members[0].metadata == encodeSubscription(["t1"])
    syncVersion = min(version, 5)
    s = result(sync(broker, syncVersion, r.member_id, 1, {r.member_id: b"assigned"}))
    assert s.error_code == E.none and s.assignment == b"assigned"
    if syncVersion >= 5:
        assert (s.protocol_type, s.protocol_name) == ("consumer", "roundrobin")


def test_join_v0_uses_session_timeout_as_rebalance_timeout(broker):
    r = result(join(broker, 0, session=7000))
    member = broker.groupCoordinator.machine.group("g").members[r.member_id]
    assert member.rebalanceTimeoutMs == member.sessionTimeoutMs == 7000
    assert member.clientId == "cli" and member.clientHost == "/127.0.0.9"


def test_join_v4_with_instance_id_needs_no_member_id(broker):
    r = result(join(broker, 5, instance="i-1"))
    assert r.error_code == E.none
    assert r.member_id.startswith("i-1-")
    assert r.members[0].group_instance_id == "i-1"


def test_join_error_versions_before_7_have_empty_protocol_name(broker):
    r = result(join(broker, 6, session=1))
    assert r.error_code == E.invalid_session_timeout
    assert r.protocol_name == ""
    r = result(join(broker, 7, session=1))
    assert r.protocol_name is None and r.protocol_type is None


def test_join_parks_until_rebalance_completes(broker):
    """
    A second member's join completes the first member's rejoin: both
    Deferreds wait without a thread until then.
    """
    a, gen = joinAndSync(broker)
    db = join(broker, 9)
    b = result(db)
    assert b.error_code == E.member_id_required
    db = join(broker, 9, memberId=b.member_id)
    assert not fired(db)  # waits for a to rejoin
    hb = broker.call(12, 4, group_id="g", generation_id=gen, member_id=a, group_instance_id=None)
    assert hb.error_code == E.rebalance_in_progress
    da = join(broker, 9, memberId=a)
    ra, rb = result(da), result(db)
    assert ra.generation_id == rb.generation_id == gen + 1
    assert ra.leader == a and {m.member_id for m in ra.members} == {a, b.member_id}
    assert rb.members == ()
    dsb = sync(broker, 5, b.member_id, gen + 1)
    assert not fired(dsb)  # a follower waits for the leader's assignment
    sa = result(sync(broker, 5, a, gen + 1, {a: b"x", b.member_id: b"y"}))
    assert sa.assignment == b"x" and result(dsb).assignment == b"y"


def test_sync_v5_requires_protocol_type_and_name(broker):
    member, gen = joinAndSync(broker)
    s = result(sync(broker, 5, member, gen, ptype=None))
    assert s.error_code == E.inconsistent_group_protocol
    s = result(sync(broker, 5, member, gen, pname=None))
    assert s.error_code == E.inconsistent_group_protocol
    # Before v5 the fields do not exist.
    assert result(sync(broker, 4, member, gen)).error_code == E.none


def test_sync_unknown_member(broker):
    joinAndSync(broker)
    assert result(sync(broker, 3, "nobody", 1)).error_code == E.unknown_member_id


def test_without_coordinator_everything_is_unavailable():
    broker = GroupBroker(coordinator=False)
    assert result(join(broker, 9)).error_code == E.coordinator_not_available
    assert result(sync(broker, 5, "m", 1)).error_code == E.coordinator_not_available
    assert broker.call(12, 0, group_id="g", generation_id=1, member_id="m").error_code == E.coordinator_not_available
    assert broker.call(16, 0).error_code == E.coordinator_not_available
    assert broker.call(13, 0, group_id="g", member_id="m").error_code == E.coordinator_not_available
    d = broker.call(15, 0, groups=("g",))
    assert d.groups[0].error_code == E.coordinator_not_available
    assert broker.call(42, 0, groups_names=("g",)).results[0].error_code == E.coordinator_not_available
    r = broker.call(9, 1, group_id="g", topics=(req(9, 1, "OffsetFetchRequestTopic", name="t1", partition_indexes=(0,)),))
    assert r.topics[0].partitions[0].error_code == E.coordinator_not_available


# -- Heartbeat / LeaveGroup ---------------------------------------------------------


@pytest.mark.parametrize("version", knownVersions(12))
def test_heartbeat(broker, version):
    member, gen = joinAndSync(broker)
    call = lambda **kw: broker.call(12, version, group_id="g", group_instance_id=None, **kw)
    assert call(generation_id=gen, member_id=member).error_code == E.none
    assert call(generation_id=gen + 1, member_id=member).error_code == E.illegal_generation
    assert call(generation_id=gen, member_id="x").error_code == E.unknown_member_id
    r = broker.call(12, version, group_id="", generation_id=gen, member_id=member, group_instance_id=None)
    assert r.error_code == E.invalid_group_id


@pytest.mark.parametrize("version", range(0, 3))
def test_leave_single_member_versions(broker, version):
    member, _ = joinAndSync(broker)
    assert broker.call(13, version, group_id="g", member_id="ghost").error_code == E.unknown_member_id
    assert broker.call(13, version, group_id="nope", member_id="ghost").error_code == E.unknown_member_id
    assert broker.call(13, version, group_id="g", member_id=member).error_code == E.none
    assert broker.call(15, 0, groups=("g",)).groups[0].group_state == "Empty"


@pytest.mark.parametrize("version", range(3, 6))
def test_leave_batched(broker, version):
    member, _ = joinAndSync(broker)
    Member = nested(requestType(13, version), "MemberIdentity")
    r = broker.call(
        13,
        version,
        group_id="g",
        members=(
            make(Member, member_id=member, group_instance_id=None, reason="bye"),
            make(Member, member_id="ghost", group_instance_id=None, reason=None),
        ),
    )
    assert r.error_code == E.none
    assert [(m.member_id, m.error_code) for m in r.members] == [
        (member, E.none),
        ("ghost", E.unknown_member_id),
    ]


# -- DescribeGroups / ListGroups / DeleteGroups --------------------------------------


@pytest.mark.parametrize("version", range(0, 6))
def test_describe_groups(broker, version):
    member, _ = joinAndSync(broker)
    r = broker.call(15, version, groups=("g", "unknown"), include_authorized_operations=True)
    g, unknown = r.groups
    assert (g.error_code, g.group_id, g.group_state, g.protocol_type, g.protocol_data) == (
        E.none,
        "g",
        "Stable",
        "consumer",
        "roundrobin",
    )
    (m,) = g.members
    assert (m.member_id, m.client_id, m.client_host) == (member, "cli", "/127.0.0.9")
    assert m.member_metadata == encodeSubscription(["t1"]) and m.member_assignment == b"A"
    assert (unknown.error_code, unknown.group_state, unknown.members) == (E.none, "Dead", ())
    if version >= 3:
        assert g.authorized_operations == groups.ALL_GROUP_OPERATIONS
        r = broker.call(15, version, groups=("g",), include_authorized_operations=False)
        assert r.groups[0].authorized_operations == OPERATIONS_OMITTED


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups(broker, version):
    joinAndSync(broker, group="stable")
    member, _ = joinAndSync(broker, group="left")
    broker.call(13, 0, group_id="left", member_id=member)
    r = broker.call(16, version, states_filter=(), types_filter=())
    assert r.error_code == E.none
    assert sorted((g.group_id, g.protocol_type) for g in r.groups) == [
        ("left", "consumer"),
        ("stable", "consumer"),
    ]
    if version >= 4:
        r = broker.call(16, version, states_filter=("empty",), types_filter=())
        assert [(g.group_id, g.group_state) for g in r.groups] == [("left", "Empty")]
    if version >= 5:
        assert {g.group_type for g in r.groups} == {"classic"}
        r = broker.call(16, version, states_filter=(), types_filter=("consumer",))
        assert r.groups == ()
        r = broker.call(16, version, states_filter=(), types_filter=("Classic",))
        assert len(r.groups) == 2


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups(broker, version):
    joinAndSync(broker, group="busy")
    member, _ = joinAndSync(broker, group="idle")
    broker.call(13, 0, group_id="idle", member_id=member)
    r = broker.call(42, version, groups_names=("busy", "idle", "idle", "ghost"))
    assert [(x.group_id, x.error_code) for x in r.results] == [
        ("busy", E.non_empty_group),
        ("idle", E.none),
        ("ghost", E.group_id_not_found),
    ]


# -- OffsetCommit / OffsetFetch / OffsetDelete -------------------------------------------


@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit_and_fetch_every_commit_version(broker, version):
    errors = commit(
        broker,
        version,
        [("t1", 0, 10, "meta-0"), ("t1", 2, 12, None), ("t2", 0, 5, "ünïcode"), ("missing", 0, 1, ""), ("t1", 9, 1, "")],
    )
    assert errors == {
        ("t1", 0): E.none,
        ("t1", 2): E.none,
        ("t2", 0): E.none,
        ("missing", 0): E.unknown_topic_or_partition,
        ("t1", 9): E.unknown_topic_or_partition,
    }
    r = fetchV7(broker)
    assert r.error_code == E.none
    assert offsetsOf(r.topics) == {
        ("t1", 0): (10, "meta-0", E.none),
        ("t1", 2): (12, "", E.none),
        ("t2", 0): (5, "ünïcode", E.none),
    }
    leaderEpochs = {(t.name, p.partition_index): p.committed_leader_epoch for t in r.topics for p in t.partitions}
    assert leaderEpochs[("t1", 0)] == (3 if version >= 6 else -1)


def test_offset_commit_retention_time_sets_expiry(broker):
    commit(broker, 2, [("t1", 0, 10, "")], retention=60000)
    commit(broker, 2, [("t1", 1, 10, "")])
    stored = loadGroups(broker.groupCoordinator.log)[1]["g"]
    now = int(broker.fakeClock.seconds() * 1000)
    assert stored[("t1", 0)].expireTimestampMs == now + 60000
    assert stored[("t1", 0)].commitTimestampMs == now
    assert stored[("t1", 1)].expireTimestampMs is None


def test_offset_commit_member_checks(broker):
    member, gen = joinAndSync(broker)
    assert commit(broker, 8, [("t1", 0, 1, "")], member=member, generation=gen) == {("t1", 0): E.none}
    assert commit(broker, 8, [("t1", 0, 1, "")], member=member, generation=gen + 1) == {
        ("t1", 0): E.illegal_generation
    }
    assert commit(broker, 8, [("t1", 0, 1, "")], member="x", generation=gen) == {
        ("t1", 0): E.unknown_member_id
    }
    # A simple consumer may not commit for a group with members.
    assert commit(broker, 8, [("t1", 0, 1, "")]) == {("t1", 0): E.unknown_member_id}


def test_offset_commit_without_coordinator():
    broker = GroupBroker(coordinator=False)
    assert commit(broker, 9, [("t1", 0, 1, "")]) == {("t1", 0): E.coordinator_not_available}


def test_offset_commit_metadata_too_large(broker):
    assert commit(broker, 9, [("t1", 0, 1, "x" * 5000)]) == {("t1", 0): E.offset_metadata_too_large}


def test_offset_fetch_v1_specific_partitions(broker):
    commit(broker, 2, [("t1", 0, 10, "m")])
    Topic = nested(requestType(9, 1), "OffsetFetchRequestTopic")
    r = broker.call(9, 1, group_id="g", topics=(make(Topic, name="t1", partition_indexes=(0, 1)),))
    assert offsetsOf(r.topics) == {("t1", 0): (10, "m", E.none), ("t1", 1): (-1, "", E.none)}


@pytest.mark.parametrize("version", range(2, 8))
def test_offset_fetch_group_error_is_top_level(broker, version):
    r = fetchV7(broker, group="", topics=None, version=version)
    # The empty group id is valid for offsets (compatibility): nothing there.
    assert r.error_code == E.none and r.topics == ()
    broker.groupCoordinator.shutdown()
    r = fetchV7(broker, topics={"t1": [0]}, version=version)
    assert r.error_code == E.coordinator_not_available and r.topics == ()


@pytest.mark.parametrize("version", [8, 9])
def test_offset_fetch_multi_group(broker, version):
    commit(broker, 9, [("t1", 0, 10, "a")], group="g1")
    commit(broker, 9, [("t2", 0, 20, "b")], group="g2")
    Group = nested(requestType(9, version), "OffsetFetchRequestGroup")
    Topic = nested(requestType(9, version), "OffsetFetchRequestTopics")
    r = broker.call(
        9,
        version,
        require_stable=True,
        groups=(
            make(Group, group_id="g1", member_id=None, member_epoch=-1, topics=None),
            make(
                Group,
                group_id="g2",
                member_id=None,
                member_epoch=-1,
                topics=(make(Topic, name="t2", partition_indexes=(0,)),),
            ),
            make(Group, group_id="g3", member_id=None, member_epoch=-1, topics=None),
        ),
    )
    byGroup = {g.group_id: (g.error_code, offsetsOf(g.topics)) for g in r.groups}
    assert byGroup == {
        "g1": (E.none, {("t1", 0): (10, "a", E.none)}),
        "g2": (E.none, {("t2", 0): (20, "b", E.none)}),
        "g3": (E.none, {}),
    }


def offsetDelete(broker, group, parts):
    Topic = nested(requestType(47, 0), "OffsetDeleteRequestTopic")
    Partition = nested(requestType(47, 0), "OffsetDeleteRequestPartition")
    byTopic = {}
    for t, p in parts:
        byTopic.setdefault(t, []).append(Partition(partition_index=p))
    r = broker.call(
        47,
        0,
        group_id=group,
        topics=tuple(Topic(name=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
    )
    return r.error_code, {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def test_offset_delete(broker):
    assert offsetDelete(broker, "ghost", [("t1", 0)]) == (E.group_id_not_found, {})
    assert offsetDelete(broker, "", [("t1", 0)]) == (E.invalid_group_id, {})
    commit(broker, 9, [("t1", 0, 10, ""), ("t1", 1, 11, "")])
    assert offsetDelete(broker, "g", [("t1", 0), ("nope", 0)]) == (
        E.none,
        {("t1", 0): E.none, ("nope", 0): E.unknown_topic_or_partition},
    )
    assert offsetsOf(fetchV7(broker).topics) == {("t1", 1): (11, "", E.none)}


def test_offset_delete_subscribed_topic(broker):
    member, gen = joinAndSync(broker)
    commit(broker, 9, [("t1", 0, 10, ""), ("t2", 0, 1, "")], member=member, generation=gen)
    assert offsetDelete(broker, "g", [("t1", 0), ("t2", 0)]) == (
        E.none,
        {("t1", 0): E.group_subscribed_to_topic, ("t2", 0): E.none},
    )


def test_registered_versions_are_known_to_kio():
    for key, cls in HANDLERS.items():
        known = knownVersions(key)
        assert cls.minVersion in known and cls.maxVersion in known, key
