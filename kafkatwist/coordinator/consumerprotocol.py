"""
The embedded consumer protocol (Kafka's C{ConsumerProtocol}): the bytes a
consumer puts in the JoinGroup protocol metadata (its subscription) and the
leader in the SyncGroup assignments.

The coordinator treats member metadata as opaque except for one purpose: to
know which topics a consumer group is subscribed to (OffsetDelete answers
GROUP_SUBSCRIBED_TO_TOPIC, and a stable group's offsets of topics it no
longer consumes may expire); the console reads the assignments to show them.

Both are Kafka's message schemas (C{clients/src/main/resources/common/
message/ConsumerProtocolSubscription.json} and
C{ConsumerProtocolAssignment.json}), written here as data, read and written
by L{kafkatwist.protocol.schemacodec}: an int16 version, then the version's
fields, never flexible.  As Kafka's C{ConsumerProtocol} does, a version newer
than the schemas' is read as the newest they know (later versions only
append fields), a negative one is refused, and nulls are read as Kafka's
generated readers read them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kafkatwist.protocol.schemacodec import Schema, SchemaError

__all__ = [
    "CONSUMER_PROTOCOL_ASSIGNMENT",
    "CONSUMER_PROTOCOL_SUBSCRIPTION",
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerAssignment",
    "ConsumerSubscription",
    "encodeAssignment",
    "encodeSubscription",
    "parseAssignment",
    "parseSubscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

# Kafka's JSON, transcribed (its comments left out); the codec ignores
# "ignorable", "zeroCopy", "mapKey" and "entityType".
CONSUMER_PROTOCOL_SUBSCRIPTION = Schema({
    "type": "data",
    "name": "ConsumerProtocolSubscription",
    "validVersions": "0-3",
    "flexibleVersions": "none",
    "fields": [
        {"name": "Topics", "type": "[]string", "versions": "0+"},
        {"name": "UserData", "type": "bytes", "versions": "0+", "nullableVersions": "0+",
         "default": "null", "zeroCopy": True},
        {"name": "OwnedPartitions", "type": "[]TopicPartition", "versions": "1+", "ignorable": True,
         "fields": [
             {"name": "Topic", "type": "string", "mapKey": True, "versions": "1+", "entityType": "topicName"},
             {"name": "Partitions", "type": "[]int32", "versions": "1+"},
         ]},
        {"name": "GenerationId", "type": "int32", "versions": "2+", "default": -1, "ignorable": True},
        {"name": "RackId", "type": "string", "versions": "3+", "nullableVersions": "3+", "default": "null",
         "ignorable": True},
    ],
}, kafkaNulls=True)

CONSUMER_PROTOCOL_ASSIGNMENT = Schema({
    "type": "data",
    "name": "ConsumerProtocolAssignment",
    "validVersions": "0-3",
    "flexibleVersions": "none",
    "fields": [
        {"name": "AssignedPartitions", "type": "[]TopicPartition", "versions": "0+",
         "fields": [
             {"name": "Topic", "type": "string", "mapKey": True, "versions": "0+", "entityType": "topicName"},
             {"name": "Partitions", "type": "[]int32", "versions": "0+"},
         ]},
        {"name": "UserData", "type": "bytes", "versions": "0+", "nullableVersions": "0+",
         "default": "null", "zeroCopy": True},
    ],
}, kafkaNulls=True)

_VERSION = struct.Struct(">h")

#: C{(topic, (partition, ...))} pairs, in the order sent
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True)
class ConsumerSubscription:
    """
    A decoded consumer subscription.

    @ivar version: the version the member wrote.
    @ivar topics: subscribed topic names, in the order sent.
    @ivar userData: assignor user data, or C{None}.
    @ivar ownedPartitions: C{(topic, (partition, ...))} pairs (v1+).
    @ivar generationId: the member's generation (v2+), -1 if absent.
    @ivar rackId: the member's rack (v3+), or C{None}.
    """

    version: int
    topics: tuple[str, ...]
    userData: bytes | None = None
    ownedPartitions: TopicPartitions = field(default=())
    generationId: int = -1
    rackId: str | None = None


@dataclass(frozen=True)
class ConsumerAssignment:
    """
    A decoded consumer assignment.

    @ivar version: the version the leader wrote.
    @ivar partitions: C{(topic, (partition, ...))} pairs.
    @ivar userData: assignor user data, or C{None}.
    """

    version: int
    partitions: TopicPartitions = field(default=())
    userData: bytes | None = None


def _decode(schema: Schema, data) -> tuple[int, dict]:
    """
    Kafka's C{ConsumerProtocol.deserialize*}: the version, then the fields
    as the newest version the schema knows that is not above it.

    @raise SchemaError: the bytes are not one.
    """
    if len(data) < _VERSION.size:
        raise SchemaError(f"{schema.name}: {len(data)} bytes, no version")
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise SchemaError(f"unsupported {schema.name} version {version}")
    values, _ = schema.decode(data, min(version, schema.highestVersion), _VERSION.size)
    return version, values


def _encode(schema: Schema, values: dict, version: int) -> bytes:
    if version < 0:
        raise SchemaError(f"unsupported {schema.name} version {version}")
    return schema.encodeValue(values, version)


def _pairs(topicPartitions: list[dict] | None) -> TopicPartitions:
    return tuple((tp["Topic"], tuple(tp["Partitions"])) for tp in topicPartitions or ())


def _dicts(pairs) -> list[dict]:
    return [{"Topic": topic, "Partitions": list(partitions)} for topic, partitions in pairs]


def parseSubscription(data: bytes) -> ConsumerSubscription:
    """
    Decode a consumer protocol subscription.

    @param data: the JoinGroup protocol metadata of a C{consumer} group.
    @return: the L{ConsumerSubscription}.
    @raise SchemaError: (a C{ValueError}) the bytes are not a subscription;
        nothing else, whatever the bytes.
    """
    version, v = _decode(CONSUMER_PROTOCOL_SUBSCRIPTION, data)
    return ConsumerSubscription(
        version, tuple(v["Topics"]), v["UserData"], _pairs(v["OwnedPartitions"]), v["GenerationId"], v["RackId"]
    )


def encodeSubscription(
    topics,
    userData: bytes | None = None,
    version: int = 0,
    ownedPartitions=(),
    generationId: int = -1,
    rackId: str | None = None,
) -> bytes:
    """
    Encode a consumer protocol subscription (the inverse of
    L{parseSubscription}; used by tests and tools).

    @param ownedPartitions: C{(topic, [partition, ...])} pairs.
    @return: C{bytes}.
    """
    values = {
        "Topics": topics,
        "UserData": userData,
        "OwnedPartitions": _dicts(ownedPartitions),
        "GenerationId": generationId,
        "RackId": rackId,
    }
    return _encode(CONSUMER_PROTOCOL_SUBSCRIPTION, values, version)


def parseAssignment(data: bytes) -> ConsumerAssignment:
    """
    Decode a consumer protocol assignment.

    @param data: a member's SyncGroup assignment in a C{consumer} group.
    @return: the L{ConsumerAssignment}.
    @raise SchemaError: (a C{ValueError}) the bytes are not an assignment;
        nothing else, whatever the bytes.
    """
    version, v = _decode(CONSUMER_PROTOCOL_ASSIGNMENT, data)
    return ConsumerAssignment(version, _pairs(v["AssignedPartitions"]), v["UserData"])


def encodeAssignment(partitions, userData: bytes | None = None, version: int = 0) -> bytes:
    """
    Encode a consumer protocol assignment (the inverse of
    L{parseAssignment}; used by tests and tools).

    @param partitions: C{(topic, [partition, ...])} pairs.
    @return: C{bytes}.
    """
    values = {"AssignedPartitions": _dicts(partitions), "UserData": userData}
    return _encode(CONSUMER_PROTOCOL_ASSIGNMENT, values, version)
