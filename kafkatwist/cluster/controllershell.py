"""
The controller shell (owner thread): becoming and resigning controller, settling the
cluster through the L{ControllerMachine<kafkatwist.cluster.controller.ControllerMachine>}
and performing its effects as conditional ZooKeeper writes, publishing the
L{ClusterImage<kafkatwist.cluster.image.ClusterImage>}.

A part of L{ClusterService<kafkatwist.cluster.service.ClusterService>}, which
combines the parts; they share its state (see its C{__init__}).
"""

from __future__ import annotations

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from twisted.logger import Logger

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.controller import deletionWaitsFor
from kafkatwist.cluster.effects import (
    CompleteReassignment,
    DeleteTopic,
    Respond,
    SetTimer,
    WriteAssignment,
    WriteState,
)
from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.util.clock import nowMs as _nowMs

log = Logger()


class ControllerShell:
    def _pruneZkReassignment(self, remove) -> None:
        try:
            data, stat = self.zk.get(Z.REASSIGN_PARTITIONS)
            entries = Z.decodeReassignment(data)
        except NoNodeError:
            return
        except (KazooException, Z.ZkDataError) as e:
            log.warn("Cannot read {path}: {e}", path=Z.REASSIGN_PARTITIONS, e=e)
            return
        kept = [e for e in entries if not remove(*e)]
        if len(kept) == len(entries) or self._epochZkVersion is None:
            return
        transaction = self._fenced()
        if kept:
            transaction.set_data(Z.REASSIGN_PARTITIONS, Z.encodeReassignment(kept), version=stat.version)
        else:
            transaction.delete(Z.REASSIGN_PARTITIONS, version=stat.version)
        try:
            self._commit(transaction, Z.REASSIGN_PARTITIONS)
        except KazooException as e:
            log.warn("Cannot update {path}: {e}", path=Z.REASSIGN_PARTITIONS, e=e)

    def _readController(self) -> None:
        found = self._get(Z.CONTROLLER)
        if found is None:
            if self._stopping:
                return
            try:
                self.zk.create(Z.CONTROLLER, Z.encodeController(self.brokerId), ephemeral=True)
            except NodeExistsError:
                found = self._get(Z.CONTROLLER)
                if found is None:
                    return
            else:
                self._controllerId = self.brokerId
                self._becomeController()
                return
        data, stat = found
        try:
            controllerId = Z.decodeController(data)
        except Z.ZkDataError as e:
            log.warn("Unreadable controller znode: {e}", e=e)
            return
        self._controllerId = controllerId
        if controllerId == self.brokerId and stat.ephemeralOwner == self.zk.client_id[0]:
            if not self.controller.active:
                self._becomeController()
        elif self.controller.active:
            self._resign()

    def _becomeController(self) -> None:
        """
        Bump C{/controller_epoch} (conditionally: two would-be controllers
        cannot both); its new version fences every later write.
        """
        while True:
            try:
                data, stat = self.zk.get(Z.CONTROLLER_EPOCH)
                epoch = Z.decodeControllerEpoch(data) + 1
                newStat = self.zk.set(Z.CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
                break
            except NoNodeError:
                try:
                    self.zk.create(Z.CONTROLLER_EPOCH, b"1")
                    epoch, newStat = 1, self.zk.exists(Z.CONTROLLER_EPOCH)
                    break
                except NodeExistsError:
                    continue
            except BadVersionError:
                log.warn("Controller epoch moved under broker {id}: another controller", id=self.brokerId)
                self._controllerId = -1
                return
        self._epochZkVersion = newStat.version
        # Everything read afresh, in case a watch was missed while another
        # broker was controller.
        self._readBrokers()
        self._readTopics(all=True)
        self._readDeletions()
        self._readShutdowns()
        self._publish()
        self._perform(self.controller.activate(_nowMs(), epoch, self.image))
        self._readIsrChanges()
        self._readZkReassignment()

    def _resign(self) -> None:
        self._perform(self.controller.resign(_nowMs()))
        self._epochZkVersion = None
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _publish(self) -> ClusterImage:
        self._serial += 1
        self.image = ClusterImage(
            brokers=freeze(self._brokers),
            controllerId=self._controllerId if self._controllerId in self._brokers else -1,
            topics=freeze(self._topics),
            states=freeze(self._states),
            configs=freeze(self._configs),
            deleting=frozenset(self._deleting),
            shuttingDown=frozenset(self._shuttingDown),
            deletedReplicas=freeze({t: freeze(d) for t, d in self._deletedReplicas.items()}),
            clusterId=self._clusterId,
            brokerEpochs=freeze({b: e for b, e in self._brokerEpochs.items() if b in self._brokers}),
            serial=self._serial,
        )
        return self.image

    def _settle(self) -> None:
        """
        Publish the view, bring local replicas in line with it, and, on
        the controller, perform what the state machine asks; again while
        its writes change the view.
        """
        for _ in range(10):
            image = self._publish()
            self._applyLocal(image)
            if not self.controller.active:
                break
            if not self._perform(self.controller.reconcile(_nowMs(), image)):
                break
        image = self.image
        if self.controller.active:
            self._logDeletionWaits(image)
        for entry in list(self._waits):
            try:
                satisfied = entry[0](image)
            except Exception:
                log.failure("cluster wait predicate failed")
                satisfied = True
            if satisfied:
                self._waits.remove(entry)
                entry[2].cancel()
                entry[1](True)

    def _logDeletionWaits(self, image: ClusterImage) -> None:
        waits = {topic: deletionWaitsFor(topic, image) for topic in image.deleting}
        for topic, brokers in sorted(waits.items()):
            if brokers and self._deletionWaits.get(topic) != brokers:
                down = sorted(brokers - image.live())
                log.info("Deletion of topic {topic} waits for brokers {brokers} to delete their replicas"
                         "{down}", topic=topic, brokers=sorted(brokers),
                         down=f" ({down} not alive: when they return)" if down else "")
        self._deletionWaits = {t: b for t, b in waits.items() if b}

    def _retryLater(self) -> None:
        """
        A controller write (or a broker's word that it deleted replicas)
        failed on ZooKeeper itself (connection loss, not a lost race):
        settle again shortly, since no watch may fire to bring it back.
        """
        if self._retry is None:
            self._retry = self.owner.callLater(1.0, self._retryNow)

    def _retryNow(self) -> None:
        self._retry = None
        if not self._stopping:
            self._settle()

    def _perform(self, effects) -> bool:
        """
        @return: whether ZooKeeper was written (the view changed).
        """
        wrote = False
        for effect in effects:
            kind = type(effect)
            if kind is WriteState:
                wrote = self._writeState(effect) or wrote
            elif kind is WriteAssignment:
                wrote = self._writeAssignment(effect) or wrote
            elif kind is CompleteReassignment:
                wrote = self._completeReassignment(effect) or wrote
            elif kind is DeleteTopic:
                wrote = self._deleteTopicZnodes(effect.topic) or wrote
            elif kind is Respond:
                try:
                    effect.replyTo(effect.result)
                except Exception:
                    log.failure("answering {r} failed", r=effect.replyTo)
            elif kind is SetTimer:
                old = self._timers.pop(effect.key, None)
                if old is not None:
                    old.cancel()
                self._timers[effect.key] = self.owner.callLater(
                    effect.delayMs / 1000.0, self._timerFired, effect.key
                )
            else:
                raise TypeError(f"unknown effect {effect!r}")
        return wrote

    def _timerFired(self, key) -> None:
        self._timers.pop(key, None)
        self._perform(self.controller.timerFired(_nowMs(), key, self.image))
        self._settle()

    def _fenced(self):
        """
        A ZooKeeper transaction that commits only while this broker's
        controller epoch is current.
        """
        transaction = self.zk.transaction()
        transaction.check(Z.CONTROLLER_EPOCH, self._epochZkVersion)
        return transaction

    def _commit(self, transaction, what: str) -> bool | None:
        """
        @return: C{True} committed, C{False} an operation failed (stale
            state), C{None} fenced (this broker was deposed: it resigned).
        """
        results = transaction.commit()
        if results and isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            log.warn("Controller {id} was deposed while writing {what}", id=self.brokerId, what=what)
            self._resign()
            self._readController()
            return None
        return not any(isinstance(r, Exception) for r in results)

    def _writeState(self, effect: WriteState) -> bool:
        topic, partition, state = effect.topic, effect.partition, effect.state
        path = Z.statePath(topic, partition)
        if self._epochZkVersion is None:
            return False
        try:
            if effect.expectedVersion < 0:
                self.zk.ensure_path(Z.partitionPath(topic, partition))
                transaction = self._fenced()
                transaction.create(path, Z.encodeState(state))
            else:
                transaction = self._fenced()
                transaction.set_data(path, Z.encodeState(state), version=effect.expectedVersion)
            committed = self._commit(transaction, path)
        except KazooException as e:
            log.warn("Writing {path} failed: {e}; trying again in a second", path=path, e=e)
            self._retryLater()
            return False
        if committed is None:
            return False
        if not committed:
            self._lostRace = True
            self._readState(topic, partition)
            return True
        if effect.unclean:
            self.uncleanLeaderElections += 1
        log.info(
            "Partition {topic}-{partition}: leader {leader}, leader epoch {epoch}, ISR {isr} ({why})",
            topic=topic, partition=partition, leader=state.leader, epoch=state.leaderEpoch,
            isr=list(state.isr), why=effect.why,
        )
        self._readState(topic, partition)
        return True

    def _writeTopic(self, topic: str, changes: dict, expectedVersion: int, states=()) -> bool | None:
        """
        Write some partitions' replicas (C{changes}: partition ->
        (replicas, adding, removing)) into the topic's znode over
        C{expectedVersion}, with partitions' states in the same
        transaction: C{states} holds C{(partition, PartitionState,
        version)}s.

        @return: as L{_commit}, C{None} also when ZooKeeper failed.
        """
        current = self._topics.get(topic)
        if current is None or self._epochZkVersion is None:
            return False
        partitions, adding, removing = dict(current.partitions), dict(current.adding), dict(current.removing)
        for partition, (replicas, add, remove) in changes.items():
            partitions[partition], adding[partition], removing[partition] = replicas, add, remove
        transaction = self._fenced()
        transaction.set_data(Z.topicPath(topic), Z.encodeTopic(current.topicId, partitions, adding, removing),
                             version=expectedVersion)
        for partition, new, version in states:
            transaction.set_data(Z.statePath(topic, partition), Z.encodeState(new), version=version)
        try:
            committed = self._commit(transaction, Z.topicPath(topic))
        except KazooException as e:
            log.warn("Writing {path} failed: {e}; trying again in a second", path=Z.topicPath(topic), e=e)
            self._retryLater()
            committed = None
        if not committed:
            self._lostRace = True
        if committed is not None:
            self._readTopic(topic)
            for partition, _, _ in states:
                self._readState(topic, partition)
        return committed

    def _writeAssignment(self, effect: WriteAssignment) -> bool:
        committed = self._writeTopic(effect.topic, effect.partitions, effect.expectedVersion,
                                     [(w.partition, w.state, w.expectedVersion) for w in effect.states])
        if committed:
            for partition, (replicas, adding, removing) in sorted(effect.partitions.items()):
                log.info("Partition {topic}-{partition}: replicas {replicas} (adding {adding}, removing "
                         "{removing})", topic=effect.topic, partition=partition, replicas=list(replicas),
                         adding=list(adding), removing=list(removing))
            for w in effect.states:
                log.info("Partition {topic}-{partition}: leader {leader}, leader epoch {epoch}, ISR {isr} "
                         "({why})", topic=w.topic, partition=w.partition, leader=w.state.leader,
                         epoch=w.state.leaderEpoch, isr=list(w.state.isr), why=w.why)
        return committed is not None

    def _completeReassignment(self, effect: CompleteReassignment) -> bool:
        topic, partition, state = effect.topic, effect.partition, effect.state
        committed = self._writeTopic(topic, {partition: (effect.replicas, (), ())}, effect.topicVersion,
                                     [(partition, state, effect.stateVersion)])
        if committed:
            log.info("Partition {topic}-{partition}: reassigned to {replicas}, leader {leader}, leader epoch "
                     "{epoch}, ISR {isr}", topic=topic, partition=partition, replicas=list(effect.replicas),
                     leader=state.leader, epoch=state.leaderEpoch, isr=list(state.isr))
            self._pruneZkReassignment(
                lambda t, p, replicas: (t, p) == (topic, partition) and tuple(replicas) == tuple(effect.replicas)
            )
        return committed is not None

    def _deleteTopicZnodes(self, name: str) -> bool:
        paths = []
        try:
            for partition in self.zk.get_children(Z.partitionsPath(name)):
                base = f"{Z.partitionsPath(name)}/{partition}"
                paths.extend(f"{base}/{c}" for c in self.zk.get_children(base))
                paths.append(base)
            paths.append(Z.partitionsPath(name))
        except NoNodeError:
            pass
        if self.zk.exists(Z.topicPath(name)) is not None:
            paths.append(Z.topicPath(name))
        if self.zk.exists(Z.topicConfigPath(name)) is not None:
            paths.append(Z.topicConfigPath(name))
        try:
            done = Z.deletedReplicasPath(name)
            paths.extend(f"{done}/{c}" for c in self.zk.get_children(done))
            paths.append(done)
        except NoNodeError:
            pass
        paths.append(Z.deleteTopicPath(name))
        transaction = self._fenced()
        for path in paths:
            transaction.delete(path)
        try:
            committed = self._commit(transaction, f"the deletion of {name}")
        except (KazooException, NotEmptyError) as e:
            log.warn("Deleting topic {topic} failed: {e}; trying again in a second", topic=name, e=e)
            self._retryLater()
            return False
        if committed:
            log.info("Topic {topic} deleted from ZooKeeper", topic=name)
        self._readTopics()
        self._readDeletions()
        return committed is not None
