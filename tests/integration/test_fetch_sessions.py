"""
Incremental fetch sessions (KIP-227) with real consumers: they open a
session, then send incremental fetches, and still get every record; the
broker's metrics count what kind of fetch each one was.
"""

import re
import time
import urllib.request

import pytest

from kafkatwist.testing import Broker

pytestmark = pytest.mark.integration

PARTITIONS = 8
RECORDS = 400


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    b = Broker(
        str(tmp_path_factory.mktemp("broker")), {"metrics.http.listener": "127.0.0.1:0"}
    )
    b.start()
    b.metricsPort = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    yield b
    b.stop()


def sessionRequests(broker) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metricsPort}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        kind: int(count)
        for kind, count in re.findall(
            r'^kafka_server_fetch_session_requests_total\{kind="(\w+)"\} (\d+)$', text, re.M
        )
    }


def gauge(broker, name) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metricsPort}/metrics", timeout=10) as r:
        text = r.read().decode()
    return int(re.search(rf"^{name} (\d+)$", text, re.M).group(1))


def createAndFill(bootstrap, topic):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def moreRecords(bootstrap, topic, start, n):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + n):
        producer.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def differences(before, after):
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def test_kafka_python_consumer_uses_incremental_fetches(broker):
    from kafka import KafkaConsumer, TopicPartition

    topic = "sessions-kafka-python"
    createAndFill(broker.bootstrap, topic)
    before = sessionRequests(broker)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100,
        auto_offset_reset="earliest", consumer_timeout_ms=30_000,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen.update(r.value for r in records)
    moreRecords(broker.bootstrap, topic, RECORDS, 40)
    while len(seen) < RECORDS + 40 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen.update(r.value for r in records)
    # Idle polls: the session's quiet partitions are not sent either way.
    for _ in range(5):
        consumer.poll(timeout_ms=200)
    assert gauge(broker, "kafka_server_fetchsessioncache_numincrementalfetchsessions") >= 1
    assert gauge(
        broker, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
    ) >= PARTITIONS
    consumer.close()
    assert seen == {b"v%d" % i for i in range(RECORDS + 40)}
    counts = differences(before, sessionRequests(broker))
    assert counts["full"] >= 1
    assert counts["incremental"] > counts["full"]
    assert counts["error"] == 0


def test_confluent_consumer_reads_everything(broker):
    """
    librdkafka sends session id 0 and epoch -1 (it does not implement
    KIP-227): its fetches never reach the session cache, and it reads
    every record as before.
    """
    from confluent_kafka import Consumer, TopicPartition

    topic = "sessions-confluent"
    createAndFill(broker.bootstrap, topic)
    before = sessionRequests(broker)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "g", "enable.auto.commit": False,
         "fetch.wait.max.ms": 100}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    seen = set()
    deadline = time.monotonic() + 60
    while len(seen) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert seen == {b"v%d" % i for i in range(RECORDS)}
    assert set(differences(before, sessionRequests(broker)).values()) == {0}
