"""
Real clients produce and consume through a real broker: every codec, every
client in both directions, byte-identical records.
"""

import asyncio
import time

import pytest
from tests.integration.helpers import confluentConsume, confluentProduce, digest, record

pytestmark = pytest.mark.integration

RECORDS = 100_000
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def expectedDigest(n: int, nullHeaders: bool = True) -> str:
    return digest(record(i, nullHeaders) for i in range(n))


def kafkaPythonConsume(bootstrap, topic, n):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    rows = []
    for message in consumer:
        rows.append((message.key, message.value, [(k, v) for k, v in message.headers]))
        if len(rows) == n:
            break
    consumer.close()
    return rows


def aiokafkaConsume(bootstrap, topic, n):
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition

    async def main():
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 0)
            rows = []
            deadline = time.monotonic() + 60
            while len(rows) < n and time.monotonic() < deadline:
                batches = await consumer.getmany(tp, timeout_ms=1000, max_records=20000)
                for message in batches.get(tp, []):
                    rows.append((message.key, message.value, list(message.headers)))
            return rows
        finally:
            await consumer.stop()

    return asyncio.run(main())


# Each codec takes tens of seconds (100,000 records through each client); the
# edit loop keeps the uncompressed one (the other tests here cover every codec
# with fewer records).
@pytest.mark.parametrize("codec", [c if c == "none" else pytest.param(c, marks=pytest.mark.slow)
                                   for c in CODECS])
def test_confluent_produces_all_clients_consume(broker, codec):
    topic = f"codec-{codec}"
    confluentProduce(broker.bootstrap, topic, RECORDS, codec)
    expected = expectedDigest(RECORDS)
    rows, offsets = confluentConsume(broker.bootstrap, topic, RECORDS)
    assert offsets == list(range(RECORDS))
    assert digest(rows) == expected
    assert digest(kafkaPythonConsume(broker.bootstrap, topic, RECORDS)) == expected
    assert digest(aiokafkaConsume(broker.bootstrap, topic, RECORDS)) == expected


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_kafka_python_producer(broker, codec):
    from kafka import KafkaProducer

    n = 20_000
    topic = f"kp-{codec}"
    # kafka-python 3 is idempotent by default: this also exercises InitProducerId.
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type=None if codec == "none" else codec,
        linger_ms=10,
    )
    for i in range(n):
        key, value, headers = record(i, nullHeaders=False)
        producer.send(topic, key=key, value=value, headers=headers, partition=0)
    producer.flush(60)
    producer.close()
    rows, offsets = confluentConsume(broker.bootstrap, topic, n)
    assert offsets == list(range(n))
    assert digest(rows) == expectedDigest(n, nullHeaders=False)


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd", "snappy"])
def test_aiokafka_producer(broker, codec):
    from aiokafka import AIOKafkaProducer

    n = 20_000
    topic = f"aio-{codec}"

    async def main():
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            compression_type=None if codec == "none" else codec,
            linger_ms=10,
        )
        await producer.start()
        try:
            pending = []
            for i in range(n):
                key, value, headers = record(i)
                pending.append(
                    await producer.send(topic, key=key, value=value, headers=headers, partition=0)
                )
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(main())
    rows, offsets = confluentConsume(broker.bootstrap, topic, n)
    assert offsets == list(range(n))
    assert digest(rows) == expectedDigest(n)


def test_consume_from_inside_a_batch(broker):
    """
    A fetch at an offset inside a batch gets the whole batch; the client
    skips the records before its offset.
    """
    topic = "inside-batch"
    confluentProduce(broker.bootstrap, topic, 1000, "lz4")
    rows, offsets = confluentConsume(broker.bootstrap, topic, 1000 - 437, offset=437)
    assert offsets == list(range(437, 1000))
    assert digest(rows) == digest(record(i) for i in range(437, 1000))
    assert kafkaPythonConsume(broker.bootstrap, topic, 1000)[437] == record(437)


def test_list_offsets_by_timestamp(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "by-time"
    base = int(time.time() * 1000) - 100_000
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    # Out of order inside batches, as producers may stamp them.
    stamps = [base + ((i * 37) % 1000) * 10 for i in range(1000)]
    for i, ts in enumerate(stamps):
        producer.produce(topic, value=b"%d" % i, timestamp=ts)
    producer.flush(30)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False}
    )
    for target in (base - 1, base + 5, base + 2500, base + 9990, base + 5000, base + 10_000):
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=10)
        candidates = [i for i, ts in enumerate(stamps) if ts >= target]
        assert found.offset == (candidates[0] if candidates else -1), target

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    result = kc.offsets_for_times({KTP(topic, 0): base + 2500})
    assert result[KTP(topic, 0)].offset == [i for i, ts in enumerate(stamps) if ts >= base + 2500][0]
    assert kc.beginning_offsets([KTP(topic, 0)])[KTP(topic, 0)] == 0
    assert kc.end_offsets([KTP(topic, 0)])[KTP(topic, 0)] == 1000
    kc.close()
    consumer.close()


def test_long_poll_wakes_on_append(broker):
    """
    A consumer parked on an empty partition gets a new record at once, not
    after fetch.wait.max.ms.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "wake"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"first")
    producer.flush(10)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "w", "fetch.wait.max.ms": 5000,
         "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 1)])
    consumer.consume(1, 1.0)
    latencies = []
    for i in range(5):
        time.sleep(0.3)
        sent = time.monotonic()
        producer.produce(topic, value=b"%d" % i)
        producer.flush(10)
        [message] = consumer.consume(1, 10)
        latencies.append(time.monotonic() - sent)
        assert message.value() == b"%d" % i
    consumer.close()
    # With fetch.wait.max.ms=5000 a broker that does not wake parked
    # fetches would take seconds.
    assert max(latencies) < 1.0, latencies
