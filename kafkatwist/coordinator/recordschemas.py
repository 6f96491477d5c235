"""
The coordinators' record schemas, the one definition of their bytes: Kafka's
JSON schemas (C{group-coordinator/src/main/resources/common/message/} and
C{transaction-coordinator/.../TransactionLog*.json}) written as data, read
and written by L{kafkatwist.protocol.schemacodec}.

A record's key starts with an int16 that names its type (Kafka's C{apiKey}
of the key schema; old schemas call it the key's version), its value with
the int16 version of the value schema.  Keys are never flexible.  Only the
fields this broker reads or writes are listed; tagged fields it does not
know are skipped on reading, as Kafka's readers do.
"""

from __future__ import annotations

from kafkatwist.protocol.schemacodec import Schema

__all__ = [
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY",
    "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE",
    "CONSUMER_GROUP_MEMBER_METADATA_KEY",
    "CONSUMER_GROUP_MEMBER_METADATA_VALUE",
    "CONSUMER_GROUP_METADATA_KEY",
    "CONSUMER_GROUP_METADATA_VALUE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY",
    "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE",
    "GROUP_METADATA_KEY",
    "GROUP_METADATA_VALUE",
    "OFFSET_COMMIT_KEY",
    "OFFSET_COMMIT_VALUE",
    "TRANSACTION_LOG_KEY",
    "TRANSACTION_LOG_VALUE",
]

# -- __consumer_offsets: classic groups and committed offsets -----------------

#: key types 0 (LegacyOffsetCommitKey) and 1: the same fields
OFFSET_COMMIT_KEY = Schema({
    "apiKey": 1, "type": "coordinator-key", "name": "OffsetCommitKey",
    "validVersions": "0",
    "fields": [
        {"name": "group", "type": "string", "versions": "0+"},
        {"name": "topic", "type": "string", "versions": "0+"},
        {"name": "partition", "type": "int32", "versions": "0+"},
    ],
})

OFFSET_COMMIT_VALUE = Schema({
    "apiKey": 1, "type": "coordinator-value", "name": "OffsetCommitValue",
    "validVersions": "0-4", "flexibleVersions": "4+",
    "fields": [
        {"name": "offset", "type": "int64", "versions": "0+"},
        {"name": "leaderEpoch", "type": "int32", "versions": "3+", "default": -1},
        {"name": "metadata", "type": "string", "versions": "0+"},
        {"name": "commitTimestamp", "type": "int64", "versions": "0+"},
        {"name": "expireTimestamp", "type": "int64", "versions": "1", "default": -1},
    ],
})

GROUP_METADATA_KEY = Schema({
    "apiKey": 2, "type": "coordinator-key", "name": "GroupMetadataKey",
    "validVersions": "0",
    "fields": [{"name": "group", "type": "string", "versions": "0+"}],
})

GROUP_METADATA_VALUE = Schema({
    "apiKey": 2, "type": "coordinator-value", "name": "GroupMetadataValue",
    "validVersions": "0-4", "flexibleVersions": "4+",
    "fields": [
        {"name": "protocolType", "type": "string", "versions": "0+"},
        {"name": "generation", "type": "int32", "versions": "0+"},
        {"name": "protocol", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "leader", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "currentStateTimestamp", "type": "int64", "versions": "2+", "default": -1},
        {"name": "members", "type": "[]MemberMetadata", "versions": "0+"},
    ],
    "commonStructs": [{
        "name": "MemberMetadata", "versions": "0+",
        "fields": [
            {"name": "memberId", "type": "string", "versions": "0+"},
            {"name": "groupInstanceId", "type": "string", "versions": "3+",
             "nullableVersions": "3+", "default": "null"},
            {"name": "clientId", "type": "string", "versions": "0+"},
            {"name": "clientHost", "type": "string", "versions": "0+"},
            {"name": "rebalanceTimeout", "type": "int32", "versions": "1+"},
            {"name": "sessionTimeout", "type": "int32", "versions": "0+"},
            {"name": "subscription", "type": "bytes", "versions": "0+"},
            {"name": "assignment", "type": "bytes", "versions": "0+"},
        ],
    }],
})

# -- __consumer_offsets: KIP-848 consumer groups --------------------------------

_GROUP_KEY = [{"name": "GroupId", "type": "string", "versions": "0"}]
_MEMBER_KEY = _GROUP_KEY + [{"name": "MemberId", "type": "string", "versions": "0"}]
_TOPIC_PARTITIONS = {
    "name": "TopicPartitions", "versions": "0+",
    "fields": [
        {"name": "TopicId", "type": "uuid", "versions": "0+"},
        {"name": "Partitions", "type": "[]int32", "versions": "0+"},
    ],
}

CONSUMER_GROUP_METADATA_KEY = Schema({
    "apiKey": 3, "type": "coordinator-key", "name": "ConsumerGroupMetadataKey",
    "validVersions": "0", "fields": _GROUP_KEY,
})

CONSUMER_GROUP_METADATA_VALUE = Schema({
    "apiKey": 3, "type": "coordinator-value", "name": "ConsumerGroupMetadataValue",
    "validVersions": "0", "flexibleVersions": "0+",
    "fields": [{"name": "Epoch", "type": "int32", "versions": "0+"}],
})

CONSUMER_GROUP_MEMBER_METADATA_KEY = Schema({
    "apiKey": 5, "type": "coordinator-key", "name": "ConsumerGroupMemberMetadataKey",
    "validVersions": "0", "fields": _MEMBER_KEY,
})

CONSUMER_GROUP_MEMBER_METADATA_VALUE = Schema({
    "apiKey": 5, "type": "coordinator-value", "name": "ConsumerGroupMemberMetadataValue",
    "validVersions": "0", "flexibleVersions": "0+",
    "fields": [
        {"name": "InstanceId", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "RackId", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "ClientId", "type": "string", "versions": "0+"},
        {"name": "ClientHost", "type": "string", "versions": "0+"},
        {"name": "SubscribedTopicNames", "type": "[]string", "versions": "0+"},
        {"name": "SubscribedTopicRegex", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        {"name": "RebalanceTimeoutMs", "type": "int32", "versions": "0+", "default": -1},
        {"name": "ServerAssignor", "type": "string", "versions": "0+", "nullableVersions": "0+"},
    ],
})

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY = Schema({
    "apiKey": 6, "type": "coordinator-key", "name": "ConsumerGroupTargetAssignmentMetadataKey",
    "validVersions": "0", "fields": _GROUP_KEY,
})

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema({
    "apiKey": 6, "type": "coordinator-value", "name": "ConsumerGroupTargetAssignmentMetadataValue",
    "validVersions": "0", "flexibleVersions": "0+",
    "fields": [{"name": "AssignmentEpoch", "type": "int32", "versions": "0+"}],
})

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY = Schema({
    "apiKey": 7, "type": "coordinator-key", "name": "ConsumerGroupTargetAssignmentMemberKey",
    "validVersions": "0", "fields": _MEMBER_KEY,
})

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema({
    "apiKey": 7, "type": "coordinator-value", "name": "ConsumerGroupTargetAssignmentMemberValue",
    "validVersions": "0", "flexibleVersions": "0+",
    "fields": [{"name": "TopicPartitions", "type": "[]TopicPartitions", "versions": "0+"}],
    "commonStructs": [_TOPIC_PARTITIONS],
})

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY = Schema({
    "apiKey": 8, "type": "coordinator-key", "name": "ConsumerGroupCurrentMemberAssignmentKey",
    "validVersions": "0", "fields": _MEMBER_KEY,
})

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema({
    "apiKey": 8, "type": "coordinator-value", "name": "ConsumerGroupCurrentMemberAssignmentValue",
    "validVersions": "0", "flexibleVersions": "0+",
    "fields": [
        {"name": "MemberEpoch", "type": "int32", "versions": "0+"},
        {"name": "PreviousMemberEpoch", "type": "int32", "versions": "0+"},
        {"name": "State", "type": "int8", "versions": "0+"},
        {"name": "AssignedPartitions", "type": "[]TopicPartitions", "versions": "0+"},
        {"name": "PartitionsPendingRevocation", "type": "[]TopicPartitions", "versions": "0+"},
    ],
    "commonStructs": [_TOPIC_PARTITIONS],
})

# -- __transaction_state --------------------------------------------------------

TRANSACTION_LOG_KEY = Schema({
    "apiKey": 0, "type": "coordinator-key", "name": "TransactionLogKey",
    "validVersions": "0",
    "fields": [{"name": "TransactionalId", "type": "string", "versions": "0"}],
})

TRANSACTION_LOG_VALUE = Schema({
    "apiKey": 0, "type": "coordinator-value", "name": "TransactionLogValue",
    "validVersions": "0-1", "flexibleVersions": "1+",
    "fields": [
        {"name": "ProducerId", "type": "int64", "versions": "0+"},
        {"name": "PreviousProducerId", "type": "int64", "taggedVersions": "1+", "tag": 0, "default": -1},
        {"name": "NextProducerId", "type": "int64", "taggedVersions": "1+", "tag": 1, "default": -1},
        {"name": "ProducerEpoch", "type": "int16", "versions": "0+"},
        {"name": "TransactionTimeoutMs", "type": "int32", "versions": "0+"},
        {"name": "TransactionStatus", "type": "int8", "versions": "0+"},
        {"name": "TransactionPartitions", "type": "[]PartitionsSchema", "versions": "0+",
         "nullableVersions": "0+", "fields": [
             {"name": "Topic", "type": "string", "versions": "0+"},
             {"name": "PartitionIds", "type": "[]int32", "versions": "0+"},
         ]},
        {"name": "TransactionLastUpdateTimestampMs", "type": "int64", "versions": "0+"},
        {"name": "TransactionStartTimestampMs", "type": "int64", "versions": "0+"},
        {"name": "ClientTransactionVersion", "type": "int16", "taggedVersions": "1+", "tag": 2, "default": 0},
    ],
})
