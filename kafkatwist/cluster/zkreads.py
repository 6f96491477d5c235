"""
Reading ZooKeeper on the owner thread: the broker registrations, topic assignments,
partition states, configs, deletions, shutdowns and ISR changes, into the owner's
copies (C{_brokers}, C{_topics}, C{_states}, ...) that L{ClusterService} publishes.

A part of L{ClusterService<kafkatwist.cluster.service.ClusterService>}, which
combines the parts; they share its state (see its C{__init__}).
"""

from __future__ import annotations

from kazoo.exceptions import (
    NoNodeError,
)
from twisted.logger import Logger

from kafkatwist.cluster import zkdata as Z

log = Logger()


class ZooKeeperReads:
    def _readZkReassignment(self) -> None:
        """
        C{/admin/reassign_partitions} (Kafka's ZooKeeper-era way to ask,
        still read by ZooKeeper-mode Kafka 3.x's controller): its
        reassignments start; each partition leaves the znode when it
        completes, the znode goes when empty.  Watched on every broker,
        acted on by the controller.
        """
        found = self._get(Z.REASSIGN_PARTITIONS)
        if found is None or not self.controller.active:
            return
        try:
            entries = Z.decodeReassignment(found[0])
        except Z.ZkDataError as e:
            log.warn("Ignoring {path}: {e}", path=Z.REASSIGN_PARTITIONS, e=e)
            return
        self._alterReassignments(entries, lambda result: None, fromZooKeeper=True)

    def _readAll(self) -> None:
        self._readEverything()
        self._removeStrays()

    def _readEverything(self) -> None:
        self._readBrokerConfigs()
        self._readBrokers()
        self._readTopics(all=True)
        self._readDeletions()
        self._readShutdowns()
        self._readController()
        self._settle()

    def _onEvent(self, path: str) -> None:
        if self._stopping or path is None:
            return
        if path == Z.BROKER_IDS:
            self._readBrokers()
        elif path == Z.TOPICS:
            self._readTopics()
        elif path == Z.CONTROLLER:
            self._readController()
        elif path == Z.DELETE_TOPICS:
            self._readDeletions()
        elif path == Z.ISR_CHANGE:
            self._readIsrChanges()
        elif path == Z.CONTROLLED_SHUTDOWN:
            self._readShutdowns()
        elif path == Z.REASSIGN_PARTITIONS:
            self._readZkReassignment()
        elif path.startswith(Z.DELETED_REPLICAS + "/"):
            topic = path[len(Z.DELETED_REPLICAS) + 1:].split("/")[0]
            if topic in self._deleting:
                self._readDeletedReplicas(topic)
        elif path.startswith(Z.CONFIG_BROKERS + "/"):
            self._readBrokerConfigs()
        elif path.startswith(Z.CONFIG_TOPICS + "/"):
            self._readConfig(path[len(Z.CONFIG_TOPICS) + 1:])
        elif path.startswith(Z.TOPICS + "/"):
            parts = path[len(Z.TOPICS) + 1:].split("/")
            if len(parts) == 1:
                self._readTopic(parts[0])
            elif len(parts) == 4 and parts[3] == "state":
                try:
                    self._readState(parts[0], int(parts[2]))
                except ValueError:
                    return
        self._settle()

    def _get(self, path):
        """
        The data and stat of C{path}, watched; C{None} if absent (its
        creation is watched then).
        """
        try:
            return self.zk.get(path, watch=self._watched)
        except NoNodeError:
            if self.zk.exists(path, watch=self._watched) is not None:
                return self._get(path)
            return None

    def _children(self, path) -> list:
        """
        The children of C{path}, watched; none if absent (its creation is
        watched then).  A node created between the read and the existence
        watch is read again: that watch fires on its deletion, never on a
        new child, so its children (a broker's deleted-replicas note) would
        go unheard for good.
        """
        while True:
            try:
                return self.zk.get_children(path, watch=self._watched)
            except NoNodeError:
                if self.zk.exists(path, watch=self._watched) is None:
                    return []

    def _readBrokers(self) -> None:
        ids = set()
        for child in self._children(Z.BROKER_IDS):
            try:
                ids.add(int(child))
            except ValueError:
                continue
        bounced = set()
        for brokerId in list(self._brokers):
            if brokerId in ids:
                # Gone and back between two reads (Kafka's "bounced
                # brokers", told apart by the znode's creation, its broker
                # epoch): it lost its state, so it leaves first.
                stat = self.zk.exists(Z.brokerPath(brokerId))
                if stat is not None and stat.czxid == self._brokerEpochs.get(brokerId):
                    continue
                bounced.add(brokerId)
            del self._brokers[brokerId]
            log.info("Broker {id} left the cluster", id=brokerId)
        if bounced:
            self._settle()
        for brokerId in ids - set(self._brokers):
            try:
                data, stat = self.zk.get(Z.brokerPath(brokerId))
                self._brokers[brokerId] = Z.decodeBroker(brokerId, data)
                self._brokerEpochs[brokerId] = stat.czxid
                log.info("Broker {id} joined the cluster: {endpoints}", id=brokerId,
                         endpoints=self._brokers[brokerId].endpoints)
            except NoNodeError:
                continue
            except Z.ZkDataError as e:
                log.warn("Ignoring broker registration: {e}", e=e)

    def _readTopics(self, all: bool = False) -> None:
        names = set(self._children(Z.TOPICS))
        for name in list(self._topics):
            if name not in names:
                self._forgetTopic(name)
        for name in names:
            if all or name not in self._topics:
                self._readTopic(name)

    def _forgetTopic(self, name: str) -> None:
        self._unreadable.discard(name)
        self._topics.pop(name, None)
        self._configs.pop(name, None)
        for key in [k for k in self._states if k[0] == name]:
            del self._states[key]

    def _readTopic(self, name: str) -> None:
        found = self._get(Z.topicPath(name))
        if found is None:
            self._forgetTopic(name)
            return
        try:
            assignment = Z.decodeTopic(name, found[0], found[1].version)
        except Z.ZkDataError as e:
            log.warn("Ignoring topic znode: {e}", e=e)
            self._unreadable.add(name)
            return
        self._unreadable.discard(name)
        self._topics[name] = assignment
        self._readConfig(name)
        for partition in assignment.partitions:
            self._readState(name, partition)

    def _readConfig(self, name: str) -> None:
        """
        A topic's overrides, watched: a change is applied to the local
        replicas' logs (L{_applyLocal}).
        """
        found = self._get(Z.topicConfigPath(name))
        configs = {}
        if found is not None:
            try:
                configs = Z.decodeTopicConfig(name, found[0])
            except Z.ZkDataError as e:
                log.warn("Ignoring topic configs: {e}", e=e)
        if name in self._topics:
            self._configs[name] = configs

    def _brokerConfigLayer(self, entity: str, get) -> dict:
        """
        One dynamic broker config znode's configs; a damaged one is one log
        line and counts as empty (start-up goes on).
        """
        path = Z.brokerConfigPath(entity)
        found = get(path)
        if found is None:
            return {}
        try:
            return Z.decodeEntityConfig(f"dynamic broker configs {path}", found[0])
        except Z.ZkDataError as e:
            log.error("Ignoring {e}", e=e)
            return {}

    def _readBrokerConfigs(self) -> None:
        """
        The cluster default's and this broker's dynamic configs, watched:
        handed to L{onBrokerConfigs}, which applies what changed.
        """
        layers = [self._brokerConfigLayer(entity, self._get)
                  for entity in (Z.DEFAULT_BROKER_ENTITY, str(self.brokerId))]
        if self.onBrokerConfigs is not None:
            self.onBrokerConfigs(*layers)

    def _readState(self, topic: str, partition: int) -> None:
        found = self._get(Z.statePath(topic, partition))
        if found is None:
            self._states.pop((topic, partition), None)
            return
        data, stat = found
        try:
            self._states[(topic, partition)] = Z.decodeState(topic, partition, data, stat.version, stat.mzxid)
        except Z.ZkDataError as e:
            log.warn("Ignoring partition state: {e}", e=e)

    def _readDeletions(self) -> None:
        self._deleting = set(self._children(Z.DELETE_TOPICS))
        for topic in list(self._deletedReplicas):
            if topic not in self._deleting:
                del self._deletedReplicas[topic]
        for topic in self._deleting:
            self._readDeletedReplicas(topic)

    def _readDeletedReplicas(self, topic: str) -> None:
        """
        Which brokers deleted their replicas of C{topic} (watched: the
        controller finishes the deletion when the last one says so).
        """
        done = {}
        for child in self._children(Z.deletedReplicasPath(topic)):
            try:
                brokerId = int(child)
                # Watched too: a broker repairs its word with a set, which
                # no children watch sees.
                data, _ = self.zk.get(Z.deletedReplicaPath(topic, brokerId), watch=self._watched)
                done[brokerId] = Z.decodeDeletedReplica(topic, data)
            except (ValueError, NoNodeError):
                continue
            except Z.ZkDataError as e:
                log.warn("Ignoring a deleted replica's znode: {e}", e=e)
        self._deletedReplicas[topic] = done

    def _readShutdowns(self) -> None:
        ids = set()
        for child in self._children(Z.CONTROLLED_SHUTDOWN):
            try:
                ids.add(int(child))
            except ValueError:
                continue
        self._shuttingDown = ids

    def _readIsrChanges(self) -> None:
        children = self._children(Z.ISR_CHANGE)
        if not self.controller.active:
            return
        # States are watched: the notifications are only cleared, as
        # Kafka's controller does once it has read them.
        for child in children:
            try:
                self.zk.delete(f"{Z.ISR_CHANGE}/{child}")
            except NoNodeError:
                pass
