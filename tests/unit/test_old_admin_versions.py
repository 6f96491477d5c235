"""
The admin APIs' versions Kafka 3.x serves and Kafka 4 dropped: CreateTopics
v0-1, DeleteTopics v0, DescribeConfigs v0, Describe/Create/DeleteAcls v0 --
through the handlers and the codec, and their layouts checked against
Kafka's message JSON byte by byte.
"""

from __future__ import annotations

import datetime
import struct

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import acls, admin, admin_configs
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.codec import decodeRequest, encodeBody
from kafkatwist.protocol.entities import nested
from kafkatwist.security.acl import AclBinding, AclOperation as Op, AclPermissionType as Perm
from kafkatwist.security.acl import PatternType as P, ResourceType as R

from tests.unit.adminhelpers import call, createTopic, makeBroker, req
from tests.unit.securityhelpers import aclBroker
from tests.unit.securityhelpers import admin as adminContext
from tests.unit.securityhelpers import call as securityCall

E = ErrorCode


def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def createV0(broker, name, partitions=1):
    topic = req(19, 0, "CreatableTopic", name=name, num_partitions=partitions, replication_factor=1,
                assignments=(), configs=())
    [result] = call(admin.CreateTopicsHandler, broker, 0, topics=(topic,), timeout=datetime.timedelta(seconds=5)).topics
    return result


def test_create_topics_v0_v1():
    broker = makeBroker()
    result = createV0(broker, "made-by-v0", partitions=3)
    assert (result.name, result.error_code) == ("made-by-v0", E.none)
    assert broker.logManager.topics()["made-by-v0"].numPartitions == 3
    again = createV0(broker, "made-by-v0")
    assert again.error_code == E.topic_already_exists
    # v1: validate_only, and the error message.
    checked = createTopic(broker, "checked", version=1, validateOnly=True)
    assert checked.error_code == E.none and "checked" not in broker.logManager.topics()
    bad = createTopic(broker, "bad", version=1, configs={"no.such.config": "1"})
    assert bad.error_code == E.invalid_config and "no.such.config" in bad.error_message


def test_create_topics_v0_layout():
    """
    CreateTopicsRequest.json v0: topics[name, num_partitions,
    replication_factor, assignments[partition, broker_ids], configs[name,
    value]], timeout_ms; the response topics[name, error_code].
    """
    body = (
        struct.pack(">i", 1) + s16("t") + struct.pack(">ih", 2, 1)
        + struct.pack(">i", 0) + struct.pack(">i", 1) + s16("retention.ms") + s16("1000")
        + struct.pack(">i", 5000)
    )
    request = decodeRequest(19, 0, body, 0)
    [topic] = request.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("t", 2, 1)
    assert [(c.name, c.value) for c in topic.configs] == [("retention.ms", "1000")]
    assert request.validate_only is False
    cls = responseType(19, 0)
    response = cls(topics=(nested(cls, "CreatableTopicResult")(name="t", error_code=E.topic_already_exists),))
    assert encodeBody(response) == struct.pack(">i", 1) + s16("t") + struct.pack(">h", 36)
    cls = responseType(19, 1)
    response = cls(topics=(nested(cls, "CreatableTopicResult")(name="t", error_code=E.none, error_message=None),))
    assert encodeBody(response) == struct.pack(">i", 1) + s16("t") + struct.pack(">hh", 0, -1)


def test_delete_topics_v0():
    broker = makeBroker()
    createTopic(broker, "doomed")
    response = call(admin.DeleteTopicsHandler, broker, 0, topic_names=("doomed", "never"),
                    timeout=datetime.timedelta(seconds=1))
    assert [(r.name, r.error_code) for r in response.responses] == [
        ("doomed", E.none), ("never", E.unknown_topic_or_partition),
    ]
    # v0 has no throttle time: responses[name, error_code] only.
    cls = responseType(20, 0)
    body = encodeBody(cls(responses=(nested(cls, "DeletableTopicResult")(name="x", error_code=E.none),)))
    assert body == struct.pack(">i", 1) + s16("x") + struct.pack(">h", 0)


def test_describe_configs_v0():
    broker = makeBroker()
    createTopic(broker, "t", configs={"retention.ms": "1000"})
    response = call(
        admin_configs.DescribeConfigsHandler, broker, 0,
        resources=(req(32, 0, "DescribeConfigsResource", resource_type=2, resource_name="t",
                       configuration_keys=("retention.ms", "cleanup.policy")),),
    )
    [result] = response.results
    assert result.error_code == E.none
    byName = {c.name: c for c in result.configs}
    assert (byName["retention.ms"].value, byName["retention.ms"].is_default) == ("1000", False)
    assert (byName["cleanup.policy"].value, byName["cleanup.policy"].is_default) == ("delete", True)


def test_describe_configs_v0_layout():
    """
    v0 has no include_synonyms; each config is name, value, read_only,
    is_default, is_sensitive (no source, no synonyms).
    """
    body = struct.pack(">i", 1) + struct.pack(">b", 2) + s16("t") + struct.pack(">i", -1)
    request = decodeRequest(32, 0, body, 0)
    assert request.resources[0].configuration_keys is None
    assert request.include_synonyms is False
    cls = responseType(32, 0)
    Result, Entry = nested(cls, "DescribeConfigsResult"), nested(cls, "DescribeConfigsResourceResult")
    response = cls(throttle_time=datetime.timedelta(0), results=(
        Result(error_code=E.none, error_message=None, resource_type=2, resource_name="t", configs=(
            Entry(name="a", value="b", read_only=False, is_default=True, is_sensitive=False),
        )),
    ))
    assert encodeBody(response) == (
        struct.pack(">ii", 0, 1) + struct.pack(">hh", 0, -1) + struct.pack(">b", 2) + s16("t")
        + struct.pack(">i", 1) + s16("a") + s16("b") + bytes([0, 1, 0])
    )


def test_acls_v0_are_literal():
    broker = aclBroker()
    broker.authorizer.createAcls(adminContext(30, 3), [
        AclBinding(R.TOPIC, "logs-", P.PREFIXED, "User:alice", "*", Op.READ, Perm.ALLOW),
    ])
    created = securityCall(acls.CreateAclsHandler, broker, 0, adminContext(30, 0), creations=(
        req(30, 0, "AclCreation", resource_type=R.TOPIC, resource_name="orders", principal="User:alice",
            host="*", operation=Op.WRITE, permission_type=Perm.ALLOW),
    ))
    assert [r.error_code for r in created.results] == [E.none]
    assert broker.authorizer.aclCount() == 2
    described = securityCall(
        acls.DescribeAclsHandler, broker, 0, adminContext(29, 0), resource_type_filter=R.TOPIC,
        resource_name_filter=None, principal_filter=None, host_filter=None, operation=Op.ANY,
        permission_type=Perm.ANY,
    )
    # The v0 filter is LITERAL: the prefixed ACL is not shown.
    assert [(r.resource_name, [a.operation for a in r.acls]) for r in described.resources] == [("orders", [Op.WRITE])]
    deleted = securityCall(acls.DeleteAclsHandler, broker, 0, adminContext(31, 0), filters=(
        req(31, 0, "DeleteAclsFilter", resource_type_filter=R.ANY, resource_name_filter=None,
            principal_filter="User:alice", host_filter=None, operation=Op.ANY, permission_type=Perm.ANY),
    ))
    [result] = deleted.filter_results
    assert [m.resource_name for m in result.matching_acls] == ["orders"]
    assert broker.authorizer.aclCount() == 1


def test_acls_v0_layouts():
    """
    DescribeAclsRequest.json v0: no pattern type filter; the v0 resource has
    no pattern type; AclCreation v0 no pattern type either.
    """
    body = struct.pack(">b", 2) + s16("t") + struct.pack(">hh", -1, -1) + struct.pack(">bb", 1, 3)
    request = decodeRequest(29, 0, body, 0)
    assert (request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter) == (2, "t", 3)
    creation = struct.pack(">i", 1) + struct.pack(">b", 2) + s16("t") + s16("User:a") + s16("*") + struct.pack(">bb", 3, 3)
    [c] = decodeRequest(30, 0, creation, 0).creations
    assert (c.resource_name, c.resource_pattern_type, c.principal) == ("t", 3, "User:a")
    assert requestType(31, 0).DeleteAclsFilter.pattern_type_filter == 3
