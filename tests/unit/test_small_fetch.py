"""
The commonest Fetch answered straight from its frame (FetchHandler.answerFrame):
recognised only in its one shape, answered byte for byte as the general path
answers it, and every other request left to the general path untouched.
"""

from __future__ import annotations

import datetime
import os

import pytest

from kafkatwist.log import LogManager
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.plugins.handler import Handler
from kafkatwist.protocol.apis import FETCH, requestType
from kafkatwist.protocol.codec import BYTES_TYPES, encodeBody, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.fetch import readSmallFetch
from kafkatwist.protocol.records import Record, buildBatch
from tests.fakeservices import FakeServices
from tests.unit.fakes import FakeOwner, connect

VERSIONS = range(12, 17)


def fetchRequest(version, topics, sessionId=0, sessionEpoch=-1, isolation=0, rack="", replica=-1,
                 minBytes=1, maxWaitMs=500, maxBytes=1 << 20):
    """
    @param topics: C{(key, [(partition, epoch, offset, max bytes)])}.
    """
    cls = requestType(FETCH, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    fields = dict(
        max_wait=datetime.timedelta(milliseconds=maxWaitMs), min_bytes=minBytes, max_bytes=maxBytes,
        isolation_level=isolation, session_id=sessionId, session_epoch=sessionEpoch,
        forgotten_topics_data=(), rack_id=rack, cluster_id=None,
        topics=tuple(
            make(Topic, **({"topic_id": key} if version >= 13 else {"topic": key}), partitions=tuple(
                make(Partition, partition=p, current_leader_epoch=e, fetch_offset=o, last_fetched_epoch=-1,
                     log_start_offset=-1, partition_max_bytes=m)
                for p, e, o, m in parts
            ))
            for key, parts in topics
        ),
    )
    if version >= 15:
        fields["replica_state"] = make(nested(cls, "ReplicaState"), replica_id=replica, replica_epoch=-1)
    else:
        fields["replica_id"] = replica
    return make(cls, **fields)


class Wrapper(Handler):
    """A drop-in wrapping Fetch: it sees every request."""

    apiKey, minVersion, maxVersion = FETCH, 0, 16

    def __init__(self, broker, wrapped):
        super().__init__(broker, wrapped)
        self.seen = 0

    def handle(self, context, request):
        self.seen += 1
        return self.wrapped.handle(context, request)


def brokerWith(tmp_path, wrap=False, disk=True, **overrides):
    if disk:
        overrides["logManager"] = LogManager([str(tmp_path / ("general" if wrap else "fast"))], {})
    broker = FakeServices(handlers=True, **overrides)
    broker.logManager.createTopic("orders", 4, {})
    log = broker.logManager.getLog("orders", 2)
    for i in range(3):
        log.append(buildBatch([Record(timestamp=1000 + i, value=b"v%d" % i * 40)] * (i + 1)), 1000)
    if wrap:
        broker.registry.handlers[FETCH] = Wrapper(broker, broker.handlerFor(FETCH))
    return broker


def key(broker, version, name="orders"):
    return broker.logManager.topics()[name].topicId if version >= 13 else name


def handled(broker, frame):
    owner = FakeOwner(supported={FETCH: (0, 16)})
    connection, _ = connect(owner)
    connection.dataReceived(frame)
    [request] = owner.submitted
    response = HandlerPool(None, broker, 1).handle(request)
    return response


def anonymous(broker, version, answer: bytes) -> bytes:
    """
    The answer with the topic's id (each test broker has its own) zeroed.
    """
    if version < 13:
        return answer
    return answer.replace(key(broker, version).bytes, bytes(16))


def materialised(chunks) -> bytes:
    out = []
    for chunk in chunks:
        if isinstance(chunk, BYTES_TYPES):
            out.append(bytes(chunk))
        else:
            out.append(os.pread(chunk.fileno(), chunk.length, chunk.position()))
            chunk.close()
    return b"".join(out)


@pytest.mark.parametrize("disk", (True, False))
@pytest.mark.parametrize("version", VERSIONS)
def test_answered_from_the_frame_as_the_general_path_answers(tmp_path, version, disk):
    fast, general = brokerWith(tmp_path, disk=disk), brokerWith(tmp_path, wrap=True, disk=disk)
    for correlation, offset, maxBytes in ((1, 0, 1 << 20), (2, 1, 1 << 20), (3, 3, 10), (4, 5, 1 << 20)):
        answers = []
        for broker in (fast, general):
            entity = fetchRequest(version, [(key(broker, version), [(2, 0, offset, maxBytes)])])
            frame = encodeRequestFrame(FETCH, version, correlation, "c", entity)
            answers.append(anonymous(broker, version, materialised(handled(broker, frame).chunks)))
        assert answers[0] == answers[1]
    assert general.handlerFor(FETCH).seen == 4
    assert fast.topicBytes.snapshot() == general.topicBytes.snapshot()


def test_the_common_shape_is_recognised(tmp_path):
    entity = fetchRequest(16, [(key(brokerWith(tmp_path), 16), [(2, 5, 7, 1000)])], maxWaitMs=250, minBytes=3)
    found = readSmallFetch(16, encodeBody(entity), 0)
    assert found[1:] == (2, 5, 7, 1000, 250, 3, 1 << 20)


OTHERS = [
    dict(sessionId=0, sessionEpoch=0),
    dict(sessionId=5, sessionEpoch=3),
    dict(isolation=1),
    dict(rack="rack-1"),
    dict(replica=1),
]


@pytest.mark.parametrize("kwargs", OTHERS)
@pytest.mark.parametrize("version", VERSIONS)
def test_other_shapes_are_not_recognised(version, kwargs):
    name = __import__("uuid").UUID(int=9) if version >= 13 else "orders"
    assert readSmallFetch(version, encodeBody(fetchRequest(version, [(name, [(0, -1, 0, 10)])], **kwargs)), 0) is None
    two = fetchRequest(version, [(name, [(0, -1, 0, 10), (1, -1, 0, 10)])])
    assert readSmallFetch(version, encodeBody(two), 0) is None
    assert readSmallFetch(version, encodeBody(fetchRequest(version, [])), 0) is None
    body = encodeBody(fetchRequest(version, [(name, [(0, -1, 0, 10)])]))
    assert readSmallFetch(version, body, 0) is not None
    assert readSmallFetch(version, body + b"\x00", 0) is None
    for cut in range(len(body)):
        assert readSmallFetch(version, body[:cut], 0) is None


@pytest.mark.parametrize("case", ["caught up", "past the end", "min bytes", "unknown partition",
                                  "fenced epoch", "session", "authorizer"])
def test_left_to_the_general_path(tmp_path, case):
    version = 16
    overrides = {}
    if case == "authorizer":
        class Allowing:
            def authorize(self, context, actions):
                return [True for _ in actions]
        overrides["authorizer"] = Allowing()
    fast = brokerWith(tmp_path, **overrides)
    general = brokerWith(tmp_path, wrap=True, **overrides)
    kwargs = {}
    partition, epoch, offset = 2, 0, 0
    if case == "caught up":
        offset = 6
    elif case == "past the end":
        offset = 60
    elif case == "min bytes":
        kwargs = dict(minBytes=1 << 20, maxWaitMs=500)
    elif case == "unknown partition":
        partition = 9
    elif case == "fenced epoch":
        epoch = 5
    elif case == "session":
        kwargs = dict(sessionEpoch=0)
    answers = []
    for broker in (fast, general):
        options = dict(kwargs)
        options.setdefault("maxWaitMs", 0)
        entity = fetchRequest(version, [(key(broker, version), [(partition, epoch, offset, 1 << 20)])], **options)
        frame = encodeRequestFrame(FETCH, version, 7, "c", entity)
        handler = broker.handlerFor(FETCH)
        found = readSmallFetch(version, frame, len(frame) - len(encodeBody(entity)))
        owner = FakeOwner(supported={FETCH: (0, 16)})
        connection, _ = connect(owner)
        connection.dataReceived(frame)
        [request] = owner.submitted
        answer = getattr(handler, "answerFrame", None)
        if answer is not None:
            assert answer(request.context, request.frame, request.header.bodyOffset) is NotImplemented, found
        response = HandlerPool(None, broker, 1).handle(request)
        answers.append(None if response is None else anonymous(broker, version, materialised(response.chunks)))
    assert answers[0] == answers[1]
