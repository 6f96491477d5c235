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
which are skipped on reading).  A null value is a tombstone.  Pure.

Assignments here are C{dict} topic id (L{uuid.UUID}) -> C{frozenset} of
partitions; the machine maps ids to names.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, field

from kafkatwist.coordinator.formats import CorruptGroupRecord

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


def _classicString(v: str) -> bytes:
    data = v.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError("string too long for the offsets topic")
    return struct.pack(">h", len(data)) + data


def _key(version: int, *fields: str) -> bytes:
    return struct.pack(">h", version) + b"".join(_classicString(f) for f in fields)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _compactString(v: str | None) -> bytes:
    if v is None:
        return b"\x00"
    data = v.encode("utf-8")
    return _uvarint(len(data) + 1) + data


def _compactArray(items: list[bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(items)


_NO_TAGS = b"\x00"


def _topicPartitions(assignment: TopicIdAssignment) -> bytes:
    return _compactArray(
        [
            topicId.bytes
            + _compactArray([struct.pack(">i", p) for p in sorted(ps)])
            + _NO_TAGS
            for topicId, ps in sorted(assignment.items(), key=lambda kv: kv[0].bytes)
        ]
    )


def _value(body: bytes) -> bytes:
    return struct.pack(">h", 0) + body + _NO_TAGS


def groupEpochRecord(groupId: str, epoch: int) -> tuple[bytes, bytes]:
    return _key(GROUP_METADATA, groupId), _value(struct.pack(">i", epoch))


def targetEpochRecord(groupId: str, epoch: int) -> tuple[bytes, bytes]:
    return _key(TARGET_METADATA, groupId), _value(struct.pack(">i", epoch))


def memberMetadataRecord(groupId: str, member) -> tuple[bytes, bytes]:
    body = b"".join(
        (
            _compactString(member.instanceId),
            _compactString(member.rackId),
            _compactString(member.clientId or ""),
            _compactString(member.clientHost or ""),
            _compactArray([_compactString(t) for t in member.subscribedTopicNames]),
            _compactString(member.subscribedTopicRegex),
            struct.pack(">i", member.rebalanceTimeoutMs),
            _compactString(member.serverAssignor),
        )
    )
    return _key(MEMBER_METADATA, groupId, member.memberId), _value(body)


def targetMemberRecord(groupId: str, memberId: str, target: TopicIdAssignment) -> tuple[bytes, bytes]:
    return _key(TARGET_MEMBER, groupId, memberId), _value(_topicPartitions(target))


def currentAssignmentRecord(
    groupId: str, member, assigned: TopicIdAssignment, pending: TopicIdAssignment
) -> tuple[bytes, bytes]:
    body = (
        struct.pack(">iib", member.memberEpoch, member.previousMemberEpoch, STATE_CODES[member.state])
        + _topicPartitions(assigned)
        + _topicPartitions(pending)
    )
    return _key(CURRENT_ASSIGNMENT, groupId, member.memberId), _value(body)


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


# -- decoding --------------------------------------------------------------------------


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptGroupRecord(f"truncated at {self.pos} (+{n}) of {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int8(self) -> int:
        return struct.unpack(">b", self.take(1))[0]

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def uvarint(self) -> int:
        n = shift = 0
        while True:
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 28:
                raise CorruptGroupRecord("varint too long")

    def classicString(self) -> str:
        n = self.int16()
        if n < 0:
            raise CorruptGroupRecord("null string in a key")
        return self._decode(self.take(n))

    def compactString(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._decode(self.take(n - 1))

    def compactCount(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            return 0
        if n > len(self.data) - self.pos:
            raise CorruptGroupRecord(f"array of {n} in {len(self.data) - self.pos} bytes")
        return n

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def topicPartitions(self) -> TopicIdAssignment:
        out: TopicIdAssignment = {}
        for _ in range(self.compactCount()):
            topicId = uuid.UUID(bytes=self.take(16))
            out[topicId] = frozenset(self.int32() for _ in range(self.compactCount()))
            self.tags()
        return out

    @staticmethod
    def _decode(data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptGroupRecord(str(e)) from e


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
        k = _Reader(key)
        k.int16()
        groupId = k.classicString()
        memberId = k.classicString() if version in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT) else None
        if value is None:
            self._delete(version, groupId, memberId)
            return True
        v = _Reader(value)
        if v.int16() != 0:
            raise CorruptGroupRecord(f"consumer group record {version}: unknown value version")
        group = self.groups.get(groupId)
        if group is None:
            group = self.groups[groupId] = LoadedConsumerGroup(groupId)
        if version == GROUP_METADATA:
            group.epoch = v.int32()
        elif version == TARGET_METADATA:
            group.assignmentEpoch = v.int32()
        else:
            member = group.members.get(memberId)
            if member is None:
                member = group.members[memberId] = LoadedMember(memberId)
            if version == MEMBER_METADATA:
                member.metadata = dict(
                    instanceId=v.compactString(),
                    rackId=v.compactString(),
                    clientId=v.compactString() or "",
                    clientHost=v.compactString() or "",
                    subscribedTopicNames=tuple(v.compactString() or "" for _ in range(v.compactCount())),
                    subscribedTopicRegex=v.compactString(),
                    rebalanceTimeoutMs=v.int32(),
                    serverAssignor=v.compactString(),
                )
            elif version == TARGET_MEMBER:
                member.target = v.topicPartitions()
            else:
                epoch, previous, state = v.int32(), v.int32(), v.int8()
                member.current = dict(
                    memberEpoch=epoch,
                    previousMemberEpoch=previous,
                    state=STATE_NAMES.get(state, "stable"),
                    assigned=v.topicPartitions(),
                    pending=v.topicPartitions(),
                )
        v.tags()
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
