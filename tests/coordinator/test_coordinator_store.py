"""
The storage seam: interface conformance and what the coordinator writes.
"""

from __future__ import annotations

import dataclasses

from zope.interface.verify import verifyObject

from kafkatwist.coordinator import (
    GroupSnapshot,
    IGroupStore,
    InMemoryGroupStore,
    MemberSnapshot,
    OffsetAndMetadata,
)

from .helpers import E, sub


def test_in_memory_store_provides_interface():
    assert verifyObject(IGroupStore, InMemoryGroupStore())


def test_snapshot_after_leader_sync_is_plain_data(h):
    (a, b), gen = h.stableGroup(2)
    snap = h.store.groups["g"]
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


def test_store_load_round_trip_and_deletes():
    store = InMemoryGroupStore()
    store.storeGroup(GroupSnapshot("g", "consumer", 3, None, None, 5, ()))
    store.storeOffsets("g", {("t", 0): OffsetAndMetadata(1), ("t", 1): OffsetAndMetadata(2)})
    store.deleteOffsets("g", [("t", 0)])
    groups, offsets = store.load()
    assert [g.groupId for g in groups] == ["g"]
    assert offsets == {"g": {("t", 1): OffsetAndMetadata(2)}}
    store.deleteGroup("g")
    assert store.load() == ([], {})


def test_offset_delete_requires_group_id(h):
    assert h.coord.deleteOffsets("", [("t", 0)]).errorCode == E.invalid_group_id
