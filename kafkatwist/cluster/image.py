"""
The cluster as this broker last read it from ZooKeeper: an immutable
L{ClusterImage}, replaced whole by the cluster owner thread after each
change, read without locks by handler threads (Metadata, FindCoordinator,
DescribeCluster...) and by the controller's state machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

from kafkatwist.cluster.zkdata import NO_LEADER, BrokerInfo, PartitionState, TopicAssignment

_EMPTY = MappingProxyType({})


@dataclass(frozen=True)
class ClusterImage:
    """
    @ivar brokers: live (registered) brokers by id.
    @ivar controllerId: the controller's broker id, or -1.
    @ivar topics: each topic's assignment (id and replicas per partition).
    @ivar states: each partition's state znode, by (topic, partition);
        absent until the controller first writes it.
    @ivar configs: each topic's overrides (C{/config/topics}).
    @ivar deleting: topics queued for deletion (C{/admin/delete_topics}).
    @ivar shuttingDown: brokers that asked to have their leaders moved away.
    @ivar deletedReplicas: for each topic queued for deletion, the brokers
        that deleted their replicas of it, with the topic id they deleted.
    @ivar brokerEpochs: each live broker's broker epoch (Kafka's: the czxid
        of its registration znode, new at every registration).
    """

    brokers: "MappingProxyType[int, BrokerInfo]" = field(default_factory=lambda: _EMPTY)
    controllerId: int = -1
    topics: "MappingProxyType[str, TopicAssignment]" = field(default_factory=lambda: _EMPTY)
    states: "MappingProxyType[tuple[str, int], PartitionState]" = field(default_factory=lambda: _EMPTY)
    configs: "MappingProxyType[str, dict]" = field(default_factory=lambda: _EMPTY)
    deleting: frozenset = frozenset()
    shuttingDown: frozenset = frozenset()
    deletedReplicas: "MappingProxyType[str, MappingProxyType[int, object]]" = field(
        default_factory=lambda: _EMPTY
    )
    clusterId: str | None = None
    brokerEpochs: "MappingProxyType[int, int]" = field(default_factory=lambda: _EMPTY)
    #: bumped by every published image (tests and waits compare it)
    serial: int = field(default=0, compare=False)

    def live(self) -> frozenset:
        return frozenset(self.brokers)

    def restartedSince(self, brokerId: int, state: PartitionState) -> bool:
        """
        Whether C{brokerId} registered after C{state} was last written: it
        restarted (or its session was renewed) since, so it is not the
        replica the state names -- it may have lost what it had not flushed
        (Kafka's bounced broker, told apart by its broker epoch).  Also
        a leader whose registration is not the one the state's election
        named (its leader broker epoch).
        """
        epoch = self.brokerEpochs.get(brokerId, 0)
        if brokerId == state.leader and 0 < epoch and 0 <= state.leaderBrokerEpoch != epoch:
            # Elected as another registration of it (an election computed
            # from an image holding its previous one, landed after it
            # registered again).
            return True
        if 0 < epoch and 0 <= dict(state.isrBrokerEpochs).get(brokerId, -1) != epoch:
            # Added to the ISR as another registration of it (KIP-903: the
            # leader's ISR write landed after it registered again).
            return True
        return 0 < state.mzxid < epoch

    def leader(self, topic: str, partition: int) -> int:
        state = self.states.get((topic, partition))
        if state is None or state.leader not in self.brokers:
            return NO_LEADER
        return state.leader

    def partitions(self):
        """
        @return: iterator of (topic, partition, replicas, state or None).
        """
        for name, assignment in self.topics.items():
            for partition, replicas in assignment.partitions.items():
                yield name, partition, replicas, self.states.get((name, partition))


def freeze(mapping: dict) -> MappingProxyType:
    return MappingProxyType(dict(mapping))
