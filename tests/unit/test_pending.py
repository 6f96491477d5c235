"""
context.respondLater(): the Deferred lives on the connection's Processor
thread; completions from any thread are posted there, once.
"""

import threading

import pytest
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from kafkatwist.interfaces import IPendingResponse, IRequestContext
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.protocol.codec import EncodedResponse
from tests.unit.fakes import (
    FakeOwner,
    FakeRegion,
    OneHandlerBroker,
    apiVersionsFrame,
    connect,
)


class PostingOwner(FakeOwner):
    """
    A Processor whose posted calls wait until the test runs them, in the
    test's thread (which plays the Processor thread).
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.posted = []

    def callInThread(self, f, *args):
        self.posted.append((f, args))

    def runPosted(self):
        posted, self.posted = self.posted, []
        for f, args in posted:
            f(*args)
        return len(posted)


def contextOf(owner):
    connection, transport = connect(owner)
    connection.dataReceived(apiVersionsFrame(5))
    [request] = owner.submitted
    return connection, transport, request


def inThread(f, *args):
    thread = threading.Thread(target=f, args=args)
    thread.start()
    thread.join()


def test_context_and_pending_provide_their_interfaces():
    owner = FakeOwner()
    _, _, request = contextOf(owner)
    assert verifyObject(IRequestContext, request.context)
    assert verifyObject(IPendingResponse, request.context.respondLater())


def test_completion_from_another_thread_fires_on_the_owner_thread():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    pending = request.context.respondLater()
    fired = []
    pending.deferred.addCallback(lambda r: fired.append((r, threading.get_ident())))
    pending.handedOver()
    inThread(pending.complete, "answer")
    # The completing thread only posted: nothing fired there.
    assert fired == []
    assert owner.runPosted() == 1
    assert fired == [("answer", threading.get_ident())]


def test_completion_before_handle_returned_waits_for_the_hand_over():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    pending = request.context.respondLater()
    pending.complete("early")
    # handle() has not returned yet: not even posted.
    assert owner.posted == []
    fired = []
    pending.deferred.addCallback(fired.append)
    pending.handedOver()
    assert fired == []
    owner.runPosted()
    assert fired == ["early"]


def test_failure_errbacks():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    pending = request.context.respondLater()
    failures = []
    pending.deferred.addErrback(failures.append)
    pending.handedOver()
    pending.complete(Failure(ValueError("no")))
    owner.runPosted()
    assert failures[0].check(ValueError)


def test_second_completion_is_logged_once_and_ignored():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    pending = request.context.respondLater()
    fired = []
    pending.deferred.addCallback(fired.append)
    pending.handedOver()
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        pending.complete("first")
        second = FakeRegion(b"x")
        pending.complete(EncodedResponse([second]))
        pending.complete("third")
    finally:
        globalLogPublisher.removeObserver(events.append)
    owner.runPosted()
    assert fired == ["first"]
    assert second.closed
    complaints = [e for e in events if "more than once" in e.get("log_format", "")]
    assert len(complaints) == 1


def test_answer_for_a_closed_connection_is_dropped_quietly():
    owner = PostingOwner()
    connection, transport, request = contextOf(owner)
    pending = request.context.respondLater()
    fired = []
    pending.deferred.addBoth(fired.append)
    pending.handedOver()
    connection.connectionLost(None)
    region = FakeRegion(b"records")
    pending.complete(EncodedResponse([region]))
    owner.runPosted()
    assert fired == []
    assert region.closed


def test_respond_later_twice_is_refused():
    owner = FakeOwner()
    _, _, request = contextOf(owner)
    request.context.respondLater()
    with pytest.raises(RuntimeError):
        request.context.respondLater()


def test_abandoned_pending_releases_a_late_answer():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    pending = request.context.respondLater()
    pending.abandon()
    region = FakeRegion(b"records")
    pending.complete(EncodedResponse([region]))
    assert owner.posted == []
    assert region.closed


# -- through the handler pool ------------------------------------------------


class LaterHandler:
    apiKey, minVersion, maxVersion = 18, 0, 3

    def __init__(self):
        self.pendings = []
        self.answerNow = False

    def handle(self, context, request):
        pending = context.respondLater()
        self.pendings.append(pending)
        if self.answerNow:
            return None
        return pending.deferred


def test_pool_sends_a_later_answer_from_the_processor_thread():
    owner = PostingOwner()
    connection, transport, request = contextOf(owner)
    handler = LaterHandler()
    pool = HandlerPool(None, OneHandlerBroker(handler), 1)
    assert pool.handle(request) is None
    [pending] = handler.pendings
    inThread(pending.complete, EncodedResponse([b"BODY"]))
    assert transport.value() == b""
    owner.runPosted()
    out = transport.value()
    assert out.endswith(b"BODY")
    assert out[4:8] == (5).to_bytes(4, "big")
    # Unmuted: the next request is taken.
    connection.dataReceived(apiVersionsFrame(6))
    assert len(owner.submitted) == 2


def test_pool_answers_a_failed_answer_with_unknown_server_error():
    # Kafka's getErrorResponse: the connection stays open.
    owner = PostingOwner()
    connection, transport, request = contextOf(owner)
    handler = LaterHandler()
    pool = HandlerPool(None, OneHandlerBroker(handler), 1)
    pool.handle(request)
    handler.pendings[0].complete(Failure(RuntimeError("coordinator broke")))
    owner.runPosted()
    assert not transport.disconnecting
    out = transport.value()
    # size, correlation id, then ApiVersions' error_code: UNKNOWN_SERVER_ERROR
    assert int.from_bytes(out[8:10], "big", signed=True) == -1


def test_pool_abandons_a_claim_answered_at_once():
    owner = PostingOwner()
    _, _, request = contextOf(owner)
    handler = LaterHandler()
    handler.answerNow = True
    pool = HandlerPool(None, OneHandlerBroker(handler), 1)
    response = pool.handle(request)
    assert response is not None and response.chunks is None
    region = FakeRegion(b"late")
    handler.pendings[0].complete(EncodedResponse([region]))
    assert owner.posted == []
    assert region.closed
