"""
What the group coordinator answers: plain dataclasses the request handlers
translate into C{kio} response entities.  Every result carries an
L{ErrorCode}.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kafkatwist.errors import ErrorCode

__all__ = [
    "FetchedOffset",
    "GroupDescription",
    "GroupOverview",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroupResult",
    "LeaveMemberResult",
    "ListGroupsResult",
    "MemberDescription",
    "OffsetDeleteResult",
    "OffsetFetchResult",
    "SyncGroupResult",
]

# Kafka's GroupCoordinator.NoGeneration / NoLeader.
NO_GENERATION = -1
NO_LEADER = ""


@dataclass(frozen=True)
class JoinGroupMember:
    """
    One member as the leader sees it in its JoinGroup response.

    @ivar metadata: the member's metadata for the selected protocol.
    """

    memberId: str
    groupInstanceId: str | None
    metadata: bytes


@dataclass(frozen=True)
class JoinGroupResult:
    """
    The JoinGroup response.

    @ivar errorCode: L{ErrorCode}.
    @ivar generationId: the new generation, -1 on error.
    @ivar protocolType: the group's protocol type, C{None} on error.
    @ivar protocolName: the selected protocol, C{None} on error.
    @ivar leaderId: the leader's member id, C{""} on error.
    @ivar memberId: the member's id (the generated one for a new member and
        for MEMBER_ID_REQUIRED).
    @ivar members: everyone's metadata for the leader, empty for the others.
    @ivar skipAssignment: always C{False} (JoinGroup v9's static-leader
        shortcut is not used; see the module docs of
        L{kafkatwist.coordinator.coordinator}).
    """

    errorCode: ErrorCode
    generationId: int = NO_GENERATION
    protocolType: str | None = None
    protocolName: str | None = None
    leaderId: str = NO_LEADER
    memberId: str = ""
    members: tuple[JoinGroupMember, ...] = field(default=())
    skipAssignment: bool = False

    @classmethod
    def failed(cls, memberId: str, errorCode: ErrorCode) -> JoinGroupResult:
        """
        Kafka's C{JoinGroupResult(memberId, error)}.
        """
        return cls(errorCode=errorCode, memberId=memberId)


@dataclass(frozen=True)
class SyncGroupResult:
    """
    The SyncGroup response.

    @ivar assignment: this member's assignment (C{b""} on error).
    """

    errorCode: ErrorCode
    protocolType: str | None = None
    protocolName: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class LeaveMemberResult:
    """
    One member's outcome in a (batched) LeaveGroup.
    """

    memberId: str
    groupInstanceId: str | None
    errorCode: ErrorCode


@dataclass(frozen=True)
class LeaveGroupResult:
    """
    The LeaveGroup response: a top-level error and one entry per member
    asked to leave (versions before 3 use the first entry's error).
    """

    errorCode: ErrorCode
    members: tuple[LeaveMemberResult, ...] = field(default=())


@dataclass(frozen=True)
class MemberDescription:
    """
    One member in DescribeGroups.  Metadata and assignment are only given
    while the group is Stable (as Kafka does).
    """

    memberId: str
    groupInstanceId: str | None
    clientId: str
    clientHost: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupDescription:
    """
    One group in DescribeGroups.  An unknown group is described as state
    C{"Dead"} with no error, like Kafka.

    @ivar protocolData: the selected protocol while Stable, else C{""}.
    """

    errorCode: ErrorCode
    groupId: str
    state: str
    protocolType: str
    protocolData: str
    members: tuple[MemberDescription, ...] = field(default=())


@dataclass(frozen=True)
class GroupOverview:
    """
    One group in ListGroups.
    """

    groupId: str
    protocolType: str
    state: str
    #: ListGroups v5's group type: C{"classic"}, or C{"consumer"} (KIP-848)
    groupType: str = "classic"


@dataclass(frozen=True)
class ListGroupsResult:
    """
    ListGroups: a top-level error (COORDINATOR_NOT_AVAILABLE after
    shutdown) and the groups.
    """

    errorCode: ErrorCode
    groups: tuple[GroupOverview, ...] = field(default=())


@dataclass(frozen=True)
class FetchedOffset:
    """
    One partition in OffsetFetch: offset -1 and metadata C{""} when nothing
    was committed.
    """

    offset: int
    leaderEpoch: int
    metadata: str
    errorCode: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class OffsetFetchResult:
    """
    OffsetFetch for one group.

    @ivar offsets: C{dict} C{(topic, partition)} -> L{FetchedOffset}.
    """

    errorCode: ErrorCode
    offsets: dict = field(default_factory=dict)


@dataclass(frozen=True)
class OffsetDeleteResult:
    """
    OffsetDelete: a group error, or per-partition errors.

    @ivar partitions: C{dict} C{(topic, partition)} -> L{ErrorCode}; empty
        when C{errorCode} is not NONE.
    """

    errorCode: ErrorCode
    partitions: dict = field(default_factory=dict)
