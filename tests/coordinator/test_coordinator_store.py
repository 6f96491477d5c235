"""
The storage seam: interface conformance and what the coordinator writes.
"""

from __future__ import annotations

import dataclasses

from zope.interface.verify import verifyObject

from kafkatwist.coordinator import GroupSnapshot, MemberSnapshot, OffsetAndMetadata
from kafkatwist.coordinator.formats import groupRecord, groupTombstone, offsetRecords, offsetTombstones
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.interfaces import ICoordinatorLog

from .helpers import E, memoryLog, sub


def test_offsets_topic_log_provides_interface():
    assert verifyObject(ICoordinatorLog, memoryLog())


def test_snapshot_after_leader_sync_is_plain_data(h):
    (a, b), gen = h.stableGroup(2)
    snap = h.stored()[0]["g"]
    assert (snap.protocolType, snap.generationId, snap.protocolName, snap.leaderId) == (
        "consumer",
        gen,
        "range",
        a,
    )
    assert snap.members[0] == MemberSnapshot(
        a, None, "client", "/127.0.0.1", 30000, 10000, sub("t1"), a.encode()
    )
    # Serialisable without custom code.
    assert dataclasses.asdict(snap)["members"][1]["assignment"] == b.encode()


def test_replay_round_trip_and_deletes():
    log = memoryLog(numPartitions=1)
    log.append(0, [groupRecord(GroupSnapshot("g", "consumer", 3, None, None, 5, ()))])
    log.append(0, offsetRecords("g", {("t", 0): OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)}))
    log.append(0, offsetTombstones("g", [("t", 0)]))
    groups, offsets = loadGroups(log)
    assert [g.groupId for g in groups] == ["g"]
    assert offsets == {"g": {("t", 1): OffsetAndMetadata(2)}}
    log.append(0, [*offsetTombstones("g", [("t", 1)]), groupTombstone("g")])
    assert loadGroups(log) == ([], {})


def test_offset_delete_requires_group_id(h):
    assert h.coord.deleteOffsets("", [("t", 0)]).errorCode == E.invalid_group_id
