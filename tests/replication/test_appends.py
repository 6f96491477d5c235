"""
The append path every writer shares (kafkatwist.replication.appends): one
min.insync.replicas check, one way to ask whether a partition is
replicated.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import MemoryLogManager
from kafkatwist.replication.appends import (
    COORDINATOR,
    appendMarker,
    appendToLeader,
    notEnoughReplicas,
)
from tests.fakeservices import FakeServices
from tests.log.batches import makeBatch

E = ErrorCode


@pytest.fixture
def log():
    logs = MemoryLogManager()
    logs.createTopic("t", 1, {"min.insync.replicas": "2"})
    return logs.getLog("t", 0)


def test_a_partition_that_is_not_replicated_is_never_refused(log):
    assert log.inSyncReplicas is None and notEnoughReplicas(log) is None
    appendToLeader(log, makeBatch(1), 0, -1)
    assert log.logEndOffset == 1


def test_acks_all_is_refused_below_min_insync_before_the_append(log):
    log.inSyncReplicas = frozenset({1})
    with pytest.raises(KafkaError) as raised:
        appendToLeader(log, makeBatch(1), 0, -1)
    assert raised.value.code == E.not_enough_replicas
    assert raised.value.message == "the ISR has 1 replicas, min.insync.replicas is 2"
    # acks=1 does not ask; nor does a coordinator's own write (checked once
    # replicated instead).
    appendToLeader(log, makeBatch(1), 0, 1)
    appendToLeader(log, makeBatch(1), 0, -1, origin=COORDINATOR)
    assert log.logEndOffset == 2
    with pytest.raises(KafkaError):
        appendMarker(log, 5, 0, True, 0, 0)
    log.inSyncReplicas = frozenset({1, 2})
    appendToLeader(log, makeBatch(1), 0, -1)
    assert log.logEndOffset == 3


def test_acks_all_waits_only_where_the_high_watermark_is_held_back():
    services = FakeServices()
    services.logManager.createTopic("t", 1, {})
    log = services.logManager.getLog("t", 0)
    replicaManager = services.replicaManager
    info = replicaManager.appendRecords(log, makeBatch(2), 0, -1)
    assert not log.replicated() and replicaManager.waitingFor("t", 0, log, info) is None
    log.inSyncReplicas = frozenset({1, 2})
    log.setHighWatermark(2)
    info = replicaManager.appendRecords(log, makeBatch(1), 0, -1)
    waiting = replicaManager.waitingFor("t", 0, log, info)
    assert log.replicated() and waiting.requiredOffset == 3
    answers = []

    class Pending:
        def complete(self, result):
            answers.append(result)

    replicaManager.awaitReplicas(services.clock, [waiting], 30.0, lambda errors: errors, Pending())
    assert answers == []
    log.setHighWatermark(3)
    services.wakePartition(("t", 0))
    assert answers == [{("t", 0): E.none}]


@pytest.mark.parametrize("acks", [2, -2, 5, 32767, -32768])
def test_acks_other_than_none_leader_or_all_are_refused_before_the_append(log, acks):
    # Kafka's ReplicaManager.appendRecords: INVALID_REQUIRED_ACKS, nothing
    # written, no message (the client is broken).
    with pytest.raises(KafkaError) as raised:
        appendToLeader(log, makeBatch(1), 0, acks)
    assert (raised.value.code, raised.value.message) == (E.invalid_required_acks, None)
    with pytest.raises(KafkaError) as raised:
        appendToLeader(log, makeBatch(1), 0, acks, origin=COORDINATOR)
    assert raised.value.code == E.invalid_required_acks
    assert log.logEndOffset == 0
    # Refused first: before min.insync.replicas, the conversion, the log.
    log.inSyncReplicas = frozenset({1})
    with pytest.raises(KafkaError) as raised:
        appendToLeader(log, b"not even records", 0, acks, convert=lambda records: 1 / 0)
    assert raised.value.code == E.invalid_required_acks
    for valid in (0, 1):
        appendToLeader(log, makeBatch(1), 0, valid)
    assert log.logEndOffset == 2


@pytest.mark.parametrize("acks", [2, -2])
def test_a_produce_with_invalid_acks_appends_nothing(acks):
    # Through the Produce handler's general path: the partition is refused
    # with INVALID_REQUIRED_ACKS and its log is untouched.
    import datetime

    from kafkatwist.plugins.produce import ProduceHandler
    from kafkatwist.protocol.apis import PRODUCE, requestType
    from kafkatwist.protocol.entities import make, nested
    from tests.unit.adminhelpers import FakeContext

    services = FakeServices()
    services.logManager.createTopic("t", 1, {})
    cls = requestType(PRODUCE, 9)
    request = make(
        cls, transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=30),
        topic_data=(make(nested(cls, "TopicProduceData"), name="t", partition_data=(
            make(nested(cls, "PartitionProduceData"), index=0, records=makeBatch(1)),
        )),),
    )
    response = ProduceHandler(services).handle(FakeContext(PRODUCE, 9), request)
    [partition] = response.responses[0].partition_responses
    assert (partition.error_code, partition.base_offset) == (E.invalid_required_acks, -1)
    assert services.logManager.getLog("t", 0).logEndOffset == 0
