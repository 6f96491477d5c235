"""
The follower side of replication (Kafka's C{ReplicaFetcherThread} and
C{AbstractFetcherThread}): one thread per source broker and fetcher index
(C{num.replica.fetchers}), each keeping a connection to its leader.

A partition handed to a fetcher (C{becomeFollower}) first finds where its
log diverges from the leader's: OffsetForLeaderEpoch (v3, with this
broker's id) for its latest epoch, and truncation to the end offset the
leader answers, bounded by the follower's own end of that epoch (KIP-279:
when the leader does not know the follower's epoch, the follower truncates
to its own end of the largest epoch the leader does know and asks again).
A follower with no epochs at all truncates to its high watermark.  Then it
fetches from its log end -- in a cluster Fetch v15, whose C{replica_state}
names this broker and its broker epoch (KIP-903: a leader never counts
what an earlier registration of this broker fetched), topics by id;
every topic by the cluster's id (the internal topics each broker creates
itself with an id of its own too: their leader resolves the cluster's id for
a replica's fetch), one request a round; without one v11, topics by name;
C{current_leader_epoch} either way --
appends what comes as it is -- the leader's offsets and epochs, CRCs
checked -- and takes the leader's high watermark (bounded by
its own log end) and log start offset.

Threads: each fetcher thread owns its partitions' fetch state and does all
its network and disk work itself (never a reactor).  The replica manager's
owner adds and removes partitions through a lock-protected table, read at
the top of every round; a removal returns once no append of that partition
is under way, so no fetched data lands after the partition changed role.
"""

from __future__ import annotations

import threading
import time

from twisted.logger import Logger

from kafkatwist.client.connection import BrokerConnection, KafkaConnectionError
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from kafkatwist.protocol.apis import FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, requestType
from kafkatwist.protocol.entities import make, ms, nested

__all__ = ["FetchState", "ReplicaFetcher", "truncationOffset"]

log = Logger()

#: a cluster broker's fetches (with its broker epoch, KIP-903: topics by id)
FETCH_VERSION = 15
#: a broker without a cluster (no registration, no broker epoch; a static
#: controller's brokers, whose topic ids differ): topics by name
NAMED_FETCH_VERSION = 11
OFFSET_FOR_LEADER_EPOCH_VERSION = 3
LIST_OFFSETS_VERSION = 4
EARLIEST = -2

#: errors after which the fetcher waits for the controller's next word
_WAIT_FOR_CONTROLLER = frozenset({
    ErrorCode.not_leader_or_follower,
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.inconsistent_topic_id,
})


class FetchState:
    """
    One partition a fetcher replicates.

    @ivar truncating: whether it must find its divergence point first.
    @ivar delayedUntil: monotonic time before which it is not fetched
        (after an error).
    @ivar lag: the leader's high watermark minus our log end at the last
        fetch (C{None}: not fetched yet); 0 is caught up, which a
        replication throttle never holds back.
    """

    __slots__ = ("key", "log", "leaderEpoch", "truncating", "delayedUntil", "lag")

    def __init__(self, key, log, leaderEpoch: int) -> None:
        self.key = key
        self.log = log
        self.leaderEpoch = leaderEpoch
        self.truncating = True
        self.delayedUntil = 0.0
        self.lag = None


def truncationOffset(log, leaderEpoch: int, leaderEndOffset: int) -> tuple[int, bool]:
    """
    Kafka's C{getOffsetTruncationState}: where a follower truncates given
    the leader's answer C{(leaderEpoch, leaderEndOffset)} for the
    follower's latest epoch.

    @return: C{(offset, complete)}; not complete means ask again with the
        follower's new latest epoch.
    """
    end = log.logEndOffset
    if leaderEndOffset == UNDEFINED_OFFSET:
        # The leader knows no epoch of ours: what we know is committed.
        return min(log.highWatermark, end), True
    if leaderEpoch == UNDEFINED_EPOCH:
        return min(leaderEndOffset, end), True
    followerEpoch, followerEnd = log.epochs.endOffsetFor(leaderEpoch, end)
    if followerEnd == UNDEFINED_OFFSET:
        return min(leaderEndOffset, end), True
    if followerEpoch != leaderEpoch:
        return min(followerEnd, end), False
    return min(leaderEndOffset, followerEnd, end), True


def leaderLostData(log, currentLeaderEpoch: int, leaderEpoch: int, leaderEndOffset: int) -> bool:
    """
    Whether the leader's answer for its own (current) epoch ends below
    what this follower holds of that epoch: records of an epoch come only
    from its leader, so that leader lost some (a crash cut its log, and it
    leads in the same epoch as before).  Truncating to it would drop
    records that may be acknowledged.
    """
    if leaderEpoch != currentLeaderEpoch or leaderEndOffset == UNDEFINED_OFFSET:
        return False
    followerEpoch, followerEnd = log.epochs.endOffsetFor(leaderEpoch, log.logEndOffset)
    return followerEpoch == leaderEpoch and leaderEndOffset < min(followerEnd, log.logEndOffset)


class ReplicaFetcher:
    """
    @param directory: an L{IBrokerDirectory} (the leader's address).
    @param onFenced: C{onFenced(key, error)}: the leader refused the
        partition (it is no longer its leader, or our epoch is stale).
    @ivar quota: the follower side's replication throttle
        (L{kafkatwist.replication.quota.ReplicationQuota}) or C{None}: a
        partition it throttles here is left out of a fetch while the rate
        is over and the partition is not caught up (Kafka's
        C{shouldFollowerThrottle}); its fetched bytes are counted.
    """

    quota = None
    #: C{wake(key)}: re-check what waits on a partition whose high
    #: watermark moved here (a consumer's fetch from this follower)
    wake = None
    #: C{brokerEpoch()}: this broker's broker epoch, which its fetches
    #: carry (-1: none)
    brokerEpoch = staticmethod(lambda: -1)
    #: C{topicIdOf(topic)}: a topic's id (C{None}: not known)
    topicIdOf = staticmethod(lambda topic: None)

    def __init__(
        self,
        brokerId: int,
        sourceId: int,
        index: int,
        directory,
        config,
        onFenced=None,
        clock=None,
    ) -> None:
        self.brokerId = brokerId
        self.sourceId = sourceId
        self.index = index
        self.directory = directory
        self.maxBytes = config["replica.fetch.max.bytes"]
        self.responseMaxBytes = config["replica.fetch.response.max.bytes"]
        self.maxWaitMs = config["replica.fetch.wait.max.ms"]
        self.minBytes = config["replica.fetch.min.bytes"]
        self.backoff = config["replica.fetch.backoff.ms"] / 1000.0
        self.socketTimeout = config["replica.socket.timeout.ms"] / 1000.0
        self.onFenced = onFenced
        self.name = f"kafkatwist-replica-fetcher-{sourceId}-{index}"
        self._lock = threading.Condition()
        #: key -> FetchState; replaced whole under the lock
        self._partitions: dict = {}
        #: serialises a round's appends with removals
        self._appendLock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._connection: BrokerConnection | None = None
        self._now = clock or time.monotonic

    # -- the replica manager's side (any thread) ---------------------------------------

    def addPartition(self, key, partitionLog, leaderEpoch: int) -> None:
        with self._lock:
            partitions = dict(self._partitions)
            partitions[key] = FetchState(key, partitionLog, leaderEpoch)
            self._partitions = partitions
            self._lock.notify_all()

    def removePartition(self, key) -> None:
        with self._lock:
            if key not in self._partitions:
                return
            partitions = dict(self._partitions)
            del partitions[key]
            self._partitions = partitions
        # An append of this partition may be under way: wait for it.
        with self._appendLock:
            pass

    def partitionCount(self) -> int:
        return len(self._partitions)

    def maxLag(self) -> int:
        """
        The largest lag of this fetcher's partitions, as its thread last
        published each (any thread).
        """
        return max((s.lag for s in self._partitions.values() if s.lag), default=0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        connection = self._connection
        if connection is not None:
            connection.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the fetcher thread ------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._stopping and not self._partitions:
                    self._lock.wait()
                if self._stopping:
                    break
                partitions = self._partitions
            try:
                self._round(partitions)
            except KafkaConnectionError as e:
                log.info("{name}: {error}; retrying", name=self.name, error=e)
                self._closeConnection()
                self._sleep(self.backoff)
            except Exception:
                log.failure("{name}: fetch round failed", name=self.name)
                self._closeConnection()
                self._sleep(self.backoff)
        self._closeConnection()

    def _sleep(self, seconds: float) -> None:
        with self._lock:
            if not self._stopping:
                self._lock.wait(seconds)

    def _closeConnection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _connect(self) -> BrokerConnection:
        connection = self._connection
        if connection is not None and connection.connected:
            return connection
        endpoint = self.directory.endpoint(self.sourceId)
        if endpoint is None:
            raise KafkaConnectionError(f"broker {self.sourceId} is not alive")
        host, port = endpoint
        connection = BrokerConnection(
            host, port, clientId=f"broker-{self.brokerId}-fetcher-{self.index}",
            timeout=self.socketTimeout,
        )
        connection.connect()
        self._connection = connection
        return connection

    def _round(self, partitions: dict) -> None:
        now = self._now()
        ready = [s for s in partitions.values() if s.delayedUntil <= now]
        if not ready:
            self._sleep(min(s.delayedUntil for s in partitions.values()) - now)
            return
        connection = self._connect()
        truncating = [s for s in ready if s.truncating]
        if truncating:
            self._truncate(connection, truncating)
            return
        self._fetch(connection, ready)

    def _stillOurs(self, state: FetchState) -> bool:
        return self._partitions.get(state.key) is state

    # -- truncation ---------------------------------------------------------------------

    def _truncate(self, connection, states: list) -> None:
        asking = []
        for state in states:
            latest = state.log.epochs.latestEpoch
            if latest == UNDEFINED_EPOCH:
                # No epochs here: only what is below the high watermark is
                # known committed.
                self._truncateTo(state, state.log.highWatermark)
                continue
            asking.append((state, latest))
        if not asking:
            return
        cls = requestType(OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION)
        Topic = nested(cls, "OffsetForLeaderTopic")
        Partition = nested(cls, "OffsetForLeaderPartition")
        byTopic: dict = {}
        for state, latest in asking:
            byTopic.setdefault(state.key[0], []).append(
                make(
                    Partition,
                    partition=state.key[1],
                    current_leader_epoch=state.leaderEpoch,
                    leader_epoch=latest,
                )
            )
        request = make(
            cls,
            replica_id=self.brokerId,
            topics=tuple(make(Topic, topic=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
        )
        response = connection.request(
            OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, request
        )
        answers = {
            (t.topic, p.partition): p for t in response.topics for p in t.partitions
        }
        for state, _ in asking:
            answer = answers.get(state.key)
            if answer is None:
                continue
            error = ErrorCode(answer.error_code)
            if error != ErrorCode.none:
                self._onError(state, error)
                continue
            answerEpoch, answerEnd = int(answer.leader_epoch), int(answer.end_offset)
            if leaderLostData(state.log, state.leaderEpoch, answerEpoch, answerEnd):
                # Only the leader of an epoch writes in it: a leader
                # with less of its own epoch than this replica lost
                # data (it restarted without its unflushed tail and
                # still believes it leads).  What this replica holds may
                # be acknowledged: keep it, and wait for the controller
                # to elect a leader in a newer epoch.
                log.warn(
                    "{topic}-{partition}: leader {leader} ends epoch {epoch} at {offset}, below "
                    "this replica's {end}: it lost data; not truncating, waiting for a new leader",
                    topic=state.key[0], partition=state.key[1], leader=self.sourceId,
                    epoch=answerEpoch, offset=answerEnd, end=state.log.logEndOffset,
                )
                state.delayedUntil = self._now() + max(self.backoff, 1.0)
                continue
            offset, complete = truncationOffset(state.log, answerEpoch, answerEnd)
            self._truncateTo(state, offset, complete)

    def _truncateTo(self, state: FetchState, offset: int, complete: bool = True) -> None:
        with self._appendLock:
            if not self._stillOurs(state):
                return
            partitionLog = state.log
            if offset < partitionLog.logEndOffset:
                log.info(
                    "{topic}-{partition}: truncating from {end} to {offset} to follow "
                    "broker {leader} in epoch {epoch}",
                    topic=state.key[0], partition=state.key[1], end=partitionLog.logEndOffset,
                    offset=offset, leader=self.sourceId, epoch=state.leaderEpoch,
                )
                partitionLog.truncateTo(offset)
            if complete:
                state.truncating = False

    # -- fetching ----------------------------------------------------------------------------

    def _fetch(self, connection, states: list) -> None:
        brokerEpoch = self.brokerEpoch()
        # One request a round, as Kafka's fetcher sends: in a cluster Fetch
        # v15 with the broker epoch (KIP-903), every topic by the cluster's
        # id (an internal topic too: its leader resolves the cluster's id
        # for a replica's fetch); without one v11, topics by name.
        if brokerEpoch >= 0:
            version = FETCH_VERSION
            topicIds: dict = {}

            def keyOf(state):
                topic = state.key[0]
                if topic not in topicIds:
                    topicIds[topic] = self.topicIdOf(topic)
                return topicIds[topic]
        else:
            version = NAMED_FETCH_VERSION

            def keyOf(state):
                return state.key[0]
        Partition = nested(requestType(FETCH, version), "FetchPartition")
        byTopic: dict = {}
        keyed = {}
        # Under the append lock, and only partitions still ours: once a
        # removal returned, no request tells this leader a log end that
        # another leader's data made (the old leader would count it as
        # replicated and acknowledge what this replica does not hold).
        with self._appendLock:
            held = False
            for state in states:
                if not self._stillOurs(state):
                    continue
                if self._throttled(state):
                    held = True
                    continue
                topicKey = keyOf(state)
                if topicKey is None:
                    # No log of the topic any more, or not the cluster's
                    # id: the controller's next word settles it.
                    state.delayedUntil = self._now() + self.backoff
                    continue
                keyed[(topicKey, state.key[1])] = state
                byTopic.setdefault(topicKey, []).append(
                    make(
                        Partition,
                        partition=state.key[1],
                        current_leader_epoch=state.leaderEpoch,
                        fetch_offset=state.log.logEndOffset,
                        log_start_offset=state.log.logStartOffset,
                        partition_max_bytes=self.maxBytes,
                    )
                )
        if not byTopic:
            if held:
                # Only throttled partitions: back off, as Kafka's fetcher
                # does with nothing to fetch.
                self._sleep(self.backoff)
            return
        self._fetchAs(connection, version, brokerEpoch if version >= 15 else -1, byTopic, keyed)

    def _fetchAs(self, connection, version: int, brokerEpoch: int, byTopic: dict, states: dict) -> None:
        cls = requestType(FETCH, version)
        Topic = nested(cls, "FetchTopic")
        topicField = "topic_id" if version >= 13 else "topic"
        replica = {"replica_id": self.brokerId}
        if version >= 15:
            replica = {"replica_state": make(
                nested(cls, "ReplicaState"), replica_id=self.brokerId, replica_epoch=brokerEpoch
            )}
        request = make(
            cls,
            cluster_id=None,
            **replica,
            max_wait=ms(self.maxWaitMs),
            min_bytes=self.minBytes,
            max_bytes=self.responseMaxBytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=tuple(make(Topic, **{topicField: t}, partitions=tuple(ps)) for t, ps in byTopic.items()),
            forgotten_topics_data=(),
            rack_id="",
        )
        response = connection.request(
            FETCH, version, request, timeout=self.socketTimeout + self.maxWaitMs / 1000.0
        )
        for topic in response.responses:
            for p in topic.partitions:
                state = states.get((getattr(topic, topicField), p.partition_index))
                if state is not None:
                    self._onPartition(connection, state, p)

    def _onPartition(self, connection, state: FetchState, p) -> None:
        error = ErrorCode(p.error_code)
        if error == ErrorCode.offset_out_of_range:
            self._outOfRange(connection, state)
            return
        if error != ErrorCode.none:
            self._onError(state, error)
            return
        records = p.records
        with self._appendLock:
            if not self._stillOurs(state):
                return
            partitionLog = state.log
            try:
                if records:
                    partitionLog.appendAsFollower(records, _wallMs(), state.leaderEpoch)
            except KafkaError as e:
                log.warn(
                    "{topic}-{partition}: replicated data refused ({error}); finding the "
                    "divergence again",
                    topic=state.key[0], partition=state.key[1], error=e,
                )
                state.truncating = True
                return
            end = partitionLog.logEndOffset
            state.lag = max(0, int(p.high_watermark) - end)
            quota = self.quota
            if records and quota is not None and quota.throttles(
                partitionLog.config.followerThrottledReplicas, state.key[1]
            ):
                quota.record(len(records))
            leaderStart = int(p.log_start_offset)
            if partitionLog.logStartOffset < leaderStart <= end:
                partitionLog.deleteRecordsBefore(leaderStart)
            hw = min(int(p.high_watermark), end)
            moved = hw != partitionLog.highWatermark
            partitionLog.setHighWatermark(hw)
        if moved and self.wake is not None:
            self.wake(state.key)

    def _outOfRange(self, connection, state: FetchState) -> None:
        """
        Our fetch offset is outside the leader's log: below its start (we
        were away through its retention) start again at its start; above
        its end, find the divergence again.
        """
        cls = requestType(LIST_OFFSETS, LIST_OFFSETS_VERSION)
        Topic = nested(cls, "ListOffsetsTopic")
        Partition = nested(cls, "ListOffsetsPartition")
        request = make(
            cls,
            replica_id=self.brokerId,
            isolation_level=0,
            topics=(
                make(
                    Topic,
                    name=state.key[0],
                    partitions=(
                        make(
                            Partition,
                            partition_index=state.key[1],
                            current_leader_epoch=state.leaderEpoch,
                            timestamp=EARLIEST,
                        ),
                    ),
                ),
            ),
        )
        response = connection.request(LIST_OFFSETS, LIST_OFFSETS_VERSION, request)
        for topic in response.topics:
            for p in topic.partitions:
                if ErrorCode(p.error_code) != ErrorCode.none:
                    self._onError(state, ErrorCode(p.error_code))
                    return
                leaderStart = int(p.offset)
                with self._appendLock:
                    if not self._stillOurs(state):
                        return
                    if state.log.logEndOffset < leaderStart:
                        log.info(
                            "{topic}-{partition}: the leader starts at {offset}; starting "
                            "there", topic=state.key[0], partition=state.key[1],
                            offset=leaderStart,
                        )
                        state.log.truncateFullyAndStartAt(leaderStart)
                    else:
                        state.truncating = True
                return

    def _throttled(self, state: FetchState) -> bool:
        quota = self.quota
        return (
            quota is not None
            and state.lag != 0
            and quota.throttles(state.log.config.followerThrottledReplicas, state.key[1])
            and quota.exceeded()
        )

    def _onError(self, state: FetchState, error: ErrorCode) -> None:
        state.delayedUntil = self._now() + self.backoff
        if error in _WAIT_FOR_CONTROLLER and self.onFenced is not None:
            self.onFenced(state.key, error)
        if error == ErrorCode.unknown_leader_epoch:
            # The leader has not heard of this epoch yet: try again soon.
            return
        log.debug(
            "{topic}-{partition}: leader {leader} answered {error}",
            topic=state.key[0], partition=state.key[1], leader=self.sourceId, error=error.name,
        )


def _wallMs() -> int:
    return int(time.time() * 1000)
