"""
What the group coordinator is asked: the requests with more than a handful
of fields, as plain frozen values the request handlers build from the
decoded C{kio} entities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition

__all__ = ["CommitRequest", "JoinRequest", "SyncRequest"]


@dataclass(frozen=True)
class JoinRequest:
    """
    A JoinGroup.

    @ivar memberId: C{""} for a member without an id yet.
    @ivar rebalanceTimeoutMs: JoinGroup v0 has none: the session timeout
        serves (a negative value is taken to mean that too).
    @ivar protocols: C{(name, metadata)} in order of preference.
    @ivar requireKnownMemberId: C{True} for JoinGroup v4+ without a group
        instance id: a new member is given an id with MEMBER_ID_REQUIRED and
        must join again with it (KIP-394).
    @ivar reason: JoinGroup v8+'s reason, logged only.
    """

    groupId: str
    memberId: str
    groupInstanceId: str | None
    clientId: str
    clientHost: str
    rebalanceTimeoutMs: int
    sessionTimeoutMs: int
    protocolType: str
    protocols: tuple[tuple[str, bytes], ...]
    requireKnownMemberId: bool = False
    reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "memberId", self.memberId or "")
        object.__setattr__(
            self, "protocols", tuple((name, bytes(meta)) for name, meta in self.protocols)
        )
        if self.rebalanceTimeoutMs is None or self.rebalanceTimeoutMs < 0:
            object.__setattr__(self, "rebalanceTimeoutMs", self.sessionTimeoutMs)


@dataclass(frozen=True)
class SyncRequest:
    """
    A SyncGroup.

    @ivar protocolType: SyncGroup v5+, else C{None} (not checked).
    @ivar protocolName: SyncGroup v5+, else C{None} (not checked).
    @ivar assignments: the leader's assignment, member id -> bytes; empty
        for followers.
    """

    groupId: str
    generationId: int
    memberId: str
    groupInstanceId: str | None = None
    protocolType: str | None = None
    protocolName: str | None = None
    assignments: Mapping[str, bytes] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "assignments", {m: bytes(a) for m, a in (self.assignments or {}).items()}
        )


@dataclass(frozen=True)
class CommitRequest:
    """
    An OffsetCommit.

    A member of a group (generation >= 0, or a member id or instance id
    given) must be current; a commit with generation -1 and no member id
    comes from a consumer managing its own partitions.

    @ivar generationId: the generation, or a KIP-848 member's epoch.
    @ivar offsets: C{(topic, partition)} -> L{OffsetAndMetadata}; a
        C{commitTimestampMs} of -1 is filled in with the commit time.
    """

    groupId: str
    generationId: int
    memberId: str
    groupInstanceId: str | None
    offsets: Mapping[TopicPartition, OffsetAndMetadata]
    #: the OffsetCommit version: a KIP-848 member must use v9+
    apiVersion: int = 9
