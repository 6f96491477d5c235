"""
The writes admin requests and the leader make (called from any thread; the work
runs on the owner thread and answers through C{onDone}): topics, partitions,
configs, deletions, elections, reassignments, the ISR (L{IAlterIsr}) and
unclean election.

A part of L{ClusterService<kafkatwist.cluster.service.ClusterService>}, which
combines the parts; they share its state (see its C{__init__}).
"""

from __future__ import annotations

import uuid

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from twisted.logger import Logger

from kafkatwist.cluster import zkdata as Z
from kafkatwist.util.clock import nowMs as _nowMs
from kafkatwist.errors import ErrorCode, KafkaError

log = Logger()


class AdminWrites:
    def alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                 brokerEpochs=None):
        """
        L{IAlterIsr}: C{brokerEpochs} gives each replica added the broker
        epoch its fetches were made under (Kafka's NewIsrWithEpochs,
        KIP-903; one missing or -1 is not known).
        """
        self.owner.submit(self._alterIsr, topic, partition, leaderId, leaderEpoch, tuple(newIsr),
                          partitionEpoch, onDone, dict(brokerEpochs or {}))

    def _alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                  brokerEpochs=None):
        # Every way out answers: a ZooKeeper error anywhere (the re-reads
        # after a stale version too) is REQUEST_TIMED_OUT, whose outcome the
        # leader treats as unknown and asks again; unanswered, its ISR
        # change would stay pending for the rest of its epoch.
        answered = []

        def answer(version, error):
            answered.append(True)
            onDone(version, error)

        try:
            self._writeIsr(topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, answer,
                           brokerEpochs)
        except KazooException as e:
            if not answered:
                onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))

    def _writeIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                  brokerEpochs=None):
        current = self._states.get((topic, partition))
        if current is not None and current.zkVersion != partitionEpoch:
            # Kafka's order: a stale partition epoch first (read again: this
            # broker's copy may be the stale one).
            self._readState(topic, partition)
            current = self._states.get((topic, partition))
            if current is None or current.zkVersion != partitionEpoch:
                self._settle()
                onDone(None, KafkaError(ErrorCode.invalid_update_version,
                                        f"the state of {topic}-{partition} changed under the ISR update"))
                return
        added = set(newIsr) - set(current.isr if current is not None else ())
        ineligible = sorted(b for b in added if b not in self._brokers or b in self._shuttingDown)
        if not ineligible:
            try:
                ineligible = self._staleRegistrations(added, brokerEpochs or {})
                if not ineligible and current is not None:
                    ineligible = self._restartedMembers(current, set(newIsr) - added - {leaderId})
            except KazooException as e:
                onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
                return
        if ineligible:
            # A dead broker, or one being shut down (its leaders are moving
            # away): the controller would only take it out again; or one
            # whose fetches were made by another registration of it than
            # its current one (Kafka's INELIGIBLE_REPLICA).
            onDone(None, KafkaError(ErrorCode.ineligible_replica,
                                    f"brokers {ineligible} cannot join the ISR of {topic}-{partition}"))
            return
        controllerEpoch = current.controllerEpoch if current is not None else 0
        # The leader's broker epoch stays the one its election named.
        leaderBrokerEpoch = current.leaderBrokerEpoch if current is not None else -1
        # Each member's registration as it was added (KIP-903), so any
        # controller tells a member that registered again since, even if
        # this write lands after that registration.
        memberEpochs = dict(current.isrBrokerEpochs) if current is not None else {}
        memberEpochs.update((b, (brokerEpochs or {}).get(b, -1)) for b in added)
        isrBrokerEpochs = tuple(sorted((b, e) for b, e in memberEpochs.items() if b in newIsr and e >= 0))
        state = Z.PartitionState(leaderId, leaderEpoch, newIsr, controllerEpoch,
                                 leaderBrokerEpoch=leaderBrokerEpoch, isrBrokerEpochs=isrBrokerEpochs)
        try:
            stat = self.zk.set(Z.statePath(topic, partition), Z.encodeState(state), version=partitionEpoch)
        except (BadVersionError, NoNodeError):
            self._readState(topic, partition)
            self._settle()
            onDone(None, KafkaError(ErrorCode.invalid_update_version,
                                    f"the state of {topic}-{partition} changed under the ISR update"))
            return
        except KazooException as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        self._states[(topic, partition)] = Z.PartitionState(
            leaderId, leaderEpoch, newIsr, controllerEpoch, stat.version, stat.mzxid, leaderBrokerEpoch,
            isrBrokerEpochs,
        )
        self._applied[(topic, partition)] = (leaderEpoch, leaderId, stat.version)
        try:
            self.zk.create(Z.ISR_CHANGE_PREFIX, Z.encodeIsrChange([(topic, partition)]), sequence=True)
        except KazooException:
            pass  # the controller reads states by watch; the notification is for Kafka's tools
        log.info("ISR of {topic}-{partition} is now {isr} (leader {leader}, epoch {epoch})",
                 topic=topic, partition=partition, isr=list(newIsr), leader=leaderId, epoch=leaderEpoch)
        self._settle()
        onDone(stat.version, None)

    def _restartedMembers(self, current, staying) -> list[int]:
        """
        The members that stay in the ISR but registered again since the
        state named them (their recorded broker epoch is not their current
        registration, or, none recorded, they registered after the state's
        last write): a restart the controller has not taken out of the ISR
        yet.  The leader's write must not hide it -- the state's newer
        write would make the restarted member, possibly with a cut log,
        look like the one the ISR named.  Read from ZooKeeper itself.
        """
        recorded = dict(current.isrBrokerEpochs)
        restarted = []
        for b in sorted(staying):
            stat = self.zk.exists(Z.brokerPath(b))
            if stat is None:
                continue  # not registered: it is seen when it registers again
            epoch = recorded.get(b, -1)
            if (stat.czxid != epoch) if epoch >= 0 else (0 < current.mzxid < stat.czxid):
                restarted.append(b)
        if restarted:
            log.info("Not writing an ISR that keeps brokers {brokers}: they registered again since "
                     "the ISR named them, and the controller takes them out first", brokers=restarted)
        return restarted

    def _staleRegistrations(self, added, brokerEpochs: dict) -> list[int]:
        """
        The replicas to be added whose broker epoch is not their current
        registration's (KIP-903): what the leader knows of them was fetched
        by a broker that restarted since -- it may have lost its log's
        tail.  One whose epoch is not known (-1) is not checked.  The registration
        is read from ZooKeeper itself: this broker's image of it may be
        behind.
        """
        stale = []
        for b in sorted(added):
            epoch = brokerEpochs.get(b, -1)
            if epoch < 0:
                # Not said (a fetch by name, Fetch v11): accepted, as Kafka
                # accepts -1 from brokers that do not send it.
                continue
            stat = self.zk.exists(Z.brokerPath(b))
            if stat is None or stat.czxid != epoch:
                stale.append(b)
        if stale:
            log.info("Not adding brokers {brokers} to an ISR: their fetches were made under broker "
                     "epochs {epochs}, not their current registrations", brokers=stale,
                     epochs=[brokerEpochs.get(b, -1) for b in stale])
        return stale

    def createTopic(self, name: str, assignment: dict, configs: dict, onDone, topicId=None) -> None:
        """
        Write a topic's configs and assignment (Kafka's
        C{AdminZkClient.createTopicWithAssignment}); the controller elects
        its leaders.  C{onDone(topicId or None, KafkaError or None)}.
        """
        self.owner.submit(self._createTopic, name, assignment, configs, topicId or uuid.uuid4(), onDone)

    def _createTopic(self, name, assignment, configs, topicId, onDone):
        try:
            if self.zk.exists(Z.deleteTopicPath(name)) is not None:
                # Kafka's AdminZkClient.validateTopicCreate: until every
                # replica of the old topic is deleted.
                onDone(None, KafkaError(ErrorCode.topic_already_exists,
                                        f"Topic '{name}' is marked for deletion."))
                return
            if self.zk.exists(Z.topicPath(name)) is not None:
                raise NodeExistsError()
            self.zk.ensure_path(Z.CONFIG_TOPICS)
            self.zk.set(Z.topicConfigPath(name), Z.encodeTopicConfig(configs)) if self.zk.exists(
                Z.topicConfigPath(name)) else self.zk.create(Z.topicConfigPath(name), Z.encodeTopicConfig(configs))
            self.zk.create(Z.topicPath(name), Z.encodeTopic(topicId, assignment))
        except NodeExistsError:
            onDone(None, KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists."))
            return
        except KazooException as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        log.info("Topic {topic} ({topicId}) created in ZooKeeper: {assignment}",
                 topic=name, topicId=str(topicId), assignment=assignment)
        self._readTopics()
        self._settle()
        onDone(topicId, None)

    def setTopicConfigs(self, name: str, configs: dict, onDone) -> None:
        """
        Replace a topic's overrides in C{/config/topics/<name>} and announce
        the change under C{/config/changes} (Kafka's layout); brokers
        hosting a replica apply it.  C{onDone(None, KafkaError or None)}.
        """
        self.owner.submit(self._setTopicConfigs, name, dict(configs), onDone)

    def _writeEntityConfig(self, path: str, entityType: str, name: str, configs: dict) -> None:
        data = Z.encodeTopicConfig(configs)
        if self.zk.exists(path) is None:
            self.zk.create(path, data, makepath=True)
        else:
            self.zk.set(path, data)
        self.zk.create(Z.CONFIG_CHANGE_PREFIX, Z.encodeConfigChange(entityType, name), sequence=True,
                       makepath=True)
        self._purgeChangeNotifications(_nowMs())

    def _purgeChangeNotifications(self, nowMs: int) -> None:
        """
        Delete the C{/config/changes} notifications older than Kafka's 15
        minutes (its C{ZkNodeChangeNotificationListener} purges them so;
        here the writer of a new one does): every broker watches the
        configs themselves, and Kafka's brokers have read them by then.
        """
        parent = Z.CONFIG_CHANGE_PREFIX.rsplit("/", 1)[0]
        try:
            children = self.zk.get_children(parent)
        except NoNodeError:
            return
        for child in sorted(children):
            path = f"{parent}/{child}"
            stat = self.zk.exists(path)
            if stat is None or stat.ctime + Z.CONFIG_CHANGE_EXPIRATION_MS >= nowMs:
                continue
            try:
                self.zk.delete(path)
            except NoNodeError:
                pass  # another broker purged it

    def _setTopicConfigs(self, name, configs, onDone):
        try:
            if self.zk.exists(Z.topicPath(name)) is None:
                raise NoNodeError()
            self._writeEntityConfig(Z.topicConfigPath(name), "topics", name, configs)
        except NoNodeError:
            onDone(None, KafkaError(ErrorCode.unknown_topic_or_partition,
                                    "This server does not host this topic-partition."))
            return
        except KazooException as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        log.info("Topic {topic} configs set in ZooKeeper: {configs}", topic=name, configs=configs)
        self._readConfig(name)
        self._settle()
        onDone(None, None)

    def setBrokerConfigs(self, perBroker: bool, configs: dict, onDone) -> None:
        """
        Replace a dynamic broker config layer -- this broker's
        C{/config/brokers/<id>} or the cluster default's
        C{/config/brokers/<default>} -- and announce it under
        C{/config/changes} (Kafka's layout); every broker it concerns reads
        it (L{_readBrokerConfigs}).  C{onDone(None, KafkaError or None)}.
        """
        self.owner.submit(self._setBrokerConfigs, perBroker, dict(configs), onDone)

    def _setBrokerConfigs(self, perBroker, configs, onDone):
        entity = str(self.brokerId) if perBroker else Z.DEFAULT_BROKER_ENTITY
        # Answered whatever happens: the broker's next config change waits
        # for this answer.
        error = KafkaError(ErrorCode.unknown_server_error, "the broker config write failed")
        try:
            self._writeEntityConfig(Z.brokerConfigPath(entity), "brokers", entity, configs)
            error = None
        except KazooException as e:
            error = KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}")
        finally:
            onDone(None, error)

    def addPartitions(self, name: str, assignment: dict, onDone) -> None:
        """
        Grow a topic (CreatePartitions): C{assignment} holds the new
        partitions' replicas.  C{onDone(None, KafkaError or None)}.
        """
        self.owner.submit(self._addPartitions, name, assignment, onDone)

    def _addPartitions(self, name, added, onDone):
        try:
            data, stat = self.zk.get(Z.topicPath(name))
            current = Z.decodeTopic(name, data)
            if current.adding or current.removing:
                raise KafkaError(ErrorCode.reassignment_in_progress, "A partition reassignment is in progress.")
            merged = dict(current.partitions)
            if set(added) & set(merged):
                raise KafkaError(ErrorCode.invalid_partitions, "partitions exist already")
            merged.update(added)
            self.zk.set(Z.topicPath(name), Z.encodeTopic(current.topicId, merged), version=stat.version)
        except NoNodeError:
            onDone(None, KafkaError(ErrorCode.unknown_topic_or_partition,
                                    "This server does not host this topic-partition."))
            return
        except BadVersionError:
            onDone(None, KafkaError(ErrorCode.reassignment_in_progress, "The topic changed meanwhile."))
            return
        except KafkaError as e:
            onDone(None, e)
            return
        except (KazooException, Z.ZkDataError) as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        self._readTopic(name)
        self._settle()
        onDone(None, None)

    def deleteTopic(self, name: str, onDone) -> None:
        """
        Queue a topic for deletion (C{/admin/delete_topics/<name>}); the
        controller removes it, every broker then deletes its replicas.
        """
        self.owner.submit(self._deleteTopic, name, onDone)

    def _deleteTopic(self, name, onDone):
        try:
            self.zk.create(Z.deleteTopicPath(name), b"", makepath=True)
        except NodeExistsError:
            pass
        except KazooException as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        self._readDeletions()
        self._settle()
        onDone(None, None)

    def electLeaders(self, electionType: int, partitions, onDone) -> None:
        """
        ElectLeaders on the controller: C{onDone(results)} with per
        partition (topic, partition, ErrorCode, message), or
        C{onDone(ErrorCode.not_controller)}.
        """
        self.owner.submit(self._electLeaders, electionType, partitions, onDone)

    def _electLeaders(self, electionType, partitions, onDone):
        self._perform(self.controller.electLeaders(_nowMs(), onDone, electionType, partitions, self.image))
        self._settle()

    def alterReassignments(self, requests, onDone) -> None:
        """
        AlterPartitionReassignments on the controller: C{requests} is
        C{[(topic, partition, replicas or None)]}; C{onDone(results)} with
        per partition (topic, partition, ErrorCode, message), or
        C{onDone(ErrorCode.not_controller)}.
        """
        self.owner.submit(self._alterReassignments, list(requests), onDone)

    def _alterReassignments(self, requests, onDone, fromZooKeeper: bool = False):
        for _ in range(5):
            answers = []
            self._lostRace = False
            self._perform(self.controller.alterReassignments(_nowMs(), answers.append, requests, self._publish()))
            if not self._lostRace:
                break
        else:
            answers = [[(t, p, ErrorCode.request_timed_out, "The topic changed meanwhile; try again.")
                        for t, p, _ in requests]]
        result = answers[0]
        if not isinstance(result, ErrorCode):
            # The latest reassignment wins over one asked in ZooKeeper
            # (Kafka's maybeRemoveFromZkReassignment); one from there that
            # cannot start is taken out of it.
            if fromZooKeeper:
                failed = {(t, p) for t, p, code, _ in result if code != ErrorCode.none}
                self._pruneZkReassignment(lambda t, p, replicas: (t, p) in failed or self._reassigned(t, p, replicas))
            else:
                started = {(t, p) for t, p, code, _ in result if code == ErrorCode.none}
                self._pruneZkReassignment(lambda t, p, replicas: (t, p) in started)
        self._settle()
        onDone(result)

    def _reassigned(self, topic: str, partition: int, replicas) -> bool:
        assignment = self._topics.get(topic)
        return (assignment is not None and not assignment.adding.get(partition)
                and not assignment.removing.get(partition)
                and assignment.partitions.get(partition) == tuple(replicas))

    def setUncleanElection(self, enabled: bool) -> None:
        """
        The broker-level C{unclean.leader.election.enable} changed (a
        dynamic config): the controller uses it from its next decision.
        Any thread.
        """
        if not self._started:
            self.controller.unclean = enabled
            return
        self.owner.submit(self._setUnclean, enabled)

    def _setUnclean(self, enabled: bool) -> None:
        self.controller.unclean = enabled
        self._settle()
