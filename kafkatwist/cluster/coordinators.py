"""
The group and transaction coordinators follow the leaders of their
internal topics' partitions (Kafka's C{onLeadershipChange}): when this
broker becomes the leader of a C{__consumer_offsets} or
C{__transaction_state} partition its coordinator loads that partition's
groups or transactional ids, and unloads them when it stops leading it.

L{CoordinatorMover} sits between the cluster layer and the replica manager
(it is an L{IReplicaManager} that passes every call on), so the replica
manager has taken the new role before a load starts.  Loads read the log,
so they run on a thread of their own (C{kafkatwist-coordinator-loader}),
one at a time and in order; never on the cluster owner, which must stay
free to follow ZooKeeper.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.util.owner import OwnerThread
from kafkatwist.coordinator.formats import OFFSETS_TOPIC
from kafkatwist.coordinator.transaction.formats import TRANSACTION_STATE_TOPIC
from kafkatwist.coordinator.wiring import topicImage

log = Logger()

_INTERNAL = (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)


class CoordinatorMover:
    """
    @param replicaManager: the L{IReplicaManager} every call is passed to.
    """

    def __init__(self, replicaManager, thread: OwnerThread | None = None) -> None:
        self.replicaManager = replicaManager
        self.thread = thread or OwnerThread("kafkatwist-coordinator-loader")
        #: owned by the loader thread: internal partitions loaded here
        self._loaded: set = set()
        #: the coordinators by internal topic, and the log manager (given
        #: by L{start}: they are built after the cluster layer)
        self._coordinators: dict = {}
        self._logManager = None

    def start(self, broker) -> None:
        """
        @param broker: the L{kafkatwist.server.broker.BrokerServices} whose
            C{groupCoordinator} and C{transactionCoordinator} are (un)loaded.
        """
        self._coordinators = {
            OFFSETS_TOPIC: broker.groupCoordinator,
            TRANSACTION_STATE_TOPIC: broker.transactionCoordinator,
        }
        self._logManager = broker.logManager
        self.thread.start()

    def stop(self) -> None:
        self.thread.stop()

    # -- IReplicaManager ------------------------------------------------------------

    def becomeLeader(self, topic, partition, leaderEpoch, isr, replicas, partitionEpoch):
        self.replicaManager.becomeLeader(topic, partition, leaderEpoch, isr, replicas, partitionEpoch)
        if topic in _INTERNAL:
            self.thread.submit(self._load, topic, partition, leaderEpoch)

    def becomeFollower(self, topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch):
        self.replicaManager.becomeFollower(topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch)
        if topic in _INTERNAL:
            self.thread.submit(self._unload, topic, partition)

    def stopReplica(self, topic, partition, delete):
        self.replicaManager.stopReplica(topic, partition, delete)
        if topic in _INTERNAL:
            self.thread.submit(self._unload, topic, partition)

    def leaderEpochs(self):
        return self.replicaManager.leaderEpochs()

    def __getattr__(self, name):
        # Anything else the replica manager offers (the broker's data path
        # may read it through here).
        return getattr(self.replicaManager, name)

    # -- on the loader thread --------------------------------------------------------

    def _coordinator(self, topic):
        return self._coordinators.get(topic)

    def _load(self, topic, partition, leaderEpoch) -> None:
        coordinator = self._coordinator(topic)
        if coordinator is None:
            return
        key = (topic, partition)
        try:
            if topic == OFFSETS_TOPIC:
                if key in self._loaded:
                    return

                logManager = self._logManager
                coordinator.loadPartition(partition, topicImage(logManager) if logManager is not None else None)
            elif key in self._loaded:
                # A new leader epoch only: the markers' coordinator epoch moves.
                coordinator.runtime.call(coordinator.machine.loadPartition, partition, (), leaderEpoch)
            else:
                coordinator.loadPartition(partition, leaderEpoch)
        except Exception:
            log.failure("loading {topic}-{partition} into its coordinator failed", topic=topic, partition=partition)
            return
        if key not in self._loaded:
            self._loaded.add(key)
            log.info("Coordinator of {topic}-{partition} loaded here (leader epoch {epoch})",
                     topic=topic, partition=partition, epoch=leaderEpoch)

    def _unload(self, topic, partition) -> None:
        key = (topic, partition)
        if key not in self._loaded:
            return
        self._loaded.discard(key)
        coordinator = self._coordinator(topic)
        if coordinator is None:
            return
        try:
            coordinator.unloadPartition(partition)
        except Exception:
            log.failure("unloading {topic}-{partition} failed", topic=topic, partition=partition)
            return
        log.info("Coordinator of {topic}-{partition} unloaded (another broker leads it)",
                 topic=topic, partition=partition)
