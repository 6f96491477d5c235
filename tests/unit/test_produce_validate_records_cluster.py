"""
Kafka's C{handleProduceRequest} asks its metadata cache whether a partition
exists (UNKNOWN_TOPIC_OR_PARTITION if not) and then runs
C{ProduceRequest.validateRecords} on its records, before the replica
manager looks for the partition among those the broker hosts.  In a
cluster, a v0/v1 message set in Produce v3+ for a partition that exists
but is hosted on another broker is INVALID_RECORD (a bare response), as is
one for an internal topic hosted elsewhere; a partition the cluster does
not know is still UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.cluster.zkdata import TopicAssignment
from kafkatwist.errors import ErrorCode
from tests.unit.test_produce_validate_records import BARE_INVALID_RECORD, answers, legacy, produce
from tests.unit.test_small_produce import batch, brokerWith

E = ErrorCode


def clusterBroker(wrap=False, deleting=()):
    """
    A broker hosting orders-0..3, in a cluster whose image also has
    elsewhere-0 and __consumer_offsets-0 on broker 2.
    """
    broker = brokerWith(wrap=wrap)
    topics = {
        "orders": TopicAssignment("orders", uuid.uuid4(), {p: (1,) for p in range(4)}),
        "elsewhere": TopicAssignment("elsewhere", uuid.uuid4(), {0: (2,)}),
        "__consumer_offsets": TopicAssignment("__consumer_offsets", uuid.uuid4(), {0: (2,)}),
    }
    broker.cluster = SimpleNamespace(
        image=ClusterImage(topics=freeze(topics), deleting=frozenset(deleting))
    )
    return broker


@pytest.mark.parametrize("wrap", (False, True))
@pytest.mark.parametrize("magic", (0, 1))
def test_old_magic_for_a_partition_hosted_elsewhere_is_invalid_record(wrap, magic):
    broker = clusterBroker(wrap=wrap)
    response = produce(broker, 9, [("elsewhere", [(0, legacy(magic))])], acks=1)
    assert answers(response, 9) == {("elsewhere", 0): BARE_INVALID_RECORD}
    # two batches too: the rest of validateRecords
    response = produce(broker, 9, [("elsewhere", [(0, batch() + batch())])], acks=1)
    assert answers(response, 9) == {("elsewhere", 0): BARE_INVALID_RECORD}


def test_old_magic_for_an_internal_topic_hosted_elsewhere_is_invalid_record():
    broker = clusterBroker()
    response = produce(broker, 9, [("__consumer_offsets", [(0, legacy(1))])], acks=1)
    assert answers(response, 9) == {("__consumer_offsets", 0): BARE_INVALID_RECORD}


def test_a_partition_the_cluster_does_not_know_is_unknown_first():
    broker = clusterBroker(deleting={"elsewhere"})
    response = produce(
        broker, 9,
        [("elsewhere", [(0, legacy(1))]), ("orders", [(9, legacy(1))]), ("nope", [(0, legacy(1))])],
        acks=1,
    )
    got = answers(response, 9)
    assert {tp: got[tp][0] for tp in got} == {
        ("elsewhere", 0): E.unknown_topic_or_partition,
        ("orders", 9): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }



@pytest.mark.parametrize("wrap", (False, True))
def test_valid_records_for_a_partition_hosted_elsewhere_are_not_leader(wrap):
    # Kafka's ReplicaManager.getPartitionOrError: a partition its metadata
    # cache knows but this broker does not host is NOT_LEADER_OR_FOLLOWER
    # (the client refreshes its metadata and goes to the leader); one it
    # does not know is UNKNOWN_TOPIC_OR_PARTITION.
    broker = clusterBroker(wrap=wrap)
    response = produce(
        broker, 9, [("elsewhere", [(0, batch())]), ("orders", [(9, batch())]), ("nope", [(0, batch())])],
        acks=1,
    )
    got = answers(response, 9)
    assert {tp: got[tp][:2] for tp in got} == {
        ("elsewhere", 0): (E.not_leader_or_follower, -1),
        ("orders", 9): (E.unknown_topic_or_partition, -1),
        ("nope", 0): (E.unknown_topic_or_partition, -1),
    }


@pytest.mark.parametrize("wrap", (False, True))
def test_one_batch_for_a_partition_hosted_elsewhere_is_not_leader(wrap):
    # The commonest shape (one partition, one batch) too, whichever path
    # answers it.
    broker = clusterBroker(wrap=wrap)
    response = produce(broker, 9, [("elsewhere", [(0, batch())])], acks=1)
    assert answers(response, 9)[("elsewhere", 0)][:2] == (E.not_leader_or_follower, -1)


def test_an_internal_partition_the_cluster_does_not_know_is_unknown():
    # Kafka asks its metadata cache before validateRecords and before the
    # replica manager refuses a client's write to an internal topic.
    broker = clusterBroker()
    response = produce(broker, 9, [("__consumer_offsets", [(0, batch()), (5, batch())])], acks=1)
    got = answers(response, 9)
    assert got[("__consumer_offsets", 0)][0] == E.invalid_topic_exception
    assert got[("__consumer_offsets", 5)][:2] == (E.unknown_topic_or_partition, -1)
