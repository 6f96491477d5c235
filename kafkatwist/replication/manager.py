"""
The replica manager (Kafka's C{ReplicaManager} with its C{Partition}s):
which partitions this broker leads or follows, in which leader epoch; on a
leader, each follower's progress, the high watermark and the ISR; on a
follower, the fetcher that copies the leader's log.

Single broker (no controller ever calls it): nothing here touches a log,
so every log leads in epoch 0 with its high watermark at its log end and
the produce and fetch paths pay nothing.  Once the controller (the cluster
layer, or a test's static controller) calls C{becomeLeader} or
C{becomeFollower} for a partition, that partition is replicated:

  - A leader's high watermark is the smallest log end offset over its ISR
    (including a pending expansion, Kafka's "maximal ISR"), advanced as
    followers fetch and published on the log, where consumer reads stop.
    It never moves back while the epoch lasts.  It is written to
    C{replication-offset-checkpoint} (Kafka's format) in each log
    directory every C{replica.high.watermark.checkpoint.interval.ms} and at
    shutdown, and read back when a partition is first given a role, so a
    restart neither exposes unreplicated data nor hides committed data.
  - A follower whose last catch-up with the leader's log end is older than
    C{replica.lag.time.max.ms} is removed from the ISR; one outside it that
    reaches the high watermark within this epoch is added back.  Both go
    through the injected L{IAlterIsr}; until it answers, nothing else about
    that ISR is asked.
  - Each time the high watermark moves, acks=all produces and consumer
    fetches waiting on the partition are woken.

Threads: all of this state belongs to one L{SerialExecutor}, the manager's
owner: work handed to it runs one piece at a time on whichever thread
found it idle.  Follower fetches hand their progress to it from request
handler threads (so an acks=all produce is usually completed on the thread
that served the follower's fetch, with no thread switch); control calls
(C{becomeLeader}...), ISR answers and the periodic checks reach it through
the manager's own timer thread (C{kafkatwist-replica-manager}), so they
never run on the caller's thread and their disk work (epoch checkpoints,
high-watermark checkpoints) never runs on a reactor.  Other threads read
only what the owner publishes: each log's C{isLeader}, C{leaderEpoch},
C{inSyncReplicas} (and so C{isrSize}) and high watermark, the C{leaderEpochs()}
snapshot, and the followers' smallest log start offset behind
C{lowWatermark()}.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.util.executor import SerialExecutor
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IReplicaManager
from kafkatwist.log.checkpoint import readCheckpoint, writeCheckpoint
from kafkatwist.util.purgatory import Purgatory
from kafkatwist.replication import appends
from kafkatwist.replication.delayed import DelayedProduce, Waiting
from kafkatwist.replication.fetcher import ReplicaFetcher
from kafkatwist.replication.selector import RACK_AWARE, ReplicaView, selectReplica
from kafkatwist.replication.state import FOLLOWER, LEADER, UNKNOWN, PartitionReplicas

__all__ = ["REPLICATION_OFFSET", "LocalAlterIsr", "ReplicaManager", "StaticDirectory"]

log = Logger()

REPLICATION_OFFSET = "replication-offset-checkpoint"
#: seconds before an ISR change whose outcome is unknown is asked for again,
#: doubled at each unknown outcome in a row up to the second figure
ISR_RETRY_SECONDS = 0.5
ISR_RETRY_MAX_SECONDS = 10.0


class LocalAlterIsr:
    """
    The L{IAlterIsr} of a broker without a controller: every change is
    accepted at once.
    """

    def alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                 brokerEpochs=None):
        onDone(partitionEpoch + 1, None)


class StaticDirectory:
    """
    An L{IBrokerDirectory} over a fixed table C{{brokerId: (host, port)}}.
    """

    def __init__(self, endpoints=None) -> None:
        self.endpoints = dict(endpoints or {})

    def endpoint(self, brokerId, listenerName=None):
        return self.endpoints.get(brokerId)

    def aliveBrokers(self):
        return frozenset(self.endpoints)

    def rack(self, brokerId):
        return None


def _wallMs() -> int:
    return int(time.time() * 1000)


@implementer(IReplicaManager)
class ReplicaManager:
    """
    @param config: the broker's configuration (C{replica.*} keys).
    @param clock: where control work and timers run: a L{TimerThread} in
        the broker, a C{task.Clock} in tests.
    @param wake: C{wake(key)} re-checks what waits on a partition (the
        produce and fetch purgatories).
    @param alterIsr: the L{IAlterIsr}.
    @param directory: the L{IBrokerDirectory} followers find leaders in.
    @param fetcherFactory: makes a fetcher (tests); defaults to
        L{ReplicaFetcher}.
    @param producePurgatory: where acks=-1 appends wait for their ISR (the
        broker's, which L{wake} re-checks); by default one of its own.
    """

    def __init__(
        self,
        brokerId: int,
        logManager,
        config,
        clock,
        *,
        wake=None,
        alterIsr=None,
        directory=None,
        fetcherFactory=None,
        nowMs=_wallMs,
        producePurgatory=None,
    ) -> None:
        self.brokerId = brokerId
        self.producePurgatory = producePurgatory if producePurgatory is not None else Purgatory("Produce")
        self.logManager = logManager
        self.config = config
        self.clock = clock
        self.wake = wake or (lambda key: None)
        self.alterIsr = alterIsr if alterIsr is not None else LocalAlterIsr()
        self.directory = directory if directory is not None else StaticDirectory()
        self.fetcherFactory = fetcherFactory or ReplicaFetcher
        self.nowMs = nowMs
        #: topic name -> id, for the fetchers (L{_topicIdOf})
        self._topicIds: dict = {}
        #: this broker's broker epoch (its registration's czxid; -1 without
        #: a cluster), which its follower fetches carry (KIP-903); set by
        #: the cluster layer
        self.brokerEpoch = lambda: UNKNOWN
        self.lagMaxMs = config["replica.lag.time.max.ms"]
        self.numFetchers = config["num.replica.fetchers"]
        self.checkpointIntervalMs = config["replica.high.watermark.checkpoint.interval.ms"]
        self.owner = SerialExecutor()
        self._partitions: dict = {}
        self._fetchers: dict = {}
        #: the fetchers, published by the owner for L{maxLag}
        self._publishedFetchers: tuple = ()
        self._published: dict = {}
        #: (topic, partition) led here -> its replication factor, published
        #: with C{_published} (L{partitionCounts})
        self._leaderReplicas: dict = {}
        #: Kafka's IsrShrinksPerSec, IsrExpandsPerSec and
        #: FailedIsrUpdatesPerSec counts: ISR changes the controller
        #: accepted, and those it refused (written by the owner only)
        #: (topic, partition) -> unknown ISR-change outcomes in a row (the
        #: retry's backoff; written by the owner only)
        self._isrRetries: dict = {}
        self.isrShrinks = 0
        self.isrExpands = 0
        self.failedIsrUpdates = 0
        #: (topic, partition) -> the smallest log start offset of the live
        #: followers of a partition led here (L{lowWatermark}); written by
        #: the owner only, one key at a time
        self._followersLogStart: dict = {}
        self._checkpointed: dict | None = None
        self._checkpointedByDir: dict = {}
        self._timers: list = []
        self._started = False
        self._stopped = False
        #: the follower side's L{kafkatwist.replication.quota.ReplicationQuota}
        #: its fetchers count throttled bytes against (C{None}: none)
        self.followerQuota = None
        #: C{replica.selector.class} (KIP-392), C{None}: consumers read
        #: from the leader
        self.replicaSelector = config.get("replica.selector.class")
        #: (topic, partition) led here -> C{((broker id, log end offset,
        #: log start offset, last caught up ms), ...)} of its followers,
        #: published by the owner (only with a rack-aware selector) for
        #: L{findPreferredReadReplica}
        self._followerViews: dict = {}

    # -- the append path (Kafka's appendRecords; kafkatwist.replication.appends) ---------
    # On the caller's thread (a request handler, a coordinator's executor):
    # reads only what the owner publishes on the logs.

    #: append one partition's records on its leader (L{appends.appendToLeader}:
    #: the min.insync.replicas check of acks=-1, the append)
    appendRecords = staticmethod(appends.appendToLeader)
    #: append an end-transaction marker with acks=-1 (L{appends.appendMarker})
    appendMarker = staticmethod(appends.appendMarker)

    @staticmethod
    def waitingFor(topic: str, partition: int, partitionLog, info) -> Waiting | None:
        """
        What an acks=-1 answer for this append must wait for: C{None} where
        the partition is not replicated (L{IPartitionLog.replicated}), so
        the answer goes at once.
        """
        if not partitionLog.replicated():
            return None
        return Waiting(topic, partition, partitionLog, info.lastOffset + 1, partitionLog.leaderEpoch)

    def awaitReplicas(self, clock, waits: list, timeoutSeconds: float, answer, pending) -> None:
        """
        Answer an acks=-1 produce once the high watermark of each of its
        replicated partitions (C{waits}, from L{waitingFor}) has passed its
        records, or at the timeout (Kafka's C{DelayedProduce}).

        @param clock: the connection's clock (the expiry only builds the
            answer).
        @param answer: C{answer(errors)} builds the response from
            C{{(topic, partition): ErrorCode}}.
        @param pending: the request's L{IPendingResponse}.
        """
        operation = DelayedProduce(clock, waits, answer, pending)
        self.producePurgatory.tryCompleteElseWatch(operation, operation.keys(), timeoutSeconds)

    def awaitReplication(self, topic: str, partition: int, requiredOffset: int, timeoutMs: int, onDone) -> None:
        """
        C{onDone(error)} once the partition's ISR has everything below
        C{requiredOffset} (Kafka's coordinators and markers write with
        acks=-1): at once where the partition is not replicated,
        REQUEST_TIMED_OUT after C{timeoutMs}, NOT_ENOUGH_REPLICAS_AFTER_APPEND
        if the ISR fell below C{min.insync.replicas}.  Any thread; C{onDone}
        may run on the owner's or the timer's.
        """
        partitionLog = self.logManager.getLog(topic, partition) if self.logManager is not None else None
        if partitionLog is None or not partitionLog.replicated():
            onDone(ErrorCode.none)
            return
        waiting = Waiting(topic, partition, partitionLog, requiredOffset, partitionLog.leaderEpoch)
        operation = DelayedProduce(
            self.clock, [waiting], lambda errors: errors[(topic, partition)], _Callback(onDone)
        )
        self.producePurgatory.tryCompleteElseWatch(operation, operation.keys(), timeoutMs / 1000.0)

    def replicationWaiter(self, timeoutMs: int):
        """
        L{awaitReplication} with its timeout: C{wait(topic, partition,
        requiredOffset, onDone)}, what the coordinators' runtimes and the
        marker writer are given.
        """

        def wait(topic, partition, requiredOffset, onDone) -> None:
            self.awaitReplication(topic, partition, requiredOffset, timeoutMs, onDone)

        return wait

    #: the partitions of a transactional produce to verify, with their
    #: guards (L{appends.transactionGuards})
    transactionGuards = staticmethod(appends.transactionGuards)

    @staticmethod
    def verifyTransaction(coordinator, answered, transactionalId, producer, unverified, verified) -> None:
        """
        Ask the transaction coordinator whether C{unverified} are in the
        producer's open transaction (KIP-890 part 1); the answer's errors go
        into C{verified} (L{appends.verificationErrors}), then
        C{answered(result)} is called, on whichever thread answered (without
        a coordinator: at once, every partition NOT_ENOUGH_REPLICAS).

        @param answered: a callable, or a L{kafkatwist.coordinator.reply.Reply}
            whose build sees the coordinator's result.
        """

        def record(result):
            appends.verificationErrors(result, unverified, verified)
            return result

        if coordinator is None:
            answered(record(ErrorCode.not_enough_replicas))
            return
        coordinator.verifyPartitions(
            _Then(record, answered), transactionalId, producer[0], producer[1], unverified
        )

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """
        Start the manager's thread (a L{TimerThread} clock), the periodic
        ISR check and the high-watermark checkpoint.  Idempotent.
        """
        if self._started:
            return
        self._started = True
        start = getattr(self.clock, "start", None)
        if start is not None:
            start()
        self._schedule(self.lagMaxMs / 2000.0, self._checkIsrs)
        self._schedule(self.checkpointIntervalMs / 1000.0, self._checkpointHighWatermarks)

    def _schedule(self, delay: float, work) -> None:
        def fire():
            if self._stopped:
                return
            self.owner.submit(work)
            self._schedule(delay, work)

        self._timers.append(self.clock.callLater(delay, fire))

    def stop(self) -> None:
        """
        Stop the fetchers and write the high watermarks (shutdown, before
        the logs close).
        """
        if self._stopped:
            return
        self._stopped = True
        for timer in self._timers:
            if timer.active():
                timer.cancel()
        # Through the owner: its state is not shared, even at the end.
        done = []
        self.owner.submit(self._stopOwned, done)
        stop = getattr(self.clock, "stop", None)
        if stop is not None:
            stop()

    def _stopOwned(self, done) -> None:
        for fetcher in list(self._fetchers.values()):
            fetcher.stop()
        self._fetchers = {}
        self._checkpointHighWatermarks()
        done.append(True)

    # -- IReplicaManager (any thread) ------------------------------------------------------

    def _post(self, f, *args) -> None:
        self.clock.callLater(0, self.owner.submit, f, *args)

    def becomeLeader(self, topic, partition, leaderEpoch, isr, replicas, partitionEpoch):
        self._post(
            self._becomeLeader, topic, partition, leaderEpoch, tuple(isr), tuple(replicas),
            partitionEpoch,
        )

    def becomeFollower(self, topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch):
        self._post(
            self._becomeFollower, topic, partition, leaderId, leaderEpoch, tuple(replicas),
            partitionEpoch,
        )

    def stopReplica(self, topic, partition, delete):
        self._post(self._stopReplica, topic, partition, delete)

    def leaderEpochs(self):
        return self._published

    def partitionCounts(self) -> dict:
        """
        Kafka's ReplicaManager gauges (any thread; read from what the owner
        publishes on the logs and in L{_publish}): C{PartitionCount} (logs
        here), C{LeaderCount} (those leading), and of the leaders,
        C{UnderReplicatedPartitions} (an ISR smaller than the replicas),
        C{UnderMinIsrPartitionCount} and C{AtMinIsrPartitionCount} (an ISR
        below or at C{min.insync.replicas}, at most the replication factor:
        Kafka's effective min ISR).  A log no controller gave a role (a
        single broker) leads alone: one replica, in sync.
        """
        logs = self.logManager.logs() if self.logManager is not None else []
        assigned = self._leaderReplicas
        leaders = under = underMin = atMin = 0
        for partitionLog in logs:
            if not partitionLog.isLeader:
                continue
            leaders += 1
            isr = partitionLog.inSyncReplicas
            replicas = assigned.get((partitionLog.topic, partitionLog.partition))
            if isr is None or replicas is None:
                size = replicas = 1
            else:
                size = len(isr)
            if size < replicas:
                under += 1
            minIsr = min(partitionLog.config.minInsyncReplicas, replicas)
            if size < minIsr:
                underMin += 1
            elif size == minIsr:
                atMin += 1
        return {
            "PartitionCount": len(logs),
            "LeaderCount": leaders,
            "UnderReplicatedPartitions": under,
            "UnderMinIsrPartitionCount": underMin,
            "AtMinIsrPartitionCount": atMin,
        }

    def maxLag(self) -> int:
        """
        Kafka's C{ReplicaFetcherManager} C{MaxLag} (any thread): the largest
        lag of the partitions this broker follows, each the leader's high
        watermark minus this replica's log end at its last fetch (as each
        fetcher thread publishes it); 0 without any.
        """
        return max((f.maxLag() for f in self._publishedFetchers), default=0)

    def lowWatermark(self, topic, partition, partitionLog) -> int:
        """
        Kafka's C{Partition.lowWatermarkIfLeader}: the smallest log start
        offset over this leader's log and its followers on live brokers
        (-1 while one has not fetched in this epoch).  Any thread.
        """
        start = partitionLog.logStartOffset
        followers = self._followersLogStart.get((topic, partition))
        return start if followers is None else min(start, followers)

    # -- the data plane (handler threads) ---------------------------------------------------

    def findPreferredReadReplica(self, partitionLog, fetchOffset: int, clientRack, listenerName, nowMs: int):
        """
        Kafka's C{ReplicaManager.findPreferredReadReplica} for a consumer's
        fetch (v11+) of a partition led here: the replica the
        C{replica.selector.class} prefers (L{kafkatwist.replication.selector}),
        or C{None} for this leader.  Any thread: it reads what the owner
        published.
        """
        if self.replicaSelector != RACK_AWARE or not clientRack or not partitionLog.isLeader:
            return None
        views = self._followerViews.get((partitionLog.topic, partitionLog.partition))
        if not views:
            return None
        directory = self.directory
        rackOf = getattr(directory, "rack", lambda brokerId: None)
        isr = partitionLog.inSyncReplicas
        leader = ReplicaView(self.brokerId, rackOf(self.brokerId), partitionLog.logEndOffset, 0)
        candidates = [leader]
        for brokerId, logEndOffset, logStartOffset, lastCaughtUpMs in views:
            if (
                brokerId in isr
                and logStartOffset <= fetchOffset <= logEndOffset
                and directory.endpoint(brokerId, listenerName) is not None
            ):
                candidates.append(
                    ReplicaView(brokerId, rackOf(brokerId), logEndOffset, nowMs - lastCaughtUpMs)
                )
        return selectReplica(self.replicaSelector, clientRack, leader, candidates)

    def recordFollowerFetch(self, replicaId: int, fetched, brokerEpoch: int = UNKNOWN) -> None:
        """
        A follower fetched: C{fetched} is C{[(key, fetchOffset,
        leaderEndOffset, logStartOffset)]}, the leader's log end read before
        the fetch was answered and the follower's log start offset (C{None}
        when its request did not say); C{brokerEpoch} the follower's broker
        epoch its fetch carried (Fetch v15; -1: not said).
        """
        self.owner.submit(self._onFollowerFetch, replicaId, fetched, self.nowMs(), brokerEpoch)

    # -- the owner's work ------------------------------------------------------------------

    def _publish(self) -> None:
        self._published = {
            key: (p.role, p.leaderEpoch) for key, p in self._partitions.items() if p.role
        }
        self._leaderReplicas = {
            key: len(p.replicas) for key, p in self._partitions.items() if p.role == LEADER
        }

    def _partitionFor(self, topic, partition):
        key = (topic, partition)
        p = self._partitions.get(key)
        partitionLog = self.logManager.getLog(topic, partition) if self.logManager else None
        if partitionLog is None:
            log.warn(
                "No log for {topic}-{partition}: its role is not applied",
                topic=topic, partition=partition,
            )
            return None
        if p is None or p.log is not partitionLog:
            if p is not None:
                self._topicIds = {}  # a topic created again: its id is new
            p = PartitionReplicas(topic, partition, partitionLog, self.brokerId)
            self._partitions[key] = p
            self._initHighWatermark(p)
        return p

    def _initHighWatermark(self, p: PartitionReplicas) -> None:
        """
        A log given its first role: its high watermark from the checkpoint
        (the log start offset without one), never past its end.
        """
        if self._checkpointed is None:
            self._checkpointed = self._readCheckpoints()
        partitionLog = p.log
        hw = self._checkpointed.get(p.key, partitionLog.logStartOffset)
        partitionLog.setHighWatermark(
            min(max(hw, partitionLog.logStartOffset), partitionLog.logEndOffset)
        )

    def _becomeLeader(self, topic, partition, leaderEpoch, isr, replicas, partitionEpoch):
        p = self._partitionFor(topic, partition)
        if p is None or leaderEpoch < p.leaderEpoch:
            return
        if p.role == LEADER and leaderEpoch == p.leaderEpoch:
            if partitionEpoch > p.partitionEpoch:
                # The same epoch, a newer ISR (written by someone else).
                p.isr, p.partitionEpoch = frozenset(isr), partitionEpoch
                p.pendingIsr = None
                p.log.inSyncReplicas = p.isr
                self._maybeAdvanceHighWatermark(p)
            return
        self._removeFetcher(p.key)
        start = p.log.becomeLeader(leaderEpoch)
        p.makeLeader(leaderEpoch, isr, replicas, partitionEpoch, start, self.nowMs())
        p.log.inSyncReplicas = p.isr
        self._publishFollowers(p)
        self._updateLowWatermark(p)
        log.info(
            "{topic}-{partition}: leader in epoch {epoch} from offset {offset}, ISR {isr}",
            topic=topic, partition=partition, epoch=leaderEpoch, offset=start, isr=sorted(p.isr),
        )
        self._maybeAdvanceHighWatermark(p)
        self._publish()
        self.wake(p.key)

    def _becomeFollower(self, topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch):
        p = self._partitionFor(topic, partition)
        if p is None or leaderEpoch < p.leaderEpoch:
            return
        if p.role == FOLLOWER and leaderEpoch == p.leaderEpoch and leaderId == p.leaderId:
            p.partitionEpoch = max(p.partitionEpoch, partitionEpoch)
            return
        self._removeFetcher(p.key)
        p.log.becomeFollower(leaderEpoch)
        p.makeFollower(leaderId, leaderEpoch, replicas, partitionEpoch)
        p.log.inSyncReplicas = frozenset()
        self._publishFollowers(p)
        self._updateLowWatermark(p)
        log.info(
            "{topic}-{partition}: following broker {leader} in epoch {epoch}",
            topic=topic, partition=partition, leader=leaderId, epoch=leaderEpoch,
        )
        if leaderId >= 0:
            self._fetcherFor(leaderId, p.key).addPartition(p.key, p.log, leaderEpoch)
        self._publish()
        # acks=all produces waiting here fail now (NOT_LEADER_OR_FOLLOWER).
        self.wake(p.key)

    def _stopReplica(self, topic, partition, delete):
        key = (topic, partition)
        p = self._partitions.pop(key, None)
        self._removeFetcher(key)
        self._followersLogStart.pop(key, None)
        self._followerViews.pop(key, None)
        if p is not None:
            p.log.isLeader = False
            p.log.inSyncReplicas = frozenset()
            if delete:
                # Kafka's StopReplica with delete (a replica reassigned
                # away): its data goes once no fetcher writes to it; the
                # log of a deleted topic is deleted whole by the log manager.
                try:
                    p.log.truncateFullyAndStartAt(0)
                except (KafkaError, OSError):
                    pass
            self._publish()
            self.wake(key)

    # -- fetchers --------------------------------------------------------------------------

    def _fetcherFor(self, leaderId: int, key):
        index = hash(key) % self.numFetchers
        fetcher = self._fetchers.get((leaderId, index))
        if fetcher is None:
            fetcher = self.fetcherFactory(
                self.brokerId, leaderId, index, self.directory, self.config,
                onFenced=self._onFenced,
            )
            # The follower's replication throttle (follower.replication.throttled.*).
            fetcher.quota = self.followerQuota
            # A consumer fetching from this follower (KIP-392) waits for
            # its high watermark.
            fetcher.wake = self.wake
            # Its fetches name this broker's registration (KIP-903) and
            # each topic by its id.
            fetcher.brokerEpoch = self.brokerEpoch
            fetcher.topicIdOf = self._topicIdOf
            self._fetchers[(leaderId, index)] = fetcher
            self._publishedFetchers = tuple(self._fetchers.values())
            fetcher.start()
        return fetcher

    def _topicIdOf(self, topic: str):
        """
        The topic id of a topic this broker has a log of, from a table of
        them read again only for a name it lacks (and emptied when a
        partition gets a new log: a topic created again has a new id);
        C{None} when not known or, in a cluster, not the id the cluster
        has (the leader would not know it) -- except for an internal topic,
        which each broker creates itself with an id of its own when it
        starts, and which takes the cluster's id once the cluster is read
        (L{kafkatwist.cluster.applier.LocalApplier._adoptInternalIds}): until
        then it goes by the cluster's id, which its leader resolves for a
        replica's fetch (so every topic is fetched by id, in one request,
        with the broker epoch).  Any thread.
        """
        ids = self._topicIds
        topicId = ids.get(topic)
        if topicId is None:
            topics = getattr(self.logManager, "topics", None)
            ids = {name: info.topicId for name, info in topics().items()} if topics is not None else {}
            self._topicIds = ids
            topicId = ids.get(topic)
        clusterTopicId = getattr(self.directory, "topicId", None)
        if topicId is not None and clusterTopicId is not None:
            clusterId = clusterTopicId(topic)
            if clusterId != topicId:
                ownIds = getattr(self.directory, "locallyCreatedTopics", ())
                return clusterId if topic in ownIds else None
        return topicId

    def _removeFetcher(self, key) -> None:
        for (leaderId, index), fetcher in list(self._fetchers.items()):
            fetcher.removePartition(key)
            if not fetcher.partitionCount():
                fetcher.stop(timeout=0)
                del self._fetchers[(leaderId, index)]
                self._publishedFetchers = tuple(self._fetchers.values())

    def _onFenced(self, key, error) -> None:
        # A leader refused us: the controller's next word fixes it.
        log.debug("{key}: the leader answered {error}", key=key, error=error.name)

    # -- the leader's side ---------------------------------------------------------------------

    def _onFollowerFetch(self, replicaId: int, fetched, nowMs: int, brokerEpoch: int = UNKNOWN) -> None:
        registered = getattr(self.directory, "brokerEpoch", None)
        current = registered(replicaId) if registered is not None else UNKNOWN
        if 0 <= brokerEpoch < current:
            # Kafka's fenced stale fetch state (KIP-903): a fetch sent by an
            # earlier registration of the follower, read after it registered
            # again, tells nothing of the log it has now.
            log.info(
                "Ignoring a fetch of broker {broker} under its broker epoch {epoch}: it is "
                "registered as {current} now", broker=replicaId, epoch=brokerEpoch, current=current,
            )
            return
        for key, fetchOffset, leaderEndOffset, logStartOffset in fetched:
            p = self._partitions.get(key)
            if p is None or p.role != LEADER:
                continue
            follower = p.followers.get(replicaId)
            if follower is None:
                continue
            if 0 <= brokerEpoch < follower.brokerEpoch:
                continue  # from the registration before the one it fetched as
            if follower.newLife(brokerEpoch):
                log.info(
                    "{topic}-{partition}: broker {broker} fetches under a new broker epoch {epoch}: "
                    "what it fetched before does not count",
                    topic=p.topic, partition=p.partition, broker=replicaId, epoch=brokerEpoch,
                )
            follower.brokerEpoch = brokerEpoch
            follower.onFetch(fetchOffset, leaderEndOffset, nowMs)
            if logStartOffset is not None and logStartOffset != follower.logStartOffset:
                follower.logStartOffset = logStartOffset
                self._updateLowWatermark(p)
            self._publishFollowers(p)
            self._maybeAdvanceHighWatermark(p)
            if p.pendingIsr is None and p.canJoinIsr(replicaId, p.log.highWatermark):
                self._expandIsr(p, replicaId)

    def _expandIsr(self, p: PartitionReplicas, replicaId: int) -> None:
        """
        Ask for C{replicaId} in the ISR (Kafka's C{maybeExpandIsr}).

        A leader alone in its ISR acknowledges acks=-1 appends at once, its
        high watermark following the log end.  Once the expansion is asked
        for, the high watermark is over the maximal ISR, follower included:
        so it is pinned first, atomically with appends, and the follower
        must have everything below the pin.  Otherwise an append answered
        during the ISR write would be acknowledged without the follower
        that the controller may then elect, and the high watermark would
        move back to the follower's log end when the expansion lands.
        """
        partitionLog = p.log
        wasPinned = partitionLog.replicated()
        pinned = partitionLog.pinHighWatermark()
        if p.canJoinIsr(replicaId, pinned):
            self._alter(p, p.isr | {replicaId})
        elif not wasPinned:
            # An append came in between: the follower is behind it.  Let
            # the high watermark follow the log end again, and answer any
            # acks=-1 append that saw the pin.
            self._maybeAdvanceHighWatermark(p)

    def _publishFollowers(self, p: PartitionReplicas) -> None:
        """
        Publish the followers' progress for L{findPreferredReadReplica}
        (only where a selector reads it).
        """
        if self.replicaSelector != RACK_AWARE:
            return
        if p.role != LEADER:
            self._followerViews.pop(p.key, None)
            return
        self._followerViews[p.key] = tuple(
            (r, f.logEndOffset, f.logStartOffset, f.lastCaughtUpMs) for r, f in p.followers.items()
        )

    def _maybeAdvanceHighWatermark(self, p: PartitionReplicas) -> None:
        partitionLog = p.log
        hw = p.highWatermark(partitionLog.logEndOffset)
        if hw is None:
            if partitionLog._highWatermark is not None:
                partitionLog.setHighWatermark(None)
                self.wake(p.key)
            return
        if hw == UNKNOWN:
            if partitionLog._highWatermark is None:
                # Pin it (atomically with appends): it may not follow the
                # log end any more.
                partitionLog.pinHighWatermark()
            return
        current = partitionLog._highWatermark
        if current is None:
            # It followed the log end: consumers may have read, and acks=-1
            # producers been answered, up to it.  The high watermark never
            # moves back (Kafka's maybeIncrementLeaderHW).
            current = partitionLog.pinHighWatermark()
        if hw > current:
            partitionLog.setHighWatermark(hw)
            self.wake(p.key)

    def _updateLowWatermark(self, p: PartitionReplicas) -> None:
        """
        Publish the followers' part of the low watermark; a rise wakes the
        DeleteRecords waiting on it.
        """
        value = p.followersLogStart(self.directory.aliveBrokers()) if p.role == LEADER else None
        old = self._followersLogStart.get(p.key)
        if value == old:
            return
        if value is None:
            self._followersLogStart.pop(p.key, None)
        else:
            self._followersLogStart[p.key] = value
        self.wake(p.key)

    def _checkIsrs(self) -> None:
        nowMs = self.nowMs()
        for p in list(self._partitions.values()):
            if p.role == LEADER:
                # A follower's broker may have died: it counts no more.
                self._updateLowWatermark(p)
            if p.role != LEADER or p.pendingIsr is not None:
                continue
            lagging = p.outOfSync(nowMs, self.lagMaxMs)
            if lagging:
                log.info(
                    "{topic}-{partition}: shrinking the ISR {isr} by {lagging}, which have "
                    "not caught up for {lag} ms",
                    topic=p.topic, partition=p.partition, isr=sorted(p.isr),
                    lagging=sorted(lagging), lag=self.lagMaxMs,
                )
                self._alter(p, p.isr - lagging)

    def _alter(self, p: PartitionReplicas, newIsr: frozenset) -> None:
        p.pendingIsr = frozenset(newIsr)
        key, epoch = p.key, p.leaderEpoch

        def onDone(newPartitionEpoch, error):
            self._post(self._isrAltered, key, epoch, frozenset(newIsr), newPartitionEpoch, error)

        # Each replica added goes with the broker epoch its fetches were
        # made under (Kafka's NewIsrWithEpochs, KIP-903): the controller
        # refuses one that is not its current registration.
        brokerEpochs = {
            r: p.followers[r].brokerEpoch if r in p.followers else UNKNOWN
            for r in newIsr if r not in p.isr
        }
        self.alterIsr.alterIsr(
            p.topic, p.partition, self.brokerId, epoch, sorted(newIsr), p.partitionEpoch, onDone,
            brokerEpochs=brokerEpochs,
        )

    def _isrAltered(self, key, epoch, newIsr, newPartitionEpoch, error) -> None:
        p = self._partitions.get(key)
        if p is None or p.role != LEADER or p.leaderEpoch != epoch or p.pendingIsr != newIsr:
            return
        if error is not None and getattr(error, "code", error) == ErrorCode.request_timed_out:
            # The outcome is unknown (ZooKeeper's connection was lost during
            # the write): it may have landed, and the controller may elect
            # a replica it added.  As Kafka's AlterPartition manager, keep
            # the change pending -- the maximal ISR, and so the high
            # watermark, still count it -- and ask again: a write that
            # landed is then refused as stale, and the state read again.
            self.failedIsrUpdates += 1
            attempts = self._isrRetries.get(key, 0)
            self._isrRetries[key] = attempts + 1
            # One warning per outage; the retries after it at debug.
            (log.warn if attempts == 0 else log.debug)(
                "{topic}-{partition}: ISR change to {isr} not confirmed ({error}): asking again",
                topic=p.topic, partition=p.partition, isr=sorted(newIsr), error=error,
            )
            if not self._stopped:
                delay = min(ISR_RETRY_SECONDS * 2 ** attempts, ISR_RETRY_MAX_SECONDS)
                self.clock.callLater(delay, self.owner.submit, self._askAgain, key, epoch, newIsr)
            return
        self._isrRetries.pop(key, None)
        p.pendingIsr = None
        if error is not None:
            self.failedIsrUpdates += 1
            log.warn(
                "{topic}-{partition}: ISR change to {isr} refused: {error}",
                topic=p.topic, partition=p.partition, isr=sorted(newIsr), error=error,
            )
            self._maybeAdvanceHighWatermark(p)
            return
        if newIsr < p.isr:
            self.isrShrinks += 1
        elif newIsr > p.isr:
            self.isrExpands += 1
        p.isr = newIsr
        p.partitionEpoch = newPartitionEpoch
        p.log.inSyncReplicas = newIsr
        self._maybeAdvanceHighWatermark(p)
        self.wake(key)

    def _askAgain(self, key, epoch, newIsr) -> None:
        p = self._partitions.get(key)
        if p is None or p.role != LEADER or p.leaderEpoch != epoch or p.pendingIsr != newIsr:
            self._isrRetries.pop(key, None)
            return
        self._alter(p, newIsr)

    # -- the high-watermark checkpoint -----------------------------------------------------------

    def _logDirs(self) -> list:
        return list(getattr(self.logManager, "logDirs", None) or ())

    def _readCheckpoints(self) -> dict:
        """
        @return: C{{(topic, partition): highWatermark}} over every log
            directory (also kept per directory, so partitions not given a
            role yet keep their entries when the file is written again).
        """
        self._checkpointedByDir = {}
        found = {}
        for logDir in self._logDirs():
            entries = readCheckpoint(os.path.join(logDir, REPLICATION_OFFSET))
            self._checkpointedByDir[logDir] = entries
            found.update(entries)
        return found

    def _checkpointHighWatermarks(self) -> None:
        if self._checkpointed is None:
            return  # no partition was ever given a role: nothing to write
        byDir: dict = defaultdict(dict)
        for logDir, entries in self._checkpointedByDir.items():
            for key, hw in entries.items():
                if key not in self._partitions and self.logManager.getLog(*key) is not None:
                    byDir[logDir][key] = hw
        for key, p in list(self._partitions.items()):
            directory = getattr(p.log, "directory", None)
            if directory is None:
                continue
            byDir[os.path.dirname(directory)][key] = p.log.highWatermark
        for logDir, entries in byDir.items():
            try:
                writeCheckpoint(os.path.join(logDir, REPLICATION_OFFSET), entries)
            except OSError as e:
                log.warn("Cannot write {path}: {error}", path=logDir, error=e)


class _Callback:
    """
    The L{IPendingResponse} side of a L{DelayedProduce} whose answer is a
    call, not a response.
    """

    __slots__ = ("onDone",)

    def __init__(self, onDone) -> None:
        self.onDone = onDone

    def complete(self, result) -> None:
        self.onDone(result)


class _Then:
    """
    C{second(first(result))}, as one callback (a coordinator's C{replyTo}).
    """

    __slots__ = ("first", "second")

    def __init__(self, first, second) -> None:
        self.first = first
        self.second = second

    def __call__(self, result) -> None:
        self.second(self.first(result))
