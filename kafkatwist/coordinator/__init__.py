"""
Kafka's classic group coordinator: group membership (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), group administration (DescribeGroups, ListGroups,
DeleteGroups) and committed offsets (OffsetCommit, OffsetFetch,
OffsetDelete, expiry).

  - L{coordinator.GroupCoordinator}: the sans-io state machine (with
    L{offsetmanager} for offsets); inputs in, L{effects} out.
  - L{runtime}: the shell that owns it and performs its effects;
    L{service.GroupCoordinatorService}, what request handlers call.
  - L{formats}, L{logstore}, L{replay}: C{__consumer_offsets}.
"""

from kafkatwist.coordinator.consumerprotocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerSubscription,
    encodeSubscription,
    parseSubscription,
)
from kafkatwist.coordinator.coordinator import GroupCoordinator
from kafkatwist.coordinator.group import GroupState
from kafkatwist.coordinator.offsets import OffsetAndMetadata
from kafkatwist.coordinator.requests import CommitRequest, JoinRequest, SyncRequest
from kafkatwist.coordinator.results import (
    FetchedOffset,
    GroupDescription,
    GroupOverview,
    JoinGroupMember,
    JoinGroupResult,
    LeaveGroupResult,
    LeaveMemberResult,
    ListGroupsResult,
    MemberDescription,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncGroupResult,
)
from kafkatwist.coordinator.service import GroupCoordinatorService
from kafkatwist.coordinator.store import GroupSnapshot, MemberSnapshot

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "CommitRequest",
    "ConsumerSubscription",
    "FetchedOffset",
    "GroupCoordinator",
    "GroupCoordinatorService",
    "GroupDescription",
    "GroupOverview",
    "GroupSnapshot",
    "GroupState",
    "JoinGroupMember",
    "JoinGroupResult",
    "JoinRequest",
    "LeaveGroupResult",
    "LeaveMemberResult",
    "ListGroupsResult",
    "MemberDescription",
    "MemberSnapshot",
    "OffsetAndMetadata",
    "OffsetDeleteResult",
    "OffsetFetchResult",
    "SyncGroupResult",
    "SyncRequest",
    "encodeSubscription",
    "parseSubscription",
]
