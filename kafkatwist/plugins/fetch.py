"""
Fetch: whole batches from the log, as file regions a PLAINTEXT connection
sends with C{sendfile}; a fetch that finds fewer than C{min_bytes} waits in
the fetch purgatory -- no thread held, no polling -- until an append to one
of its partitions satisfies it or C{max_wait} passes on the clock of the
connection's reactor.

Fetch v0-3 carry message formats v0/v1: their answers are down-converted
(L{kafkatwist.plugins.fetch_downconvert}); only they pay for it.

With an authorizer, each topic needs READ (TOPIC_AUTHORIZATION_FAILED for
its partitions otherwise).

Fetch v7+ keeps incremental fetch sessions (KIP-227,
L{kafkatwist.plugins.fetchsessions}): a request with a session is looked at by the
sessions' owner first, read here as any other, and its answer trimmed to
the partitions with news by the owner again.  A sessionless request (id 0,
epoch -1, or any request below v7) never goes near the owner.

read_committed (isolation level 1): each partition is read up to its last
stable offset, with the aborted transactions the records overlap (the
consumer drops their batches); a long poll waits for the last stable offset
to move, which the marker that ends a transaction does (its append wakes
the partition's key).
"""

from __future__ import annotations

from twisted.python.failure import Failure

from kafkatwist.config import TLS_PROTOCOLS
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import FETCH
from kafkatwist.plugins.fetchsessions import FINAL_EPOCH, INVALID_SESSION_ID, FetchContext
from kafkatwist.protocol.codec import BYTES_TYPES, chunkLength, closeRegions
from kafkatwist.plugins.fetch_downconvert import LEGACY_MAX_VERSION, encodeDownConverted
from kafkatwist.protocol.fetch import (
    MAX_VERSION,
    TOPIC_IDS_FROM,
    FetchRequest,
    PartitionData,
    decodeFetchRequest,
    encodeFetchResponse,
    encodeSmallFetchAnswer,
    fetchRequestFrom,
    readSmallFetch,
)
from kafkatwist.util.purgatory import DelayedOperation
from kafkatwist.replication.fencing import NO_EPOCH, checkReplica
from kafkatwist.replication.state import FOLLOWER
from kafkatwist.quota.store import CONSUMER_BYTE_RATE
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkatwist.security.checks import authorize

#: a partition's records up to this size answer a Fetch as bytes, read with
#: their batch headers, rather than as a file region: one socket write and
#: no descriptor of their own, where a region costs a C{dup}, a C{close}
#: and three writes (the head, C{sendfile}, the tail) -- cheaper for the
#: small batches a consumer at the tail gets: measured 0.7x the broker CPU
#: per Fetch of one batch of 1 to 300 100-byte records (31 KB), 1.07x at 600
#: (62 KB; bench/RESULTS.md, "Small Fetch CPU")
INLINE_RECORDS = 32 * 1024

READ_COMMITTED = 1
SESSIONS_FROM = 7
#: KIP-392: a consumer's fetch carries its rack (Kafka's ClientMetadata),
#: may be served by a follower, and may be told a preferred read replica
CLIENT_METADATA_FROM = 11
#: a follower fetch refused CLUSTER_ACTION: every partition answers
#: TOPIC_AUTHORIZATION_FAILED
REFUSED_REPLICA = -1000


class _Wanted:
    """
    One partition a fetch asks for.
    """

    __slots__ = (
        "topic", "key", "partition", "offset", "maxBytes", "log", "error", "throttle", "preferred",
    )

    def __init__(self, topic, key, partition, offset, maxBytes, log, error):
        self.topic = topic
        self.key = key
        self.partition = partition
        self.offset = offset
        self.maxBytes = maxBytes
        self.log = log
        self.error = error
        #: a follower's fetch of a partition this leader throttles: its
        #: L{kafkatwist.replication.quota.LeaderThrottle}
        self.throttle = None
        #: the replica a consumer should read this partition from
        #: (KIP-392), when not this leader: nothing is read
        self.preferred = None


class FetchHandler(Handler):
    """
    @ivar maxWaitMs: the longest a fetch may wait for C{min_bytes}.
    """

    apiKey = FETCH
    minVersion = 0
    maxVersion = MAX_VERSION
    #: its own decoder (L{kafkatwist.protocol.fetch}): the request's
    #: partitions straight from the frame, bounds checked as it reads.  A
    #: request decoded by C{kio} (a wrapper without it, a test) is taken
    #: as well.
    decodeRequest = staticmethod(decodeFetchRequest)

    def __init__(self, broker, wrapped=None) -> None:
        super().__init__(broker, wrapped)
        # Kafka takes a fetch's max_wait_ms as given; clients send 500 ms
        # (fetch.max.wait.ms), far below their request timeouts.  A wait near
        # 2^31 ms would park the connection -- its purgatory entry, timer and
        # muted socket -- for weeks.  connections.max.idle.ms is the bound
        # because it is the broker's own answer to "how long may a
        # connection stay silent": a parked fetch is exactly that, and the
        # idle sweep, which skips connections with a request in flight,
        # would otherwise never end it.  Clients never notice: their
        # request timeouts are shorter still.
        self.maxWaitMs = broker.config["connections.max.idle.ms"]
        #: the most one Fetch answers, whatever its max_bytes asks (Kafka's
        #: fetch.max.bytes, KIP-541; the first batch still goes out whole)
        self.fetchMaxBytes = broker.config["fetch.max.bytes"]
        self.sessions = broker.fetchSessions

    def answerFrame(self, context, frame, offset):
        """
        The commonest Fetch, answered straight from its frame (the handler
        pool calls this before it decodes anything): a consumer's v12-v16
        Fetch without a session, read_uncommitted, of one partition this
        broker serves from an offset below its high watermark, no rack, on
        a PLAINTEXT connection of a broker without an authorizer, with no
        consumer_byte_rate quota or throttle in force.  The same checks
        (leader epoch, leadership), the same read and bytes counted as
        L{handle}, and the same answer, encoded in one piece.

        @return: C{NotImplemented} for any other request, or one that would
            wait for C{min_bytes} or answer an error (nothing was done:
            L{handle} answers it); else the response chunks (size prefix
            included).
        """
        version = context.apiVersion
        if version < 12:
            return NotImplemented
        found = readSmallFetch(version, frame, offset)
        if found is None:
            return NotImplemented
        broker = self.broker
        if (
            broker.authorizer is not None
            or context.securityProtocol in TLS_PROTOCOLS
            or getattr(context, "throttleMs", 0) > 0
        ):
            return NotImplemented
        quotas = broker.clientQuotas
        if quotas is not None and quotas.active(CONSUMER_BYTE_RATE):
            return NotImplemented
        topicKey, partition, epoch, fetchOffset, partitionMaxBytes, maxWaitMs, minBytes, maxBytes = found
        logManager = broker.logManager
        name = logManager.topicName(topicKey) if version >= TOPIC_IDS_FROM else topicKey
        log = logManager.getLog(name, partition) if name is not None else None
        if log is None:
            return NotImplemented
        # As _plan for a consumer's fetch (v11+: a follower serves it too).
        if (epoch != NO_EPOCH or not log.isLeader) and checkReplica(
            log, epoch, not self._following(name, partition)
        ) is not None:
            return NotImplemented
        if not log.logStartOffset <= fetchOffset < log.highWatermark:
            return NotImplemented
        if maxBytes <= 0 or maxBytes > self.fetchMaxBytes:
            maxBytes = self.fetchMaxBytes
        if minBytes > maxBytes:
            minBytes = maxBytes
        try:
            info = log.read(
                fetchOffset, min(partitionMaxBytes, maxBytes), True, False, False, INLINE_RECORDS
            )
        except KafkaError:
            return NotImplemented
        records = info.records
        size = len(records) if isinstance(records, BYTES_TYPES) else records.length
        if not size or (size < minBytes and min(max(0, maxWaitMs), self.maxWaitMs) > 0):
            # Nothing after all, or too little: handle reads it again (and
            # waits).
            if not isinstance(records, BYTES_TYPES):
                records.close()
            return NotImplemented
        broker.topicBytes.fetched(name, size)
        # (the top level's NONE and the partition's)
        broker.requestErrors.count(FETCH, 0, 2)
        return encodeSmallFetchAnswer(
            version, context.correlationId, topicKey, partition, info.highWatermark,
            info.lastStableOffset, info.logStartOffset, records, size,
        )

    def handle(self, context, request):
        version = context.apiVersion
        if request.__class__ is not FetchRequest:
            request = fetchRequestFrom(version, request)
        replicaId = request.replica_id
        if replicaId >= 0 and not self.allowed(
            context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ):
            # Kafka's answer to a follower fetch without CLUSTER_ACTION.
            replicaId = REFUSED_REPLICA
        if version >= SESSIONS_FROM and (
            request.session_id != INVALID_SESSION_ID or request.session_epoch != FINAL_EPOCH
        ):
            return self._sessionFetch(context, request, version, replicaId)
        plan = self._plan(
            version, request.entries, context, replicaId,
            (request.rack_id or None) if version >= CLIENT_METADATA_FROM else None,
        )
        return self._fetch(context, request, version, plan, replicaId)

    def _fetch(self, context, request, version, plan, replicaId, session=None, pending=None):
        """
        Read C{plan} and answer, now or once C{min_bytes} arrived.  With a
        L{FetchContext} the answer goes to C{pending} through the sessions'
        owner.
        """
        maxWaitMs = min(max(0, request.max_wait_ms), self.maxWaitMs)
        maxBytes = request.max_bytes
        if maxBytes <= 0 or maxBytes > self.fetchMaxBytes:
            maxBytes = self.fetchMaxBytes
        minBytes = min(request.min_bytes, maxBytes)
        readCommitted = request.isolation_level == READ_COMMITTED
        fromFollower = replicaId >= 0
        if fromFollower:
            self._recordFollower(replicaId, plan, request, version)
        topics, total, errors = self._read(plan, maxBytes, readCommitted, fromFollower)
        if maxWaitMs == 0 or total >= minBytes or errors or not plan:
            _account(self.broker, plan, topics)
            if session is None:
                if version <= LEGACY_MAX_VERSION:
                    return encodeDownConverted(version, plan, topics)
                return encodeFetchResponse(version, topics)
            self._respond(version, context.clock, session, topics, pending)
            return pending.deferred
        _close(topics)
        if pending is None:
            pending = context.respondLater()
        operation = DelayedFetch(
            context.clock, self, version, plan, minBytes, maxBytes, readCommitted, pending, session,
            fromFollower,
        )
        self.broker.fetchPurgatory.tryCompleteElseWatch(
            operation,
            {w.key for _, wanted in plan for w in wanted if w.log is not None},
            maxWaitMs / 1000.0,
        )
        return pending.deferred

    def _sessionFetch(self, context, request, version, replicaId):
        pending = context.respondLater()

        def opened(session):
            try:
                if isinstance(session, Failure):
                    pending.complete(session)
                elif session.kind == FetchContext.ERROR:
                    pending.complete(
                        encodeFetchResponse(version, [], session.errorCode, INVALID_SESSION_ID)
                    )
                else:
                    plan = self._plan(
                        version, session.entries, context, replicaId,
                        (request.rack_id or None) if version >= CLIENT_METADATA_FROM else None,
                    )
                    self._fetch(context, request, version, plan, replicaId, session, pending)
            except Exception:
                pending.complete(Failure())

        forgotten = [(topicKey, p) for topicKey, partitions in request.forgotten for p in partitions]
        self.sessions.open(
            _nowMs(context.clock), request.session_id, request.session_epoch,
            version >= TOPIC_IDS_FROM, replicaId >= 0, request.entries,
            forgotten, opened,
        )
        return pending.deferred

    def _respond(self, version, clock, session, topics, pending) -> None:
        """
        Hand what was read to the sessions' owner, which keeps the
        partitions to send; encode those and complete C{pending}.
        """
        results = [(topicKey, p) for topicKey, partitions in topics for p in partitions]

        def chosen(outcome):
            if isinstance(outcome, Failure):
                _close(topics)
                pending.complete(outcome)
                return
            errorCode, sessionId, sent = outcome
            kept = {id(p) for _, p in sent}
            closeRegions([p.records for _, p in results if id(p) not in kept])
            try:
                answer = encodeFetchResponse(version, _grouped(sent), errorCode, sessionId)
            except Exception:
                _close(topics)
                answer = Failure()
            pending.complete(answer)

        self.sessions.respond(_nowMs(clock), session, results, chosen)

    def _recordFollower(self, replicaId, plan, request, version) -> None:
        """
        Tell the replica manager how far the follower got: its fetch offset
        is its log end; and its log start offset (Fetch v5+: the leader's
        low watermark, which DeleteRecords waits for).
        """
        replicaManager = self.broker.replicaManager
        if replicaManager is None:
            return
        starts = {}
        for entry, (_, start) in zip(request.entries, request.extras):
            if start >= 0:
                starts[(entry[0], entry[1])] = start
        # Only offsets this log has: one past its end (a replica with
        # another leader's data) is answered OFFSET_OUT_OF_RANGE, and must
        # not count as replicated.
        fetched = []
        for topicKey, wanted in plan:
            for w in wanted:
                log = w.log
                if log is not None:
                    end = log.logEndOffset
                    if log.logStartOffset <= w.offset <= end:
                        fetched.append((w.key, w.offset, end, starts.get((topicKey, w.partition))))
        if fetched:
            replicaManager.recordFollowerFetch(replicaId, fetched, request.replica_epoch)

    def _clusterInternal(self):
        """
        For a replica's fetch in a cluster: C{f(topic id)}, the internal
        topic whose id the cluster has is that id (C{None}: none).  Each
        broker creates the internal topics itself, with an id of its own;
        its followers fetch them by the cluster's id, as every topic.
        """
        replicaManager = self.broker.replicaManager
        directory = getattr(replicaManager, "directory", None)
        clusterTopicId = getattr(directory, "topicId", None)
        if clusterTopicId is None:
            return None
        names = getattr(directory, "locallyCreatedTopics", ())

        def internalTopic(topicId):
            for name in names:
                if clusterTopicId(name) == topicId:
                    return name
            return None

        return internalTopic

    @staticmethod
    def _encode(version, plan, topics):
        if version <= LEGACY_MAX_VERSION:
            return encodeDownConverted(version, plan, topics)
        return encodeFetchResponse(version, topics)

    def _plan(
        self, version, entries, context, replicaId=-1, clientRack=None
    ) -> list[tuple[object, list[_Wanted]]]:
        """
        @param entries: C{(topic key, partition, fetch offset, max bytes,
            current leader epoch)} (L{FetchRequest.entries}); runs of one topic
            become one topic of the answer.
        @param clientRack: a consumer's C{rack_id} (v11+).
        """
        logManager = self.broker.logManager
        authorizer = self.authorizer
        quotas = self.broker.replicationQuotas if replicaId >= 0 else None
        # Kafka's fetchOnlyFromLeader is false for a consumer's fetch with
        # client metadata: a follower serves it up to its high watermark.
        fromAnyReplica = replicaId < 0 and version >= CLIENT_METADATA_FROM
        replicaManager = self.broker.replicaManager if fromAnyReplica else None
        selecting = (
            replicaManager is not None
            and bool(clientRack)
            and getattr(replicaManager, "replicaSelector", None) is not None
        )
        nowMs = _nowMs(context.clock) if selecting else 0
        clusterInternal = self._clusterInternal() if replicaId >= 0 and version >= TOPIC_IDS_FROM else None
        plan = []
        previous = _NO_TOPIC
        for topicKey, partition, offset, partitionMaxBytes, epoch in entries:
            if topicKey != previous:
                previous = topicKey
                if version >= TOPIC_IDS_FROM:
                    # librdkafka's Fetch (v16): one look-up per topic, not
                    # a copy of the topic table per request.
                    name = clusterInternal(topicKey) if clusterInternal is not None else None
                    if name is None:
                        name = logManager.topicName(topicKey)
                    missing = ErrorCode.unknown_topic_id
                else:
                    name = topicKey
                    missing = ErrorCode.unknown_topic_or_partition
                if replicaId == REFUSED_REPLICA or (
                    authorizer is not None
                    and replicaId < 0
                    and name is not None
                    and not authorize(authorizer, context, AclOperation.READ, ResourceType.TOPIC, name)
                ):
                    # READ refused: no log is looked at.
                    name, missing = None, ErrorCode.topic_authorization_failed
                wanted = []
                plan.append((topicKey, wanted))
            log = logManager.getLog(name, partition) if name is not None else None
            error = None if log is not None else missing
            if log is not None:
                # KIP-320 fencing and leadership: two attribute reads.
                if epoch != NO_EPOCH or not log.isLeader:
                    error = checkReplica(
                        log, epoch, not (fromAnyReplica and self._following(name, partition))
                    )
                    if error is not None:
                        log = None
            wanted.append(
                _Wanted(
                    topicKey,
                    (name, partition),
                    partition,
                    offset,
                    partitionMaxBytes,
                    log,
                    error,
                )
            )
            if quotas is not None and log is not None:
                wanted[-1].throttle = quotas.leaderThrottle(log, partition, replicaId)
            if selecting and log is not None and log.isLeader:
                wanted[-1].preferred = replicaManager.findPreferredReadReplica(
                    log, offset, clientRack, context.listenerName, nowMs
                )
        return plan

    def _following(self, topic, partition) -> bool:
        """
        Whether this broker follows the partition (the replica manager
        published that role): only then does it serve a consumer.
        """
        replicaManager = self.broker.replicaManager
        if replicaManager is None:
            return False
        role = replicaManager.leaderEpochs().get((topic, partition))
        return role is not None and role[0] == FOLLOWER

    @staticmethod
    def _read(plan, maxBytes, readCommitted, fromFollower=False):
        """
        Read every partition, Kafka's way: each partition up to its own
        limit and what is left of the response's; the first partition with
        data may exceed both by one batch, so a consumer never stalls on a
        batch larger than its limits.

        @return: (topics for the encoder, bytes read, whether to answer
            now: an error, or a partition with a preferred read replica).
        """
        remaining = maxBytes
        total = 0
        errors = False
        minOneBatch = True
        topics = []
        aborted = () if readCommitted else None
        for topicKey, wanted in plan:
            partitions = []
            for w in wanted:
                log = w.log
                if log is None:
                    partitions.append(PartitionData(w.partition, w.error))
                    errors = True
                    continue
                if w.preferred is not None:
                    # Kafka skips the read and answers at once: the
                    # consumer goes to the preferred replica.
                    partitions.append(
                        PartitionData(
                            w.partition, ErrorCode.none, log.highWatermark, log.lastStableOffset,
                            log.logStartOffset, b"", aborted, w.preferred,
                        )
                    )
                    errors = True
                    continue
                if w.offset == log.logEndOffset and w.offset >= log.logStartOffset:
                    # Caught up: nothing to read, only the offsets to tell
                    # (most partitions of a consumer's every poll).
                    partitions.append(
                        PartitionData(
                            w.partition, ErrorCode.none, log.highWatermark, log.lastStableOffset,
                            log.logStartOffset, b"", aborted,
                        )
                    )
                    continue
                if (
                    w.throttle is not None
                    and log.logStartOffset <= w.offset <= log.logEndOffset
                    and w.throttle.holdsBack()
                ):
                    # A follower out of the ISR, over the replication
                    # throttle: no data for now (Kafka's shouldLeaderThrottle,
                    # which empties what was read: an offset out of range
                    # is still answered as such, below).
                    partitions.append(
                        PartitionData(
                            w.partition, ErrorCode.none, log.highWatermark, log.lastStableOffset,
                            log.logStartOffset, b"", aborted,
                        )
                    )
                    continue
                try:
                    info = log.read(
                        w.offset, min(w.maxBytes, remaining), minOneBatch, readCommitted,
                        fromFollower, INLINE_RECORDS,
                    )
                except KafkaError as e:
                    partitions.append(
                        PartitionData(
                            w.partition, e.code, log.highWatermark, log.lastStableOffset,
                            log.logStartOffset,
                        )
                    )
                    errors = True
                    continue
                records = info.records
                size = chunkLength(records)
                if size:
                    minOneBatch = False
                    total += size
                    remaining = max(0, remaining - size)
                elif not isinstance(records, BYTES_TYPES):
                    records.close()
                    records = b""
                partitions.append(
                    PartitionData(
                        w.partition,
                        ErrorCode.none,
                        info.highWatermark,
                        info.lastStableOffset,
                        info.logStartOffset,
                        records,
                        info.abortedTransactions,
                    )
                )
            topics.append((topicKey, partitions))
        return topics, total, errors


class DelayedFetch(DelayedOperation):
    """
    A fetch waiting for C{minBytes}.  C{tryComplete} runs in the handler
    thread of the append that may satisfy it.  Its timer fires on the
    connection's Processor, which never reads the log: an idle long poll
    (every offset at its log's end) is answered there from the logs' offsets
    alone, anything else is read on a handler thread (the purgatory's
    reaper).
    """

    def __init__(
        self, clock, handler, version, plan, minBytes, maxBytes, readCommitted, pending, session=None,
        fromFollower=False,
    ):
        super().__init__(clock)
        #: the L{FetchContext} of a request with a session, else C{None}
        self.session = session
        #: a follower's fetch reads to the log end, a consumer's to the
        #: high watermark
        self.fromFollower = fromFollower
        self.handler = handler
        self.version = version
        self.plan = plan
        self.minBytes = minBytes
        self.maxBytes = maxBytes
        self.readCommitted = readCommitted
        #: the L{IPendingResponse} the answer goes to
        self.pending = pending
        # What a min_bytes check read and found enough: sent as it is.
        self._ready = None

    def tryComplete(self) -> bool:
        # Cheap test first: nothing appended past any fetch offset (nothing
        # stable, for read_committed) means nothing to read, whatever
        # min_bytes is.
        if self.readCommitted:
            readable = any(
                w.log is not None and w.log.lastStableOffset > w.offset
                for _, wanted in self.plan
                for w in wanted
            )
        elif self.fromFollower:
            # A partition held back by a replication throttle does not
            # complete a follower's fetch (Kafka's DelayedFetch).
            readable = any(
                w.log is not None and w.log.logEndOffset > w.offset
                and (w.throttle is None or not w.throttle.holdsBack())
                for _, wanted in self.plan
                for w in wanted
            )
        else:
            readable = any(
                w.log is not None and w.log.highWatermark > w.offset
                for _, wanted in self.plan
                for w in wanted
            )
        if not readable:
            return False
        if self.minBytes <= 1:
            return self.forceComplete()
        topics, total, errors = FetchHandler._read(
            self.plan, self.maxBytes, self.readCommitted, self.fromFollower
        )
        if total >= self.minBytes or errors:
            self._ready = topics
            if self.forceComplete():
                return True
            self._ready = None
        _close(topics)
        return False

    def canExpireHere(self) -> bool:
        # The common expiry -- a consumer polling an idle partition -- needs
        # no read: answer it with offsets only, saving a hop to a handler
        # thread and back.  Not with a session: its owner's work never runs
        # on a Processor (work queued behind it would read the log there).
        if self.session is not None:
            return False
        topics = []
        aborted = () if self.readCommitted else None
        for topicKey, wanted in self.plan:
            partitions = []
            for w in wanted:
                log = w.log
                if log is None:
                    partitions.append(PartitionData(w.partition, w.error))
                    continue
                end = log.logEndOffset
                hw = log.highWatermark
                stable = log.lastStableOffset
                # At the end (read_committed: at the last stable offset,
                # which may be below the end; a consumer: at the high
                # watermark).
                limit = stable if self.readCommitted else end if self.fromFollower else hw
                if w.offset != limit or w.offset < log.logStartOffset:
                    return False
                partitions.append(
                    PartitionData(
                        w.partition, ErrorCode.none, hw, stable, log.logStartOffset,
                        b"", aborted,
                    )
                )
            topics.append((topicKey, partitions))
        self._ready = topics
        return True

    def onComplete(self) -> None:
        try:
            topics = self._topics()
            _account(self.handler.broker, self.plan, topics)
            if self.session is not None:
                self.handler._respond(self.version, self.clock, self.session, topics, self.pending)
                return
            answer = self.handler._encode(self.version, self.plan, topics)
        except Exception:
            # Whatever broke, the request must not stay in flight forever:
            # a failure closes the connection with a log line.
            answer = Failure()
        self.pending.complete(answer)

    def _topics(self):
        topics, self._ready = self._ready, None
        if topics is None:
            # The topic may have been deleted (DeleteTopics wakes parked
            # fetches): look every log up again.
            logManager = self.handler.broker.logManager
            for _, wanted in self.plan:
                for w in wanted:
                    if w.log is not None:
                        w.log = logManager.getLog(*w.key)
                        if w.log is None:
                            w.error = ErrorCode.unknown_topic_or_partition
            topics, _, _ = FetchHandler._read(
                self.plan, self.maxBytes, self.readCommitted, self.fromFollower
            )
        return topics


_NO_TOPIC = object()


def _grouped(results) -> list[tuple[object, list[PartitionData]]]:
    """
    C{(topic key, PartitionData)} as the encoder takes them: consecutive
    partitions of one topic under one topic, as Kafka's FetchResponse does.
    """
    topics = []
    previous = _NO_TOPIC
    for topicKey, data in results:
        if topicKey != previous:
            previous = topicKey
            partitions = []
            topics.append((topicKey, partitions))
        partitions.append(data)
    return topics


def _nowMs(clock) -> int:
    return int(clock.seconds() * 1000)


def _account(broker, plan, topics) -> None:
    fetched = broker.topicBytes.fetched
    for (_, wanted), (_, partitions) in zip(plan, topics):
        size = 0
        throttled = False
        for w, p in zip(wanted, partitions):
            records = p.records
            if records:
                size += chunkLength(records)
                throttled = throttled or w.throttle is not None
        if size:
            fetched(wanted[0].key[0], size)
            if throttled:
                # What a leader sends for throttled partitions counts
                # against its replication throttle (to followers in the
                # ISR too).
                for w, p in zip(wanted, partitions):
                    if w.throttle is not None and p.size:
                        w.throttle.record(p.size)


def _close(topics) -> None:
    closeRegions([p.records for _, partitions in topics for p in partitions])


fetch = HandlerPlugin("builtin.fetch", FETCH, FetchHandler, priority=0)
