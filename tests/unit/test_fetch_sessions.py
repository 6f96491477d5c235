"""
Incremental fetch sessions (KIP-227): the cache's rules on their own, then
Fetch requests through the handler as the pool runs it.
"""

import datetime

import pytest
from kio.serial import entity_reader
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kafkatwist.errors import ErrorCode as E
from kafkatwist.plugins.fetchsessions import (
    EVICTION_MS,
    INVALID_SESSION_ID,
    FetchContext,
    FetchSessionCache,
    FetchSessions,
)
from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.fetch import PartitionData
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches
from tests.unit.fakes import handleLikeThePool
from tests.unit.fetchhelpers import Context, fetchServices

T0 = 1_700_000_000_000


# -- the cache -------------------------------------------------------------------


def entries(n, topic="t", offset=0):
    return [(topic, p, offset, 1000, -1) for p in range(n)]


def results(n, topic="t", hw=0):
    return [(topic, PartitionData(p, E.none, hw, hw, 0)) for p in range(n)]


def openSession(cache, nowMs, n, privileged=False):
    context = cache.newContext(nowMs, 0, 0, False, privileged, entries(n), [])
    assert context.kind == FetchContext.FULL
    _, sessionId, _ = cache.respond(nowMs, context, results(n))
    return sessionId


def test_full_then_incremental():
    cache = FetchSessionCache(10, shards=1)
    sessionId = openSession(cache, T0, 3)
    assert sessionId != INVALID_SESSION_ID
    context = cache.newContext(T0, sessionId, 1, False, False, [], [])
    assert context.kind == FetchContext.INCREMENTAL
    assert [e[:3] for e in context.entries] == [("t", 0, 0), ("t", 1, 0), ("t", 2, 0)]
    # Nothing changed: nothing sent.
    assert cache.respond(T0, context, results(3)) == (E.none, sessionId, [])
    # Partition 1 has records and a new high watermark: sent, and read last
    # from now on; partition 2's log start moved: sent.
    context = cache.newContext(T0, sessionId, 2, False, False, [("t", 1, 0, 1000, -1)], [])
    data = results(3)
    data[1] = ("t", PartitionData(1, E.none, 5, 5, 0, b"x" * 10))
    data[2] = ("t", PartitionData(2, E.none, 0, 0, 3))
    _, _, sent = cache.respond(T0, context, data)
    assert [p.partition for _, p in sent] == [1, 2]
    context = cache.newContext(T0, sessionId, 3, False, False, [("t", 1, 5, 1000, 7)], [])
    assert [(p, o, e) for _, p, o, _, e in context.entries] == [(0, 0, -1), (2, 0, -1), (1, 5, 7)]


def test_last_stable_offset_and_errors_are_news():
    cache = FetchSessionCache(10, shards=1)
    sessionId = openSession(cache, T0, 2)
    context = cache.newContext(T0, sessionId, 1, False, False, [], [])
    data = [("t", PartitionData(0, E.none, 0, -1, 0)), ("t", PartitionData(1, E.not_leader_or_follower))]
    _, _, sent = cache.respond(T0, context, data)
    assert [p.partition for _, p in sent] == [0, 1]
    # The error is gone: the partition is sent again, once.
    context = cache.newContext(T0, sessionId, 2, False, False, [], [])
    _, _, sent = cache.respond(T0, context, results(2))
    assert [p.partition for _, p in sent] == [0, 1]
    context = cache.newContext(T0, sessionId, 3, False, False, [], [])
    assert cache.respond(T0, context, results(2))[2] == []


def test_session_errors():
    cache = FetchSessionCache(10, shards=1)
    sessionId = openSession(cache, T0, 1)
    assert cache.newContext(T0, sessionId + 1, 1, False, False, [], []).errorCode == (
        E.fetch_session_id_not_found
    )
    assert cache.newContext(T0, sessionId, 2, False, False, [], []).errorCode == (
        E.invalid_fetch_session_epoch
    )
    # A session of names is not used by a request of topic ids.
    assert cache.newContext(T0, sessionId, 1, True, False, [], []).errorCode == (
        E.fetch_session_topic_id_error
    )
    # None of those moved the epoch on.
    assert cache.newContext(T0, sessionId, 1, False, False, [], []).kind == FetchContext.INCREMENTAL


def test_duplicate_request_gets_the_epoch_error_at_response_time():
    cache = FetchSessionCache(10, shards=1)
    sessionId = openSession(cache, T0, 1)
    first = cache.newContext(T0, sessionId, 1, False, False, [], [])
    cache.newContext(T0, sessionId, 2, False, False, [], [])
    assert cache.respond(T0, first, results(1)) == (E.invalid_fetch_session_epoch, sessionId, [])


def test_forgotten_partitions_and_closing():
    cache = FetchSessionCache(10, shards=1)
    sessionId = openSession(cache, T0, 2)
    context = cache.newContext(T0, sessionId, 1, False, False, [], [("t", 0)])
    assert [e[1] for e in context.entries] == [1]
    assert cache.numPartitions == 1
    # Forgetting the last partition closes the session.
    context = cache.newContext(T0, sessionId, 2, False, False, [], [("t", 1)])
    assert context.kind == FetchContext.SESSIONLESS
    assert cache.get(sessionId) is None and cache.numPartitions == 0
    # Epoch -1 closes a session and answers without one; epoch 0 closes it
    # and opens another.
    sessionId = openSession(cache, T0, 1)
    context = cache.newContext(T0, sessionId, -1, False, False, entries(1), [])
    assert context.kind == FetchContext.SESSIONLESS and cache.get(sessionId) is None
    assert cache.respond(T0, context, results(1))[1] == INVALID_SESSION_ID
    sessionId = openSession(cache, T0, 1)
    context = cache.newContext(T0, sessionId, 0, False, False, entries(1), [])
    assert cache.get(sessionId) is None and context.kind == FetchContext.FULL


def test_eviction():
    cache = FetchSessionCache(2, shards=1)
    small = openSession(cache, T0, 1)
    large = openSession(cache, T0, 5)
    # Full, and both sessions are young: no session for a consumer.
    assert openSession(cache, T0 + 1000, 10) == INVALID_SESSION_ID
    # A follower (privileged) may evict a young consumer's session: the
    # smallest goes.
    follower = openSession(cache, T0 + 1000, 1, privileged=True)
    assert follower and cache.get(small) is None and cache.get(large) is not None
    assert cache.evictions == 1
    # Once older than two minutes, and touched since, a session may be
    # evicted by a larger session (not an equal one).
    later = T0 + EVICTION_MS + 1001
    cache.newContext(later, large, 1, False, False, [], [])
    cache.newContext(later, follower, 1, False, False, [], [])
    assert openSession(cache, later, 5) == INVALID_SESSION_ID
    newcomer = openSession(cache, later, 6)
    assert newcomer and cache.get(large) is None and cache.get(follower) is not None
    # A session unused for two minutes is evicted by anyone.
    stale = later + EVICTION_MS + 1
    cache.newContext(stale, newcomer, 1, False, False, [], [])
    tiny = openSession(cache, stale, 1)
    assert tiny and cache.get(follower) is None


def test_slots_are_divided_among_eight_shards():
    cache = FetchSessionCache(16)
    ids = [openSession(cache, T0, 1) for _ in range(16)]
    assert all(ids) and len(set(ids)) == 16
    assert openSession(cache, T0, 1) == INVALID_SESSION_ID
    # Fewer slots than shards: Kafka 3.8+ keeps no session at all.
    assert openSession(FetchSessionCache(7), T0, 1) == INVALID_SESSION_ID
    assert openSession(FetchSessionCache(0), T0, 1) == INVALID_SESSION_ID


# -- Fetch requests --------------------------------------------------------------


@pytest.fixture
def broker():
    broker = fetchServices()
    broker.fetchSessions = FetchSessions(1000, shards=1)
    broker.logManager.createTopic("t", 3, {})
    return broker


def request(version, partitions, sessionId, epoch, forgotten=(), minBytes=0, maxWaitMs=0,
            topicKey="t"):
    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    Forgotten = nested(cls, "ForgottenTopic")
    field = "topic_id" if version >= 13 else "topic"
    topics = (
        (make(Topic, **{field: topicKey}, partitions=tuple(
            make(Partition, partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in partitions
        )),)
        if partitions else ()
    )
    return make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=maxWaitMs),
        min_bytes=minBytes, max_bytes=1 << 20, session_id=sessionId, session_epoch=epoch,
        topics=topics,
        forgotten_topics_data=(
            (make(Forgotten, **{field: topicKey}, partitions=tuple(forgotten)),) if forgotten else ()
        ),
    )


def fetch(broker, version, *args, clock=None, **kw):
    context = Context(clock or Clock())
    context.apiVersion = version
    answers = []
    result = handleLikeThePool(FetchHandler(broker), context, request(version, *args, **kw))
    assert isinstance(result, Deferred)
    result.addCallback(answers.append)
    return answers


def decoded(version, answer):
    body = b"".join(bytes(c) for c in answer.chunks)
    response, end = entity_reader(responseType(1, version))(body, 0)
    assert end == len(body)
    return response


def partitionsOf(response):
    return {
        p.partition_index: [r.offset for b in decodeBatches(p.records or b"") for r in b.records]
        for t in response.responses
        for p in t.partitions
    }


def append(broker, partition, n=1):
    log = broker.logManager.getLog("t", partition)
    log.append(buildBatch([Record(value=b"v") for _ in range(n)]), T0)
    broker.fetchPurgatory.checkAndComplete(("t", partition))


def test_fetch_session_through_the_handler(broker):
    append(broker, 0, 2)
    [answer] = fetch(broker, 12, [(0, 0), (1, 0), (2, 0)], 0, 0)
    full = decoded(12, answer)
    assert full.error_code == E.none and full.session_id != 0
    assert partitionsOf(full) == {0: [0, 1], 1: [], 2: []}
    sessionId = full.session_id
    # The consumer moved on in partition 0: it says so, nothing else.
    [answer] = fetch(broker, 12, [(0, 2)], sessionId, 1)
    assert partitionsOf(decoded(12, answer)) == {}
    append(broker, 2, 3)
    [answer] = fetch(broker, 12, [], sessionId, 2)
    response = decoded(12, answer)
    assert response.session_id == sessionId
    assert partitionsOf(response) == {2: [0, 1, 2]}
    [answer] = fetch(broker, 12, [], sessionId, 2)
    response = decoded(12, answer)
    assert (response.error_code, response.session_id, response.responses) == (
        E.invalid_fetch_session_epoch, 0, ()
    )
    [answer] = fetch(broker, 12, [], sessionId + 1, 1)
    assert decoded(12, answer).error_code == E.fetch_session_id_not_found
    [answer] = fetch(broker, 13, [], sessionId, 3)
    assert decoded(13, answer).error_code == E.fetch_session_topic_id_error


def test_parked_incremental_fetch_wakes_on_append(broker):
    [answer] = fetch(broker, 12, [(0, 0), (1, 0)], 0, 0)
    sessionId = decoded(12, answer).session_id
    clock = Clock()
    answers = fetch(broker, 12, [], sessionId, 1, minBytes=1, maxWaitMs=500, clock=clock)
    assert answers == []
    append(broker, 1, 2)
    [answer] = answers
    assert partitionsOf(decoded(12, answer)) == {1: [0, 1]}
    # An idle long poll expires with nothing to send.
    answers = fetch(broker, 12, [(1, 2)], sessionId, 2, minBytes=1, maxWaitMs=500, clock=clock)
    clock.advance(0.5)
    [answer] = answers
    response = decoded(12, answer)
    assert response.session_id == sessionId and response.responses == ()


def test_session_of_topic_ids(broker):
    topicId = broker.logManager.topics()["t"].topicId
    append(broker, 1)
    [answer] = fetch(broker, 13, [(0, 0), (1, 0)], 0, 0, topicKey=topicId)
    full = decoded(13, answer)
    assert [t.topic_id for t in full.responses] == [topicId]
    [answer] = fetch(broker, 13, [(1, 1)], full.session_id, 1, forgotten=[0], topicKey=topicId)
    assert decoded(13, answer).responses == ()
    assert broker.fetchSessions.cache.get(full.session_id).partitions.keys() == {(topicId, 1)}
    append(broker, 1)
    [answer] = fetch(broker, 13, [], full.session_id, 2, topicKey=topicId)
    assert partitionsOf(decoded(13, answer)) == {1: [1]}
