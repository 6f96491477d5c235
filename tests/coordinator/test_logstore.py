"""
The C{__consumer_offsets} group store (L{kafkatwist.coordinator.logstore})
on a real L{LogManager}: Kafka's record formats, partitioning, tombstones,
and restarts (a new LogManager on the same directory, then C{load()}).
"""

from __future__ import annotations

import pytest
from twisted.internet import task

from kafkatwist.clock import ThreadSafeClock
from kafkatwist.coordinator import (
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    encodeSubscription,
)
from kafkatwist.coordinator.logstore import (
    OFFSETS_TOPIC,
    LogGroupStore,
    decodeGroupValue,
    decodeKey,
    decodeOffsetValue,
    encodeGroupKey,
    encodeGroupValue,
    encodeOffsetKey,
    encodeOffsetValue,
    javaStringHashCode,
    partitionFor,
)
from kafkatwist.coordinator.wiring import makeGroupCoordinator, stopGroupCoordinator
from kafkatwist.errors import ErrorCode
from kafkatwist.log import LogManager
from kafkatwist.protocol.records import decodeBatches

E = ErrorCode
NOW = 1_700_000_000_000


class Dirs:
    """
    Open, close and reopen a LogManager on one directory.
    """

    def __init__(self, path) -> None:
        self.path = str(path)
        self.manager = None

    def open(self) -> LogManager:
        self.manager = LogManager([self.path], {"num.partitions": 1})
        return self.manager

    def restart(self) -> LogManager:
        self.manager.close()
        return self.open()

    def close(self) -> None:
        if self.manager is not None:
            self.manager.close()
            self.manager = None


@pytest.fixture
def dirs(tmp_path):
    d = Dirs(tmp_path / "data")
    yield d
    d.close()


def member(mid, instance=None, sub=b"sub", assignment=b"asg"):
    return MemberSnapshot(
        memberId=mid,
        groupInstanceId=instance,
        clientId="client-" + mid,
        clientHost="/127.0.0.1",
        rebalanceTimeoutMs=30000,
        sessionTimeoutMs=10000,
        subscription=sub,
        assignment=assignment,
    )


# -- formats ---------------------------------------------------------------------


def test_java_string_hash_code():
    assert javaStringHashCode("") == 0
    assert javaStringHashCode("hello") == 99162322
    # Beyond the BMP: hashed as a surrogate pair, as Java does.
    assert javaStringHashCode("\U0001F600") == (0xD83D * 31 + 0xDE00)
    # The famous string whose hashCode is Integer.MIN_VALUE: Kafka's
    # Utils.abs maps it to 0.
    assert javaStringHashCode("polygenelubricants") == -(2**31)
    assert partitionFor("polygenelubricants", 50) == 0
    assert partitionFor("hello", 50) == 99162322 % 50
    assert partitionFor("hello", 7) == 99162322 % 7


def test_offset_key_and_value_bytes():
    assert encodeOffsetKey("g", "t", 1) == b"\x00\x01" b"\x00\x01g" b"\x00\x01t" b"\x00\x00\x00\x01"
    assert encodeGroupKey("g") == b"\x00\x02\x00\x01g"
    assert decodeKey(encodeOffsetKey("gé", "tø", 7)) == ("offset", "gé", ("tø", 7))
    assert decodeKey(encodeGroupKey("g")) == ("group", "g")
    assert decodeKey(b"\x00\x05whatever") == ("unknown", 5)

    om = OffsetAndMetadata(42, 3, "meta", 1000)
    value = encodeOffsetValue(om)
    # v3: version, offset, leader epoch, metadata, commit timestamp
    assert value == (
        b"\x00\x03" + (42).to_bytes(8, "big") + (3).to_bytes(4, "big") + b"\x00\x04meta" + (1000).to_bytes(8, "big")
    )
    assert decodeOffsetValue(value) == om

    # An explicit expiry is only in v1 (which has no leader epoch).
    expiring = OffsetAndMetadata(42, 3, "meta", 1000, 5000)
    value = encodeOffsetValue(expiring)
    assert value[:2] == b"\x00\x01"
    assert decodeOffsetValue(value) == OffsetAndMetadata(42, -1, "meta", 1000, 5000)


def test_group_value_round_trip_and_layout():
    snap = GroupSnapshot(
        groupId="g",
        protocolType="consumer",
        generationId=5,
        protocolName="roundrobin",
        leaderId="m1",
        currentStateTimestampMs=NOW,
        members=(member("m1", "static-1"), member("m2", sub=b"\x00\x01", assignment=b"")),
    )
    value = encodeGroupValue(snap)
    assert value.startswith(b"\x00\x03\x00\x08consumer\x00\x00\x00\x05\x00\x0aroundrobin\x00\x02m1")
    assert decodeGroupValue("g", value) == snap
    empty = GroupSnapshot("g", None, 0, None, None, None)
    assert decodeGroupValue("g", encodeGroupValue(empty)) == empty


# -- the store on a real log -------------------------------------------------------------


def test_creates_compacted_topic(dirs):
    manager = dirs.open()
    store = LogGroupStore(manager, numPartitions=5)
    info = manager.topics()[OFFSETS_TOPIC]
    assert info.numPartitions == 5 == store.numPartitions
    assert info.configs.get("cleanup.policy") == "compact"
    # An existing topic keeps its partition count.
    assert LogGroupStore(dirs.restart(), numPartitions=50).numPartitions == 5


def test_round_trip_across_restart(dirs):
    manager = dirs.open()
    store = LogGroupStore(manager, numPartitions=4, clock=lambda: NOW)
    snap = GroupSnapshot("g1", "consumer", 3, "range", "m1", NOW, (member("m1"), member("m2", "inst")))
    store.storeGroup(snap)
    store.storeOffsets(
        "g1",
        {
            ("t", 0): OffsetAndMetadata(10, 1, "ünïcødé metadata ✓", NOW),
            ("t", 1): OffsetAndMetadata(11, -1, "", NOW),
        },
    )
    store.storeOffsets("g1", {("t", 0): OffsetAndMetadata(12, 2, "newer", NOW + 1)})
    store.storeOffsets("simple", {("u", 3): OffsetAndMetadata(7, -1, "x" * 4096, NOW, NOW + 99)})
    # Records are where Kafka puts them.
    ends = {p: manager.getLog(OFFSETS_TOPIC, p).logEndOffset for p in range(4)}
    extra = 1 if partitionFor("simple", 4) == partitionFor("g1", 4) else 0
    # 1 group record + 2 + 1 offset records
    assert ends[partitionFor("g1", 4)] == 4 + extra
    assert sum(ends.values()) == 5

    store2 = LogGroupStore(dirs.restart(), numPartitions=4)
    groups, offsets = store2.load()
    assert groups == [snap]
    assert offsets == {
        "g1": {
            ("t", 0): OffsetAndMetadata(12, 2, "newer", NOW + 1),
            ("t", 1): OffsetAndMetadata(11, -1, "", NOW),
        },
        "simple": {("u", 3): OffsetAndMetadata(7, -1, "x" * 4096, NOW, NOW + 99)},
    }


def test_tombstones(dirs):
    store = LogGroupStore(dirs.open(), numPartitions=3)
    store.storeGroup(GroupSnapshot("g", "consumer", 1, None, None, NOW))
    store.storeOffsets("g", {("t", 0): OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)})
    store.storeOffsets("h", {("t", 0): OffsetAndMetadata(5)})
    store.deleteOffsets("g", [("t", 0)])
    groups, offsets = LogGroupStore(dirs.restart(), numPartitions=3).load()
    assert [g.groupId for g in groups] == ["g"]
    assert set(offsets["g"]) == {("t", 1)}

    store = LogGroupStore(dirs.manager, numPartitions=3)
    store.load()
    # Deleting a group after a restart still tombstones the offsets it had
    # before: the store learned them from the log.
    store.deleteGroup("g")
    partitionLog = dirs.manager.getLog(OFFSETS_TOPIC, store.partitionFor("g"))
    data = partitionLog.read(partitionLog.logEndOffset - 1, 1 << 20).records
    raw = data if isinstance(data, bytes) else data.read()
    if not isinstance(data, bytes):
        data.close()
    last = list(decodeBatches(raw))[-1]
    assert [(decodeKey(r.key), r.value) for r in last.records] == [
        (("offset", "g", ("t", 1)), None),
        (("group", "g"), None),
    ]
    groups, offsets = LogGroupStore(dirs.restart(), numPartitions=3).load()
    assert groups == [] and offsets == {"h": {("t", 0): OffsetAndMetadata(5)}}


def test_unreadable_records_are_skipped(dirs):
    from kafkatwist.protocol.records import Record, buildBatch

    manager = dirs.open()
    store = LogGroupStore(manager, numPartitions=1)
    store.storeOffsets("g", {("t", 0): OffsetAndMetadata(1)})
    manager.getLog(OFFSETS_TOPIC, 0).append(
        buildBatch(
            [
                Record(key=b"\x00\x01\x00", value=b"junk"),
                Record(key=b"\x00\x09other", value=b"another coordinator's"),
                Record(key=encodeOffsetKey("g", "t", 1), value=b"\x00\x07bad version"),
            ]
        ),
        NOW,
        isFromClient=False,
    )
    store.storeOffsets("g", {("t", 2): OffsetAndMetadata(3)})
    _, offsets = LogGroupStore(dirs.restart(), numPartitions=1).load()
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(1), ("t", 2): OffsetAndMetadata(3)}}


# -- the coordinator over the store ----------------------------------------------------------


class Broker:
    def __init__(self) -> None:
        self.fakeClock = task.Clock()
        self.fakeClock.advance(NOW / 1000)
        self.clock = ThreadSafeClock(self.fakeClock)


def joinAndSync(coordinator, clock, groupId="g"):
    d = coordinator.joinGroup(
        groupId, "", None, "cli", "/1.2.3.4", 30000, 10000, "consumer",
        [("roundrobin", encodeSubscription(["t"]))], False,
    )
    clock.advance(0)
    out = []
    d.addCallback(out.append)
    (joined,) = out
    d = coordinator.syncGroup(groupId, joined.generationId, joined.memberId, None, None, None, {joined.memberId: b"assignment"})
    out = []
    d.addCallback(out.append)
    assert out[0].errorCode == E.none
    return joined


def test_coordinator_restart_keeps_groups_and_offsets(dirs):
    dirs.open()
    broker = Broker()
    config = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
    coordinator = makeGroupCoordinator(broker, config, dirs.manager)
    joined = joinAndSync(coordinator, broker.fakeClock)
    assert coordinator.commitOffsets(
        "g", joined.generationId, joined.memberId, None, {("t", 0): OffsetAndMetadata(100, 4, "md ✓")}
    ) == {("t", 0): E.none}
    assert coordinator.commitOffsets("solo", -1, "", None, {("t", 1): OffsetAndMetadata(5)}) == {
        ("t", 1): E.none
    }
    stopGroupCoordinator(coordinator)
    stopGroupCoordinator(coordinator)  # idempotent

    dirs.restart()
    broker = Broker()
    coordinator = makeGroupCoordinator(broker, config, dirs.manager)
    (desc,) = coordinator.describeGroups(["g"])
    assert (desc.state, desc.protocolType, desc.protocolData) == ("Stable", "consumer", "roundrobin")
    assert [(m.memberId, m.clientHost, m.assignment) for m in desc.members] == [
        (joined.memberId, "/1.2.3.4", b"assignment")
    ]
    fetched = coordinator.fetchOffsets("g").offsets[("t", 0)]
    assert (fetched.offset, fetched.leaderEpoch, fetched.metadata) == (100, 4, "md ✓")
    assert coordinator.fetchOffsets("solo").offsets[("t", 1)].offset == 5
    # The loaded member keeps its generation and must heartbeat within its
    # session timeout, else it is removed and the group empties.
    assert coordinator.heartbeat("g", joined.generationId, joined.memberId) == E.none
    broker.fakeClock.advance(10.001)
    assert coordinator.describeGroups(["g"])[0].state == "Empty"
    stopGroupCoordinator(coordinator)

    # The emptied group was stored too.
    dirs.restart()
    coordinator = makeGroupCoordinator(Broker(), config, dirs.manager)
    assert coordinator.describeGroups(["g"])[0].state == "Empty"
    assert coordinator.fetchOffsets("g").offsets[("t", 0)].offset == 100
    stopGroupCoordinator(coordinator)


def test_expiry_and_deletion_survive_restart(dirs):
    dirs.open()
    config = {"offsets.topic.num.partitions": 2, "offsets.retention.minutes": 1}
    broker = Broker()
    coordinator = makeGroupCoordinator(broker, config, dirs.manager)
    coordinator.commitOffsets("old", -1, "", None, {("t", 0): OffsetAndMetadata(1)})
    coordinator.commitOffsets("gone", -1, "", None, {("t", 0): OffsetAndMetadata(1)})
    assert coordinator.deleteGroups(["gone"]) == {"gone": E.none}
    broker.fakeClock.advance(61)
    assert coordinator.expireOffsets() == 1
    coordinator.commitOffsets("new", -1, "", None, {("t", 0): OffsetAndMetadata(2)})
    stopGroupCoordinator(coordinator)

    dirs.restart()
    coordinator = makeGroupCoordinator(Broker(), config, dirs.manager)
    assert [g.groupId for g in coordinator.listGroups().groups] == ["new"]
    assert coordinator.fetchOffsets("old").offsets == {}
    stopGroupCoordinator(coordinator)


def test_without_log_manager_groups_stay_in_memory():
    coordinator = makeGroupCoordinator(Broker(), {}, None)
    assert coordinator.commitOffsets("g", -1, "", None, {("t", 0): OffsetAndMetadata(1)}) == {
        ("t", 0): E.none
    }
    stopGroupCoordinator(coordinator)
    stopGroupCoordinator(None)
