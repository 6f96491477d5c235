"""
Kafka's replica selectors (KIP-392) as pure functions.
"""

from kafkatwist.replication.selector import LEADER, RACK_AWARE, ReplicaView, selectReplica

L = ReplicaView(1, "a", 100, 0)


def test_rack_aware_prefers_the_most_caught_up_replica_in_the_clients_rack():
    replicas = [L, ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 95, 500), ReplicaView(4, "c", 100, 0)]
    assert selectReplica(RACK_AWARE, "b", L, replicas) == 3
    assert selectReplica(RACK_AWARE, "c", L, replicas) == 4
    # The leader's rack, no rack, an unknown rack: the leader.
    for rack in ("a", None, "", "z"):
        assert selectReplica(RACK_AWARE, rack, L, replicas) is None
    assert selectReplica(LEADER, "b", L, replicas) is None
    assert selectReplica(None, "b", L, replicas) is None


def test_ties_go_to_the_most_recently_caught_up_then_the_largest_id():
    replicas = [L, ReplicaView(2, "b", 95, 10), ReplicaView(3, "b", 95, 20)]
    assert selectReplica(RACK_AWARE, "b", L, replicas) == 2
    replicas = [L, ReplicaView(2, "b", 95, 10), ReplicaView(3, "b", 95, 10)]
    assert selectReplica(RACK_AWARE, "b", L, replicas) == 3
