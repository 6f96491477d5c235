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

Keys and values start with an int16 schema version; their schemas are in
L{kafkatwist.coordinator.recordschemas}, read and written by
L{kafkatwist.protocol.schemacodec}.  Everything here is pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from kafkatwist.config import KEYS
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.store import GroupSnapshot, MemberSnapshot
from kafkatwist.coordinator.recordschemas import (
    GROUP_METADATA_KEY,
    GROUP_METADATA_VALUE,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
)
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol.schemacodec import SchemaError

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

_INT16 = struct.Struct(">h")

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
# Keys and values, by the schemas of L{kafkatwist.coordinator.recordschemas}


class CorruptGroupRecord(ValueError):
    """
    A key or value of C{__consumer_offsets} that cannot be parsed.
    """


def _encoded(encode, *args) -> bytes:
    try:
        return encode(*args)
    except SchemaError as e:
        raise KafkaError(E.invalid_request, f"not storable in the offsets topic: {e}") from None


def encodeOffsetKey(groupId: str, topic: str, partition: int) -> bytes:
    """
    C{OffsetCommitKey} v1.
    """
    return _encoded(
        OFFSET_COMMIT_KEY.encodeKey, {"group": groupId, "topic": topic, "partition": partition}
    )


def encodeGroupKey(groupId: str) -> bytes:
    """
    C{GroupMetadataKey} v2.
    """
    return _encoded(GROUP_METADATA_KEY.encodeKey, {"group": groupId})


def decodeKey(data: bytes) -> tuple:
    """
    @return: C{("offset", groupId, (topic, partition))},
        C{("group", groupId)}, or C{("unknown", version)} for the record
        types of other coordinators (KIP-848 groups, share groups) that a
        classic coordinator skips.
    @raise CorruptGroupRecord: if the key cannot be parsed.
    """
    if len(data) < 2:
        raise CorruptGroupRecord(f"key of {len(data)} bytes")
    (version,) = _INT16.unpack_from(data, 0)
    if version in (0, 1):
        key = OFFSET_COMMIT_KEY.decodeKey(data, CorruptGroupRecord)
        if key["group"] is None or key["topic"] is None:
            raise CorruptGroupRecord("null group or topic in an offset key")
        return ("offset", key["group"], (key["topic"], key["partition"]))
    if version == GROUP_METADATA_KEY_VERSION:
        groupId = GROUP_METADATA_KEY.decodeKey(data, CorruptGroupRecord)["group"]
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
    values = {
        "offset": om.offset,
        "leaderEpoch": om.leaderEpoch,
        "metadata": om.metadata or "",
        "commitTimestamp": om.commitTimestampMs,
    }
    if om.expireTimestampMs is not None:
        values["expireTimestamp"] = om.expireTimestampMs
        return _encoded(OFFSET_COMMIT_VALUE.encodeValue, values, OFFSET_COMMIT_VALUE_EXPIRING_VERSION)
    return _encoded(OFFSET_COMMIT_VALUE.encodeValue, values, OFFSET_COMMIT_VALUE_VERSION)


def decodeOffsetValue(data: bytes) -> OffsetAndMetadata:
    """
    Read C{OffsetCommitValue} v0-v4.

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    _, value = OFFSET_COMMIT_VALUE.decodeValue(data, CorruptGroupRecord)
    expireTimestamp = value["expireTimestamp"]
    return OffsetAndMetadata(
        offset=value["offset"],
        leaderEpoch=value["leaderEpoch"],
        metadata=value["metadata"] or "",
        commitTimestampMs=value["commitTimestamp"],
        expireTimestampMs=None if expireTimestamp < 0 else expireTimestamp,
    )


def encodeGroupValue(snap: GroupSnapshot) -> bytes:
    """
    C{GroupMetadataValue} v3.  A group without a protocol type is written
    with C{""}, which Kafka reads back as none.
    """
    return _encoded(
        GROUP_METADATA_VALUE.encodeValue,
        {
            "protocolType": snap.protocolType or "",
            "generation": snap.generationId,
            "protocol": snap.protocolName,
            "leader": snap.leaderId,
            "currentStateTimestamp": -1
            if snap.currentStateTimestampMs is None
            else snap.currentStateTimestampMs,
            "members": [
                {
                    "memberId": m.memberId,
                    "groupInstanceId": m.groupInstanceId,
                    "clientId": m.clientId,
                    "clientHost": m.clientHost,
                    "rebalanceTimeout": m.rebalanceTimeoutMs,
                    "sessionTimeout": m.sessionTimeoutMs,
                    "subscription": m.subscription,
                    "assignment": m.assignment,
                }
                for m in snap.members
            ],
        },
        GROUP_METADATA_VALUE_VERSION,
    )


def decodeGroupValue(groupId: str, data: bytes) -> GroupSnapshot:
    """
    Read C{GroupMetadataValue} v0-v4 (v0 lacks the rebalance timeout, which
    defaults to the session timeout as in Kafka; v0-1 lack the state
    timestamp; v0-2 the group instance id).

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    version, value = GROUP_METADATA_VALUE.decodeValue(data, CorruptGroupRecord)
    members = tuple(
        MemberSnapshot(
            memberId=m["memberId"] or "",
            groupInstanceId=m["groupInstanceId"],
            clientId=m["clientId"] or "",
            clientHost=m["clientHost"] or "",
            rebalanceTimeoutMs=m["rebalanceTimeout"] if version >= 1 else m["sessionTimeout"],
            sessionTimeoutMs=m["sessionTimeout"],
            subscription=m["subscription"] or b"",
            assignment=m["assignment"] or b"",
        )
        for m in value["members"] or ()
    )
    stateTimestamp = value["currentStateTimestamp"]
    return GroupSnapshot(
        groupId=groupId,
        protocolType=value["protocolType"] or None,
        generationId=value["generation"],
        protocolName=value["protocol"],
        leaderId=value["leader"],
        currentStateTimestampMs=None if stateTimestamp < 0 else stateTimestamp,
        members=members,
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
