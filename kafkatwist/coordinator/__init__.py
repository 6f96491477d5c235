"""
Kafka's classic group coordinator: group membership (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup), group administration (DescribeGroups, ListGroups,
DeleteGroups) and committed offsets (OffsetCommit, OffsetFetch,
OffsetDelete, expiry), as logic on an injected clock with a storage seam.
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
from kafkatwist.coordinator.store import (
    GroupSnapshot,
    IGroupStore,
    InMemoryGroupStore,
    MemberSnapshot,
)

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerSubscription",
    "FetchedOffset",
    "GroupCoordinator",
    "GroupDescription",
    "GroupOverview",
    "GroupSnapshot",
    "GroupState",
    "IGroupStore",
    "InMemoryGroupStore",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroupResult",
    "LeaveMemberResult",
    "ListGroupsResult",
    "MemberDescription",
    "MemberSnapshot",
    "OffsetAndMetadata",
    "OffsetDeleteResult",
    "OffsetFetchResult",
    "SyncGroupResult",
    "encodeSubscription",
    "parseSubscription",
]
