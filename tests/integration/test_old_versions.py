"""
Kafka 3.x's old versions through a real broker process, over the wire:
Produce v0-2 in message formats v0/v1 (stored as record batches), Fetch
v0-3 (down-converted), ListOffsets v0, OffsetCommit v0-1 / OffsetFetch v0,
CreateTopics v0-1; and old real clients (afkak, kafka-python pinned to old
broker versions, kcat without ApiVersions) producing and consuming.
"""

from __future__ import annotations

import datetime
import shutil
import subprocess
import time

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.legacy_records import compressInner, encodeMessage
from tests.integration.test_idempotence import sendProduce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

E = ErrorCode
T0 = 1_700_000_000_000


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


def call(client, apiKey, version, **fields):
    """
    One request of C{version} through the project's client, raw.
    """
    entity = make(requestType(apiKey, version), **fields)
    frame = encodeRequestFrame(apiKey, version, 11, "old-versions", entity)
    _, response = decodeResponseFrame(apiKey, version, client.sendRaw(frame))
    return response


def produceFrame(topic, records, version):
    cls = requestType(0, version)
    request = make(
        cls,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            make(
                nested(cls, "TopicProduceData"),
                name=topic,
                partition_data=(make(nested(cls, "PartitionProduceData"), index=0, records=records),),
            ),
        ),
    )
    return encodeRequestFrame(0, version, 7, "old-versions", request), version


def confluentRead(bootstrap, topic, n, timeout=30.0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.offset(), m.timestamp(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


# -- Produce v0-2 --------------------------------------------------------------


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1)])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_produce_old_formats(broker, client, version, magic, codec):
    topic = f"produce-v{version}-c{codec}"
    client.createTopics({topic: 1})
    messages = [(b"k%d" % i if i % 2 else None, b"value-%d" % i) for i in range(5)]
    entries = [encodeMessage(0, magic, 0, T0 + i, k, v) for i, (k, v) in enumerate(messages)]
    for round_ in range(2):
        if codec:
            inner = b"".join(
                encodeMessage(i if magic else 0, magic, 0, T0 + i, k, v) for i, (k, v) in enumerate(messages)
            )
            records = encodeMessage(0, magic, codec, T0 + 4, None, compressInner(codec, magic, inner))
        else:
            records = b"".join(entries)
        frame, _ = produceFrame(topic, records, version=version)
        assert sendProduce(client, frame, version) == (E.none, 5 * round_)
    got = confluentRead(broker.bootstrap, topic, 10)
    assert [(o, k, v) for o, _, k, v in got] == [
        (o, k, v) for o, (k, v) in enumerate(messages * 2)
    ]
    # v0 messages have no time: Kafka stores -1 (confluent: not available).
    expected = [T0 + i if magic else -1 for i in range(5)] * 2
    assert [ts[1] if ts[0] else -1 for _, ts, _, _ in got] == expected


def test_produce_v2_log_append_time(broker, client):
    topic = "produce-v2-append-time"
    client.createTopics({topic: (1, {"message.timestamp.type": "LogAppendTime"})})
    frame, _ = produceFrame(topic, encodeMessage(0, 1, 0, T0, None, b"v"), version=2)
    response = decodeResponseFrame(0, 2, client.sendRaw(frame))[1]
    [p] = response.responses[0].partition_responses
    assert p.error_code == E.none and p.log_append_time is not None
    # A producer may not claim LogAppendTime.
    frame, _ = produceFrame(topic, encodeMessage(0, 1, 8, T0, None, b"v"), version=2)
    assert sendProduce(client, frame, 2)[0] == E.invalid_timestamp
