"""
Incremental fetch sessions (KIP-227): the broker remembers what a fetcher
asks for, so that the fetcher sends only the partitions whose fetch offset
changed, and the broker answers only the partitions with news -- records,
a moved high watermark, last stable offset or log start offset, or an
error.  A consumer of 1,000 quiet partitions then sends and receives a few
bytes per poll instead of 1,000 partitions each way.

Kafka's rules, kept here:

  - The request's (session id, epoch) says what it is: epoch 0 opens a new
    session (closing the one named, if any); epoch -1 is a sessionless full
    fetch (closing the one named); any other epoch is the next request of
    session C{id}, which must exist (FETCH_SESSION_ID_NOT_FOUND) and expect
    exactly that epoch (INVALID_FETCH_SESSION_EPOCH).  A session of topic
    ids (Fetch v13+) is used by v13+ requests only, and a session of names
    by older ones (FETCH_SESSION_TOPIC_ID_ERROR).
  - An incremental request adds or updates the partitions it names and
    drops the forgotten ones; a session left empty is closed.  The broker
    reads every partition of the session, in the session's order, and a
    partition whose read returned records moves to the end of that order,
    so a response filled by the first partitions does not starve the last.
  - Slots: C{max.incremental.fetch.session.cache.slots} divided among 8
    shards (Kafka 3.8+), a new session going to the next shard in turn.  A
    shard with no free slot evicts, in this order: a session unused for two
    minutes; else the least valuable evictable session -- unprivileged
    before privileged (followers), then fewest partitions -- if the new one
    is worth more (privileged over unprivileged, else more partitions).
    A session younger than two minutes (as of its last use) can only be
    evicted by a privileged one, and only if it is itself unprivileged.
    Without a slot the fetch is answered in full with session id 0.

Kafka leaves the last stable offset out of what makes a partition "news";
it is in here as well (a read_committed consumer waits on it), which only
ever sends a partition that Kafka would have left out.

Threads: L{FetchSessionCache} is plain state with no locks.  It belongs to
L{FetchSessions}' owner, a L{SerialExecutor}: every look-up, update,
creation and eviction runs there, one at a time.
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Callable
from typing import NamedTuple

from twisted.python.failure import Failure

from kafkatwist.util.executor import SerialExecutor, runHere
from kafkatwist.errors import ErrorCode

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "FetchContext",
    "FetchSessionCache",
    "FetchSessions",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EVICTION_MS = 120_000
#: Kafka's NumFetchSessionCacheShards
SHARDS = 8
_INT_MAX = 0x7FFFFFFF


def nextEpoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == _INT_MAX:
        return 1
    return epoch + 1


class CachedPartition:
    """
    What a session remembers of one partition: the fetcher's last request
    parameters and what it was last told.
    """

    __slots__ = (
        "fetchOffset", "maxBytes", "leaderEpoch", "highWatermark", "lastStableOffset",
        "logStartOffset",
    )

    def __init__(
        self, fetchOffset, maxBytes, leaderEpoch, highWatermark=-1, lastStableOffset=-1,
        logStartOffset=-1,
    ):
        self.fetchOffset = fetchOffset
        self.maxBytes = maxBytes
        #: the fetcher's current leader epoch (KIP-320), -1 if not given
        self.leaderEpoch = leaderEpoch
        self.highWatermark = highWatermark
        self.lastStableOffset = lastStableOffset
        self.logStartOffset = logStartOffset

    def mustRespond(self, data) -> bool:
        """
        Whether C{data} (a L{kafkatwist.protocol.fetch.PartitionData}) is
        news, remembering what it tells.  A partition with an error is
        always sent, and its high watermark forgotten so that the partition
        is sent again once the error is gone.
        """
        news = data.size > 0 or data.preferredReadReplica >= 0
        if data.errorCode:
            self.highWatermark = -1
            return True
        if self.highWatermark != data.highWatermark:
            self.highWatermark = data.highWatermark
            news = True
        if self.lastStableOffset != data.lastStableOffset:
            self.lastStableOffset = data.lastStableOffset
            news = True
        if self.logStartOffset != data.logStartOffset:
            self.logStartOffset = data.logStartOffset
            news = True
        return news


class FetchSession:
    """
    @ivar partitions: C{(topic key, partition)} to L{CachedPartition}, in
        the order the session reads them.  The topic key is the name, or
        the topic id (a C{uuid.UUID}, C{None} for the zero id) in a session
        of topic ids.
    """

    __slots__ = (
        "id", "privileged", "usesTopicIds", "partitions", "creationMs", "lastUsedMs", "epoch",
        "cachedSize", "evictableByAll", "evictableByPrivileged",
    )

    def __init__(self, sessionId, privileged, usesTopicIds, partitions, nowMs) -> None:
        self.id = sessionId
        self.privileged = privileged
        self.usesTopicIds = usesTopicIds
        self.partitions = partitions
        self.creationMs = nowMs
        self.lastUsedMs = nowMs
        self.epoch = nextEpoch(INITIAL_EPOCH)
        self.touch(nowMs)

    def touch(self, nowMs) -> None:
        """
        Mark the session used.  Whether it may be evicted for a new session
        is decided here, as Kafka files it in its eviction trees when
        touched: for any new session once older than L{EVICTION_MS}, for a
        privileged one also while young if this one is not privileged.
        """
        self.lastUsedMs = nowMs
        self.cachedSize = len(self.partitions)
        old = nowMs - self.creationMs > EVICTION_MS
        self.evictableByAll = old
        self.evictableByPrivileged = old or not self.privileged

    def evictableKey(self) -> tuple:
        # Kafka's EvictableKey order: unprivileged first, then smaller.
        return (self.privileged, self.cachedSize, self.id)


class FetchContext:
    """
    What one Fetch request is, once its session metadata was looked at.

    @ivar kind: L{SESSIONLESS}, L{FULL}, L{INCREMENTAL} or L{ERROR}.
    @ivar entries: what to read, in order: C{(topic key, partition, fetch
        offset, partition max bytes, current leader epoch)}.
    """

    SESSIONLESS, FULL, INCREMENTAL, ERROR = "sessionless", "full", "incremental", "error"

    __slots__ = ("kind", "entries", "errorCode", "session", "expectedEpoch", "privileged", "usesTopicIds")

    def __init__(self, kind, entries=(), errorCode=ErrorCode.none, session=None, privileged=False,
                 usesTopicIds=False) -> None:
        self.kind = kind
        self.entries = entries
        self.errorCode = errorCode
        self.session = session
        self.expectedEpoch = session.epoch if session is not None else None
        self.privileged = privileged
        self.usesTopicIds = usesTopicIds


class _Shard:
    """
    One shard of the cache: its own slots and eviction order, as Kafka's
    C{FetchSessionCacheShard}.
    """

    def __init__(self, cache, number, maxEntries, idRange) -> None:
        self.cache = cache
        self.number = number
        self.maxEntries = maxEntries
        self.idRange = idRange
        self.sessions: dict[int, FetchSession] = {}

    def _newId(self, rng) -> int:
        low = max(1, self.number * self.idRange)
        high = (self.number + 1) * self.idRange
        while True:
            sessionId = rng.randrange(low, high)
            if sessionId not in self.cache._byId:
                return sessionId

    def _stalest(self):
        return min(self.sessions.values(), key=lambda s: (s.lastUsedMs, s.id), default=None)

    def tryEvict(self, privileged, size, nowMs) -> bool:
        stalest = self._stalest()
        if stalest is None:
            return False
        if nowMs - stalest.lastUsedMs > EVICTION_MS:
            self.cache._remove(stalest, evicted=True)
            return True
        if privileged:
            candidates = [s for s in self.sessions.values() if s.evictableByPrivileged]
        else:
            candidates = [s for s in self.sessions.values() if s.evictableByAll]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.evictableKey)
        if (privileged, size, 0) < victim.evictableKey():
            return False
        self.cache._remove(victim, evicted=True)
        return True


class FetchSessionCache:
    """
    The sessions of this broker.  Not thread-safe: only its owner calls it
    (see L{FetchSessions}).

    @param slots: C{max.incremental.fetch.session.cache.slots}.
    @param shards: Kafka's 8; tests may use 1.
    """

    def __init__(self, slots: int, shards: int = SHARDS, rng: random.Random | None = None) -> None:
        idRange = _INT_MAX // shards
        self._shards = [_Shard(self, n, slots // shards, idRange) for n in range(shards)]
        self._next = itertools.cycle(self._shards)
        self._byId: dict[int, FetchSession] = {}
        self._rng = rng or random.Random()
        #: sessions evicted to make room (Kafka's IncrementalFetchSessionEvictionsPerSec)
        self.evictions = 0
        #: partitions in all sessions (Kafka's NumIncrementalFetchPartitionsCached)
        self.numPartitions = 0

    def __len__(self) -> int:
        return len(self._byId)

    def get(self, sessionId: int) -> FetchSession | None:
        return self._byId.get(sessionId)

    def _shardOf(self, sessionId: int) -> _Shard:
        return self._shards[min(sessionId // self._shards[0].idRange, len(self._shards) - 1)]

    def _remove(self, session: FetchSession, evicted: bool = False) -> None:
        if self._byId.pop(session.id, None) is not None:
            self._shardOf(session.id).sessions.pop(session.id, None)
            self.numPartitions -= session.cachedSize
            if evicted:
                self.evictions += 1

    def remove(self, sessionId: int) -> None:
        session = self._byId.get(sessionId)
        if session is not None:
            self._remove(session)

    def maybeCreate(self, nowMs, privileged, usesTopicIds, partitions) -> int:
        """
        @return: the new session's id, or L{INVALID_SESSION_ID} if its shard
            has no slot and nothing may be evicted for it.
        """
        shard = next(self._next)
        if len(shard.sessions) >= shard.maxEntries and not (
            shard.maxEntries > 0 and shard.tryEvict(privileged, len(partitions), nowMs)
        ):
            return INVALID_SESSION_ID
        session = FetchSession(shard._newId(self._rng), privileged, usesTopicIds, partitions, nowMs)
        shard.sessions[session.id] = session
        self._byId[session.id] = session
        self.numPartitions += session.cachedSize
        return session.id

    # -- one request -------------------------------------------------------------

    def newContext(self, nowMs, sessionId, epoch, usesTopicIds, privileged, entries, forgotten):
        """
        Look at a Fetch request's session metadata: Kafka's
        C{FetchManager.newContext}.

        @param entries: the request's partitions, C{(topic key, partition,
            fetch offset, partition max bytes, current leader epoch)}.
        @param forgotten: C{(topic key, partition)} to drop from the session.
        """
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if sessionId != INVALID_SESSION_ID:
                self.remove(sessionId)
            kind = FetchContext.SESSIONLESS if epoch == FINAL_EPOCH else FetchContext.FULL
            return FetchContext(kind, entries, privileged=privileged, usesTopicIds=usesTopicIds)
        session = self._byId.get(sessionId)
        if session is None:
            return FetchContext(FetchContext.ERROR, errorCode=ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext(FetchContext.ERROR, errorCode=ErrorCode.invalid_fetch_session_epoch)
        if session.usesTopicIds != usesTopicIds:
            return FetchContext(FetchContext.ERROR, errorCode=ErrorCode.fetch_session_topic_id_error)
        partitions = session.partitions
        for topicKey, partition, offset, maxBytes, leaderEpoch in entries:
            cached = partitions.get((topicKey, partition))
            if cached is None:
                partitions[(topicKey, partition)] = CachedPartition(offset, maxBytes, leaderEpoch)
            else:
                cached.fetchOffset = offset
                cached.maxBytes = maxBytes
                cached.leaderEpoch = leaderEpoch
        for key in forgotten:
            partitions.pop(key, None)
        if not partitions:
            self._remove(session)
            return FetchContext(FetchContext.SESSIONLESS, entries)
        self.numPartitions -= session.cachedSize
        session.touch(nowMs)
        self.numPartitions += session.cachedSize
        session.epoch = nextEpoch(session.epoch)
        return FetchContext(
            FetchContext.INCREMENTAL,
            [(t, p, c.fetchOffset, c.maxBytes, c.leaderEpoch) for (t, p), c in partitions.items()],
            session=session,
        )

    def respond(self, nowMs, context: FetchContext, results):
        """
        Choose what the answer carries: Kafka's
        C{updateAndGenerateResponseData}.

        @param results: C{(topic key, PartitionData)} for each of
            C{context.entries}, in order.
        @return: (top-level error code, session id, the C{(topic key,
            PartitionData)} to send).
        """
        kind = context.kind
        if kind == FetchContext.ERROR:
            return context.errorCode, INVALID_SESSION_ID, []
        if kind == FetchContext.SESSIONLESS:
            return ErrorCode.none, INVALID_SESSION_ID, results
        if kind == FetchContext.FULL:
            partitions = {}
            for (topicKey, partition, offset, maxBytes, epoch), (_, data) in zip(
                context.entries, results
            ):
                partitions[(topicKey, partition)] = CachedPartition(
                    offset, maxBytes, epoch, data.highWatermark, data.lastStableOffset,
                    data.logStartOffset,
                )
            sessionId = self.maybeCreate(nowMs, context.privileged, context.usesTopicIds, partitions)
            return ErrorCode.none, sessionId, results
        session = context.session
        if session.epoch != context.expectedEpoch:
            # A duplicate request moved the epoch on meanwhile: Kafka
            # answers the epoch error.  (A session evicted meanwhile still
            # answers this request; the next one finds it gone.)
            return ErrorCode.invalid_fetch_session_epoch, session.id, []
        partitions = session.partitions
        sent = []
        for topicKey, data in results:
            key = (topicKey, data.partition)
            cached = partitions.get(key)
            if cached is None:
                sent.append((topicKey, data))
                continue
            if cached.mustRespond(data):
                sent.append((topicKey, data))
                if data.size:
                    partitions[key] = partitions.pop(key)
        return ErrorCode.none, session.id, sent


_KINDS = (FetchContext.FULL, FetchContext.INCREMENTAL, FetchContext.SESSIONLESS, FetchContext.ERROR)


class FetchSessionStats(NamedTuple):
    """
    @ivar requests: Fetch requests that went to the owner, by the kind of
        their L{FetchContext} (plain sessionless fetches never do).
    """

    sessions: int
    partitions: int
    evictions: int
    requests: dict


class FetchSessions:
    """
    The broker's fetch sessions and their owner: a L{SerialExecutor} that
    runs each piece of session work one at a time, on whichever thread
    handed it over while it was idle (a request handler thread, or the one
    completing a parked fetch -- never a Processor).  What follows a piece
    of work (the log reads, the encoding) runs after the owner's turn, on
    the same thread, outside it.
    """

    def __init__(self, slots: int, shards: int = SHARDS) -> None:
        self.cache = FetchSessionCache(slots, shards)
        self._owner = SerialExecutor()
        self._requests = dict.fromkeys(_KINDS, 0)
        #: what the owner last published, for other threads (metrics)
        self.published = FetchSessionStats(0, 0, 0, dict(self._requests))

    def open(self, nowMs, sessionId, epoch, usesTopicIds, privileged, entries, forgotten,
             then: Callable[[FetchContext], None]) -> None:
        """
        Find the request's L{FetchContext}, then call C{then(context)}
        outside the owner.
        """
        self._owner.submit(
            self._onOwner, then, self._newContext,
            nowMs, sessionId, epoch, usesTopicIds, privileged, entries, forgotten,
        )

    def _newContext(self, *args) -> FetchContext:
        context = self.cache.newContext(*args)
        self._requests[context.kind] += 1
        self._publish()
        return context

    def _respond(self, *args):
        outcome = self.cache.respond(*args)
        self._publish()
        return outcome

    def _publish(self) -> None:
        cache = self.cache
        self.published = FetchSessionStats(
            len(cache), cache.numPartitions, cache.evictions, dict(self._requests)
        )

    def respond(self, nowMs, context, results, then) -> None:
        """
        Choose the answer's partitions (L{FetchSessionCache.respond}), then
        call C{then((error code, session id, results))} outside the owner.
        Either C{then} gets a L{Failure} instead if the owner's work failed.
        """
        self._owner.submit(self._onOwner, then, self._respond, nowMs, context, results)

    @staticmethod
    def _onOwner(then, work, *args) -> None:
        try:
            result = work(*args)
        except Exception:
            # C{then} answers the request with it: a fetch never hangs.
            result = Failure()
        runHere(functools.partial(then, result))
