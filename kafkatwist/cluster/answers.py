"""
What the request handlers answer from the cluster image in cluster mode
(C{zookeeper.connect} set): partitions' leaders for Metadata, where a
coordinator lives for FindCoordinator, topic creation with replication.
Read by handler threads; the image is immutable, the ZooKeeper writes are
handed to the cluster owner.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.cluster.image import ClusterImage
from kafkatwist.protocol.entities import NO_LEADER
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol.entities import make
from kafkatwist.coordinator.formats import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS, partitionFor
from kafkatwist.coordinator.transaction.formats import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_CONFIGS,
)

log = Logger()


def clusterPartitions(Partition, image: ClusterImage, name: str, assignment) -> tuple:
    """
    Metadata's partitions of a topic: leader, leader epoch, replicas, ISR
    and the replicas on brokers that are not alive; LEADER_NOT_AVAILABLE
    while a partition has no live leader (Kafka's answer).
    """
    live = image.brokers
    partitions = []
    for index, replicas in sorted(assignment.partitions.items()):
        state = image.states.get((name, index))
        leader = state.leader if state is not None and state.leader in live else NO_LEADER
        partitions.append(
            make(
                Partition,
                error_code=ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available,
                partition_index=index,
                leader_id=leader,
                leader_epoch=state.leaderEpoch if state is not None else -1,
                replica_nodes=tuple(replicas),
                isr_nodes=tuple(state.isr) if state is not None else (),
                offline_replicas=tuple(r for r in replicas if r not in live),
            )
        )
    return tuple(partitions)


def _logged(what: str):
    def onDone(result, error):
        if error is not None and error.code != ErrorCode.topic_already_exists:
            log.warn("{what} failed: {error}", what=what, error=error)

    return onDone


def autoCreate(cluster, config, name: str) -> ErrorCode:
    """
    Create C{name} with C{num.partitions} and
    C{default.replication.factor} (Metadata's auto-creation).

    @return: the code Metadata answers for it meanwhile.
    """
    try:
        assignment = cluster.assign(config["num.partitions"], config["default.replication.factor"])
    except KafkaError as e:
        return e.code
    cluster.createTopic(name, assignment, {}, _logged(f"Auto-creating topic {name}"))
    return ErrorCode.leader_not_available


def internalTopic(cluster, config, name: str, partitionsKey: str, replicationKey: str, configs: dict):
    """
    The internal topic's assignment from the image, creating it in
    ZooKeeper first if needed (Kafka creates C{__consumer_offsets} on the
    first FindCoordinator, with C{offsets.topic.replication.factor}
    replicas; too few live brokers is COORDINATOR_NOT_AVAILABLE until there
    are enough).

    @return: (assignment or None, ErrorCode).
    """
    image = cluster.image
    assignment = image.topics.get(name)
    if assignment is not None:
        return assignment, ErrorCode.none
    try:
        replicas = cluster.assign(config[partitionsKey], config[replicationKey])
    except KafkaError as e:
        log.warn("Cannot create {topic} yet: {e}", topic=name, e=e.message)
        return None, ErrorCode.coordinator_not_available
    cluster.createTopic(name, replicas, dict(configs), _logged(f"Creating {name}"))
    return None, ErrorCode.coordinator_not_available


def coordinatorFor(cluster, config, keyType: int, key: str, listenerName: str):
    """
    FindCoordinator in a cluster: the leader of the internal topic's
    partition that holds C{key}.

    @return: (ErrorCode, nodeId, host, port).
    """

    if keyType == 0:
        configs = dict(OFFSETS_TOPIC_CONFIGS, **{"segment.bytes": str(config["offsets.topic.segment.bytes"])})
        assignment, code = internalTopic(
            cluster, config, OFFSETS_TOPIC, "offsets.topic.num.partitions",
            "offsets.topic.replication.factor", configs,
        )
        name = OFFSETS_TOPIC
    else:
        configs = dict(TRANSACTION_STATE_TOPIC_CONFIGS,
                       **{"segment.bytes": str(config["transaction.state.log.segment.bytes"])})
        assignment, code = internalTopic(
            cluster, config, TRANSACTION_STATE_TOPIC, "transaction.state.log.num.partitions",
            "transaction.state.log.replication.factor", configs,
        )
        name = TRANSACTION_STATE_TOPIC
    if assignment is None:
        return code, -1, "", -1
    partition = partitionFor(key, len(assignment.partitions))
    image = cluster.image
    leader = image.leader(name, partition)
    if leader == NO_LEADER:
        return ErrorCode.coordinator_not_available, -1, "", -1
    info = image.brokers[leader]
    host, port = info.endpoint(listenerName) or info.endpoint()
    return ErrorCode.none, leader, host, port


def brokerEndpoints(image: ClusterImage, listenerName: str):
    """
    Every live broker's endpoint on the listener a request came in on (its
    first one if it has no such listener), in id order.

    @return: list of (brokerId, host, port, rack).
    """
    result = []
    for info in sorted(image.brokers.values(), key=lambda b: b.brokerId):
        host, port = info.endpoint(listenerName) or info.endpoint()
        result.append((info.brokerId, host, port, info.rack))
    return result
