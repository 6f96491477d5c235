"""
A group as C{__consumer_offsets} stores it.

The coordinator keeps all group state in memory and appends a group
snapshot whenever Kafka would: after each completed rebalance, when a group
empties, when a static member's id changes.  The snapshot types mirror
Kafka's C{GroupMetadataValue} (v3) and are frozen dataclasses of plain
values, which L{kafkatwist.coordinator.formats} serialises.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["GroupSnapshot", "MemberSnapshot"]


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
