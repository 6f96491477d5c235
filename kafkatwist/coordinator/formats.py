"""
Kafka's record formats of C{__consumer_offsets} (C{GroupMetadataManager}'s
schemas) and the partitioning of groups over it.

  - partition of a group: C{abs(javaStringHashCode(groupId)) % n}, with
    C{n} the topic's partition count (C{offsets.topic.num.partitions} when
    the topic is created; an existing topic keeps its count, since moving a
    group to another partition would break last-write-wins on replay);
  - a committed offset: key C{OffsetCommitKey} v1 (group, topic,
    partition), value C{OffsetCommitValue} v3 (offset, leader epoch,
    metadata, commit timestamp), or v1 (offset, metadata, commit timestamp,
    expire timestamp) when an old client (OffsetCommit v2-4) asked for an
    explicit retention time, as Kafka writes it;
  - group metadata: key C{GroupMetadataKey} v2 (group), value
    C{GroupMetadataValue} v3 (protocol type, generation, protocol, leader,
    current state timestamp, members);
  - deletion: the same key with a null value (a tombstone).

Keys and values start with an int16 schema version and use Kafka's
classic (non-flexible) encoding: int16-length UTF-8 strings (-1 for null),
int32-length bytes, int32-count arrays, big-endian integers.  Everything
here is pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from kafkatwist.config import KEYS
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.store import GroupSnapshot, MemberSnapshot
from kafkatwist.errors import ErrorCode, KafkaError

__all__ = [
    "APPEND_ERRORS_FOR_COMMIT",
    "APPEND_ERRORS_FOR_GROUP",
    "CorruptGroupRecord",
    "OFFSETS_TOPIC",
    "OFFSETS_TOPIC_CONFIGS",
    "decodeGroupValue",
    "decodeKey",
    "decodeOffsetValue",
    "encodeGroupKey",
    "encodeGroupValue",
    "encodeOffsetKey",
    "encodeOffsetValue",
    "groupRecord",
    "groupTombstone",
    "javaStringHashCode",
    "offsetRecords",
    "offsetTombstones",
    "partitionFor",
]

E = ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
#: the offsets topic's configs: compacted, with the broker's default
#: C{offsets.topic.segment.bytes} unless its configuration says otherwise
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": KEYS["offsets.topic.segment.bytes"].default,
}

#: key schema versions: 0 and 1 are OffsetCommitKey, 2 is GroupMetadataKey
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
#: the value version Kafka writes when an explicit expiry must be kept
OFFSET_COMMIT_VALUE_EXPIRING_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

# ---------------------------------------------------------------------------
# Partitioning


def javaStringHashCode(s: str) -> int:
    """
    Java's C{String.hashCode()}: C{s[0]*31^(n-1) + ... + s[n-1]} over
    UTF-16 code units, in signed 32-bit arithmetic.
    """
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partitionFor(groupId: str, numPartitions: int) -> int:
    """
    Kafka's C{GroupMetadataManager.partitionFor}:
    C{Utils.abs(groupId.hashCode) % n}, where C{Utils.abs(MIN_VALUE)} is 0.
    """
    h = javaStringHashCode(groupId)
    return (0 if h == -(2**31) else abs(h)) % numPartitions


# ---------------------------------------------------------------------------
# Encoding (Kafka's non-flexible message encoding)


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.int16(-1)
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise KafkaError(E.invalid_request, "string too long for the offsets topic")
        self.int16(len(data))
        self.parts.append(data)
        return self

    def bytes(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.parts.append(bytes(v))
        return self

    def value(self) -> bytes:
        return b"".join(self.parts)


class CorruptGroupRecord(ValueError):
    """
    A key or value of C{__consumer_offsets} that cannot be parsed.
    """


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptGroupRecord(f"truncated at {self.pos} (+{n}) of {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptGroupRecord(str(e)) from e

    def bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        return self._take(n)


def _string(v: str) -> bytes:
    data = v.encode("utf-8")
    if len(data) > 0x7FFF:
        raise KafkaError(E.invalid_request, "string too long for the offsets topic")
    return _INT16.pack(len(data)) + data


_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_OFFSET_VALUE_V3 = struct.Struct(">hqi")
_INT64 = struct.Struct(">q")


def encodeOffsetKey(groupId: str, topic: str, partition: int) -> bytes:
    """
    C{OffsetCommitKey} v1 (on every commit's path: no writer object).
    """
    return b"".join(
        (
            _INT16.pack(OFFSET_COMMIT_KEY_VERSION),
            _string(groupId),
            _string(topic),
            _INT32.pack(partition),
        )
    )


def encodeGroupKey(groupId: str) -> bytes:
    """
    C{GroupMetadataKey} v2.
    """
    return _Writer().int16(GROUP_METADATA_KEY_VERSION).string(groupId).value()


def decodeKey(data: bytes) -> tuple:
    """
    @return: C{("offset", groupId, (topic, partition))},
        C{("group", groupId)}, or C{("unknown", version)} for the record
        types of other coordinators (KIP-848 groups, share groups) that a
        classic coordinator skips.
    @raise CorruptGroupRecord: if the key cannot be parsed.
    """
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        groupId = r.string()
        topic = r.string()
        partition = r.int32()
        if groupId is None or topic is None:
            raise CorruptGroupRecord("null group or topic in an offset key")
        return ("offset", groupId, (topic, partition))
    if version == GROUP_METADATA_KEY_VERSION:
        groupId = r.string()
        if groupId is None:
            raise CorruptGroupRecord("null group in a group metadata key")
        return ("group", groupId)
    return ("unknown", version)


def encodeOffsetValue(om: OffsetAndMetadata) -> bytes:
    """
    C{OffsetCommitValue} v3, or v1 when the offset has an explicit expiry
    (Kafka's C{offsetCommitValue} does the same: only v1 has the field, so
    the leader epoch is dropped for such commits).
    """
    if om.expireTimestampMs is not None:
        w = _Writer().int16(OFFSET_COMMIT_VALUE_EXPIRING_VERSION)
        w.int64(om.offset).string(om.metadata or "").int64(om.commitTimestampMs)
        w.int64(om.expireTimestampMs)
        return w.value()
    return b"".join(
        (
            _OFFSET_VALUE_V3.pack(OFFSET_COMMIT_VALUE_VERSION, om.offset, om.leaderEpoch),
            _string(om.metadata or ""),
            _INT64.pack(om.commitTimestampMs),
        )
    )


def decodeOffsetValue(data: bytes) -> OffsetAndMetadata:
    """
    Read C{OffsetCommitValue} v0-v3.

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptGroupRecord(f"OffsetCommitValue v{version} is not supported")
    offset = r.int64()
    leaderEpoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    commitTimestamp = r.int64()
    expireTimestamp = r.int64() if version == 1 else -1
    return OffsetAndMetadata(
        offset=offset,
        leaderEpoch=leaderEpoch,
        metadata=metadata,
        commitTimestampMs=commitTimestamp,
        expireTimestampMs=None if expireTimestamp < 0 else expireTimestamp,
    )


def encodeGroupValue(snap: GroupSnapshot) -> bytes:
    """
    C{GroupMetadataValue} v3.  A group without a protocol type is written
    with C{""}, which Kafka reads back as none.
    """
    w = _Writer().int16(GROUP_METADATA_VALUE_VERSION)
    w.string(snap.protocolType or "")
    w.int32(snap.generationId)
    w.string(snap.protocolName)
    w.string(snap.leaderId)
    w.int64(-1 if snap.currentStateTimestampMs is None else snap.currentStateTimestampMs)
    w.int32(len(snap.members))
    for m in snap.members:
        w.string(m.memberId)
        w.string(m.groupInstanceId)
        w.string(m.clientId)
        w.string(m.clientHost)
        w.int32(m.rebalanceTimeoutMs)
        w.int32(m.sessionTimeoutMs)
        w.bytes(m.subscription)
        w.bytes(m.assignment)
    return w.value()


def decodeGroupValue(groupId: str, data: bytes) -> GroupSnapshot:
    """
    Read C{GroupMetadataValue} v0-v3 (v0 lacks the rebalance timeout, which
    defaults to the session timeout as in Kafka; v0-1 lack the state
    timestamp; v0-2 the group instance id).

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptGroupRecord(f"GroupMetadataValue v{version} is not supported")
    protocolType = r.string()
    generationId = r.int32()
    protocolName = r.string()
    leaderId = r.string()
    stateTimestamp = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        count = 0
    members = []
    for _ in range(count):
        memberId = r.string() or ""
        groupInstanceId = r.string() if version >= 3 else None
        clientId = r.string() or ""
        clientHost = r.string() or ""
        rebalanceTimeout = r.int32() if version >= 1 else None
        sessionTimeout = r.int32()
        subscription = r.bytes() or b""
        assignment = r.bytes() or b""
        members.append(
            MemberSnapshot(
                memberId=memberId,
                groupInstanceId=groupInstanceId,
                clientId=clientId,
                clientHost=clientHost,
                rebalanceTimeoutMs=sessionTimeout if rebalanceTimeout is None else rebalanceTimeout,
                sessionTimeoutMs=sessionTimeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    return GroupSnapshot(
        groupId=groupId,
        protocolType=protocolType or None,
        generationId=generationId,
        protocolName=protocolName,
        leaderId=leaderId,
        currentStateTimestampMs=None if stateTimestamp < 0 else stateTimestamp,
        members=tuple(members),
    )


# ---------------------------------------------------------------------------
# Append errors, as Kafka maps them for each kind of write; any other code is
# answered as it is (Kafka's "case other => other").

#: GroupMetadataManager.storeOffsets' callback
APPEND_ERRORS_FOR_COMMIT = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.message_too_large: E.invalid_commit_offset_size,
    E.record_list_too_large: E.invalid_commit_offset_size,
    E.invalid_fetch_size: E.invalid_commit_offset_size,
}
#: GroupMetadataManager.storeGroup's callback (also used for tombstones)
APPEND_ERRORS_FOR_GROUP = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.message_too_large: E.unknown_server_error,
    E.record_list_too_large: E.unknown_server_error,
    E.invalid_fetch_size: E.unknown_server_error,
}


# ---------------------------------------------------------------------------
# Records, as the coordinator appends them


def groupRecord(snap: GroupSnapshot) -> tuple[bytes, bytes]:
    return (encodeGroupKey(snap.groupId), encodeGroupValue(snap))


def groupTombstone(groupId: str) -> tuple[bytes, None]:
    return (encodeGroupKey(groupId), None)


def offsetRecords(
    groupId: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
) -> list[tuple[bytes, bytes]]:
    return [
        (encodeOffsetKey(groupId, topic, partition), encodeOffsetValue(om))
        for (topic, partition), om in offsets.items()
    ]


def offsetTombstones(
    groupId: str, partitions: Iterable[TopicPartition]
) -> list[tuple[bytes, None]]:
    return [(encodeOffsetKey(groupId, topic, partition), None) for topic, partition in partitions]
