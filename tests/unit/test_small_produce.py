"""
The commonest Produce (v9+, one topic of one partition, acks 0/1/-1)
answered straight from its frame (C{ProduceHandler.answerFrame}): the same
answer, the same append and the same checks as the general path, which
every other shape, and a drop-in wrapping Produce, still takes.
"""

import datetime

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.network.handlers import HandlerPool
from kafkatwist.plugins.handler import Handler
from kafkatwist.protocol.apis import PRODUCE, requestType
from kafkatwist.protocol.codec import encodeBody, encodeRequestFrame, encodeResponseFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.protocol.produce import encodeProduceResponse, encodeSmallProduceAnswer, readSmallProduce
from kafkatwist.protocol.records import Record, buildBatch
from kafkatwist.util.purgatory import Purgatory
from tests.fakeservices import FakeServices
from tests.unit.fakes import FakeOwner, connect


def produceRequest(version, topics, acks=1, transactionalId=None):
    cls = requestType(PRODUCE, version)
    Topic = nested(cls, "TopicProduceData")
    Partition = nested(cls, "PartitionProduceData")
    return make(
        cls, transactional_id=transactionalId, acks=acks, timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            make(Topic, name=name, partition_data=tuple(make(Partition, index=i, records=r) for i, r in parts))
            for name, parts in topics
        ),
    )


def batch(values=(b"x" * 100,), **kwargs):
    return bytes(buildBatch([Record(timestamp=1_700_000_000_000 + i, value=v) for i, v in enumerate(values)], **kwargs))


def body(version, topics, **kwargs):
    return encodeBody(produceRequest(version, topics, **kwargs))


@pytest.mark.parametrize("version", range(9, 13))
@pytest.mark.parametrize("acks", (0, 1, -1))
def test_the_common_shape_is_recognised(version, acks):
    records = batch()
    frame = b"HEAD" + body(version, [("orders", [(3, records)])], acks=acks)
    got = readSmallProduce(version, frame, 4)
    assert got is not None
    gotAcks, name, index, start, end = got
    assert (gotAcks, name, index, frame[start:end]) == (acks, "orders", 3, records)


def test_a_record_set_with_a_two_byte_length_is_recognised():
    records = batch([b"y" * 200] * 10)
    assert len(records) > 127
    frame = body(9, [("t", [(0, records)])])
    _, _, _, start, end = readSmallProduce(9, frame, 0)
    assert frame[start:end] == records


@pytest.mark.parametrize(
    "version, topics, kwargs",
    [
        (8, [("t", [(0, batch())])], {}),
        (9, [("t", [(0, batch())]), ("u", [(0, batch())])], {}),
        (9, [("t", [(0, batch()), (1, batch())])], {}),
        (9, [("t", [(0, batch())])], {"transactionalId": "tx"}),
        (9, [("t", [(0, batch(producerId=7, producerEpoch=0, baseSequence=0, isTransactional=True))])], {}),
        (9, [("t", [(0, None)])], {}),
        (9, [("t", [(0, b"")])], {}),
        (9, [("t", [(0, b"\x00" * 70)])], {}),  # magic 0
        (9, [("t", [(0, batch([b"z" * 20000]))])], {}),  # a three-byte length
        (9, [("t" * 200, [(0, batch())])], {}),
    ],
)
def test_other_shapes_are_left_to_the_general_path(version, topics, kwargs):
    assert readSmallProduce(version, body(version, topics, **kwargs), 0) is None


def test_trailing_bytes_and_cut_frames_are_left_to_the_general_path():
    frame = body(9, [("t", [(0, batch())])])
    assert readSmallProduce(9, frame + b"\x00", 0) is None
    for cut in range(len(frame)):
        # never raises: the general decoder says what is wrong
        assert readSmallProduce(9, frame[:cut], 0) is None


@pytest.mark.parametrize("version", range(9, 13))
def test_the_answer_is_what_the_general_encoder_writes(version):
    [chunk] = encodeSmallProduceAnswer(77, "orders", 3, 1234, -1, 12, 250)
    general = encodeResponseFrame(
        PRODUCE, version, 77,
        encodeProduceResponse(version, [("orders", [(3, ErrorCode.none, 1234, -1, 12, None, ())])], 250),
    )
    assert chunk == b"".join(general)


class Wrapper(Handler):
    """A drop-in wrapping Produce: it sees every request."""

    apiKey, minVersion, maxVersion = PRODUCE, 0, 12

    def __init__(self, broker, wrapped):
        super().__init__(broker, wrapped)
        self.seen = 0
        self.decodeRequest = getattr(wrapped, "decodeRequest", None)

    def handle(self, context, request):
        self.seen += 1
        return self.wrapped.handle(context, request)


def brokerWith(wrap=False, **overrides):
    broker = FakeServices(handlers=True, **overrides)
    broker.logManager.createTopic("orders", 4, {})
    if wrap:
        broker.registry.handlers[PRODUCE] = Wrapper(broker, broker.handlerFor(PRODUCE))
    return broker


def handled(broker, frame):
    owner = FakeOwner(supported={PRODUCE: (0, 12)})
    connection, _ = connect(owner)
    connection.dataReceived(frame)
    [request] = owner.submitted
    response = HandlerPool(None, broker, 1).handle(request)
    assert request.frame is None  # released
    return response


@pytest.mark.parametrize("acks", (1, -1))
def test_answered_from_the_frame_as_the_general_path_answers(acks):
    frames = [
        encodeRequestFrame(PRODUCE, 9, correlation, "c", produceRequest(9, [("orders", [(2, batch())])], acks=acks))
        for correlation in (1, 2)
    ]
    fast, general = brokerWith(), brokerWith(wrap=True)
    for frame in frames:
        answers = [b"".join(handled(b, frame).chunks) for b in (fast, general)]
        assert answers[0] == answers[1]
    assert general.handlerFor(PRODUCE).seen == 2
    logs = [b.logManager.getLog("orders", 2) for b in (fast, general)]
    assert [log.logEndOffset for log in logs] == [2, 2]
    assert fast.topicBytes.snapshot() == general.topicBytes.snapshot()
    # the second append got offset 1 (size, correlation id, tagged fields, one topic "orders", one partition, its index and error code before it)
    assert int.from_bytes(answers[0][24:32], "big") == 1


def test_acks_0_appends_and_answers_nothing():
    broker = brokerWith()
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, batch())])], acks=0))
    assert handled(broker, frame).chunks is None
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_a_bad_batch_is_refused_as_the_general_path_refuses_it():
    records = bytearray(batch())
    records[-1] ^= 0xFF  # the CRC no longer matches
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, bytes(records))])]))
    answers = [b"".join(handled(b, frame).chunks) for b in (brokerWith(), brokerWith(wrap=True))]
    assert answers[0] == answers[1]
    assert int.from_bytes(answers[0][22:24], "big", signed=True) == ErrorCode.corrupt_message


def test_an_unknown_partition_goes_the_general_way():
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(9, batch())])]))
    out = b"".join(handled(brokerWith(), frame).chunks)
    assert int.from_bytes(out[22:24], "big", signed=True) == ErrorCode.unknown_topic_or_partition


class Refusing:
    def __init__(self):
        self.asked = []

    def authorize(self, context, actions):
        self.asked.append(actions)
        return [False for _ in actions]


def test_write_is_checked_once_and_a_refusal_answered():
    from kafkatwist.security.acl import AclOperation

    authorizer = Refusing()
    broker = brokerWith(authorizer=authorizer)
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, batch())])]))
    out = b"".join(handled(broker, frame).chunks)
    assert int.from_bytes(out[22:24], "big", signed=True) == ErrorCode.topic_authorization_failed
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0
    [[action]] = authorizer.asked
    assert action.operation == AclOperation.WRITE


def test_a_waiting_fetch_is_woken():
    broker = brokerWith()
    broker.fetchPurgatory = purgatory = Purgatory("Fetch")
    woken = []
    purgatory.checkAndComplete = woken.append
    assert not purgatory.watching()
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(1, batch())])]))
    handled(broker, frame)
    assert woken == []  # nothing watched: nothing to wake
    purgatory._watchers[("orders", 1)].append(object())
    assert purgatory.watching()
    handled(broker, frame)
    assert woken == [("orders", 1)]


def test_the_header_parse_reads_inline_what_it_read_before():
    frame = encodeRequestFrame(PRODUCE, 9, 5, "client", produceRequest(9, [("orders", [(1, batch())])]))[4:]
    header = parseRequestHeader(frame)
    assert (header.apiKey, header.apiVersion, header.correlationId, header.clientId) == (PRODUCE, 9, 5, "client")
    assert frame[header.bodyOffset] == 0  # the null transactional id


def test_an_append_that_raises_is_answered_as_the_general_path_answers_it():
    # UNKNOWN_SERVER_ERROR for the partition, the connection kept.
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, batch())])]))
    answers = []
    for wrap in (False, True):
        broker = brokerWith(wrap=wrap)

        def broken(*args, **kwargs):
            raise RuntimeError("the disk went away")

        broker.replicaManager.appendRecords = broken
        response = handled(broker, frame)
        assert not response.close
        answers.append(b"".join(response.chunks))
    assert answers[0] == answers[1]
    assert int.from_bytes(answers[0][22:24], "big", signed=True) == ErrorCode.unknown_server_error


def test_damaged_frames_are_answered_or_refused_never_raised():
    good = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, batch())])]))
    broker = brokerWith()
    headerEnd = 4 + 10 + 1 + 1  # size, fixed header, client id "c", tagged fields
    for position in range(headerEnd, len(good)):
        for value in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            frame = bytearray(good)
            frame[position] = value
            response = handled(broker, bytes(frame))
            assert response.close or response.chunks is None or response.chunks


def test_a_broker_without_logs_answers_as_the_general_path():
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, batch())])]))
    answers = []
    for wrap in (False, True):
        broker = brokerWith(wrap=wrap)
        broker.logManager = None
        answers.append(b"".join(handled(broker, frame).chunks))
    assert answers[0] == answers[1]
    assert int.from_bytes(answers[0][22:24], "big", signed=True) == ErrorCode.unknown_topic_or_partition


def test_an_acks_all_append_that_finds_its_log_replicated_waits_for_the_isr():
    """
    The fast path takes acks=-1 only where the partition is not replicated,
    checked before the append.  Its leader may ask for a follower in the
    ISR between that check and the append (it pins the high watermark
    first): the append is then answered only once the ISR has it, as the
    general path answers it, never at once.
    """
    broker = brokerWith()
    log = broker.logManager.getLog("orders", 2)
    append = broker.replicaManager.appendRecords

    def expandedFirst(partitionLog, records, nowMs, acks):
        partitionLog.pinHighWatermark()  # the replica manager's thread, meanwhile
        return append(partitionLog, records, nowMs, acks)

    broker.replicaManager.appendRecords = expandedFirst
    owner = FakeOwner(supported={PRODUCE: (0, 12)})
    connection, transport = connect(owner)
    sent = []
    connection.sendResponse = sent.append
    connection.dataReceived(
        encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(2, batch())])], acks=-1))
    )
    [request] = owner.submitted
    assert HandlerPool(None, broker, 1).handle(request) is None  # handed over
    assert log.logEndOffset == 1 and sent == []
    log.setHighWatermark(1)  # the follower fetched it
    broker.producePurgatory.checkAndComplete(("orders", 2))
    [response] = sent
    out = b"".join(response.chunks)
    assert int.from_bytes(out[22:24], "big", signed=True) == ErrorCode.none
    assert int.from_bytes(out[24:32], "big") == 0


def test_a_log_alone_again_after_the_pin_is_answered_at_once():
    """
    Review 4, R4-5: replicated after the append, alone again when asked
    what to wait for (the expansion refused): answered NONE at once, not
    an error for a record that was appended.
    """
    broker = brokerWith()
    log = broker.logManager.getLog("orders", 2)
    append = broker.replicaManager.appendRecords

    def expandedFirst(partitionLog, records, nowMs, acks):
        partitionLog.pinHighWatermark()
        return append(partitionLog, records, nowMs, acks)

    def aloneAgain(topic, partition, partitionLog, info):
        partitionLog.setHighWatermark(None)  # the replica manager's thread, meanwhile
        return None

    broker.replicaManager.appendRecords = expandedFirst
    broker.replicaManager.waitingFor = aloneAgain
    frame = encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(2, batch())])], acks=-1))
    out = b"".join(handled(broker, frame).chunks)
    assert int.from_bytes(out[22:24], "big", signed=True) == ErrorCode.none
    assert log.logEndOffset == 1
