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
C{/brokers/ids/<id>}) names a previous life of it, as does one whose
leader broker epoch is not its registration's: it does not lead on such a
state (L{ClusterService._mayLead}), and the controller fails such
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
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.protocol.states import KazooState
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.adminwrites import AdminWrites
from kafkatwist.cluster.applier import LocalApplier
from kafkatwist.cluster.controller import ControllerMachine
from kafkatwist.cluster.controllershell import ControllerShell
from kafkatwist.cluster.produceridblocks import ProducerIdBlocks
from kafkatwist.cluster.zkreads import ZooKeeperReads
from kafkatwist.cluster.image import ClusterImage
from kafkatwist.util.owner import OwnerThread
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS
from kafkatwist.cluster.placement import assignReplicasToBrokers
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IAlterIsr, IBrokerDirectory
from kafkatwist.util.startup import StartupError

log = Logger()


class ClusterStartError(StartupError):
    """
    The broker cannot join the cluster (ZooKeeper unreachable, its id taken).
    """


@implementer(IAlterIsr, IBrokerDirectory)
class ClusterService(ZooKeeperReads, ControllerShell, LocalApplier, AdminWrites, ProducerIdBlocks):
    """
    This broker's part of the cluster: the ZooKeeper session, registration
    and owner thread (here), and, sharing the state set up in
    C{__init__}, its roles in a module each: reading ZooKeeper
    (L{ZooKeeperReads}), the controller shell (L{ControllerShell}),
    applying the published cluster to local logs and replicas
    (L{LocalApplier}), the admin writes and ISR changes (L{AdminWrites}),
    producer-id blocks (L{ProducerIdBlocks}).

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
        #: internal topic -> the cluster's id its local log took (L{_adoptInternalIds})
        self._adoptedIds: dict = {}
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
        #: (topic, partition) -> (topic id, the latest leader epoch in which
        #: a state written before this registration named this broker
        #: leader): it leads that topic only in a later one (L{_mayLead})
        self._staleEpochs: dict[tuple[str, int], tuple] = {}
        self._stopping = False
        #: Kafka's UncleanLeaderElectionsPerSec count: leaders this broker,
        #: as the controller, elected from outside the ISR (the owner's)
        self.uncleanLeaderElections = 0
        #: Kafka's SessionExpireListener counts (ZooKeeperSyncConnectsPerSec,
        #: ZooKeeperDisconnectsPerSec, ZooKeeperExpiresPerSec): the
        #: session's changes, kazoo's CONNECTED, SUSPENDED, LOST (written
        #: by the kazoo thread that reports them only)
        self.sessionEvents = {KazooState.CONNECTED: 0, KazooState.SUSPENDED: 0, KazooState.LOST: 0}
        #: held by the owner while it touches local logs (L{_applyLocal}),
        #: which it does only before L{stop} set C{_stopping}; L{stop}
        #: takes it once after that, so no log is touched once it returned
        #: (the logs close next), even by an owner thread that outlived it
        #: (blocked on ZooKeeper)
        self._localWork = threading.RLock()
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
        # (the first connect, before the listener hears the next ones)
        self.sessionEvents[KazooState.CONNECTED] = int(self.zk.connected)
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
        # Taken: local work under way ends first, and whatever the owner
        # does from now on (it may outlive this, blocked on ZooKeeper), it
        # touches no log.
        with self._localWork:
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

    def brokerEpoch(self, brokerId) -> int:
        """
        The broker epoch of C{brokerId}'s registration as this broker last
        read it (-1: not registered).  Any thread.
        """
        return self.image.brokerEpochs.get(brokerId, -1)

    #: the topics each broker creates itself, with an id of its own (the
    #: internal topics): followers fetch them by the cluster's id, which
    #: their leader resolves for a replica's fetch
    locallyCreatedTopics = INTERNAL_TOPICS

    def topicId(self, name: str):
        """
        The topic's id as the cluster has it (C{None}: not known).  Any
        thread.
        """
        assignment = self.image.topics.get(name)
        return assignment.topicId if assignment is not None else None

    def currentBrokerEpoch(self) -> int:
        """
        This broker's own broker epoch (its registration's czxid; -1 before
        it registered), which its follower fetches carry.  Any thread.
        """
        return self._brokerEpoch if self._brokerEpoch > 0 else -1

    def eligibleForIsr(self, brokerId) -> bool:
        """
        Whether a leader may add C{brokerId} to an ISR: alive and not being
        shut down (L{alterIsr} refuses others with INELIGIBLE_REPLICA).
        Any thread.
        """
        image = self.image
        return brokerId in image.brokers and brokerId not in image.shuttingDown

    # -- waiting for the cluster (any thread; answers on the owner thread) -----------------

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
        # On a kazoo thread: count, and hand over.
        if state in self.sessionEvents:
            self.sessionEvents[state] += 1
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
        if isinstance(e, ClusterStartError):
            # Registering again under a new session refused (the id held by
            # another session): one line, and the catch-up tries again.
            if not self._stopping:
                log.warn("Broker {id} cannot register again: {e}; trying again", id=self.brokerId, e=e)
                self._stale = True
                self._catchUpLater()
            return True
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
                # The broker epoch from the create itself: a read after it
                # may find nothing (the session lost in between).
                _, stat = self.zk.create(path, data, ephemeral=True, include_data=True)
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
