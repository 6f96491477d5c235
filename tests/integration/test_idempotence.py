"""
Idempotent producers through a real broker: kafka-python's default producer
and confluent-kafka with C{enable.idempotence=true} are consumed exactly
once in order; a Produce request resent byte for byte at the wire level is
acknowledged with the original offset and appended once; a sequence gap and
a fenced epoch are refused; producer state survives a restart and a kill.
"""

from __future__ import annotations

import datetime

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.batch import iterBatchHeaders
from kafkatwist.protocol.records import Record, buildBatch
from kafkatwist.testing import Broker
from tests.integration.helpers import logEnd, produceFrame, sendProduce

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

INIT_PRODUCER_ID = 22
N = 2000


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


def consumeAll(bootstrap, topic, partition=0):
    values = []
    with KafkaWireClient(bootstrap) as client:
        offset = 0
        end = client.listOffsets(topic, [partition])[partition]
        end = end[0] if isinstance(end, tuple) else end
        while offset < end:
            result = client.fetch(topic, partition, offset)
            values.extend(r.value for r in result.records)
            offset = result.nextOffset
    return values


def producerIds(bootstrap, topic, partition=0):
    with KafkaWireClient(bootstrap) as client:
        raw = client.fetchRaw(topic, partition, 0, maxBytes=1 << 24)
    return {h.producerId for _, h in iterBatchHeaders(raw.records)}


def initProducerId(client):
    def build(version, cls):
        fields = cls.__dataclass_fields__
        values = {
            "transactional_id": None,
            "transaction_timeout": datetime.timedelta(milliseconds=60000),
            "producer_id": -1,
            "producer_epoch": -1,
        }
        if "enable2_pc" in fields:
            values["enable2_pc"] = False
        if "keep_prepared_txn" in fields:
            values["keep_prepared_txn"] = False
        return cls(**{k: v for k, v in values.items() if k in fields})

    _, response = client.call(INIT_PRODUCER_ID, build)
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def batchOf(values, producerId, epoch, sequence):
    return buildBatch(
        [Record(value=v) for v in values],
        producerId=producerId,
        producerEpoch=epoch,
        baseSequence=sequence,
    )


def test_kafka_python_default_producer_exactly_once(broker, client):
    from kafka import KafkaProducer

    topic = "idem-kafka-python"
    client.createTopics({topic: 1})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    try:
        assert producer.config["enable_idempotence"]
        futures = [producer.send(topic, value=b"%d" % i, partition=0) for i in range(N)]
        producer.flush(60)
        for f in futures:
            f.get(timeout=30)
    finally:
        producer.close(10)
    assert consumeAll(broker.bootstrap, topic) == [b"%d" % i for i in range(N)]
    (producerId,) = producerIds(broker.bootstrap, topic)
    assert producerId >= 0


def test_confluent_idempotent_producer_exactly_once(broker, client):
    from confluent_kafka import Producer

    topic = "idem-confluent"
    client.createTopics({topic: 1})
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 100,
        }
    )
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    for i in range(N):
        producer.produce(topic, value=b"%d" % i, partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    assert consumeAll(broker.bootstrap, topic) == [b"%d" % i for i in range(N)]
    (producerId,) = producerIds(broker.bootstrap, topic)
    assert producerId >= 0


def test_wire_level_resend_is_deduplicated(client):
    topic = "idem-wire"
    client.createTopics({topic: 1})
    client.produce(topic, 0, [Record(value=b"before")])
    producerId, epoch = initProducerId(client)
    assert producerId >= 0 and epoch == 0
    frame, version = produceFrame(topic, batchOf([b"a", b"b", b"c"], producerId, epoch, 0))
    assert sendProduce(client, frame, version) == (ErrorCode.none, 1)
    assert logEnd(client, topic) == 4
    # The same bytes again (a retry after a lost response).
    assert sendProduce(client, frame, version) == (ErrorCode.none, 1)
    assert logEnd(client, topic) == 4
    # The producer carries on; then the older batch once more.
    frame2, _ = produceFrame(topic, batchOf([b"d"], producerId, epoch, 3), correlationId=8)
    assert sendProduce(client, frame2, version) == (ErrorCode.none, 4)
    assert sendProduce(client, frame, version) == (ErrorCode.none, 1)
    assert sendProduce(client, frame2, version) == (ErrorCode.none, 4)
    assert logEnd(client, topic) == 5
    values = [r.value for r in client.fetch(topic, 0, 0).records]
    assert values == [b"before", b"a", b"b", b"c", b"d"]


def test_gap_and_fenced_epoch_refused(client):
    topic = "idem-gap"
    client.createTopics({topic: 1})
    producerId, _ = initProducerId(client)
    frame, version = produceFrame(topic, batchOf([b"x"], producerId, 1, 0))
    assert sendProduce(client, frame, version) == (ErrorCode.none, 0)
    gap, _ = produceFrame(topic, batchOf([b"y"], producerId, 1, 5))
    error, base = sendProduce(client, gap, version)
    assert error == ErrorCode.out_of_order_sequence_number and base == -1
    fenced, _ = produceFrame(topic, batchOf([b"z"], producerId, 0, 1))
    assert sendProduce(client, fenced, version)[0] == ErrorCode.invalid_producer_epoch
    # An epoch bump (KIP-360, made by the client) restarts at sequence 0.
    bumped, _ = produceFrame(topic, batchOf([b"w"], producerId, 2, 0))
    assert sendProduce(client, bumped, version) == (ErrorCode.none, 1)
    assert logEnd(client, topic) == 2


def test_new_producer_id_each_init(client):
    first, _ = initProducerId(client)
    second, _ = initProducerId(client)
    assert second != first


@pytest.mark.parametrize("kill", [False, True], ids=["restart", "kill"])
def test_producer_state_survives_restart(brokerFactory, kill):
    broker = brokerFactory().start()
    topic = "idem-restart"
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({topic: 1})
        producerId, epoch = initProducerId(client)
        frame, version = produceFrame(topic, batchOf([b"a", b"b"], producerId, epoch, 0))
        assert sendProduce(client, frame, version) == (ErrorCode.none, 0)
    if kill:
        broker.kill()
    else:
        broker.stop()
    again = Broker(broker.directory, dict(broker.overrides))
    again.logPath = broker.logPath + ".2"
    again.start()
    try:
        with KafkaWireClient(again.bootstrap) as client:
            assert sendProduce(client, frame, version) == (ErrorCode.none, 0)
            assert logEnd(client, topic) == 2
            gap, _ = produceFrame(topic, batchOf([b"c"], producerId, epoch, 3))
            assert sendProduce(client, gap, version)[0] == ErrorCode.out_of_order_sequence_number
            nextFrame, _ = produceFrame(topic, batchOf([b"c"], producerId, epoch, 2))
            assert sendProduce(client, nextFrame, version) == (ErrorCode.none, 2)
            assert initProducerId(client)[0] != producerId
    finally:
        again.stop()
    if not kill:
        assert "no clean shutdown" not in again.output()
    assert "no clean shutdown" not in broker.output()  # a first start warns of nothing
