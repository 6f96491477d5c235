"""
What each API checks, table-driven: every built-in handler (built from the
plugin registry, as the daemon builds them) is called by a principal without
ACLs and must answer Kafka's code (29, 30 or 31, or the transactional id's)
where Kafka puts it; then, with the ACLs Kafka requires, that refusal must be
gone.  Requests and responses go through the wire codec.
"""


from __future__ import annotations

import datetime

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from twisted.internet.task import Clock

from kafkatwist.config import BrokerConfig
from kafkatwist.coordinator import GroupCoordinatorService
from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import (
    decodeRequest,
    decodeResponseFrame,
    encodeRequestFrame,
    encodeResponseFrame,
)
from kafkatwist.protocol.entities import make, ms, nested
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType,
    ResourceType as R,
    SUPPORTED_OPERATIONS,
    operationsBitfield,
)
from kafkatwist.security.authorizer import StandardAuthorizer
from tests.coordinator.helpers import memoryLog
from tests.fakeservices import FakeServices
from tests.log.batches import makeBatch

E = ErrorCode
BOB = "User:bob"
TOPIC_OK, GROUP_OK = "t", "g"
ZERO = uuid.UUID(int=0)


class FakePurgatory:
    def checkAndComplete(self, key):
        return 0

    def tryCompleteElseWatch(self, operation, keys, timeout):
        return False


@pytest.fixture
def broker(tmp_path):
    from kafkatwist.service import brokerLogDefaults

    config = BrokerConfig({"log.dir": str(tmp_path), "group.initial.rebalance.delay.ms": "0"})
    fakeClock = Clock()
    logManager = MemoryLogManager(brokerLogDefaults(config))
    for name in (TOPIC_OK, "other"):
        logManager.createTopic(name, 1, {})
    broker = FakeServices(
        config,
        fakeClock=fakeClock,
        logManager=logManager,
        fetchPurgatory=FakePurgatory(),
        groupCoordinator=GroupCoordinatorService(fakeClock, memoryLog(), initialRebalanceDelayMs=0),
        authorizer=StandardAuthorizer(None, superUsers={"User:admin"}),
        clusterId="cluster",
        handlers=True,
    )
    broker.handlers = broker.registry.handlers
    return broker


class PendingResponse:
    def __init__(self):
        from twisted.internet.defer import Deferred

        self.deferred = Deferred()

    def complete(self, result):
        self.deferred.callback(result)


def grant(broker, *acls):
    bindings = [
        AclBinding(rtype, name, PatternType.LITERAL, BOB, "*", op, Perm.ALLOW) for rtype, name, op in acls
    ]
    assert broker.authorizer.createAcls(SimpleNamespace(principal="User:admin"), bindings) == [None] * len(bindings)


def call(broker, apiKey, version, fields, principal=BOB):
    entity = make(requestType(apiKey, version), **fields)
    frame = encodeRequestFrame(apiKey, version, 1, "test", entity)[4:]
    header = parseRequestHeader(frame)
    request = decodeRequest(apiKey, version, frame, header.bodyOffset)
    context = SimpleNamespace(
        apiKey=apiKey, apiVersion=version, principal=principal, clientAddress=("10.0.0.1", 5000),
        listenerName="PLAINTEXT", clientId="test", correlationId=1, clock=broker.clock,
        respondLater=PendingResponse,
    )
    response = broker.handlers[apiKey].handle(context, request)
    if hasattr(response, "addCallback"):
        # An answer the coordinator gave at once, as a fired Deferred.
        fired = []
        response.addBoth(fired.append)
        [response] = fired
    chunks = encodeResponseFrame(apiKey, version, 1, response)
    data = b"".join(bytes(c) for c in chunks)[4:]
    return decodeResponseFrame(apiKey, version, data)[1]


def n(apiKey, version, entity, /, **fields):
    return make(nested(requestType(apiKey, version), entity), **fields)


T, G, C, X = R.TOPIC, R.GROUP, R.CLUSTER, R.TRANSACTIONAL_ID


@dataclass
class Case:
    name: str
    apiKey: int
    version: int
    fields: dict
    code: callable  # response -> the error code where Kafka puts the refusal
    refused: ErrorCode
    needs: list  # (resource type, name, operation) Kafka requires
    partly: list = field(default_factory=list)  # granted first: the refusal moves on


CASES = [
    Case("Produce", 0, 9,
         dict(transactional_id=None, acks=1, timeout=ms(5000), topic_data=(
             n(0, 9, "TopicProduceData", name=TOPIC_OK, partition_data=(
                 n(0, 9, "PartitionProduceData", index=0, records=makeBatch(1)),)),)),
         lambda r: r.responses[0].partition_responses[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.WRITE)]),
    Case("Fetch", 1, 12,
         dict(replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
              session_epoch=-1, topics=(n(1, 12, "FetchTopic", topic=TOPIC_OK, partitions=(
                  n(1, 12, "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=0,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20),)),),
              forgotten_topics_data=(), rack_id=""),
         lambda r: r.responses[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.READ)]),
    Case("ListOffsets", 2, 7,
         dict(replica_id=-1, isolation_level=0, topics=(n(2, 7, "ListOffsetsTopic", name=TOPIC_OK, partitions=(
             n(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE)]),
    Case("OffsetForLeaderEpoch", 23, 4,
         dict(replica_id=-1, topics=(n(23, 4, "OffsetForLeaderTopic", topic=TOPIC_OK, partitions=(
             n(23, 4, "OffsetForLeaderPartition", partition=0, current_leader_epoch=-1, leader_epoch=0),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE)]),
    Case("Metadata", 3, 12,
         dict(topics=(n(3, 12, "MetadataRequestTopic", name=TOPIC_OK, topic_id=ZERO),), allow_auto_topic_creation=False,
              include_topic_authorized_operations=False),
         lambda r: r.topics[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE)]),
    Case("Metadata auto-creation", 3, 12,
         dict(topics=(n(3, 12, "MetadataRequestTopic", name="fresh", topic_id=ZERO),), allow_auto_topic_creation=True,
              include_topic_authorized_operations=False),
         lambda r: r.topics[0].error_code,
         E.topic_authorization_failed, [(T, "fresh", Op.CREATE)], partly=[(T, "fresh", Op.DESCRIBE)]),
    Case("OffsetCommit", 8, 8,
         dict(group_id=GROUP_OK, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
              topics=(n(8, 8, "OffsetCommitRequestTopic", name=TOPIC_OK, partitions=(
                  n(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                    committed_leader_epoch=-1, committed_metadata=""),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.group_authorization_failed, [(G, GROUP_OK, Op.READ), (T, TOPIC_OK, Op.READ)]),
    Case("OffsetCommit topic", 8, 8,
         dict(group_id=GROUP_OK, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
              topics=(n(8, 8, "OffsetCommitRequestTopic", name=TOPIC_OK, partitions=(
                  n(8, 8, "OffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                    committed_leader_epoch=-1, committed_metadata=""),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.READ)], partly=[(G, GROUP_OK, Op.READ)]),
    Case("OffsetFetch", 9, 8,
         dict(groups=(n(9, 8, "OffsetFetchRequestGroup", group_id=GROUP_OK, topics=None),), require_stable=False),
         lambda r: r.groups[0].error_code,
         E.group_authorization_failed, [(G, GROUP_OK, Op.DESCRIBE)]),
    Case("OffsetFetch topic", 9, 8,
         dict(groups=(n(9, 8, "OffsetFetchRequestGroup", group_id=GROUP_OK, topics=(
             n(9, 8, "OffsetFetchRequestTopics", name=TOPIC_OK, partition_indexes=(0,)),)),), require_stable=False),
         lambda r: r.groups[0].topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE)], partly=[(G, GROUP_OK, Op.DESCRIBE)]),
    Case("FindCoordinator group", 10, 4, dict(key_type=0, coordinator_keys=(GROUP_OK,)),
         lambda r: r.coordinators[0].error_code,
         E.group_authorization_failed, [(G, GROUP_OK, Op.DESCRIBE)]),
    Case("FindCoordinator transaction", 10, 4, dict(key_type=1, coordinator_keys=("tx",)),
         lambda r: r.coordinators[0].error_code,
         E.transactional_id_authorization_failed, [(X, "tx", Op.DESCRIBE)]),
    Case("JoinGroup", 11, 5,
         dict(group_id=GROUP_OK, session_timeout=ms(10000), rebalance_timeout=ms(10000), member_id="",
              group_instance_id=None, protocol_type="consumer",
              protocols=(n(11, 5, "JoinGroupRequestProtocol", name="range", metadata=b""),)),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ)]),
    Case("Heartbeat", 12, 3, dict(group_id=GROUP_OK, generation_id=1, member_id="m", group_instance_id=None),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ)]),
    Case("LeaveGroup", 13, 3,
         dict(group_id=GROUP_OK, members=(n(13, 3, "MemberIdentity", member_id="m", group_instance_id=None),)),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ)]),
    Case("SyncGroup", 14, 3,
         dict(group_id=GROUP_OK, generation_id=1, member_id="m", group_instance_id=None, assignments=()),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ)]),
    Case("ConsumerGroupHeartbeat", 68, 1,
         dict(group_id=GROUP_OK, member_id="m", member_epoch=0, instance_id=None, rack_id=None,
              rebalance_timeout=ms(30000), subscribed_topic_names=(TOPIC_OK,), subscribed_topic_regex=None,
              server_assignor=None, topic_partitions=()),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ), (T, TOPIC_OK, Op.DESCRIBE)]),
    Case("ConsumerGroupHeartbeat topic", 68, 1,
         dict(group_id=GROUP_OK, member_id="m", member_epoch=0, instance_id=None, rack_id=None,
              rebalance_timeout=ms(30000), subscribed_topic_names=(TOPIC_OK,), subscribed_topic_regex=None,
              server_assignor=None, topic_partitions=()),
         lambda r: r.error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE)],
         partly=[(G, GROUP_OK, Op.READ)]),
    Case("ConsumerGroupDescribe", 69, 0, dict(group_ids=(GROUP_OK,), include_authorized_operations=True),
         lambda r: r.groups[0].error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.DESCRIBE)]),
    Case("DescribeGroups", 15, 5, dict(groups=(GROUP_OK,), include_authorized_operations=True),
         lambda r: r.groups[0].error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.DESCRIBE)]),
    Case("CreateTopics", 19, 5,
         dict(topics=(n(19, 5, "CreatableTopic", name="new", num_partitions=1, replication_factor=1,
                        assignments=(), configs=()),), timeout=ms(5000), validate_only=True),
         lambda r: r.topics[0].error_code, E.topic_authorization_failed, [(T, "new", Op.CREATE)]),
    Case("CreateTopics by cluster", 19, 5,
         dict(topics=(n(19, 5, "CreatableTopic", name="new", num_partitions=1, replication_factor=1,
                        assignments=(), configs=()),), timeout=ms(5000), validate_only=True),
         lambda r: r.topics[0].error_code, E.topic_authorization_failed, [(C, CLUSTER_NAME, Op.CREATE)]),
    Case("DeleteTopics", 20, 6,
         dict(topics=(n(20, 6, "DeleteTopicState", name="other", topic_id=ZERO),), timeout=ms(5000)),
         lambda r: r.responses[0].error_code, E.topic_authorization_failed, [(T, "other", Op.DELETE)]),
    Case("DeleteRecords", 21, 2,
         dict(topics=(n(21, 2, "DeleteRecordsTopic", name=TOPIC_OK, partitions=(
             n(21, 2, "DeleteRecordsPartition", partition_index=0, offset=0),)),), timeout=ms(5000)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.DELETE)]),
    Case("InitProducerId", 22, 4, dict(transactional_id=None, transaction_timeout=ms(60000), producer_id=-1,
                                       producer_epoch=-1),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)]),
    Case("InitProducerId by topic WRITE", 22, 4, dict(transactional_id=None, transaction_timeout=ms(60000),
                                                      producer_id=-1, producer_epoch=-1),
         lambda r: r.error_code, E.cluster_authorization_failed, [(T, "anything", Op.WRITE)]),
    Case("InitProducerId transactional", 22, 4, dict(transactional_id="tx", transaction_timeout=ms(60000),
                                                     producer_id=-1, producer_epoch=-1),
         lambda r: r.error_code, E.transactional_id_authorization_failed, [(X, "tx", Op.WRITE)]),
    Case("Produce transactional", 0, 9,
         dict(transactional_id="tx", acks=-1, timeout=ms(5000), topic_data=(
             n(0, 9, "TopicProduceData", name=TOPIC_OK, partition_data=(
                 n(0, 9, "PartitionProduceData", index=0, records=makeBatch(
                     1, producerId=5, producerEpoch=0, baseSequence=0, attributes=0x10)),)),)),
         lambda r: r.responses[0].partition_responses[0].error_code,
         E.transactional_id_authorization_failed, [(X, "tx", Op.WRITE)],
         partly=[(T, TOPIC_OK, Op.WRITE)]),
    Case("AddPartitionsToTxn", 24, 3,
         dict(v3_and_below_transactional_id="tx", v3_and_below_producer_id=5, v3_and_below_producer_epoch=0,
              v3_and_below_topics=(n(24, 3, "AddPartitionsToTxnTopic", name=TOPIC_OK, partitions=(0,)),)),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
         E.transactional_id_authorization_failed, [(X, "tx", Op.WRITE), (T, TOPIC_OK, Op.WRITE)]),
    Case("AddPartitionsToTxn topic", 24, 3,
         dict(v3_and_below_transactional_id="tx", v3_and_below_producer_id=5, v3_and_below_producer_epoch=0,
              v3_and_below_topics=(n(24, 3, "AddPartitionsToTxnTopic", name=TOPIC_OK, partitions=(0,)),)),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.WRITE)], partly=[(X, "tx", Op.WRITE)]),
    Case("AddPartitionsToTxn from brokers", 24, 4,
         dict(transactions=(n(24, 4, "AddPartitionsToTxnTransaction", transactional_id="tx", producer_id=5,
                              producer_epoch=0, verify_only=True, topics=(
                                  n(24, 4, "AddPartitionsToTxnTopic", name=TOPIC_OK, partitions=(0,)),)),)),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.CLUSTER_ACTION)]),
    Case("AddOffsetsToTxn", 25, 3, dict(transactional_id="tx", producer_id=5, producer_epoch=0, group_id=GROUP_OK),
         lambda r: r.error_code, E.transactional_id_authorization_failed,
         [(X, "tx", Op.WRITE), (G, GROUP_OK, Op.READ)]),
    Case("AddOffsetsToTxn group", 25, 3,
         dict(transactional_id="tx", producer_id=5, producer_epoch=0, group_id=GROUP_OK),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.READ)],
         partly=[(X, "tx", Op.WRITE)]),
    Case("EndTxn", 26, 3, dict(transactional_id="tx", producer_id=5, producer_epoch=0, committed=True),
         lambda r: r.error_code, E.transactional_id_authorization_failed, [(X, "tx", Op.WRITE)]),
    Case("WriteTxnMarkers", 27, 1,
         dict(markers=(n(27, 1, "WritableTxnMarker", producer_id=5, producer_epoch=0, transaction_result=False,
                         coordinator_epoch=0, topics=(
                             n(27, 1, "WritableTxnMarkerTopic", name=TOPIC_OK, partition_indexes=(0,)),)),)),
         lambda r: r.markers[0].topics[0].partitions[0].error_code,
         E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.CLUSTER_ACTION)]),
    Case("TxnOffsetCommit", 28, 3,
         dict(transactional_id="tx", group_id=GROUP_OK, producer_id=5, producer_epoch=0, generation_id=-1,
              member_id="", group_instance_id=None, topics=(n(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC_OK,
              partitions=(n(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                            committed_leader_epoch=-1, committed_metadata=""),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.transactional_id_authorization_failed,
         [(X, "tx", Op.WRITE), (G, GROUP_OK, Op.READ), (T, TOPIC_OK, Op.READ)]),
    Case("TxnOffsetCommit group", 28, 3,
         dict(transactional_id="tx", group_id=GROUP_OK, producer_id=5, producer_epoch=0, generation_id=-1,
              member_id="", group_instance_id=None, topics=(n(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC_OK,
              partitions=(n(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                            committed_leader_epoch=-1, committed_metadata=""),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.group_authorization_failed, [(G, GROUP_OK, Op.READ), (T, TOPIC_OK, Op.READ)],
         partly=[(X, "tx", Op.WRITE)]),
    Case("TxnOffsetCommit topic", 28, 3,
         dict(transactional_id="tx", group_id=GROUP_OK, producer_id=5, producer_epoch=0, generation_id=-1,
              member_id="", group_instance_id=None, topics=(n(28, 3, "TxnOffsetCommitRequestTopic", name=TOPIC_OK,
              partitions=(n(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=1,
                            committed_leader_epoch=-1, committed_metadata=""),)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.READ)],
         partly=[(X, "tx", Op.WRITE), (G, GROUP_OK, Op.READ)]),
    Case("DescribeProducers", 61, 0,
         dict(topics=(n(61, 0, "TopicRequest", name=TOPIC_OK, partition_indexes=(0,)),)),
         lambda r: r.topics[0].partitions[0].error_code,
         E.topic_authorization_failed, [(T, TOPIC_OK, Op.READ)]),
    Case("DescribeTransactions", 65, 0, dict(transactional_ids=("tx",)),
         lambda r: r.transaction_states[0].error_code,
         E.transactional_id_authorization_failed, [(X, "tx", Op.DESCRIBE)]),
    Case("DescribeAcls", 29, 3,
         dict(resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
              host_filter=None, operation=1, permission_type=1),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.DESCRIBE)]),
    Case("CreateAcls", 30, 3,
         dict(creations=(n(30, 3, "AclCreation", resource_type=2, resource_name="x", resource_pattern_type=3,
                           principal="User:x", host="*", operation=3, permission_type=3),)),
         lambda r: r.results[0].error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER)]),
    Case("DeleteAcls", 31, 3,
         dict(filters=(n(31, 3, "DeleteAclsFilter", resource_type_filter=2, resource_name_filter="x",
                         pattern_type_filter=3, principal_filter=None, host_filter=None, operation=1,
                         permission_type=1),)),
         lambda r: r.filter_results[0].error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER)]),
    Case("DescribeConfigs topic", 32, 4,
         dict(resources=(n(32, 4, "DescribeConfigsResource", resource_type=2, resource_name=TOPIC_OK,
                           configuration_keys=None),), include_synonyms=False, include_documentation=False),
         lambda r: r.results[0].error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.DESCRIBE_CONFIGS)]),
    Case("DescribeConfigs broker", 32, 4,
         dict(resources=(n(32, 4, "DescribeConfigsResource", resource_type=4, resource_name="1",
                           configuration_keys=None),), include_synonyms=False, include_documentation=False),
         lambda r: r.results[0].error_code, E.cluster_authorization_failed,
         [(C, CLUSTER_NAME, Op.DESCRIBE_CONFIGS)]),
    Case("DescribeConfigs implied by ALTER_CONFIGS", 32, 4,
         dict(resources=(n(32, 4, "DescribeConfigsResource", resource_type=2, resource_name=TOPIC_OK,
                           configuration_keys=None),), include_synonyms=False, include_documentation=False),
         lambda r: r.results[0].error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.ALTER_CONFIGS)]),
    Case("AlterConfigs", 33, 2,
         dict(resources=(n(33, 2, "AlterConfigsResource", resource_type=2, resource_name=TOPIC_OK, configs=(
             n(33, 2, "AlterableConfig", name="retention.ms", value="1000"),)),), validate_only=True),
         lambda r: r.responses[0].error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.ALTER_CONFIGS)]),
    Case("IncrementalAlterConfigs", 44, 1,
         dict(resources=(n(44, 1, "AlterConfigsResource", resource_type=2, resource_name=TOPIC_OK, configs=(
             n(44, 1, "AlterableConfig", name="retention.ms", config_operation=0, value="1000"),)),),
             validate_only=True),
         lambda r: r.responses[0].error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.ALTER_CONFIGS)]),
    Case("IncrementalAlterConfigs broker", 44, 1,
         dict(resources=(n(44, 1, "AlterConfigsResource", resource_type=4, resource_name="1", configs=()),),
              validate_only=True),
         lambda r: r.responses[0].error_code, E.cluster_authorization_failed,
         [(C, CLUSTER_NAME, Op.ALTER_CONFIGS)]),
    Case("CreatePartitions", 37, 3,
         dict(topics=(n(37, 3, "CreatePartitionsTopic", name=TOPIC_OK, count=2, assignments=None),),
              timeout=ms(5000), validate_only=True),
         lambda r: r.results[0].error_code, E.topic_authorization_failed, [(T, TOPIC_OK, Op.ALTER)]),
    Case("DeleteGroups", 42, 2, dict(groups_names=(GROUP_OK,)),
         lambda r: r.results[0].error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.DELETE)]),
    Case("OffsetDelete", 47, 0,
         dict(group_id=GROUP_OK, topics=(n(47, 0, "OffsetDeleteRequestTopic", name=TOPIC_OK, partitions=(
             n(47, 0, "OffsetDeleteRequestPartition", partition_index=0),)),)),
         lambda r: r.error_code, E.group_authorization_failed, [(G, GROUP_OK, Op.DELETE)]),
    Case("DescribeLogDirs", 35, 4, dict(topics=None),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.DESCRIBE)]),
    Case("ElectLeaders", 43, 2,
         dict(election_type=0, topic_partitions=(n(43, 2, "TopicPartitions", topic=TOPIC_OK, partitions=(0,)),),
              timeout=datetime.timedelta(seconds=1)),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER)]),
    Case("AlterPartitionReassignments", 45, 0,
         dict(topics=(n(45, 0, "ReassignableTopic", name=TOPIC_OK, partitions=(
             n(45, 0, "ReassignablePartition", partition_index=0, replicas=None),)),),
              timeout=datetime.timedelta(seconds=1)),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER)]),
    Case("ListPartitionReassignments", 46, 0, dict(topics=None, timeout=datetime.timedelta(seconds=1)),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.DESCRIBE)]),
    Case("DescribeUserScramCredentials", 50, 0, dict(users=None),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.DESCRIBE)]),
    Case("AlterUserScramCredentials", 51, 0,
         dict(deletions=(n(51, 0, "ScramCredentialDeletion", name="u", mechanism=1),), upsertions=()),
         lambda r: r.results[0].error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER)]),
    Case("DescribeClientQuotas", 48, 1, dict(components=(), strict=False),
         lambda r: r.error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.DESCRIBE_CONFIGS)]),
    Case("AlterClientQuotas", 49, 1,
         dict(entries=(n(49, 1, "EntryData", entity=(n(49, 1, "EntityData", entity_type="user", entity_name="u"),),
                         ops=(n(49, 1, "OpData", key="producer_byte_rate", value=1000.0, remove=False),)),),
              validate_only=True),
         lambda r: r.entries[0].error_code, E.cluster_authorization_failed, [(C, CLUSTER_NAME, Op.ALTER_CONFIGS)]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_refused_without_acls_then_allowed(broker, case):
    if case.partly:
        grant(broker, *case.partly)
    response = call(broker, case.apiKey, case.version, case.fields)
    assert case.code(response) == case.refused
    grant(broker, *case.needs)
    response = call(broker, case.apiKey, case.version, case.fields)
    assert case.code(response) != case.refused
    assert case.code(response) not in (
        E.topic_authorization_failed, E.group_authorization_failed, E.cluster_authorization_failed,
        E.transactional_id_authorization_failed,
    )


def test_every_api_is_in_the_table():
    """
    Kafka checks something for every API kafkatwist serves except these.
    """
    # SASL, ApiVersions; ListGroups, DescribeCluster and ListTransactions
    # filter instead
    unchecked = {17, 18, 36, 16, 60, 66}
    covered = {case.apiKey for case in CASES} | unchecked
    registry = HandlerRegistry(discoverPlugins())
    assert set(registry.chains) <= covered


def test_super_user_needs_no_acls(broker):
    for case in CASES:
        response = call(broker, case.apiKey, case.version, case.fields, principal="User:admin")
        assert case.code(response) != case.refused, case.name


def test_metadata_lists_only_describable_topics(broker):
    fields = dict(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True)
    assert call(broker, 3, 12, fields).topics == ()
    grant(broker, (T, TOPIC_OK, Op.READ))
    [topic] = call(broker, 3, 12, fields).topics
    assert topic.name == TOPIC_OK
    assert topic.topic_authorized_operations == operationsBitfield([Op.READ, Op.DESCRIBE])
    # v10 reports the cluster's operations: none without DESCRIBE on it.
    fields10 = dict(fields, include_cluster_authorized_operations=True)
    assert call(broker, 3, 10, fields10).cluster_authorized_operations == 0
    grant(broker, (C, CLUSTER_NAME, Op.ALTER))
    assert call(broker, 3, 10, fields10).cluster_authorized_operations == operationsBitfield(
        [Op.ALTER, Op.DESCRIBE]
    )


def test_describe_cluster_operations(broker):
    fields = dict(include_cluster_authorized_operations=True, endpoint_type=1)
    assert call(broker, 60, 1, fields).cluster_authorized_operations == 0
    response = call(broker, 60, 1, fields, principal="User:admin")
    assert response.cluster_authorized_operations == operationsBitfield(SUPPORTED_OPERATIONS[C])


def test_list_groups_shows_only_describable_groups(broker):
    for group in ("g1", "g2"):
        commit = dict(next(c for c in CASES if c.name == "OffsetCommit").fields, group_id=group)
        assert call(broker, 8, 8, commit, principal="User:admin").topics[0].partitions[0].error_code == E.none
    fields = dict(states_filter=())
    assert {g.group_id for g in call(broker, 16, 4, fields, principal="User:admin").groups} == {"g1", "g2"}
    assert {g.group_id for g in call(broker, 16, 4, fields).groups} == set()
    grant(broker, (G, "g1", Op.READ))
    assert {g.group_id for g in call(broker, 16, 4, fields).groups} == {"g1"}
    grant(broker, (C, CLUSTER_NAME, Op.DESCRIBE))
    assert {g.group_id for g in call(broker, 16, 4, fields).groups} == {"g1", "g2"}


def test_describe_groups_computes_authorized_operations(broker):
    grant(broker, (G, GROUP_OK, Op.READ))
    [group] = call(broker, 15, 5, dict(groups=(GROUP_OK,), include_authorized_operations=True)).groups
    assert group.error_code == E.none
    assert group.authorized_operations == operationsBitfield([Op.READ, Op.DESCRIBE])


def test_no_authorizer_allows_everything(broker):
    broker.authorizer = None
    for case in CASES:
        response = call(broker, case.apiKey, case.version, case.fields)
        if case.apiKey in (29, 30, 31):
            continue  # SECURITY_DISABLED
        assert case.code(response) != case.refused, case.name
