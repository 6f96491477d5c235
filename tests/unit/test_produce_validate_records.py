"""
Produce v3+ may carry only record batches (magic 2): Kafka checks each
partition's records while it reads the request (C{KafkaApis.
handleProduceRequest} calls C{ProduceRequest.validateRecords}), after the
WRITE check and the topic lookup and before C{ReplicaManager.appendRecords}
looks at the acks or the topic is found internal.  A partition carrying a
v0/v1 message set is answered INVALID_RECORD with Kafka's bare
C{PartitionResponse(Errors.INVALID_RECORD)}: offsets -1, no message, and
never reaches the append; the others of the same request are answered as
before (INVALID_REQUIRED_ACKS with bad acks).  Produce v0-2 are not checked
so (Kafka neither): their v0/v1 sets are converted.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import PRODUCE
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.legacy_records import encodeMessage
from tests.unit.test_small_produce import batch, brokerWith, handled, produceRequest

E = ErrorCode


def legacy(magic):
    return encodeMessage(0, magic, 0, 1_700_000_000_000, b"k", b"v" * 50)


def answers(response, version):
    _, entity = decodeResponseFrame(PRODUCE, version, b"".join(response.chunks)[4:])
    return {
        # (log_start_offset from v5, error_message from v8: -1 and None before)
        (topic.name, p.index): (
            p.error_code, p.base_offset, getattr(p, "log_start_offset", -1), getattr(p, "error_message", None)
        )
        for topic in entity.responses
        for p in topic.partition_responses
    }


def produce(broker, version, topics, acks):
    frame = encodeRequestFrame(PRODUCE, version, 5, "the-client", produceRequest(version, topics, acks=acks))
    return handled(broker, frame)


BARE_INVALID_RECORD = (E.invalid_record, -1, -1, None)


@pytest.mark.parametrize("wrap", (False, True))  # the built-in handler; a drop-in wrapping it
@pytest.mark.parametrize("version", (3, 8, 9, 12))
@pytest.mark.parametrize("magic", (0, 1))
@pytest.mark.parametrize("acks", (2, -2, 1, -1))
def test_old_magic_in_v3_plus_is_invalid_record_whatever_the_acks(wrap, version, magic, acks):
    broker = brokerWith(wrap=wrap)
    response = produce(broker, version, [("orders", [(0, legacy(magic))])], acks)
    assert not response.close
    assert answers(response, version) == {("orders", 0): BARE_INVALID_RECORD}
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


@pytest.mark.parametrize("version", (3, 9))
def test_the_other_partitions_of_the_request_still_get_invalid_required_acks(version):
    broker = brokerWith()
    response = produce(broker, version, [("orders", [(0, legacy(1)), (1, batch())])], acks=2)
    assert answers(response, version) == {
        ("orders", 0): BARE_INVALID_RECORD,
        ("orders", 1): (E.invalid_required_acks, -1, -1, None),
    }
    assert [broker.logManager.getLog("orders", i).logEndOffset for i in (0, 1)] == [0, 0]


def test_the_other_partitions_of_the_request_are_appended_with_valid_acks():
    broker = brokerWith()
    response = produce(broker, 9, [("orders", [(0, legacy(1)), (1, batch())])], acks=1)
    got = answers(response, 9)
    assert got[("orders", 0)] == BARE_INVALID_RECORD
    assert got[("orders", 1)][0] == E.none
    assert [broker.logManager.getLog("orders", i).logEndOffset for i in (0, 1)] == [0, 1]


def test_old_magic_on_an_internal_topic_is_invalid_record_first():
    # Kafka looks at the records before ReplicaManager refuses the internal topic.
    broker = brokerWith()
    broker.logManager.createTopic("__consumer_offsets", 1, {})
    for acks in (1, 2):
        response = produce(broker, 9, [("__consumer_offsets", [(0, legacy(1))])], acks)
        assert answers(response, 9) == {("__consumer_offsets", 0): BARE_INVALID_RECORD}
    response = produce(broker, 9, [("__consumer_offsets", [(0, batch())])], 1)
    assert answers(response, 9)[("__consumer_offsets", 0)][0] == E.invalid_topic_exception


def test_an_unknown_partition_is_unknown_before_its_records_are_looked_at():
    broker = brokerWith()
    response = produce(broker, 9, [("orders", [(9, legacy(1))])], acks=2)
    assert answers(response, 9)[("orders", 9)][0] == E.unknown_topic_or_partition


@pytest.mark.parametrize("wrap", (False, True))
def test_old_magic_with_acks_0_closes_the_connection(wrap):
    broker = brokerWith(wrap=wrap)
    response = produce(broker, 9, [("orders", [(0, legacy(0))])], acks=0)
    assert response.close and response.chunks is None
    assert "orders-0: INVALID_RECORD" in response.reason
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


@pytest.mark.parametrize("version", (0, 1, 2))
def test_produce_before_v3_is_not_checked_so(version):
    broker = brokerWith()
    response = produce(broker, version, [("orders", [(0, legacy(min(version, 1)))])], acks=2)
    assert answers(response, version)[("orders", 0)][0] == E.invalid_required_acks
    response = produce(broker, version, [("orders", [(0, legacy(min(version, 1)))])], acks=1)
    assert answers(response, version)[("orders", 0)][0] == E.none
    assert broker.logManager.getLog("orders", 0).logEndOffset == 1


def test_the_fast_path_leaves_old_formats_to_handle():
    from tests.unit.fakes import FakeOwner, connect

    broker = brokerWith()
    owner = FakeOwner(supported={PRODUCE: (0, 12)})
    connection, _ = connect(owner)
    connection.dataReceived(
        encodeRequestFrame(PRODUCE, 9, 5, "c", produceRequest(9, [("orders", [(0, legacy(1))])], acks=2))
    )
    [request] = owner.submitted
    handler = broker.handlerFor(PRODUCE)
    assert handler.answerFrame(request.context, request.frame, request.header.bodyOffset) is NotImplemented
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


# -- the rest of Kafka's validateRecords: one batch, zstd from v7, not empty --------


@pytest.mark.parametrize("wrap", (False, True))
@pytest.mark.parametrize("acks", (1, 2))
def test_two_batches_in_one_partition_are_invalid_record(wrap, acks):
    broker = brokerWith(wrap=wrap)
    response = produce(broker, 9, [("orders", [(0, batch() + batch())])], acks)
    assert answers(response, 9) == {("orders", 0): BARE_INVALID_RECORD}
    assert broker.logManager.getLog("orders", 0).logEndOffset == 0


def test_the_fast_path_leaves_two_batches_to_handle():
    from kafkatwist.protocol.produce import readSmallProduce
    from tests.unit.test_small_produce import body

    frame = b"HEAD" + body(9, [("orders", [(0, batch() + batch())])], acks=1)
    assert readSmallProduce(9, frame, 4) is None


@pytest.mark.parametrize("version", (3, 6))
def test_zstd_before_v7_is_unsupported_compression_type(version):
    broker = brokerWith()
    response = produce(broker, version, [("orders", [(0, batch(compression="zstd"))])], 2)
    assert answers(response, version) == {("orders", 0): (E.unsupported_compression_type, -1, -1, None)}
    response = produce(broker, 7, [("orders", [(0, batch(compression="zstd"))])], 1)
    assert answers(response, 7)[("orders", 0)][0] == E.none


def test_no_records_is_a_bare_invalid_record_from_v3():
    broker = brokerWith()
    response = produce(broker, 9, [("orders", [(0, b"")])], 2)
    assert answers(response, 9) == {("orders", 0): BARE_INVALID_RECORD}
