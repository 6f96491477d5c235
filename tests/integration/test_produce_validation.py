"""
Produce requests the broker must refuse, through a real broker process:
appends to internal topics, batches whose record count lies, old message
formats, bombs.  Each answer is a Kafka error code per partition; the log is
untouched and nothing is logged as a traceback.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.records import Record, buildBatch
from tests.fuzz.bombs import bomb
from tests.integration.helpers import logEnd, produceFrame, sendProduce
from tests.integration.helpers import legacyProduceFrame as oldProduceFrame
from tests.unit.helpers import rewrite

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
def test_clients_may_not_append_to_internal_topics(broker, client, topic):
    batch = buildBatch([Record(key=b"forged", value=b"commit")])
    if topic == "__transaction_state":
        # Made on the first transactional producer's use, as in Kafka;
        # before, a Produce to it is UNKNOWN_TOPIC_OR_PARTITION (Kafka asks
        # its metadata cache before it refuses a write to an internal topic).
        frame, version = produceFrame(topic, batch)
        assert sendProduce(client, frame, version) == (ErrorCode.unknown_topic_or_partition, -1)
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "makes-the-topic"})
        producer.init_transactions(30)
    frame, version = produceFrame(topic, batch, correlationId=9)
    error, base = sendProduce(client, frame, version)
    assert error == ErrorCode.invalid_topic_exception
    assert base == -1


def test_confluent_producer_to_internal_topic_gets_invalid_topic(broker):
    from confluent_kafka import KafkaError, Producer

    reports = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    producer.produce("__consumer_offsets", b"forged", partition=0, on_delivery=lambda e, m: reports.append(e))
    producer.flush(20)
    assert [e.code() for e in reports] == [KafkaError.TOPIC_EXCEPTION]


def test_lying_record_count_is_refused_and_moves_nothing(broker, client):
    topic = "lying-count"
    client.createTopics({topic: 1})
    frame, version = produceFrame(topic, buildBatch([Record(value=b"ok")]))
    assert sendProduce(client, frame, version) == (ErrorCode.none, 0)
    lying = rewrite(buildBatch([Record(value=b"v")]), count=2**31 - 1, lastOffsetDelta=2**31 - 2)
    frame, version = produceFrame(topic, lying, correlationId=8)
    error, _ = sendProduce(client, frame, version)
    assert error == ErrorCode.invalid_record
    assert logEnd(client, topic) == 1


def test_v1_message_needs_produce_v0_to_v2(broker, client):
    """
    Produce v3+ carries record batches only (Kafka's
    ProduceRequest.validateRecords: INVALID_RECORD); v0-2 convert the old
    formats (tests/integration/test_old_versions.py).
    """
    topic = "old-format"
    client.createTopics({topic: 1})
    body = bytes([1, 0]) + struct.pack(">qii", 1000, -1, 3) + b"abc"
    message = struct.pack(">qiI", 0, len(body) + 4, zlib.crc32(body)) + body
    frame, version = produceFrame(topic, message)
    error, _ = sendProduce(client, frame, version)
    assert error == ErrorCode.invalid_record
    frame, version = oldProduceFrame(topic, message, version=2)
    assert sendProduce(client, frame, version) == (ErrorCode.none, 0)


def test_zstd_bomb_is_corrupt_message(broker, client):
    topic = "bomb"
    client.createTopics({topic: 1})
    payload = bomb("zstd", 8192)  # 262 KB, 8 GiB once inflated
    batch = rewrite(buildBatch([Record(value=b"v")], compression="zstd"), payload=payload)
    frame, version = produceFrame(topic, batch)
    error, _ = sendProduce(client, frame, version)
    assert error == ErrorCode.corrupt_message
    assert logEnd(client, topic) == 0
    assert "Traceback" not in broker.output()
