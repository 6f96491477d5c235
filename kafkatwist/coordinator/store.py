"""
The storage seam of the group coordinator.

The coordinator keeps all group state in memory and writes through an
L{IGroupStore} whenever Kafka would append to C{__consumer_offsets}: a group
snapshot after each completed rebalance (and when a group empties), offsets
on commit, tombstones on deletion and expiry.  At startup it reads everything
back with C{load()}.

The snapshot types mirror Kafka's C{GroupMetadataValue} (v3) and are frozen
dataclasses of plain values, so a log-backed store can serialise them
directly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from zope.interface import Interface, implementer

from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition

__all__ = ["GroupSnapshot", "IGroupStore", "InMemoryGroupStore", "MemberSnapshot"]


@dataclass(frozen=True)
class MemberSnapshot:
    """
    One member of a stored group (C{MemberMetadata} in
    C{GroupMetadataValue}).

    @ivar subscription: the member's metadata for the group's selected
        protocol.
    @ivar assignment: what the leader assigned it.
    """

    memberId: str
    groupInstanceId: str | None
    clientId: str
    clientHost: str
    rebalanceTimeoutMs: int
    sessionTimeoutMs: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """
    A stored group: Stable with members, or Empty without.

    @ivar protocolType: e.g. C{"consumer"}, or C{None} for a group that only
        ever committed offsets.
    @ivar protocolName: the selected protocol (assignor), C{None} when empty.
    @ivar leaderId: the leader's member id, C{None} when empty.
    @ivar currentStateTimestampMs: when the group entered its current state
        (the start of offset retention for an empty group).
    """

    groupId: str
    protocolType: str | None
    generationId: int
    protocolName: str | None
    leaderId: str | None
    currentStateTimestampMs: int | None
    members: tuple[MemberSnapshot, ...] = field(default=())


class IGroupStore(Interface):
    """
    Durable storage of group metadata and committed offsets.

    Calls are made with the group's lock held, so calls for one group are
    serialised and ordered; calls for different groups may come from
    several threads at once.  A method raising
    L{kafkatwist.errors.KafkaError} fails the operation with that code (the
    coordinator keeps its in-memory state unchanged in that case).
    """

    def storeGroup(groupSnapshot):
        """
        Persist the group's metadata, replacing any earlier snapshot.

        @param groupSnapshot: a L{GroupSnapshot}.
        """

    def storeOffsets(groupId, offsets):
        """
        Persist commits, replacing earlier offsets of the same partitions.

        @param offsets: C{dict} C{(topic, partition)} -> L{OffsetAndMetadata}.
        """

    def deleteOffsets(groupId, partitions):
        """
        Remove some of a group's offsets (OffsetDelete, expiry): tombstones
        in a log-backed store.

        @param partitions: iterable of C{(topic, partition)}.
        """

    def deleteGroup(groupId):
        """
        Remove a group's metadata and all its offsets.
        """

    def load():
        """
        Read everything back.

        @return: C{(groups, offsets)}: a C{list} of L{GroupSnapshot}, and a
            C{dict} group id -> C{dict} C{(topic, partition)} ->
            L{OffsetAndMetadata}.  A group may have offsets without a
            snapshot (simple consumers that never joined).
        """


@implementer(IGroupStore)
class InMemoryGroupStore:
    """
    An L{IGroupStore} in a dictionary: nothing survives the process, which
    is what tests and a broker without persistence want.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.groups: dict[str, GroupSnapshot] = {}
        self.offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}

    def storeGroup(self, groupSnapshot: GroupSnapshot) -> None:
        with self._lock:
            self.groups[groupSnapshot.groupId] = groupSnapshot

    def storeOffsets(
        self, groupId: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        with self._lock:
            self.offsets.setdefault(groupId, {}).update(offsets)

    def deleteOffsets(self, groupId: str, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            stored = self.offsets.get(groupId)
            if stored is None:
                return
            for tp in partitions:
                stored.pop(tp, None)
            if not stored:
                del self.offsets[groupId]

    def deleteGroup(self, groupId: str) -> None:
        with self._lock:
            self.groups.pop(groupId, None)
            self.offsets.pop(groupId, None)

    def load(self):
        with self._lock:
            return (
                list(self.groups.values()),
                {g: dict(offs) for g, offs in self.offsets.items()},
            )
