"""
Per-record errors (KIP-467): a batch refused for some of its records is
answered, from Produce v8, with the index of each refused record and an
error message; the log is untouched.  Raw requests see the fields, a
confluent-kafka producer sees the error in its delivery reports.
"""

from __future__ import annotations

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import PRODUCE
from kafkatwist.protocol.codec import decodeResponseFrame
from kafkatwist.protocol.records import Record, buildBatch
from tests.integration.helpers import logEnd, produceFrame

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


def produce(client, topic, batch, version):
    frame, version = produceFrame(topic, batch, version=version)
    _, body = decodeResponseFrame(PRODUCE, version, client.sendRaw(frame))
    (partition,) = body.responses[0].partition_responses
    return partition


KEYS = [b"a", None, b"b", None, b"c"]


@pytest.mark.parametrize("version", [3, 7, 8, 9, 12])
def test_keyless_records_on_a_compacted_topic(broker, client, version):
    topic = f"compacted-v{version}"
    client.createTopics({topic: (1, {"cleanup.policy": "compact"})})
    batch = buildBatch([Record(key=k, value=b"v") for k in KEYS], compression="gzip")
    answer = produce(client, topic, batch, version)
    assert answer.error_code == ErrorCode.invalid_record
    assert int(answer.base_offset) == -1
    if version >= 8:
        message = f"Compacted topic cannot accept message without key in topic partition {topic}-0."
        assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
            (1, message), (3, message)
        ]
        assert answer.error_message == (
            "One or more records have been rejected due to 2 record errors in total, and only "
            f"showing the first three errors at most: [RecordError(batchIndex=1, message='{message}'), "
            f"RecordError(batchIndex=3, message='{message}')]"
        )
    assert logEnd(client, topic) == 0
    keyed = buildBatch([Record(key=b"k%d" % i, value=b"v") for i in range(3)])
    assert produce(client, topic, keyed, version).error_code == ErrorCode.none


def test_producer_may_not_claim_log_append_time(broker, client):
    topic = "append-time"
    client.createTopics({topic: (1, {"message.timestamp.type": "LogAppendTime"})})
    claimed = buildBatch([Record(value=b"v%d" % i) for i in range(3)], timestampType=1)
    answer = produce(client, topic, claimed, 12)
    assert answer.error_code == ErrorCode.invalid_timestamp
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [e.batch_index for e in answer.record_errors] == [0, 1, 2]
    assert "LogAppendTime" in answer.record_errors[0].batch_index_error_message
    assert logEnd(client, topic) == 0
    # On a CreateTime topic a claim with a time is kept, as Kafka does.
    client.createTopics({"create-time": 1})
    assert produce(client, "create-time", claimed, 12).error_code == ErrorCode.none


def test_records_out_of_the_time_bounds(broker, client):
    import time

    topic = "time-bounds"
    client.createTopics({topic: (1, {"message.timestamp.before.max.ms": "3600000"})})
    now = int(time.time() * 1000)
    batch = buildBatch([
        Record(value=b"ok", timestamp=now), Record(value=b"old", timestamp=now - 7_200_000),
    ])
    answer = produce(client, topic, batch, 12)
    assert answer.error_code == ErrorCode.invalid_timestamp
    [(index, message)] = [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors]
    assert index == 1 and message.startswith(f"Timestamp {now - 7_200_000} of message with offset 1")
    assert logEnd(client, topic) == 0


def test_confluent_delivery_reports_name_the_error(broker, client):
    from confluent_kafka import KafkaError, Producer

    topic = "compacted-confluent"
    client.createTopics({topic: (1, {"cleanup.policy": "compact"})})
    reports = []
    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "linger.ms": 50, "message.send.max.retries": 0,
    })
    for i, key in enumerate(KEYS):
        producer.produce(topic, b"%d" % i, key=key, on_delivery=lambda e, m: reports.append((m.value(), e)))
    producer.flush(20)
    # One batch, refused whole: librdkafka reads record_errors and fails
    # the keyless records (and only those) with INVALID_RECORD, the others
    # with _INVALID_DIFFERENT_RECORD (without record_errors all five would
    # be INVALID_RECORD).
    errors = dict(reports)
    assert sorted(errors) == [b"0", b"1", b"2", b"3", b"4"]
    for value in (b"1", b"3"):
        assert errors[value].code() == KafkaError.INVALID_RECORD
    for value in (b"0", b"2", b"4"):
        assert errors[value].code() == KafkaError._INVALID_DIFFERENT_RECORD
    assert logEnd(client, topic) == 0
