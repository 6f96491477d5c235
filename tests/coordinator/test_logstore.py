"""
C{__consumer_offsets} (L{kafkatwist.coordinator.formats},
L{kafkatwist.coordinator.logstore}, L{kafkatwist.coordinator.replay}) on a
real L{LogManager}: Kafka's record formats, partitioning, tombstones,
restarts (a new LogManager on the same directory, then a replay), and
loading that survives damaged or foreign records.
"""

from __future__ import annotations

import os
import struct

import pytest
from crc32c import crc32c
from twisted.internet import task
from twisted.logger import globalLogPublisher

from kafkatwist.coordinator import (
    CommitRequest,
    GroupSnapshot,
    JoinRequest,
    MemberSnapshot,
    OffsetAndMetadata,
    SyncRequest,
    encodeSubscription,
)
from kafkatwist.coordinator.formats import (
    OFFSETS_TOPIC,
    decodeGroupValue,
    decodeKey,
    decodeOffsetValue,
    encodeGroupKey,
    encodeGroupValue,
    encodeOffsetKey,
    encodeOffsetValue,
    javaStringHashCode,
    groupRecord,
    groupTombstone,
    offsetRecords,
    offsetTombstones,
    partitionFor,
)
from kafkatwist.coordinator.logstore import OffsetsTopicLog
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.coordinator.wiring import makeGroupCoordinator, stopGroupCoordinator
from kafkatwist.errors import ErrorCode
from kafkatwist.log import LogManager
from kafkatwist.protocol.batch import ATTRIBUTES_AT, CRC_AT, HEADER_SIZE
from kafkatwist.protocol.records import (
    Record,
    buildBatch,
    decodeBatches,
    readVarint,
    zigzagVarint,
)
from tests.coordinator.helpers import answer

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


# -- the log ------------------------------------------------------------------------------


def test_creates_compacted_topic(dirs):
    manager = dirs.open()
    log = OffsetsTopicLog(manager, numPartitions=5, segmentBytes=65536)
    info = manager.topics()[OFFSETS_TOPIC]
    assert info.numPartitions == 5 == log.numPartitions
    assert info.configs.get("cleanup.policy") == "compact"
    assert str(info.configs.get("segment.bytes")) == "65536"
    # An existing topic keeps its partition count.
    assert OffsetsTopicLog(dirs.restart(), numPartitions=50).numPartitions == 5


def test_round_trip_across_restart(dirs):
    manager = dirs.open()
    log = OffsetsTopicLog(manager, numPartitions=4, clock=lambda: NOW)
    snap = GroupSnapshot("g1", "consumer", 3, "range", "m1", NOW, (member("m1"), member("m2", "inst")))
    g1 = partitionFor("g1", 4)
    log.append(g1, [groupRecord(snap)])
    log.append(
        g1,
        offsetRecords(
            "g1",
            {
                ("t", 0): OffsetAndMetadata(10, 1, "ünïcødé metadata ✓", NOW),
                ("t", 1): OffsetAndMetadata(11, -1, "", NOW),
            },
        ),
    )
    log.append(g1, offsetRecords("g1", {("t", 0): OffsetAndMetadata(12, 2, "newer", NOW + 1)}))
    log.append(
        partitionFor("simple", 4),
        offsetRecords("simple", {("u", 3): OffsetAndMetadata(7, -1, "x" * 4096, NOW, NOW + 99)}),
    )
    ends = {p: manager.getLog(OFFSETS_TOPIC, p).logEndOffset for p in range(4)}
    extra = 1 if partitionFor("simple", 4) == g1 else 0
    # 1 group record + 2 + 1 offset records
    assert ends[g1] == 4 + extra
    assert sum(ends.values()) == 5

    groups, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=4))
    assert groups == [snap]
    assert offsets == {
        "g1": {
            ("t", 0): OffsetAndMetadata(12, 2, "newer", NOW + 1),
            ("t", 1): OffsetAndMetadata(11, -1, "", NOW),
        },
        "simple": {("u", 3): OffsetAndMetadata(7, -1, "x" * 4096, NOW, NOW + 99)},
    }


def test_tombstones(dirs):
    log = OffsetsTopicLog(dirs.open(), numPartitions=1)
    log.append(0, [groupRecord(GroupSnapshot("g", "consumer", 1, None, None, NOW))])
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)}))
    log.append(0, offsetRecords("h", {("t", 0): OffsetAndMetadata(5)}))
    log.append(0, offsetTombstones("g", [("t", 0)]))
    groups, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=1))
    assert [g.groupId for g in groups] == ["g"]
    assert set(offsets["g"]) == {("t", 1)}
    log = OffsetsTopicLog(dirs.manager, numPartitions=1)
    log.append(0, [*offsetTombstones("g", [("t", 1)]), groupTombstone("g")])
    groups, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=1))
    assert groups == [] and offsets == {"h": {("t", 0): OffsetAndMetadata(5)}}


class LogLines:
    """
    The twisted.logger events emitted meanwhile, as formatted text.
    """

    def __init__(self) -> None:
        from twisted.logger import formatEvent

        self._format = formatEvent
        self.lines: list[str] = []

    def __enter__(self):
        globalLogPublisher.addObserver(self._observe)
        return self

    def __exit__(self, *exc) -> None:
        globalLogPublisher.removeObserver(self._observe)

    def _observe(self, event) -> None:
        self.lines.append(self._format(event))

    def matching(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]


def test_unreadable_records_are_skipped(dirs):
    manager = dirs.open()
    log = OffsetsTopicLog(manager, numPartitions=1)
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1)}))
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
    log.append(0, offsetRecords("g", {("t", 2): OffsetAndMetadata(3)}))
    with LogLines() as logged:
        _, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=1))
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(1), ("t", 2): OffsetAndMetadata(3)}}
    # One line per unreadable record, naming topic, partition and offset.
    assert len(logged.matching("__consumer_offsets-0 offset 1: skipping unreadable record")) == 1
    assert len(logged.matching("__consumer_offsets-0 offset 3: skipping unreadable record")) == 1
    assert len(logged.matching("skipped 1 records of other coordinators' types (the first at offset 2)")) == 1


#: small enough that each batch of these tests gets a segment of its own:
#: the damage is then in an older segment, which the log does not check
#: again at start-up (it checks the active one's tail and truncates there)
ONE_BATCH_SEGMENTS = 200


def _segments(dirs) -> list[str]:
    return sorted(
        os.path.join(root, name)
        for root, _, names in os.walk(dirs.path)
        for name in names
        if name.endswith(".log") and OFFSETS_TOPIC in root
    )


def _damageOnDisk(dirs, segment: int, damage) -> None:
    """
    Close the log, let C{damage(bytearray)} change the bytes of its
    C{segment}th segment in place, reopen.  (The log refuses such batches at
    append now; this is what a forged append or a bad disk left before.)
    """
    dirs.close()
    with open(_segments(dirs)[segment], "r+b") as f:
        data = bytearray(f.read())
        damage(data)
        f.seek(0)
        f.write(data)
    dirs.open()


def _truncateLastRecord(data: bytearray, batch: int) -> None:
    """
    Make the last record of the batch at C{batch} claim more bytes than are
    left, and give the batch a valid CRC again: a CRC-valid batch holding a
    truncated record, the input that stopped start-up in issue 11.
    """
    size = 12 + int.from_bytes(data[batch + 8 : batch + 12], "big")
    position = batch + HEADER_SIZE
    while True:
        value, after = readVarint(bytes(data[position : position + 5]), 0)
        length = (value >> 1) ^ -(value & 1)
        if after + length >= batch + size - position:
            break
        position += after + length
    assert after == 1 and length < 63
    data[position : position + 1] = zigzagVarint(63)
    struct.pack_into(">I", data, batch + CRC_AT, crc32c(bytes(data[batch + ATTRIBUTES_AT : batch + size])))


def test_batch_with_truncated_record_is_skipped_with_one_line(dirs):
    log = OffsetsTopicLog(dirs.open(), numPartitions=1, segmentBytes=ONE_BATCH_SEGMENTS)
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1)}))
    log.append(0, offsetRecords("g", {("t", 5): OffsetAndMetadata(50), ("t", 6): OffsetAndMetadata(60)}))
    log.append(0, offsetRecords("g", {("t", 2): OffsetAndMetadata(3)}))
    assert len(_segments(dirs)) == 3
    _damageOnDisk(dirs, 1, lambda data: _truncateLastRecord(data, 0))
    with open(_segments(dirs)[1], "rb") as f:
        damaged = f.read()
    with pytest.raises(Exception, match="overruns|past the end|varint"):
        list(decodeBatches(damaged))
    with LogLines() as logged:
        _, offsets = loadGroups(OffsetsTopicLog(dirs.manager, numPartitions=1))
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(1), ("t", 2): OffsetAndMetadata(3)}}
    lines = logged.matching("skipping unreadable")
    assert len(lines) == 1
    assert "__consumer_offsets-0: skipping unreadable batch at offsets 1-2" in lines[0]


def test_crc_flip_is_skipped_and_start_up_goes_on(dirs):
    config = {"offsets.topic.num.partitions": 1}
    log = OffsetsTopicLog(dirs.open(), numPartitions=1, segmentBytes=ONE_BATCH_SEGMENTS)
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1)}))
    log.append(0, offsetRecords("g", {("t", 1): OffsetAndMetadata(2)}))
    log.append(0, offsetRecords("g", {("t", 2): OffsetAndMetadata(3)}))
    assert len(_segments(dirs)) == 3

    def flip(data):
        data[70] ^= 0x01  # inside the records of the segment's one batch

    _damageOnDisk(dirs, 1, flip)
    with LogLines() as logged:
        coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=task.Clock())
    try:
        fetched = call(coordinator.fetchOffsets, "g", None).offsets
        assert {tp: f.offset for tp, f in fetched.items()} == {("t", 0): 1, ("t", 2): 3}
        lines = logged.matching("skipping unreadable batch at offsets 1-1")
        assert len(lines) == 1 and "crc" in lines[0].lower()
    finally:
        stopGroupCoordinator(coordinator)


def test_batches_written_by_producers_are_not_trusted(dirs):
    manager = dirs.open()
    log = OffsetsTopicLog(manager, numPartitions=1)
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1)}))
    forged = buildBatch(
        [Record(key=k, value=v) for k, v in offsetRecords("g", {("t", 0): OffsetAndMetadata(999)})],
        producerId=7,
        producerEpoch=0,
        baseSequence=0,
    )
    manager.getLog(OFFSETS_TOPIC, 0).append(forged, NOW, isFromClient=False)
    with LogLines() as logged:
        _, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=1))
    assert offsets == {"g": {("t", 0): OffsetAndMetadata(1)}}
    assert len(logged.matching("written by producer 7, not by the broker")) == 1


def test_batch_larger_than_the_load_buffer(dirs, monkeypatch):
    from kafkatwist.coordinator import logstore

    monkeypatch.setattr(logstore, "LOAD_BUFFER_BYTES", 100)
    log = OffsetsTopicLog(dirs.open(), numPartitions=1)
    big = {("t", p): OffsetAndMetadata(p, metadata="m" * 50) for p in range(20)}
    log.append(0, offsetRecords("g", big))
    log.append(0, offsetRecords("g", {("u", 0): OffsetAndMetadata(1)}))
    _, offsets = loadGroups(OffsetsTopicLog(dirs.restart(), numPartitions=1))
    assert offsets["g"] == {**big, ("u", 0): OffsetAndMetadata(1)}


# -- the coordinator over the log ---------------------------------------------------------


def call(method, *args):
    box = []
    method(box.append, *args)
    (result,) = box
    return result


def joinAndSync(coordinator, clock, groupId="g"):
    joined = call(
        coordinator.joinGroup,
        JoinRequest(
            groupId, "", None, "cli", "/1.2.3.4", 30000, 10000, "consumer",
            (("roundrobin", encodeSubscription(["t"])),),
        ),
    )
    synced = call(
        coordinator.syncGroup,
        SyncRequest(groupId, joined.generationId, joined.memberId, assignments={joined.memberId: b"assignment"}),
    )
    assert synced.errorCode == E.none
    return joined


def fakeClock():
    clock = task.Clock()
    clock.advance(NOW / 1000)
    return clock


def commit(coordinator, group, offsets, member="", generation=-1):
    return call(coordinator.commitOffsets, CommitRequest(group, generation, member, None, offsets))


def test_coordinator_restart_keeps_groups_and_offsets(dirs):
    dirs.open()
    config = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0}
    clock = fakeClock()
    coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=clock)
    joined = joinAndSync(coordinator, clock)
    assert commit(
        coordinator, "g", {("t", 0): OffsetAndMetadata(100, 4, "md ✓")}, joined.memberId, joined.generationId
    ) == {("t", 0): E.none}
    assert commit(coordinator, "solo", {("t", 1): OffsetAndMetadata(5)}) == {("t", 1): E.none}
    stopGroupCoordinator(coordinator)
    stopGroupCoordinator(coordinator)  # idempotent

    dirs.restart()
    clock = fakeClock()
    coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=clock)
    (desc,) = call(coordinator.describeGroups, ["g"])
    assert (desc.state, desc.protocolType, desc.protocolData) == ("Stable", "consumer", "roundrobin")
    assert [(m.memberId, m.clientHost, m.assignment) for m in desc.members] == [
        (joined.memberId, "/1.2.3.4", b"assignment")
    ]
    fetched = call(coordinator.fetchOffsets, "g", None).offsets[("t", 0)]
    assert (fetched.offset, fetched.leaderEpoch, fetched.metadata) == (100, 4, "md ✓")
    assert call(coordinator.fetchOffsets, "solo", None).offsets[("t", 1)].offset == 5
    # The loaded member keeps its generation and must heartbeat within its
    # session timeout, else it is removed and the group empties.
    assert call(coordinator.heartbeat, "g", joined.generationId, joined.memberId, None) == E.none
    clock.advance(10.001)
    assert call(coordinator.describeGroups, ["g"])[0].state == "Empty"
    stopGroupCoordinator(coordinator)

    # The emptied group was stored too.
    dirs.restart()
    coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=fakeClock())
    assert call(coordinator.describeGroups, ["g"])[0].state == "Empty"
    assert call(coordinator.fetchOffsets, "g", None).offsets[("t", 0)].offset == 100
    stopGroupCoordinator(coordinator)


def test_expiry_and_deletion_survive_restart(dirs):
    dirs.open()
    config = {"offsets.topic.num.partitions": 2, "offsets.retention.minutes": 1}
    clock = fakeClock()
    coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=clock)
    commit(coordinator, "old", {("t", 0): OffsetAndMetadata(1)})
    commit(coordinator, "gone", {("t", 0): OffsetAndMetadata(1)})
    assert call(coordinator.deleteGroups, ["gone"]) == {"gone": E.none}
    clock.advance(61)
    assert call(coordinator.expireOffsets) == 1
    commit(coordinator, "new", {("t", 0): OffsetAndMetadata(2)})
    stopGroupCoordinator(coordinator)

    dirs.restart()
    coordinator = makeGroupCoordinator(None, config, dirs.manager, clock=fakeClock())
    assert [g.groupId for g in call(coordinator.listGroups, ()).groups] == ["new"]
    assert call(coordinator.fetchOffsets, "old", None).offsets == {}
    stopGroupCoordinator(coordinator)


def test_without_log_manager_groups_stay_in_memory():
    coordinator = makeGroupCoordinator(None, {}, None)
    assert commit(coordinator, "g", {("t", 0): OffsetAndMetadata(1)}) == {("t", 0): E.none}
    stopGroupCoordinator(coordinator)
    stopGroupCoordinator(None)


def test_the_broker_clock_is_not_used(dirs):
    """
    The main reactor does nothing for groups: the coordinator keeps its own
    timer thread, and never touches the broker's (main reactor) clock.
    """

    class Broker:
        @property
        def clock(self):
            raise AssertionError("the coordinator used the main reactor's clock")

    dirs.open()
    config = {"offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0}
    coordinator = makeGroupCoordinator(Broker(), config, dirs.manager)
    try:
        assert coordinator.clock.name == "kafkatwist-group-coordinator"
        joined = answer(coordinator.joinGroup, joinRequestFor("g"))
        assert joined.errorCode == E.none
        synced = answer(
            coordinator.syncGroup,
            SyncRequest("g", joined.generationId, joined.memberId, assignments={joined.memberId: b"a"}),
        )
        assert synced.errorCode == E.none
        assert answer(coordinator.heartbeat, "g", joined.generationId, joined.memberId, None) == E.none
    finally:
        stopGroupCoordinator(coordinator)


def joinRequestFor(groupId):
    return JoinRequest(
        groupId, "", None, "cli", "/1.2.3.4", 30000, 10000, "consumer",
        (("roundrobin", encodeSubscription(["t"])),),
    )


def test_a_partition_that_fails_to_replay_does_not_stop_loading(dirs):
    log = OffsetsTopicLog(dirs.open(), numPartitions=2)
    log.append(0, offsetRecords("a", {("t", 0): OffsetAndMetadata(1)}))
    log.append(1, offsetRecords("b", {("t", 0): OffsetAndMetadata(2)}))
    replay = log.replayEvents

    def broken(partition):
        if partition == 0:
            raise OSError("the disk is on fire")
        return replay(partition)

    log.replayEvents = broken
    with LogLines() as logged:
        _, offsets = loadGroups(log)
    assert offsets == {"b": {("t", 0): OffsetAndMetadata(2)}}
    assert len(logged.matching("__consumer_offsets-0: loading stopped after offset None")) == 1


def test_a_group_that_cannot_be_rebuilt_starts_empty(monkeypatch):
    from kafkatwist.coordinator.coordinator import GroupCoordinator
    from kafkatwist.coordinator.group import GroupMetadata

    real = GroupMetadata.fromSnapshot

    def fromSnapshot(snap, nowMs):
        if snap.groupId == "bad":
            raise ValueError("odd")
        return real(snap, nowMs)

    monkeypatch.setattr(GroupMetadata, "fromSnapshot", staticmethod(fromSnapshot))
    machine = GroupCoordinator()
    machine.load(
        0,
        [GroupSnapshot("bad", "consumer", 1, None, None, 0), GroupSnapshot("ok", "consumer", 2, None, None, 0)],
        {"bad": {("t", 0): OffsetAndMetadata(5)}},
    )
    assert sorted(machine.publishedGroups()) == ["bad", "ok"]
    assert dict(machine.publishedGroups()["bad"].offsets) == {("t", 0): 5}
