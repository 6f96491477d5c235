"""
A Fetch whose handler raises is answered as Kafka answers it --
UNKNOWN_SERVER_ERROR for each of its partitions, the connection kept -- for
requests read by the hand-written decoder too, whose request object keeps
its partitions in flat tuples rather than kio's entities.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.protocol.apis import FETCH
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.header import INT32
from tests.fakeservices import FakeServices
from tests.unit.fakes import FakeOwner, connect
from tests.unit.fetchreference import kioRequest


def failingFetch(broker, monkeypatch):
    handler = broker.handlerFor(FETCH)
    target = handler
    while not hasattr(type(target), "_plan"):
        target = target.wrapped

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(target, "_plan", boom)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16])
def test_a_failing_fetch_is_answered_unknown_server_error(version, monkeypatch):
    broker = FakeServices(handlers=True)
    broker.logManager.createTopic("t", 1, {})
    failingFetch(broker, monkeypatch)
    key = broker.logManager.topics()["t"].topicId if version >= 13 else "t"
    frame = encodeRequestFrame(
        FETCH, version, 9, "c", kioRequest(version, [(key, [(0, -1, 0, -1, 0, 1000)])])
    )
    owner = FakeOwner(supported={FETCH: (0, 16)})
    connection, _ = connect(owner)
    connection.dataReceived(frame)
    [request] = owner.submitted
    response = HandlerPool(None, broker, 1).handle(request)
    assert not response.close, "the connection was closed instead of answered"
    answer = b"".join(bytes(chunk) for chunk in response.chunks)
    assert INT32.unpack_from(answer, 0)[0] == len(answer) - 4
    correlationId, decoded = decodeResponseFrame(FETCH, version, answer[4:])
    assert correlationId == 9
    [topic] = decoded.responses
    [partition] = topic.partitions
    assert partition.error_code == ErrorCode.unknown_server_error
