"""
Replica placement at topic creation: Kafka's AdminUtils.assignReplicasToBrokers,
rack-aware when the brokers have a broker.rack.
"""

from __future__ import annotations

import itertools

import pytest

from kafkatwist.cluster.controller import assignReplicas
from kafkatwist.cluster.placement import assignReplicasToBrokers, rackAlternatedBrokers
from kafkatwist.errors import ErrorCode, KafkaError

#: the example of Kafka's AdminUtils documentation
RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_alternated_list():
    assert rackAlternatedBrokers(RACKS) == [0, 3, 1, 5, 4, 2]
    racks = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rackAlternatedBrokers(racks) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_kafkas_documented_example():
    assignment = assignReplicasToBrokers(RACKS, 7, 3, 0, 0)
    assert assignment == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),
    }


@pytest.mark.parametrize("start,shift", itertools.product(range(6), range(6)))
def test_every_rack_gets_a_replica(start, shift):
    assignment = assignReplicasToBrokers(RACKS, 12, 3, start, shift)
    for replicas in assignment.values():
        assert len(set(replicas)) == 3
        assert {RACKS[b] for b in replicas} == {"rack1", "rack2", "rack3"}
    # Leaders spread evenly.
    leaders = [replicas[0] for replicas in assignment.values()]
    assert sorted(leaders.count(b) for b in RACKS) == [2] * 6


def test_more_replicas_than_racks():
    racks = {1: "a", 2: "a", 3: "b"}
    for replicas in assignReplicasToBrokers(racks, 6, 3, 1, 2).values():
        assert sorted(replicas) == [1, 2, 3]
    for replicas in assignReplicasToBrokers(racks, 6, 2, 1, 2).values():
        assert {racks[b] for b in replicas} == {"a", "b"}


def test_no_racks_is_kafkas_rack_unaware_assignment():
    brokers = {1: None, 2: None, 3: None, 4: None}
    assert assignReplicasToBrokers(brokers, 8, 3, 2, 1) == assignReplicas(brokers, 8, 3, 2, 1)


def test_some_brokers_without_rack_refused():
    with pytest.raises(KafkaError) as e:
        assignReplicasToBrokers({1: "a", 2: None, 3: "b"}, 1, 1, 0, 0)
    assert e.value.code == ErrorCode.unknown_server_error
    assert "Not all brokers have rack information" in str(e.value)


def test_create_partitions_continue_the_round():
    whole = assignReplicasToBrokers(RACKS, 9, 3, 4, 1)
    later = assignReplicasToBrokers(RACKS, 5, 3, 4, 1, firstPartition=4)
    assert later == {p: whole[p] for p in range(4, 9)}
