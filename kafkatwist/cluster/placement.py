"""
Where new partitions' replicas go (Kafka's C{AdminUtils.assignReplicasToBrokers}):
rack-unaware when no live broker has a C{broker.rack}
(L{kafkatwist.cluster.controller.assignReplicas}), rack-aware when every
one has, refused when only some have.

The rack-aware assignment, as Kafka's: the brokers in a rack-alternated
order (racks sorted by name, each rack's brokers by id: rack1's first,
rack2's first, ..., rack1's second...); each partition's leader
round-robin over that list from a start index; each further replica the
next broker, with a shift that grows every full round, skipping brokers on
a rack that already has a replica while some rack has none, and brokers
that already have one while some broker has none.  So a partition with as
many replicas as there are racks has one in each.
"""

from __future__ import annotations

from kafkatwist.cluster.controller import assignReplicas
from kafkatwist.errors import ErrorCode, KafkaError

__all__ = ["assignReplicasToBrokers", "rackAlternatedBrokers"]


def assignReplicasToBrokers(
    brokerRacks: dict,
    numPartitions: int,
    replicationFactor: int,
    startIndex: int,
    nextReplicaShift: int,
    firstPartition: int = 0,
) -> dict[int, tuple[int, ...]]:
    """
    @param brokerRacks: live broker id -> its rack, or C{None}.
    @param startIndex: where the first leader falls (Kafka: random).
    @param nextReplicaShift: the first follower's offset (Kafka: random).
    @param firstPartition: the first new partition's number.
    @raise KafkaError: UNKNOWN_SERVER_ERROR when only some brokers have a
        rack (Kafka's C{AdminOperationException}, which its CreateTopics
        and CreatePartitions answer with that code).
    """
    racks = {broker: rack for broker, rack in brokerRacks.items() if rack is not None}
    if not racks:
        return assignReplicas(
            brokerRacks, numPartitions, replicationFactor, startIndex, nextReplicaShift, firstPartition
        )
    if len(racks) < len(brokerRacks):
        raise KafkaError(
            ErrorCode.unknown_server_error,
            "Not all brokers have rack information for replica rack aware assignment.",
        )
    arranged = rackAlternatedBrokers(racks)
    numRacks = len(set(racks.values()))
    n = len(arranged)
    result = {}
    current = max(0, firstPartition)
    shift = nextReplicaShift
    for _ in range(numPartitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + startIndex) % n
        leader = arranged[first]
        replicas = [leader]
        racksWithReplicas = {racks[leader]}
        brokersWithReplicas = {leader}
        k = 0
        for _ in range(replicationFactor - 1):
            while True:
                broker = arranged[_replicaIndex(first, shift * numRacks, k, n)]
                rack = racks[broker]
                k += 1
                if (rack not in racksWithReplicas or len(racksWithReplicas) == numRacks) and (
                    broker not in brokersWithReplicas or len(brokersWithReplicas) == n
                ):
                    replicas.append(broker)
                    racksWithReplicas.add(rack)
                    brokersWithReplicas.add(broker)
                    break
        result[current] = tuple(replicas)
        current += 1
    return result


def rackAlternatedBrokers(racks: dict) -> list[int]:
    """
    Kafka's C{getRackAlternatedBrokerList}: rack1: 0, 1, 2; rack2: 3, 4, 5;
    rack3: 6, 7, 8 give 0, 3, 6, 1, 4, 7, 2, 5, 8.
    """
    byRack: dict = {}
    for broker in sorted(racks):
        byRack.setdefault(racks[broker], []).append(broker)
    columns = [byRack[rack] for rack in sorted(byRack)]
    result = []
    depth = 0
    while len(result) < len(racks):
        for column in columns:
            if depth < len(column):
                result.append(column[depth])
        depth += 1
    return result


def _replicaIndex(first: int, secondReplicaShift: int, replicaIndex: int, n: int) -> int:
    shift = 1 + (secondReplicaShift + replicaIndex) % (n - 1)
    return (first + shift) % n
