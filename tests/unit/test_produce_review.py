"""
The small-request fast paths after review 1: a handler's C{answerFrame} runs
only in place of the C{handle} its own class defines; an acks=0 Produce that
fails closes its connection (Kafka's closeConnection), on both paths; acks
outside -1/0/1 are answered INVALID_REQUIRED_ACKS with -1 offsets, on both.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import CloseConnection, frameAnswerer
from kafkatwist.plugins.client_quotas import FetchQuotaHandler
from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.plugins.handler import Handler
from kafkatwist.plugins.produce import ProduceHandler
from kafkatwist.protocol.apis import FETCH, PRODUCE
from kafkatwist.protocol.codec import encodeRequestFrame
from tests.unit import test_small_fetch as smallFetch
from tests.unit.test_small_produce import Refusing, batch, brokerWith, handled, produceRequest


def produceFrame(acks=1, partition=0, records=None, correlationId=5):
    request = produceRequest(9, [("orders", [(partition, batch() if records is None else records)])], acks=acks)
    return encodeRequestFrame(PRODUCE, 9, correlationId, "the-client", request)


class Counting(ProduceHandler):
    """A subclass overriding handle: it must see every request."""

    seen = 0

    def handle(self, context, request):
        type(self).seen += 1
        return super().handle(context, request)


class Forwarding(Handler):
    """A wrapper forwarding what it lacks (as FetchQuotaHandler does)."""

    apiKey, minVersion, maxVersion = PRODUCE, 0, 12

    def __init__(self, broker, wrapped):
        super().__init__(broker, wrapped)
        self.seen = 0

    def __getattr__(self, name):
        wrapped = self.__dict__.get("wrapped")
        if wrapped is None:
            raise AttributeError(name)
        return getattr(wrapped, name)

    def handle(self, context, request):
        self.seen += 1
        return self.wrapped.handle(context, request)


# -- answerFrame only from the class that defines handle ----------------------


def test_the_built_in_handlers_keep_their_fast_paths():
    broker = brokerWith()
    produce = broker.handlerFor(PRODUCE)
    assert frameAnswerer(produce) == produce.answerFrame
    fetch = broker.handlerFor(FETCH)
    assert type(fetch) is FetchQuotaHandler  # the built-in Fetch, wrapped for client quotas
    assert frameAnswerer(fetch) == fetch.answerFrame
    assert frameAnswerer(fetch.wrapped) == fetch.wrapped.answerFrame


def test_a_subclass_overriding_produce_handle_sees_small_produces():
    broker = brokerWith()
    broker.registry.handlers[PRODUCE] = handler = Counting(broker)
    assert frameAnswerer(handler) is None
    Counting.seen = 0
    response = handled(broker, produceFrame())
    assert Counting.seen == 1
    assert response.chunks and not response.close
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_a_forwarding_wrapper_of_produce_sees_small_produces():
    broker = brokerWith()
    broker.registry.handlers[PRODUCE] = wrapper = Forwarding(broker, broker.handlerFor(PRODUCE))
    assert wrapper.answerFrame  # found through __getattr__ ...
    assert frameAnswerer(wrapper) is None  # ... so not used
    handled(broker, produceFrame())
    assert wrapper.seen == 1
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_a_handle_set_on_the_instance_sees_small_produces():
    broker = brokerWith()
    handler = broker.handlerFor(PRODUCE)
    seen = []
    general = handler.handle
    handler.handle = lambda context, request: seen.append(request) or general(context, request)
    handled(broker, produceFrame())
    assert len(seen) == 1


def fetchFrame(broker, version=16):
    entity = smallFetch.fetchRequest(version, [(smallFetch.key(broker, version), [(2, -1, 0, 1 << 20)])], maxWaitMs=0)
    return encodeRequestFrame(FETCH, version, 7, "c", entity)


class CountingFetch(FetchHandler):
    seen = 0

    def handle(self, context, request):
        type(self).seen += 1
        return super().handle(context, request)


class ForwardingFetch(Forwarding):
    apiKey, minVersion, maxVersion = FETCH, 0, 16


def test_a_subclass_overriding_fetch_handle_sees_small_fetches(tmp_path):
    broker = smallFetch.brokerWith(tmp_path)
    broker.registry.handlers[FETCH] = handler = CountingFetch(broker)
    assert frameAnswerer(handler) is None
    CountingFetch.seen = 0
    response = smallFetch.handled(broker, fetchFrame(broker))
    assert CountingFetch.seen == 1
    assert response.chunks and not response.close
    smallFetch.materialised(response.chunks)


@pytest.mark.parametrize("inner", ("builtin", "unwrapped"))
def test_a_forwarding_wrapper_of_fetch_sees_small_fetches(tmp_path, inner):
    broker = smallFetch.brokerWith(tmp_path)
    wrapped = broker.handlerFor(FETCH)
    if inner == "unwrapped":
        wrapped = wrapped.wrapped
    broker.registry.handlers[FETCH] = wrapper = ForwardingFetch(broker, wrapped)
    assert frameAnswerer(wrapper) is None
    response = smallFetch.handled(broker, fetchFrame(broker))
    assert wrapper.seen == 1
    smallFetch.materialised(response.chunks)


def test_the_quota_wrapper_does_not_answer_from_the_frame_for_a_wrapped_subclass(tmp_path):
    broker = smallFetch.brokerWith(tmp_path)
    quota = FetchQuotaHandler(broker, CountingFetch(broker))
    CountingFetch.seen = 0
    broker.registry.handlers[FETCH] = quota
    frame = fetchFrame(broker)
    response = smallFetch.handled(broker, frame)
    assert CountingFetch.seen == 1
    smallFetch.materialised(response.chunks)


# -- acks=0: an error closes the connection ------------------------------------


def corrupt():
    records = bytearray(batch())
    records[-1] ^= 0xFF  # the CRC no longer matches
    return bytes(records)


@pytest.mark.parametrize("wrap", (False, True))  # False: the fast path; True: the general path
@pytest.mark.parametrize(
    "case, error", [("corrupt", "CORRUPT_MESSAGE"), ("unknown", "UNKNOWN_TOPIC_OR_PARTITION"),
                    ("refused", "TOPIC_AUTHORIZATION_FAILED")],
)
def test_acks_0_with_an_error_closes_the_connection(wrap, case, error):
    broker = brokerWith(wrap=wrap, **({"authorizer": Refusing()} if case == "refused" else {}))
    frame = produceFrame(
        acks=0, partition=9 if case == "unknown" else 0, records=corrupt() if case == "corrupt" else None
    )
    response = handled(broker, frame)
    assert response.close
    assert response.chunks is None
    assert "the-client" in response.reason
    assert f"orders-{9 if case == 'unknown' else 0}: {error}" in response.reason
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


@pytest.mark.parametrize("wrap", (False, True))
def test_acks_0_without_error_keeps_the_connection(wrap):
    broker = brokerWith(wrap=wrap)
    response = handled(broker, produceFrame(acks=0))
    assert not response.close
    assert response.chunks is None
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_acks_0_error_on_one_partition_of_several_closes_the_connection():
    broker = brokerWith()
    request = produceRequest(9, [("orders", [(0, batch()), (1, corrupt())])], acks=0)
    response = handled(broker, encodeRequestFrame(PRODUCE, 9, 5, "c", request))
    assert response.close and "orders-1: CORRUPT_MESSAGE" in response.reason
    assert "orders-0" not in response.reason
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_a_close_asked_for_by_a_handler_is_no_handler_error():
    class Closing(Handler):
        apiKey, minVersion, maxVersion = PRODUCE, 0, 12

        def handle(self, context, request):
            raise CloseConnection("asked")

    broker = brokerWith()
    broker.registry.handlers[PRODUCE] = Closing(broker)
    response = handled(broker, produceFrame())
    assert (response.close, response.reason, response.chunks) == (True, "asked", None)


# -- acks outside -1/0/1 -----------------------------------------------------


def answerFields(response):
    out = b"".join(response.chunks)
    # size, correlation id, header tags, topics (1), "orders", partitions (1), index
    at = 4 + 4 + 1 + 1 + 1 + len("orders") + 1 + 4
    error = int.from_bytes(out[at:at + 2], "big", signed=True)
    base, appendTime, start = (int.from_bytes(out[at + 2 + 8 * i:at + 10 + 8 * i], "big", signed=True) for i in range(3))
    return error, base, appendTime, start


@pytest.mark.parametrize("wrap", (False, True))
@pytest.mark.parametrize("acks", (2, -2, 5))
def test_invalid_acks_are_answered_invalid_required_acks(acks, wrap):
    broker = brokerWith(wrap=wrap)
    handler = broker.handlerFor(PRODUCE)
    response = handled(broker, produceFrame(acks=acks))
    assert not response.close
    assert answerFields(response) == (ErrorCode.invalid_required_acks, -1, -1, -1)
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0
    if wrap:
        assert handler.seen == 1


def test_the_fast_path_leaves_invalid_acks_to_handle():
    from tests.unit.fakes import FakeOwner, connect

    broker = brokerWith()
    owner = FakeOwner(supported={PRODUCE: (0, 12)})
    connection, _ = connect(owner)
    connection.dataReceived(produceFrame(acks=2))
    [request] = owner.submitted
    handler = broker.handlerFor(PRODUCE)
    assert handler.answerFrame(request.context, request.frame, request.header.bodyOffset) is NotImplemented
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


def test_invalid_acks_on_an_internal_topic_are_invalid_required_acks():
    broker = brokerWith()
    broker.logManager.createTopic("__consumer_offsets", 1, {})
    request = produceRequest(9, [("__consumer_offsets", [(0, batch())])], acks=2)
    response = handled(broker, encodeRequestFrame(PRODUCE, 9, 5, "c", request))
    out = b"".join(response.chunks)
    at = 4 + 4 + 1 + 1 + 1 + len("__consumer_offsets") + 1 + 4
    assert int.from_bytes(out[at:at + 2], "big", signed=True) == ErrorCode.invalid_required_acks
