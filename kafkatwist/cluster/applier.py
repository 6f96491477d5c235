"""
Applying the published cluster to this broker (owner thread): leadership to the
replica manager, local logs created, configured and deleted, stray partitions
removed.

A part of L{ClusterService<kafkatwist.cluster.service.ClusterService>}, which
combines the parts; they share its state (see its C{__init__}).
"""

from __future__ import annotations

from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
)
from twisted.logger import Logger

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.image import ClusterImage
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS

log = Logger()


class LocalApplier:
    def _applyLocal(self, image: ClusterImage) -> None:
        """
        Tell the replica manager about every hosted partition whose leader
        epoch changed, and stop the replicas this broker no longer hosts.
        Nothing once the cluster stops: the logs close after it (see
        L{_localWork}).
        """
        with self._localWork:
            if self._stopping:
                return
            self._applyLocalLogs(image)
        self._deleteQueued(image)

    def _adoptInternalIds(self, image: ClusterImage) -> None:
        """
        Each broker creates the internal topics' logs itself when it starts
        (its coordinators need them before the cluster is read), with an
        id of its own; the controller creates the topic in ZooKeeper with
        another.  Kafka writes the controller's id in every replica's
        C{partition.metadata} and refuses a log whose id differs
        (InconsistentTopicIdException).  Here the local log takes the
        cluster's id, data kept: it is the same topic -- an internal topic
        is never deleted, so its name has only ever meant this one, and
        its records (committed offsets, transactions) were written by this
        cluster's coordinators.  Also for a data directory an earlier
        version left with a locally made id.  (A data topic whose id
        differs is another topic of the same name: L{_ensureLocalLog}
        replaces it.)
        """
        logManager = self.logManager
        adopt = getattr(logManager, "adoptTopicId", None)
        if adopt is None:
            return
        for name in INTERNAL_TOPICS:
            assignment = image.topics.get(name)
            if assignment is None or name in image.deleting or self._adoptedIds.get(name) == assignment.topicId:
                continue
            local = logManager.topics().get(name)
            if local is None:
                continue
            if local.topicId != assignment.topicId:
                log.info("Internal topic {topic}: the local id {old} takes the cluster's {new}",
                         topic=name, old=str(local.topicId), new=str(assignment.topicId))
                try:
                    adopt(name, assignment.topicId)
                except (KafkaError, OSError) as e:
                    # adoptTopicId publishes the new id only once written:
                    # the local id is still the old one, so the next apply
                    # (not marked adopted) tries again.
                    log.warn(
                        "Internal topic {topic} keeps its local id {old} for now "
                        "(the cluster's {new} is tried again at the next update): {e}",
                        topic=name, old=str(local.topicId), new=str(assignment.topicId), e=e,
                    )
                    continue
            self._adoptedIds[name] = assignment.topicId

    def _applyLocalLogs(self, image: ClusterImage) -> None:
        self._adoptInternalIds(image)
        me = self.brokerId
        hosted = set()
        for topic, partition, replicas, state in image.partitions():
            if me not in replicas or state is None or topic in image.deleting:
                continue
            key = (topic, partition)
            hosted.add(key)
            leader = state.leader
            if leader == me and not self._mayLead(key, state, image.topics[topic].topicId):
                # Named leader by a state from before this registration: a
                # previous life of this broker was elected, and this one may
                # have lost its unflushed tail.  It serves nothing until the
                # controller elects a leader in a newer epoch.
                leader = Z.NO_LEADER
            # A leader also hears of a new partition epoch in its leader
            # epoch (its ISR change whose answer it dropped, say): its next
            # alterIsr would fail on the old one.
            seen = (state.leaderEpoch, leader, state.zkVersion if leader == me else None)
            if self._applied.get(key) == seen:
                continue
            if not self._ensureLocalLog(image, topic):
                continue
            if leader != state.leader:
                log.info("Partition {topic}-{partition}: ZooKeeper names broker {id} leader in epoch {epoch} "
                         "from before its registration: not leading until the controller elects a leader "
                         "in a newer epoch", topic=topic, partition=partition, id=me, epoch=state.leaderEpoch)
            self._applied[key] = seen
            try:
                if leader == me:
                    self.replicaManager.becomeLeader(
                        topic, partition, state.leaderEpoch, state.isr, replicas, state.zkVersion
                    )
                else:
                    self.replicaManager.becomeFollower(
                        topic, partition, leader, state.leaderEpoch, replicas, state.zkVersion
                    )
            except Exception:
                log.failure("replica manager failed on {topic}-{partition}", topic=topic, partition=partition)
        self._applyConfigs(image, {topic for topic, _ in hosted})
        # The epochs refused belong to the topic they were seen for: a
        # topic deleted (or created again under its name) forgets them.
        self._staleEpochs = {
            key: (topicId, epoch) for key, (topicId, epoch) in self._staleEpochs.items()
            if key[0] in self._unreadable
            or (key[0] in image.topics and image.topics[key[0]].topicId == topicId)
        }
        gone = [key for key in self._applied if key not in hosted]
        deletedTopics = set()
        for key in gone:
            del self._applied[key]
            topic, partition = key
            assignment = image.topics.get(topic)
            deleted = assignment is None or topic in image.deleting
            # Reassigned away: this replica's data goes too.
            removed = not deleted and me not in assignment.partitions.get(partition, ())
            try:
                self.replicaManager.stopReplica(topic, partition, deleted or removed)
            except Exception:
                log.failure("replica manager failed to stop {topic}-{partition}", topic=topic, partition=partition)
            if deleted or (removed and not any(me in r for r in assignment.partitions.values())):
                deletedTopics.add(topic)
        for topic in deletedTopics:
            self._deleteLocal(topic)

    def _mayLead(self, key, state, topicId) -> bool:
        """
        Kafka's broker leads only on the controller's LeaderAndIsr, sent
        for its current broker epoch with a leader epoch newer than it had.
        Here: a state naming this broker leader counts only if written
        after this broker registered (the controller elected this life of
        it) for this registration (its leader broker epoch, when the state
        has one, is this broker's), and only in a leader epoch later than
        any in which an older state named it for the same topic (C{topicId}: a topic created
        again under the name starts at epoch 0).
        """
        seen = self._staleEpochs.get(key)
        stale = seen[1] if seen is not None and seen[0] == topicId else None
        if 0 < state.mzxid < self._brokerEpoch or 0 <= state.leaderBrokerEpoch != self._brokerEpoch:
            self._staleEpochs[key] = (topicId, max(state.leaderEpoch, -1 if stale is None else stale))
            return False
        return stale is None or state.leaderEpoch > stale

    def _deleteQueued(self, image: ClusterImage) -> None:
        """
        Delete this broker's replicas of the topics queued for deletion and
        say so in ZooKeeper (Kafka's StopReplica with delete, and its
        answer) -- also when this broker was down when the deletion was
        asked: it deletes them on its return, so the topic never comes
        back from its disk.
        """
        me = self.brokerId
        # Only deletions still pending need remembering.
        self._deletedHere = {(t, i) for t, i in self._deletedHere if t in image.deleting}
        for topic in image.deleting:
            assignment = image.topics.get(topic)
            if assignment is None or (topic, assignment.topicId) in self._deletedHere:
                continue
            if not any(me in replicas for replicas in assignment.partitions.values()):
                continue
            if image.deletedReplicas.get(topic, {}).get(me) != assignment.topicId:
                if not self._deleteLocal(topic):
                    self._retryLater()
                    continue
                path = Z.deletedReplicaPath(topic, me)
                data = Z.encodeDeletedReplica(assignment.topicId)
                try:
                    try:
                        self.zk.create(path, data, makepath=True)
                    except NodeExistsError:
                        self.zk.set(path, data)
                except KazooException as e:
                    log.warn("Cannot tell that the replicas of {topic} are deleted: {e}", topic=topic, e=e)
                    self._retryLater()
                    continue
                log.info("Replicas of topic {topic} ({topicId}) on broker {id} deleted",
                         topic=topic, topicId=Z.encodeTopicId(assignment.topicId), id=me)
            self._deletedHere.add((topic, assignment.topicId))

    def _applyConfigs(self, image: ClusterImage, topics) -> None:
        """
        Bring the local logs' overrides of hosted topics to ZooKeeper's.
        """
        logManager = self.logManager
        if logManager is None:
            return
        local = logManager.topics()
        for name in topics:
            info = local.get(name)
            wanted = image.configs.get(name, {})
            if info is None or name in INTERNAL_TOPICS:
                continue
            current = {k: str(v) for k, v in info.configs.items()}
            if current == wanted:
                continue
            changes = [(k, "DELETE", None) for k in current if k not in wanted]
            changes += [(k, "SET", v) for k, v in wanted.items() if current.get(k) != v]
            try:
                logManager.alterTopicConfigs(name, changes)
            except KafkaError as e:
                log.warn("Topic {topic}: the cluster's configs {configs} do not apply here: {e}",
                         topic=name, configs=wanted, e=e)

    def _ensureLocalLog(self, image: ClusterImage, name: str) -> bool:
        logManager = self.logManager
        if logManager is None:
            return True
        assignment = image.topics[name]
        count = max(assignment.partitions) + 1
        local = logManager.topics().get(name)
        try:
            if local is not None and local.topicId != assignment.topicId and name not in INTERNAL_TOPICS:
                # The name was deleted and created again while this broker
                # was away: the old replica is another topic's.
                log.info("Local topic {topic} ({old}) is not the cluster's ({new}): replaced",
                         topic=name, old=str(local.topicId), new=str(assignment.topicId))
                logManager.deleteTopic(name)
                local = None
            if local is None:
                logManager.createTopic(name, count, image.configs.get(name, {}), topicId=assignment.topicId)
            elif local.numPartitions < count:
                logManager.createPartitions(name, count)
        except KafkaError as e:
            if e.code != ErrorCode.topic_already_exists:
                log.warn("Cannot host {topic} here: {e}", topic=name, e=e)
                return False
        except OSError as e:
            log.warn("Cannot host {topic} here: {e}", topic=name, e=e)
            return False
        return True

    def _deleteLocal(self, name: str) -> bool:
        """
        @return: whether this broker holds no replica of C{name} any more
            (C{False} once the cluster stops: its logs are not touched).
        """
        if self.logManager is None or name in INTERNAL_TOPICS:
            return True
        with self._localWork:
            if self._stopping:
                return False
            return self._deleteLocalLogs(name)

    def _deleteLocalLogs(self, name: str) -> bool:
        try:
            self.logManager.deleteTopic(name)
        except KafkaError:
            pass  # the replica manager deleted it already
        except OSError as e:
            log.warn("Deleting the local replicas of {topic} failed: {e}", topic=name, e=e)
            return False
        return True

    def _removeStrays(self) -> None:
        """
        Local topics the cluster no longer has (deleted while this broker
        was down), or no longer has here (reassigned away), are deleted --
        only when ZooKeeper already held this cluster's id, so a broker
        pointed at an empty ZooKeeper keeps its data.
        """
        if self.logManager is None or not self._clusterIdWasStored:
            return
        with self._localWork:
            if not self._stopping:
                self._removeStrayLogs()

    def _removeStrayLogs(self) -> None:
        me = self.brokerId
        for name in list(self.logManager.topics()):
            if name in INTERNAL_TOPICS:
                continue
            assignment = self._topics.get(name)
            if name in self._unreadable:
                continue
            if assignment is None:
                log.info("Local topic {topic} is not in the cluster any more: deleted", topic=name)
                self._deleteLocal(name)
            elif not any(me in replicas for replicas in assignment.partitions.values()):
                log.info("Local topic {topic} has no replica here any more: deleted", topic=name)
                self._deleteLocal(name)
            else:
                self._emptyStrayPartitions(name, assignment)

    def _emptyStrayPartitions(self, name: str, assignment) -> None:
        """
        Partitions of a topic still hosted here that were reassigned away
        while this broker was down: their data goes (as a replica removed
        while it was up, L{IReplicaManager.stopReplica} with delete).
        """
        me = self.brokerId
        for partition, replicas in sorted(assignment.partitions.items()):
            if me in replicas:
                continue
            local = self.logManager.getLog(name, partition)
            if local is None or local.logEndOffset == 0:
                continue
            log.info("Local partition {topic}-{partition} has no replica here any more: emptied",
                     topic=name, partition=partition)
            try:
                local.truncateFullyAndStartAt(0)
            except (KafkaError, OSError) as e:
                log.warn("Could not empty {topic}-{partition}: {e}", topic=name, partition=partition, e=e)
