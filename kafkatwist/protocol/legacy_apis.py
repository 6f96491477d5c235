"""
The request and response layouts Kafka 3.x serves below Kafka 4's floors
(KIP-896), which C{kio} does not generate: transcribed from Kafka's message
JSON (C{clients/src/main/resources/common/message}), field names as C{kio}
spells the same fields in later versions, so one handler reads every
version.

A field a later version has and an older one lacks is given, where a
handler reads it, as a plain class attribute with its meaning for the older
version (Fetch v0-2's C{max_bytes}: no response limit).

Where an old version's layout is the next version's, the table names
C{kio}'s class for that version (OffsetFetch v0 is v1's layout;
CreateTopics v1's request is v2's; CreateAcls v0's response is v1's;
DescribeLogDirs v0 is v1's).
"""

from __future__ import annotations

from kio.schema.create_acls.v1.response import CreateAclsResponse as CreateAclsResponseV1
from kio.schema.create_topics.v2.request import CreateTopicsRequest as CreateTopicsRequestV2
from kio.schema.delete_topics.v1.request import DeleteTopicsRequest as DeleteTopicsRequestV1
from kio.schema.describe_log_dirs.v1.request import (
    DescribeLogDirsRequest as DescribeLogDirsRequestV1,
)
from kio.schema.describe_log_dirs.v1.response import (
    DescribeLogDirsResponse as DescribeLogDirsResponseV1,
)
from kio.schema.offset_fetch.v1.request import OffsetFetchRequest as OffsetFetchRequestV1
from kio.schema.offset_fetch.v1.response import OffsetFetchResponse as OffsetFetchResponseV1

from kafkatwist.protocol.entitytypes import NULLABLE, request, response

__all__ = ["LEGACY_SCHEMAS"]

# -- Produce (0) v0-2 ---------------------------------------------------------
# v3's layout without transactional_id; responses gain throttle_time in v1 and
# log_append_time in v2 (message formats v0/v1: L{kafkatwist.protocol.convert}).


def _produceRequest(version: int) -> type:
    return request("ProduceRequest", 0, version, [
        ("acks", "int16"),
        ("timeout", "timedelta_i32"),
        ("topic_data", [("TopicProduceData", [
            ("name", "string"),
            ("partition_data", [("PartitionProduceData", [("index", "int32"), ("records", "records?")])]),
        ])]),
    ], transactional_id=None)


def _produceResponse(version: int) -> type:
    partition = [("index", "int32"), ("error_code", "error_code"), ("base_offset", "int64")]
    if version >= 2:
        partition.append(("log_append_time", "datetime_i64?"))
    fields: list = [
        ("responses", [("TopicProduceResponse", [
            ("name", "string"),
            ("partition_responses", [("PartitionProduceResponse", partition)]),
        ])]),
    ]
    if version >= 1:
        fields.append(("throttle_time", "timedelta_i32"))
    return response("ProduceResponse", 0, version, fields)


# -- Fetch (1) v0-3 ----------------------------------------------------------

_FETCH_PARTITION = ("FetchPartition", [
    ("partition", "int32"),
    ("fetch_offset", "int64"),
    ("partition_max_bytes", "int32"),
])
_FETCH_TOPICS = ("topics", [("FetchTopic", [("topic", "string"), ("partitions", [_FETCH_PARTITION])])])


def _fetchRequest(version: int) -> type:
    fields: list = [("replica_id", "int32"), ("max_wait", "timedelta_i32"), ("min_bytes", "int32")]
    attributes = {"isolation_level": 0}
    if version >= 3:
        fields.append(("max_bytes", "int32"))
    else:
        # KIP-74's response limit came in v3: v0-2 have none.
        attributes["max_bytes"] = 0x7FFFFFFF
    fields.append(_FETCH_TOPICS)
    return request("FetchRequest", 1, version, fields, **attributes)


def _fetchResponse(version: int) -> type:
    partition = ("PartitionData", [
        ("partition_index", "int32"),
        ("error_code", "error_code"),
        ("high_watermark", "int64"),
        ("records", "records?"),
    ])
    fields: list = [("throttle_time", "timedelta_i32")] if version >= 1 else []
    fields.append(
        ("responses", [("FetchableTopicResponse", [("topic", "string"), ("partitions", [partition])])])
    )
    return response("FetchResponse", 1, version, fields)


# -- ListOffsets (2) v0 ------------------------------------------------------

_LIST_OFFSETS_REQUEST_V0 = request("ListOffsetsRequest", 2, 0, [
    ("replica_id", "int32"),
    ("topics", [("ListOffsetsTopic", [
        ("name", "string"),
        ("partitions", [("ListOffsetsPartition", [
            ("partition_index", "int32"),
            ("timestamp", "int64"),
            ("max_num_offsets", "int32"),
        ])]),
    ])]),
])
_LIST_OFFSETS_RESPONSE_V0 = response("ListOffsetsResponse", 2, 0, [
    ("topics", [("ListOffsetsTopicResponse", [
        ("name", "string"),
        ("partitions", [("ListOffsetsPartitionResponse", [
            ("partition_index", "int32"),
            ("error_code", "error_code"),
            ("old_style_offsets", ["int64"]),
        ])]),
    ])]),
])

# -- OffsetCommit (8) v0-1 ---------------------------------------------------


def _offsetCommitRequest(version: int) -> type:
    partition = [("partition_index", "int32"), ("committed_offset", "int64")]
    if version == 1:
        partition.append(("commit_timestamp", "int64"))
    partition.append(("committed_metadata", "string?"))
    fields: list = [("group_id", "string")]
    attributes = {}
    if version >= 1:
        fields += [("generation_id_or_member_epoch", "int32"), ("member_id", "string")]
    else:
        attributes = {"generation_id_or_member_epoch": -1, "member_id": ""}
    fields.append(
        ("topics", [("OffsetCommitRequestTopic", [
            ("name", "string"),
            ("partitions", [("OffsetCommitRequestPartition", partition)]),
        ])])
    )
    return request("OffsetCommitRequest", 8, version, fields, **attributes)


def _offsetCommitResponse(version: int) -> type:
    return response("OffsetCommitResponse", 8, version, [
        ("topics", [("OffsetCommitResponseTopic", [
            ("name", "string"),
            ("partitions", [("OffsetCommitResponsePartition", [
                ("partition_index", "int32"),
                ("error_code", "error_code"),
            ])]),
        ])]),
    ])


# -- CreateTopics (19) v0-1 --------------------------------------------------

_CREATE_TOPICS_REQUEST_V0 = request(
    "CreateTopicsRequest", 19, 0, [
        ("topics", [("CreatableTopic", [
            ("name", "string"),
            ("num_partitions", "int32"),
            ("replication_factor", "int16"),
            ("assignments", [("CreatableReplicaAssignment", [
                ("partition_index", "int32"),
                ("broker_ids", ["int32"]),
            ])]),
            ("configs", [("CreatableTopicConfig", [("name", "string"), ("value", "string?")])]),
        ])]),
        ("timeout", "timedelta_i32"),
    ],
    validate_only=False,
)


def _createTopicsResponse(version: int) -> type:
    result = [("name", "string"), ("error_code", "error_code")]
    if version >= 1:
        result.append(("error_message", "string?"))
    return response("CreateTopicsResponse", 19, version, [("topics", [("CreatableTopicResult", result)])])


# -- DeleteTopics (20) v0 ----------------------------------------------------

_DELETE_TOPICS_RESPONSE_V0 = response("DeleteTopicsResponse", 20, 0, [
    ("responses", [("DeletableTopicResult", [("name", "string"), ("error_code", "error_code")])]),
])


# -- DescribeAcls (29), CreateAcls (30), DeleteAcls (31) v0 ------------------
# v0 predates prefixed ACLs (KIP-290): every pattern is LITERAL (3).

LITERAL = 3
_ACL_FILTER = [
    ("resource_type_filter", "int8"),
    ("resource_name_filter", "string?"),
    ("principal_filter", "string?"),
    ("host_filter", "string?"),
    ("operation", "int8"),
    ("permission_type", "int8"),
]
_ACL_ENTRY = [("principal", "string"), ("host", "string"), ("operation", "int8"), ("permission_type", "int8")]

_DESCRIBE_ACLS_REQUEST_V0 = request(
    "DescribeAclsRequest", 29, 0, _ACL_FILTER, pattern_type_filter=LITERAL
)
_DESCRIBE_ACLS_RESPONSE_V0 = response("DescribeAclsResponse", 29, 0, [
    ("throttle_time", "timedelta_i32"),
    ("error_code", "error_code"),
    ("error_message", "string?"),
    ("resources", [("DescribeAclsResource", [
        ("resource_type", "int8"),
        ("resource_name", "string"),
        ("acls", [("AclDescription", _ACL_ENTRY)]),
    ])]),
])
_CREATE_ACLS_REQUEST_V0 = request("CreateAclsRequest", 30, 0, [
    ("creations", [("AclCreation", [
        ("resource_type", "int8"),
        ("resource_name", "string"),
        *_ACL_ENTRY,
    ], {"resource_pattern_type": LITERAL})]),
])
_DELETE_ACLS_REQUEST_V0 = request("DeleteAclsRequest", 31, 0, [
    ("filters", [("DeleteAclsFilter", _ACL_FILTER, {"pattern_type_filter": LITERAL})]),
])
_DELETE_ACLS_RESPONSE_V0 = response("DeleteAclsResponse", 31, 0, [
    ("throttle_time", "timedelta_i32"),
    ("filter_results", [("DeleteAclsFilterResult", [
        ("error_code", "error_code"),
        ("error_message", "string?"),
        ("matching_acls", [("DeleteAclsMatchingAcl", [
            ("error_code", "error_code"),
            ("error_message", "string?"),
            ("resource_type", "int8"),
            ("resource_name", "string"),
            *_ACL_ENTRY,
        ])]),
    ])]),
])

# -- DescribeConfigs (32) v0 -------------------------------------------------
# v0 says is_default where v1 says config_source, and has no synonyms.

_DESCRIBE_CONFIGS_REQUEST_V0 = request(
    "DescribeConfigsRequest", 32, 0, [
        ("resources", [("DescribeConfigsResource", [
            ("resource_type", "int8"),
            ("resource_name", "string"),
            ("configuration_keys", ["string"], NULLABLE),
        ])]),
    ],
    include_synonyms=False,
    include_documentation=False,
)
_DESCRIBE_CONFIGS_RESPONSE_V0 = response("DescribeConfigsResponse", 32, 0, [
    ("throttle_time", "timedelta_i32"),
    ("results", [("DescribeConfigsResult", [
        ("error_code", "error_code"),
        ("error_message", "string?"),
        ("resource_type", "int8"),
        ("resource_name", "string"),
        ("configs", [("DescribeConfigsResourceResult", [
            ("name", "string"),
            ("value", "string?"),
            ("read_only", "bool"),
            ("is_default", "bool"),
            ("is_sensitive", "bool"),
        ])]),
    ])]),
])


# -- WriteTxnMarkers (27) v0 -------------------------------------------------
# v1's fields, not flexible.

_WRITE_TXN_MARKERS_REQUEST_V0 = request("WriteTxnMarkersRequest", 27, 0, [
    ("markers", [("WritableTxnMarker", [
        ("producer_id", "int64"),
        ("producer_epoch", "int16"),
        ("transaction_result", "bool"),
        ("topics", [("WritableTxnMarkerTopic", [
            ("name", "string"),
            ("partition_indexes", ["int32"]),
        ])]),
        ("coordinator_epoch", "int32"),
    ])]),
])
_WRITE_TXN_MARKERS_RESPONSE_V0 = response("WriteTxnMarkersResponse", 27, 0, [
    ("markers", [("WritableTxnMarkerResult", [
        ("producer_id", "int64"),
        ("topics", [("WritableTxnMarkerTopicResult", [
            ("name", "string"),
            ("partitions", [("WritableTxnMarkerPartitionResult", [
                ("partition_index", "int32"),
                ("error_code", "error_code"),
            ])]),
        ])]),
    ])]),
])


# -- OffsetForLeaderEpoch (23) v0-1 --------------------------------------------
# v2 adds current_leader_epoch (KIP-320) and throttle_time, v3 replica_id;
# before them the asker is a follower or an admin tool, never fenced.

_OFFSET_FOR_LEADER_EPOCH_REQUEST_V0 = request(
    "OffsetForLeaderEpochRequest", 23, 0, [
        ("topics", [("OffsetForLeaderTopic", [
            ("topic", "string"),
            ("partitions", [("OffsetForLeaderPartition", [
                ("partition", "int32"),
                ("leader_epoch", "int32"),
            ], {"current_leader_epoch": -1})]),
        ])]),
    ],
    replica_id=-2,
)


def _offsetForLeaderEpochResponse(version: int) -> type:
    fields = [("error_code", "error_code"), ("partition", "int32")]
    if version >= 1:
        fields.append(("leader_epoch", "int32"))
    fields.append(("end_offset", "int64"))
    return response("OffsetForLeaderEpochResponse", 23, version, [
        ("topics", [("OffsetForLeaderTopicResult", [
            ("topic", "string"),
            ("partitions", [("EpochEndOffset", fields)]),
        ])]),
    ])


#: ApiKey -> version -> (request class, response class)
LEGACY_SCHEMAS: dict[int, dict[int, tuple[type, type]]] = {
    0: {v: (_produceRequest(v), _produceResponse(v)) for v in range(3)},
    1: {v: (_fetchRequest(v), _fetchResponse(v)) for v in range(4)},
    2: {0: (_LIST_OFFSETS_REQUEST_V0, _LIST_OFFSETS_RESPONSE_V0)},
    8: {v: (_offsetCommitRequest(v), _offsetCommitResponse(v)) for v in (0, 1)},
    9: {0: (OffsetFetchRequestV1, OffsetFetchResponseV1)},
    19: {
        0: (_CREATE_TOPICS_REQUEST_V0, _createTopicsResponse(0)),
        1: (CreateTopicsRequestV2, _createTopicsResponse(1)),
    },
    20: {0: (DeleteTopicsRequestV1, _DELETE_TOPICS_RESPONSE_V0)},
    29: {0: (_DESCRIBE_ACLS_REQUEST_V0, _DESCRIBE_ACLS_RESPONSE_V0)},
    30: {0: (_CREATE_ACLS_REQUEST_V0, CreateAclsResponseV1)},
    31: {0: (_DELETE_ACLS_REQUEST_V0, _DELETE_ACLS_RESPONSE_V0)},
    27: {0: (_WRITE_TXN_MARKERS_REQUEST_V0, _WRITE_TXN_MARKERS_RESPONSE_V0)},
    32: {0: (_DESCRIBE_CONFIGS_REQUEST_V0, _DESCRIBE_CONFIGS_RESPONSE_V0)},
    23: {
        v: (_OFFSET_FOR_LEADER_EPOCH_REQUEST_V0, _offsetForLeaderEpochResponse(v)) for v in (0, 1)
    },
    35: {0: (DescribeLogDirsRequestV1, DescribeLogDirsResponseV1)},
}
