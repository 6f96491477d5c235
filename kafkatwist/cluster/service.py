"""
The cluster service: this broker's ZooKeeper session, its registration,
its view of the cluster (published as L{ClusterImage}s), the controller
shell when this broker is the controller, and what the replica manager is
told.

How brokers learn leadership: from ZooKeeper watches, not from the
controller's LeaderAndIsr/UpdateMetadata/StopReplica requests (see the
README, "Cluster").  Every broker watches the broker registrations, the
topic assignments and every partition's state znode; when a state it
hosts changes leader epoch it calls the replica manager's C{becomeLeader}
or C{becomeFollower}.  The controller is the only writer of leaders (a
leader writes its own ISR, conditionally, through L{IAlterIsr}).  A state
written before this broker's registration (its broker epoch, the czxid of
C{/brokers/ids/<id>}) names a previous life of it: it does not lead on
such a state (L{ClusterService._mayLead}), and the controller fails such
a broker first -- out of the ISR, its leaderships moved in a new leader
epoch -- before it counts as a new broker (see docs/crash-restart.md).

Threads: everything here runs on the cluster owner thread
(L{kafkatwist.util.owner.OwnerThread}, C{kafkatwist-cluster}) except
the public methods, which hand work to it, and L{image}, which any thread
reads.
"""

from __future__ import annotations

import random
import threading
import time
import uuid

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.protocol.states import KazooState
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.controller import ControllerMachine, deletionWaitsFor
from kafkatwist.cluster.effects import (
    CompleteReassignment,
    DeleteTopic,
    Respond,
    SetTimer,
    WriteAssignment,
    WriteState,
)
from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.util.owner import OwnerThread
from kafkatwist.cluster.placement import assignReplicasToBrokers
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IAlterIsr, IBrokerDirectory
from kafkatwist.util.startup import StartupError
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS

log = Logger()


class ClusterStartError(StartupError):
    """
    The broker cannot join the cluster (ZooKeeper unreachable, its id taken).
    """


def _nowMs() -> int:
    return int(time.time() * 1000)


@implementer(IAlterIsr, IBrokerDirectory)
class ClusterService:
    """
    @param config: the L{kafkatwist.config.BrokerConfig}.
    @param replicaManager: the L{IReplicaManager} told about leadership.
    @param logManager: the broker's L{ILogManager}: replicas this broker
        hosts get a local log (created with the topic's id and configs);
        deleted topics lose theirs.
    """

    def __init__(self, config, advertisedListeners, replicaManager, logManager=None,
                 kazooFactory=KazooClient, owner: OwnerThread | None = None) -> None:
        self.config = config
        self.brokerId = config.nodeId
        self.advertisedListeners = list(advertisedListeners)
        #: this broker's web console URL, registered with its endpoints
        #: (set before L{connect} when C{metrics.http.listener} is)
        self.consoleUrl: str | None = None
        self.replicaManager = replicaManager
        self.logManager = logManager
        self.sessionTimeoutMs = config["zookeeper.session.timeout.ms"]
        self._kazooFactory = kazooFactory
        self.zk = kazooFactory(
            hosts=config["zookeeper.connect"], timeout=self.sessionTimeoutMs / 1000.0,
        )
        self.owner = owner or OwnerThread()
        self.owner.onError = self._ownerFailed
        #: read by any thread; replaced whole by the owner
        self.image = ClusterImage()
        self.controller = ControllerMachine(
            self.brokerId,
            unclean=config["unclean.leader.election.enable"],
            autoRebalance=config["auto.leader.rebalance.enable"],
            rebalanceIntervalMs=config["leader.imbalance.check.interval.seconds"] * 1000,
            imbalancePercentage=config["leader.imbalance.per.broker.percentage"],
        )
        # -- owned by the owner thread --
        self._brokers: dict[int, Z.BrokerInfo] = {}
        #: each live broker's registration's czxid (Kafka's broker epoch)
        self._brokerEpochs: dict[int, int] = {}
        self._topics: dict[str, Z.TopicAssignment] = {}
        self._states: dict[tuple[str, int], Z.PartitionState] = {}
        self._configs: dict[str, dict] = {}
        self._deleting: set[str] = set()
        #: topic queued for deletion -> {broker id: the topic id it deleted}
        self._deletedReplicas: dict[str, dict] = {}
        #: (topic, topic id) whose replicas this broker deleted and said so
        self._deletedHere: set = set()
        #: topics whose znode could not be read: their local data is kept
        self._unreadable: set[str] = set()
        #: set by a controller write that lost a race (the state changed under it)
        self._lostRace = False
        #: topic -> the brokers its deletion was last logged waiting for
        self._deletionWaits: dict[str, frozenset] = {}
        self._shuttingDown: set[int] = set()
        self._controllerId = -1
        self._epochZkVersion: int | None = None
        self._applied: dict[tuple[str, int], tuple[int, int]] = {}
        self._waits: list = []
        self._timers: dict = {}
        self._retry = None
        #: a ZooKeeper call failed on the owner: a watch may be lost, so
        #: everything is read again (L{_catchUp}) once connected
        self._stale = False
        self._catchUpTimer = None
        self._serial = 0
        self._clusterId: str | None = None
        self._clusterIdWasStored = False
        #: this broker's current registration's czxid (its broker epoch)
        self._brokerEpoch = 0
        #: (topic, partition) -> the latest leader epoch in which a state
        #: written before this registration named this broker leader: it
        #: leads only in a later one (L{_mayLead})
        self._staleEpochs: dict[tuple[str, int], int] = {}
        self._stopping = False
        self._started = False
        self._sessionId = None
        #: the dynamic broker configs (cluster default, this broker's) read
        #: by L{connect}, before anything is built from the config
        self.storedBrokerConfigs: tuple[dict, dict] = ({}, {})
        #: called on the owner thread with both layers whenever either znode
        #: is read (L{kafkatwist.config.dynamic.DynamicBrokerConfig.storedChanged})
        self.onBrokerConfigs = None

    # -- start and stop (caller's thread) --------------------------------------------

    def connect(self, localClusterId=None) -> str:
        """
        Check ZooKeeper, create the cluster's persistent paths, and read (or
        first write) the cluster id, with a session of its own that is
        closed again: this runs before twistd daemonizes, and threads (kazoo's,
        the owner) do not survive the fork.  L{start} opens the session
        that lasts.  Blocking: start-up only.

        @param localClusterId: callable giving an id to store when ZooKeeper
            has none yet (this broker's C{meta.properties} one), or
            C{None} for a new one; it must write nothing: the race to
            create C{/cluster/id} decides the id the caller then stores.
        @return: the cluster id.
        @raise ClusterStartError: ZooKeeper cannot be reached.
        """
        self._ensureChroot()
        zk = self._kazooFactory(hosts=self.config["zookeeper.connect"], timeout=self.sessionTimeoutMs / 1000.0)
        self._startSession(zk)
        try:
            for path in Z.PERSISTENT_PATHS:
                zk.ensure_path(path)
            try:
                data, _ = zk.get(Z.CLUSTER_ID)
                self._clusterId = Z.decodeClusterId(data)
                self._clusterIdWasStored = True
            except NoNodeError:
                clusterId = (localClusterId() if localClusterId is not None else None) or _newClusterId()
                try:
                    zk.create(Z.CLUSTER_ID, Z.encodeClusterId(clusterId), makepath=True)
                    self._clusterId = clusterId
                except NodeExistsError:
                    data, _ = zk.get(Z.CLUSTER_ID)
                    self._clusterId = Z.decodeClusterId(data)
                    self._clusterIdWasStored = True
            self.storedBrokerConfigs = tuple(
                self._brokerConfigLayer(entity, lambda path: zk.get(path) if zk.exists(path) else None)
                for entity in (Z.DEFAULT_BROKER_ENTITY, str(self.brokerId))
            )
        except (KazooException, Z.ZkDataError) as e:
            raise ClusterStartError(f"ZooKeeper at {self.config['zookeeper.connect']}: {e}") from None
        finally:
            zk.stop()
            zk.close()
        return self._clusterId

    def _startSession(self, zk) -> None:
        timeout = (self.config["zookeeper.connection.timeout.ms"] or self.sessionTimeoutMs) / 1000.0
        try:
            zk.start(timeout=timeout)
        except Exception as e:
            raise ClusterStartError(
                f"cannot reach ZooKeeper at {self.config['zookeeper.connect']}: {e or type(e).__name__}"
            ) from None

    def _ensureChroot(self) -> None:
        """
        Create C{zookeeper.connect}'s chroot if missing, as Kafka does.
        """
        hosts, slash, chroot = self.config["zookeeper.connect"].partition("/")
        if not slash or not chroot.strip("/"):
            return
        bare = self._kazooFactory(hosts=hosts, timeout=self.sessionTimeoutMs / 1000.0)
        self._startSession(bare)
        try:
            bare.ensure_path("/" + chroot.strip("/"))
        finally:
            bare.stop()
            bare.close()

    def start(self, timeout: float | None = None) -> None:
        """
        Open the broker's ZooKeeper session, register this broker, read the
        cluster, take part in the controller election.  Blocks until the
        first image is published.

        @raise ClusterStartError: ZooKeeper unreachable, or this id held by
            another live session.
        """
        self._startSession(self.zk)
        self.zk.add_listener(self._sessionChanged)
        self._started = True
        self.owner.start()
        wait = timeout if timeout is not None else 1.5 * self.sessionTimeoutMs / 1000.0 + 10
        self.owner.call(self._register, wait, timeout=wait + 5)
        self.owner.call(self._readAll, timeout=wait + 5)

    def controlledShutdown(self, timeout: float) -> bool:
        """
        Kafka's controlled shutdown: ask the controller to move this
        broker's leaders away and wait until it leads nothing another ISR
        member could lead.  Blocking (call it off the reactors).

        @return: whether that was reached in time.
        """
        deadline = time.monotonic() + timeout
        try:
            # Bounded: a request made while ZooKeeper is unreachable waits
            # for a reconnection that may never come.
            self.zk.create_async(Z.controlledShutdownPath(self.brokerId), b"", ephemeral=True,
                                 makepath=True).get(timeout=timeout)
        except NodeExistsError:
            pass
        except (KazooException, self.zk.handler.timeout_exception) as e:
            log.warn("Controlled shutdown of broker {id} could not be requested: {e}", id=self.brokerId,
                     e=str(e) or type(e).__name__)
            return False
        while time.monotonic() < deadline:
            if not self._leadsMovable(self.image):
                log.info("Controlled shutdown of broker {id} complete", id=self.brokerId)
                return True
            time.sleep(0.1)
        log.warn("Controlled shutdown of broker {id} timed out after {s}s", id=self.brokerId, s=timeout)
        return False

    def _leadsMovable(self, image: ClusterImage) -> bool:
        live = image.live()
        for topic, partition, replicas, state in image.partitions():
            if state is not None and state.leader == self.brokerId:
                if any(r != self.brokerId and r in live for r in state.isr):
                    return True
        return False

    def stop(self, timeout: float = 15.0) -> None:
        """
        Leave the cluster: the session closes, so the registration (and the
        controller znode, if this broker held it) vanish at once.  Within
        C{timeout} seconds whatever ZooKeeper does: unreachable, the
        session is left to expire (its threads are daemons).
        """
        self._stopping = True
        if not self._started:
            return
        # A second stop returns at once (the owner thread is gone: a call
        # to it would wait out its timeout).
        self._started = False
        deadline = time.monotonic() + timeout
        try:
            self.owner.call(self._resign, timeout=min(5.0, timeout))
        except Exception:
            pass  # the owner is blocked on ZooKeeper: it is a daemon thread
        self.owner.stop(timeout=max(0.1, min(10.0, deadline - time.monotonic())))
        # kazoo's stop waits for its connection thread (up to the session
        # timeout, then raises): in a thread of its own, bounded here.
        closer = threading.Thread(target=self._closeSession, name="kafkatwist-zookeeper-close", daemon=True)
        closer.start()
        closer.join(max(0.1, deadline - time.monotonic()))
        if closer.is_alive():
            log.warn("ZooKeeper session of broker {id} not closed in time (ZooKeeper unreachable?): "
                     "it expires on its own", id=self.brokerId)

    def _closeSession(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception as e:
            log.warn("Closing the ZooKeeper session of broker {id}: {e}", id=self.brokerId,
                     e=str(e) or type(e).__name__)

    # -- IBrokerDirectory (any thread) ---------------------------------------------------

    def endpoint(self, brokerId, listenerName=None):
        info = self.image.brokers.get(brokerId)
        return info.endpoint(listenerName) if info is not None else None

    def aliveBrokers(self):
        return self.image.live()

    def rack(self, brokerId):
        info = self.image.brokers.get(brokerId)
        return info.rack if info is not None else None

    def eligibleForIsr(self, brokerId) -> bool:
        """
        Whether a leader may add C{brokerId} to an ISR: alive and not being
        shut down (L{alterIsr} refuses others with INELIGIBLE_REPLICA).
        Any thread.
        """
        image = self.image
        return brokerId in image.brokers and brokerId not in image.shuttingDown

    # -- IAlterIsr (any thread) ---------------------------------------------------------

    def alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone):
        self.owner.submit(self._alterIsr, topic, partition, leaderId, leaderEpoch, tuple(newIsr),
                          partitionEpoch, onDone)

    def _alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone):
        current = self._states.get((topic, partition))
        added = set(newIsr) - set(current.isr if current is not None else ())
        ineligible = sorted(b for b in added if b not in self._brokers or b in self._shuttingDown)
        if ineligible:
            # A dead broker, or one being shut down (its leaders are moving
            # away): the controller would only take it out again (Kafka's
            # INELIGIBLE_REPLICA).
            onDone(None, KafkaError(ErrorCode.ineligible_replica,
                                    f"brokers {ineligible} cannot join the ISR of {topic}-{partition}"))
            return
        controllerEpoch = current.controllerEpoch if current is not None else 0
        state = Z.PartitionState(leaderId, leaderEpoch, newIsr, controllerEpoch)
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
            leaderId, leaderEpoch, newIsr, controllerEpoch, stat.version, stat.mzxid
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

    # -- producer ids (any thread; blocking) -----------------------------------------------

    def reserveProducerIdBlock(self, size: int) -> int:
        """
        Reserve the next C{size} producer ids cluster-wide (Kafka's
        C{/latest_producer_id_block}, written conditionally on its version).

        @return: the first id of the block.
        @raise KafkaError: ZooKeeper did not answer.
        """
        return self.owner.call(self._reserveProducerIdBlock, size)

    def reserveProducerIdBlockLater(self, size: int, onDone) -> None:
        """
        L{reserveProducerIdBlock} without waiting: C{onDone(start, None)}
        or C{onDone(None, error)} on the owner thread.
        """
        self.owner.submit(self._reserveProducerIdBlockFor, size, onDone)

    def _reserveProducerIdBlockFor(self, size: int, onDone) -> None:
        try:
            start = self._reserveProducerIdBlock(size)
        except Exception as e:  # handed to the caller (ZooKeeper, a lost session)
            onDone(None, e)
            return
        onDone(start, None)

    def _reserveProducerIdBlock(self, size: int) -> int:
        for _ in range(100):
            try:
                data, stat = self.zk.get(Z.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(Z.PRODUCER_ID_BLOCK, Z.encodeProducerIdBlock(self.brokerId, 0, size))
                    return 0
                except NodeExistsError:
                    continue
            start = Z.decodeProducerIdBlockEnd(data) + 1
            try:
                self.zk.set(Z.PRODUCER_ID_BLOCK, Z.encodeProducerIdBlock(self.brokerId, start, size),
                            version=stat.version)
                return start
            except BadVersionError:
                continue  # another broker took that block
        raise KafkaError(ErrorCode.coordinator_not_available, "no producer id block could be reserved")

    # -- admin (any thread; answers on the owner thread) ---------------------------------

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
        try:
            self._writeEntityConfig(Z.brokerConfigPath(entity), "brokers", entity, configs)
        except KazooException as e:
            onDone(None, KafkaError(ErrorCode.request_timed_out, f"ZooKeeper: {e}"))
            return
        onDone(None, None)

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

    def waitFor(self, predicate, timeout: float, onDone) -> None:
        """
        Call C{onDone(True)} once C{predicate(image)} holds for a published
        image, or C{onDone(False)} after C{timeout} seconds.  On the owner.
        """
        self.owner.submit(self._waitFor, predicate, timeout, onDone)

    def _waitFor(self, predicate, timeout, onDone):
        if predicate(self.image):
            onDone(True)
            return
        entry = [predicate, onDone, None]
        entry[2] = self.owner.callLater(timeout, self._waitExpired, entry)
        self._waits.append(entry)

    def _waitExpired(self, entry):
        if entry in self._waits:
            self._waits.remove(entry)
            entry[1](False)

    # -- session (kazoo threads hand over) --------------------------------------------------

    def _sessionChanged(self, state) -> None:
        # On a kazoo thread: only hand over.
        if state == KazooState.LOST:
            self.owner.submit(self._sessionLost)
        elif state == KazooState.CONNECTED:
            self.owner.submit(self._sessionConnected)

    def _sessionLost(self):
        if self._stopping:
            return
        log.warn("ZooKeeper session of broker {id} expired", id=self.brokerId)
        self._resign()

    def _sessionConnected(self):
        if self._stopping:
            return
        sessionId = self.zk.client_id[0] if self.zk.client_id else None
        if sessionId == self._sessionId and not self._stale:
            return  # reconnected within the session: watches and znodes are still there
        self._catchUp()

    def _ownerFailed(self, f, e) -> bool:
        """
        A ZooKeeper call on the owner failed (the connection dropped, the
        session expired): one line, and everything is read again once
        connected -- the read that failed may have been the one to set a
        watch (a lost watch on C{/controller} or C{/brokers/ids} leaves a
        partition without a leader for good).  Other failures keep their
        traceback.
        """
        if not isinstance(e, KazooException):
            return False
        if not self._stopping:
            if not self._stale:  # one line until the cluster is read again
                log.warn("ZooKeeper call in {f} failed ({e}): broker {id} reads the cluster again when connected",
                         f=getattr(f, "__name__", f), e=type(e).__name__, id=self.brokerId)
            self._stale = True
            self._catchUpLater()
        return True

    def _catchUpLater(self, delay: float = 1.0) -> None:
        if self._catchUpTimer is None:
            self._catchUpTimer = self.owner.callLater(delay, self._catchUp)

    def _catchUp(self) -> None:
        """
        Register again under a new session, read everything (watches set
        anew), settle.  A failure comes back here through L{_ownerFailed}.
        """
        if self._catchUpTimer is not None:
            self._catchUpTimer.cancel()
            self._catchUpTimer = None
        if self._stopping or not self.zk.connected:
            return  # the session listener calls again once connected
        sessionId = self.zk.client_id[0] if self.zk.client_id else None
        if sessionId != self._sessionId:
            log.info("New ZooKeeper session for broker {id}: registering again", id=self.brokerId)
            self._register(1.5 * self.sessionTimeoutMs / 1000.0 + 5)
            self._readAll()
        else:
            wasController = self.controller.active
            self._readEverything()
            if wasController and self.controller.active:
                # What only the controller watches (a new one reads them).
                self._readIsrChanges()
                self._readZkReassignment()
                self._settle()
        self._stale = False

    def _watched(self, event) -> None:
        # On a kazoo thread: only hand over.
        self.owner.submit(self._onEvent, event.path)

    # -- registration and reading (owner) ------------------------------------------------------

    def _register(self, wait: float) -> None:
        path = Z.brokerPath(self.brokerId)
        raw = getattr(self.config, "raw", {}) or {}
        data = Z.encodeBroker(self.brokerId, self.advertisedListeners,
                              self.config["listener.security.protocol.map"], rack=raw.get("broker.rack"),
                              console=self.consoleUrl)
        deadline = time.monotonic() + wait
        while True:
            try:
                self.zk.create(path, data, ephemeral=True)
                stat = self.zk.exists(path)
                break
            except NodeExistsError:
                stat = self.zk.exists(path)
                if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
                    break
                if time.monotonic() > deadline:
                    raise ClusterStartError(
                        f"broker id {self.brokerId} is registered by another session "
                        f"({path} in ZooKeeper): is another broker using it?"
                    ) from None
                # A previous process of this broker (killed) whose session has
                # not expired yet: wait for ZooKeeper to drop it.
                time.sleep(0.2)
        self._sessionId = self.zk.client_id[0]
        # This registration's broker epoch: a state last written before it
        # names a previous life of this broker (see L{_mayLead}).
        self._brokerEpoch = stat.czxid if stat is not None else 0
        log.info("Broker {id} registered in ZooKeeper at {path} (broker epoch {epoch})",
                 id=self.brokerId, path=path, epoch=self._brokerEpoch)

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
        try:
            return self.zk.get_children(path, watch=self._watched)
        except NoNodeError:
            self.zk.exists(path, watch=self._watched)
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

    # -- publishing, local replicas, controller effects (owner) ------------------------------------

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

    def _applyLocal(self, image: ClusterImage) -> None:
        """
        Tell the replica manager about every hosted partition whose leader
        epoch changed, and stop the replicas this broker no longer hosts.
        """
        me = self.brokerId
        hosted = set()
        for topic, partition, replicas, state in image.partitions():
            if me not in replicas or state is None or topic in image.deleting:
                continue
            key = (topic, partition)
            hosted.add(key)
            leader = state.leader
            if leader == me and not self._mayLead(key, state):
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
        self._deleteQueued(image)

    def _mayLead(self, key, state) -> bool:
        """
        Kafka's broker leads only on the controller's LeaderAndIsr, sent
        for its current broker epoch with a leader epoch newer than it had.
        Here: a state naming this broker leader counts only if written
        after this broker registered (the controller elected this life of
        it), and only in a leader epoch later than any in which an older
        state named it.
        """
        stale = self._staleEpochs.get(key)
        if 0 < state.mzxid < self._brokerEpoch:
            self._staleEpochs[key] = max(state.leaderEpoch, -1 if stale is None else stale)
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
        @return: whether this broker holds no replica of C{name} any more.
        """
        if self.logManager is None or name in INTERNAL_TOPICS:
            return True
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

    # -- assignment (any thread) -------------------------------------------------------------------

    def assign(self, numPartitions: int, replicationFactor: int, firstPartition: int = 0) -> dict:
        """
        Replicas for new partitions over the live brokers, as Kafka assigns
        them (rack-aware when the brokers have a C{broker.rack}:
        L{kafkatwist.cluster.placement}).

        @raise KafkaError: INVALID_REPLICATION_FACTOR with more replicas
            than live brokers.
        """
        brokers = self.image.brokers
        if replicationFactor > len(brokers):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"Replication factor: {replicationFactor} larger than available brokers: {len(brokers)}.",
            )
        n = len(brokers)
        return assignReplicasToBrokers({b: info.rack for b, info in brokers.items()}, numPartitions,
                                       replicationFactor, random.randrange(n), random.randrange(n),
                                       firstPartition)


def _newClusterId() -> str:
    return Z.encodeTopicId(uuid.uuid4())
