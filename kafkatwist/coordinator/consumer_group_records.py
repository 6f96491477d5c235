"""
KIP-848 consumer-group records of C{__consumer_offsets}, in Kafka's formats
(C{group-coordinator/src/main/resources/common/message/ConsumerGroup*.json}):

  ====  =================================  ==========================================
  key   record                             value (v0, flexible)
  ====  =================================  ==========================================
  3     ConsumerGroupMetadata              epoch
  5     ConsumerGroupMemberMetadata        instance id, rack id, client id, client
                                           host, subscribed topic names, regex,
                                           rebalance timeout, server assignor
  6     ConsumerGroupTargetAssignmentMeta  assignment epoch
  7     ConsumerGroupTargetAssignmentMem   topic partitions (topic id, partitions)
  8     ConsumerGroupCurrentMemberAssign   member epoch, previous epoch, state,
                                           assigned, pending revocation
  ====  =================================  ==========================================

Keys are an int16 version (the record type) and classic-encoded fields
(group id, and member id for 5, 7, 8); values an int16 version 0 and a
flexible body (compact strings and arrays, 16-byte uuids, tagged fields,
which are skipped on reading).  A null value is a tombstone.  The schemas
are in L{kafkatwist.coordinator.recordschemas}.  Pure.

Assignments here are C{dict} topic id (L{uuid.UUID}) -> C{frozenset} of
partitions; the machine maps ids to names.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kafkatwist.coordinator.formats import CorruptGroupRecord
from kafkatwist.coordinator.recordschemas import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
    CONSUMER_GROUP_MEMBER_METADATA_KEY,
    CONSUMER_GROUP_MEMBER_METADATA_VALUE,
    CONSUMER_GROUP_METADATA_KEY,
    CONSUMER_GROUP_METADATA_VALUE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
)

__all__ = [
    "GROUP_METADATA",
    "CURRENT_ASSIGNMENT",
    "LoadedConsumerGroup",
    "LoadedMember",
    "MEMBER_METADATA",
    "TARGET_MEMBER",
    "TARGET_METADATA",
    "ConsumerGroupRecords",
    "currentAssignmentRecord",
    "groupTombstone",
    "groupEpochRecord",
    "memberMetadataRecord",
    "memberTombstones",
    "targetEpochRecord",
    "targetMemberRecord",
]

GROUP_METADATA = 3
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
KEY_VERSIONS = frozenset({GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT})
#: Kafka's record types of KIP-848 groups this coordinator does not keep
#: (4: partition metadata, 16: regular expressions): it recomputes them.
DERIVED_KEY_VERSIONS = frozenset({4, 16})

#: MemberState's int8 values
STATE_CODES = {"stable": 0, "unrevoked_partitions": 1, "unreleased_partitions": 2}
STATE_NAMES = {v: k for k, v in STATE_CODES.items()}

TopicIdAssignment = dict[uuid.UUID, frozenset[int]]


# -- encoding --------------------------------------------------------------------------

#: the key and value schema of each record type
SCHEMAS = {
    GROUP_METADATA: (CONSUMER_GROUP_METADATA_KEY, CONSUMER_GROUP_METADATA_VALUE),
    MEMBER_METADATA: (CONSUMER_GROUP_MEMBER_METADATA_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE),
    TARGET_METADATA: (
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
    ),
    TARGET_MEMBER: (
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
    ),
    CURRENT_ASSIGNMENT: (
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
    ),
}


def _key(version: int, groupId: str, memberId: str | None = None) -> bytes:
    return SCHEMAS[version][0].encodeKey({"GroupId": groupId, "MemberId": memberId})


def _value(version: int, values: dict) -> bytes:
    return SCHEMAS[version][1].encodeValue(values, 0)


def _topicPartitions(assignment: TopicIdAssignment) -> list[dict]:
    return [
        {"TopicId": topicId, "Partitions": sorted(ps)}
        for topicId, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes)
    ]


def _assignment(topics: list[dict] | None) -> TopicIdAssignment:
    return {t["TopicId"]: frozenset(t["Partitions"] or ()) for t in topics or ()}


def groupEpochRecord(groupId: str, epoch: int) -> tuple[bytes, bytes]:
    return _key(GROUP_METADATA, groupId), _value(GROUP_METADATA, {"Epoch": epoch})


def targetEpochRecord(groupId: str, epoch: int) -> tuple[bytes, bytes]:
    return _key(TARGET_METADATA, groupId), _value(TARGET_METADATA, {"AssignmentEpoch": epoch})


def memberMetadataRecord(groupId: str, member) -> tuple[bytes, bytes]:
    return _key(MEMBER_METADATA, groupId, member.memberId), _value(
        MEMBER_METADATA,
        {
            "InstanceId": member.instanceId,
            "RackId": member.rackId,
            "ClientId": member.clientId or "",
            "ClientHost": member.clientHost or "",
            "SubscribedTopicNames": list(member.subscribedTopicNames),
            "SubscribedTopicRegex": member.subscribedTopicRegex,
            "RebalanceTimeoutMs": member.rebalanceTimeoutMs,
            "ServerAssignor": member.serverAssignor,
        },
    )


def targetMemberRecord(groupId: str, memberId: str, target: TopicIdAssignment) -> tuple[bytes, bytes]:
    return _key(TARGET_MEMBER, groupId, memberId), _value(
        TARGET_MEMBER, {"TopicPartitions": _topicPartitions(target)}
    )


def currentAssignmentRecord(
    groupId: str, member, assigned: TopicIdAssignment, pending: TopicIdAssignment
) -> tuple[bytes, bytes]:
    return _key(CURRENT_ASSIGNMENT, groupId, member.memberId), _value(
        CURRENT_ASSIGNMENT,
        {
            "MemberEpoch": member.memberEpoch,
            "PreviousMemberEpoch": member.previousMemberEpoch,
            "State": STATE_CODES[member.state],
            "AssignedPartitions": _topicPartitions(assigned),
            "PartitionsPendingRevocation": _topicPartitions(pending),
        },
    )


def groupTombstone(groupId: str, version: int) -> tuple[bytes, None]:
    """
    The tombstone of a group-level record (L{GROUP_METADATA} or
    L{TARGET_METADATA}).
    """
    return (_key(version, groupId), None)


def memberTombstones(groupId: str, memberId: str) -> list[tuple[bytes, None]]:
    """
    Kafka's order when a member goes: current assignment, target, metadata.
    """
    return [
        (_key(CURRENT_ASSIGNMENT, groupId, memberId), None),
        (_key(TARGET_MEMBER, groupId, memberId), None),
        (_key(MEMBER_METADATA, groupId, memberId), None),
    ]


@dataclass
class LoadedMember:
    memberId: str
    metadata: dict | None = None
    target: TopicIdAssignment | None = None
    current: dict | None = None


@dataclass
class LoadedConsumerGroup:
    groupId: str
    epoch: int | None = None
    assignmentEpoch: int = 0
    members: dict[str, LoadedMember] = field(default_factory=dict)


class ConsumerGroupRecords:
    """
    The consumer groups read back from C{__consumer_offsets}: last record
    per key wins, tombstones delete (replayed by
    L{kafkatwist.coordinator.replay.loadGroups}).
    """

    def __init__(self) -> None:
        self.groups: dict[str, LoadedConsumerGroup] = {}

    def apply(self, version: int, key: bytes, value: bytes | None) -> bool:
        """
        @return: C{False} if C{version} is not a consumer-group record type.
        @raise CorruptGroupRecord: if the record cannot be read.
        """
        if version in DERIVED_KEY_VERSIONS:
            return True
        if version not in KEY_VERSIONS:
            return False
        keySchema, valueSchema = SCHEMAS[version]
        k = keySchema.decodeKey(key, CorruptGroupRecord)
        groupId = k["GroupId"]
        memberId = k.get("MemberId")
        if groupId is None or (memberId is None and version in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT)):
            raise CorruptGroupRecord("null string in a key")
        if value is None:
            self._delete(version, groupId, memberId)
            return True
        _, v = valueSchema.decodeValue(value, CorruptGroupRecord)
        group = self.groups.get(groupId)
        if group is None:
            group = self.groups[groupId] = LoadedConsumerGroup(groupId)
        if version == GROUP_METADATA:
            group.epoch = v["Epoch"]
        elif version == TARGET_METADATA:
            group.assignmentEpoch = v["AssignmentEpoch"]
        else:
            assert memberId is not None
            member = group.members.get(memberId)
            if member is None:
                member = group.members[memberId] = LoadedMember(memberId)
            if version == MEMBER_METADATA:
                member.metadata = dict(
                    instanceId=v["InstanceId"],
                    rackId=v["RackId"],
                    clientId=v["ClientId"] or "",
                    clientHost=v["ClientHost"] or "",
                    subscribedTopicNames=tuple(t or "" for t in v["SubscribedTopicNames"] or ()),
                    subscribedTopicRegex=v["SubscribedTopicRegex"],
                    rebalanceTimeoutMs=v["RebalanceTimeoutMs"],
                    serverAssignor=v["ServerAssignor"],
                )
            elif version == TARGET_MEMBER:
                member.target = _assignment(v["TopicPartitions"])
            else:
                member.current = dict(
                    memberEpoch=v["MemberEpoch"],
                    previousMemberEpoch=v["PreviousMemberEpoch"],
                    state=STATE_NAMES.get(v["State"], "stable"),
                    assigned=_assignment(v["AssignedPartitions"]),
                    pending=_assignment(v["PartitionsPendingRevocation"]),
                )
        return True

    def _delete(self, version: int, groupId: str, memberId: str | None) -> None:
        group = self.groups.get(groupId)
        if group is None:
            return
        if version == GROUP_METADATA:
            del self.groups[groupId]
            return
        if memberId is None:
            return
        member = group.members.get(memberId)
        if member is None:
            return
        if version == MEMBER_METADATA:
            member.metadata = None
        elif version == TARGET_MEMBER:
            member.target = None
        elif version == CURRENT_ASSIGNMENT:
            member.current = None
        if member.metadata is None and member.target is None and member.current is None:
            del group.members[memberId]
