"""
Client quotas against a real C{twistd -n kafkatwist}.

None of the Python clients has an admin call for client quotas (Java's
C{kafka-configs.sh --entity-type clients} sends these requests): they are
built and read with kafka-python's own protocol classes, an encoder
independent of the broker's.  Throttling is observed by confluent-kafka
(librdkafka): its C{throttle_cb} reports the broker's throttle_time_ms,
and its measured rate converges to the quota.
"""

from __future__ import annotations

import time
import uuid

import pytest
from tests.integration.helpers import alterQuotas, describeQuotas

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: short windows, so that rates converge within a test
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe(brokerFactory, version):
    broker = brokerFactory().start()
    ok = (0, None)
    assert alterQuotas(broker, [
        ({"user": "alice", "client-id": "app"}, {"producer_byte_rate": 1024, "request_percentage": 12.5}),
        ({"user": None}, {"consumer_byte_rate": 2048}),
        ({"client-id": None}, {"producer_byte_rate": 4096}),
    ], version) == [ok, ok, ok]
    everything = describeQuotas(broker, version=version)
    assert everything == {
        (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 1024.0, "request_percentage": 12.5},
        (("user", None),): {"consumer_byte_rate": 2048.0},
        (("client-id", None),): {"producer_byte_rate": 4096.0},
    }
    # Kafka's filters: exact, default, any specified name; strict.
    assert set(describeQuotas(broker, [("user", 0, "alice")], version=version)) == {
        (("client-id", "app"), ("user", "alice"))}
    assert describeQuotas(broker, [("user", 0, "alice")], strict=True, version=version) == {}
    assert set(describeQuotas(broker, [("user", 1, None)], version=version)) == {(("user", None),)}
    assert set(describeQuotas(broker, [("client-id", 2, None)], version=version)) == {
        (("client-id", "app"), ("user", "alice"))}

    # Per-entry errors; the good entry of the same request is applied.
    results = alterQuotas(broker, [
        ({"client-id": "x"}, {"producer_byte_rate": 1.5}),
        ({"client-id": "y"}, {"nonsense": 1}),
        ({"ip": "1.2.3.4", "user": "x"}, {"connection_creation_rate": 5}),
        ({"client-id": "z"}, {"consumer_byte_rate": 100}),
    ], version)
    assert [code for code, _ in results] == [42, 42, 42, 0]
    assert "must be an integer" in results[0][1]
    assert "Invalid configuration key nonsense" in results[1][1]
    assert describeQuotas(broker, [("client-id", 0, "z")], version=version) == {
        (("client-id", "z"),): {"consumer_byte_rate": 100.0}}
    # validate_only changes nothing; removing the last key forgets the entity.
    assert alterQuotas(broker, [({"client-id": "z"}, {"consumer_byte_rate": 5})], version, True) == [ok]
    assert alterQuotas(broker, [({"client-id": "z"}, {"consumer_byte_rate": None})], version) == [ok]
    assert describeQuotas(broker, [("client-id", 0, "z")], version=version) == {}

    # Durable: a restarted broker has them.
    broker.stop()
    from kafkatwist.testing import Broker

    again = Broker(broker.directory, dict(broker.overrides))
    again.logPath = broker.logPath + ".2"
    again.start()
    try:
        assert describeQuotas(again, version=version) == everything
    finally:
        again.stop()


def produceFor(bootstrap, topic, clientId, seconds, size=4096):
    """
    Produce as fast as the client is let for C{seconds}.

    @return: ([(time, bytes acknowledged)], [throttle ms reported]).
    """
    from confluent_kafka import Producer

    acked = []
    throttles = []
    start = time.monotonic()
    producer = Producer({
        "bootstrap.servers": bootstrap, "client.id": clientId, "linger.ms": 5,
        "queue.buffering.max.kbytes": 512, "batch.size": 16384, "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic() - start, len(msg.value())))

    payload = b"x" * size
    while time.monotonic() - start < seconds:
        try:
            producer.produce(topic, payload, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    return acked, throttles


def rateBetween(acked, begin, end):
    return sum(size for t, size in acked if begin <= t < end) / (end - begin)


def test_producer_is_throttled_to_its_quota(brokerFactory):
    broker = brokerFactory(WINDOWS).start()
    topic = unique("quota")
    quota = 200_000
    assert alterQuotas(broker, [({"client-id": "slow"}, {"producer_byte_rate": quota})]) == [(0, None)]
    acked, throttles = produceFor(broker.bootstrap, topic, "slow", 8)
    rate = rateBetween(acked, 3, 8)
    assert 0.6 * quota < rate < 1.5 * quota, rate
    assert throttles and max(throttles) > 0
    # Another client id is not held back.
    fast, fastThrottles = produceFor(broker.bootstrap, topic, "fast", 3)
    assert rateBetween(fast, 1, 3) > 3 * quota
    assert not [t for t in fastThrottles if t > 0]


def test_consumer_is_throttled_to_its_quota(brokerFactory):
    from confluent_kafka import Consumer, TopicPartition

    broker = brokerFactory(WINDOWS).start()
    topic = unique("quotac")
    produceFor(broker.bootstrap, topic, "loader", 3)
    quota = 300_000
    assert alterQuotas(broker, [({"client-id": "reader"}, {"consumer_byte_rate": quota})]) == [(0, None)]
    throttles = []
    consumer = Consumer({
        "bootstrap.servers": broker.bootstrap, "client.id": "reader", "group.id": unique("g"),
        "enable.auto.commit": False, "fetch.max.bytes": 262144, "message.max.bytes": 65536,
        "max.partition.fetch.bytes": 65536,
        "throttle_cb": lambda event: throttles.append(event.throttle_time),
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    start = time.monotonic()
    try:
        while time.monotonic() - start < 7:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                got.append((time.monotonic() - start, len(message.value())))
    finally:
        consumer.close()
    rate = rateBetween(got, 2, 7)
    assert 0.5 * quota < rate < 1.6 * quota, rate
    assert throttles and max(throttles) > 0


def test_request_percentage_mutes_the_connection(brokerFactory):
    """
    A client over request_percentage gets throttle_time_ms in its answers,
    and the broker reads its next request only once that time has passed.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
    from kafkatwist.protocol.entities import durationMs, make
    from tests.rawclient import RawConnection

    broker = brokerFactory(WINDOWS).start()
    assert alterQuotas(broker, [({"client-id": "busy"}, {"request_percentage": 0.01})]) == [(0, None)]
    connection = RawConnection(broker.port)
    request = make(requestType(3, 12), topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    frame = encodeRequestFrame(3, 12, 1, "busy", request)
    throttled = None
    try:
        for _ in range(200):
            connection.send(frame)
            _, response = decodeResponseFrame(3, 12, connection.readFrame())
            if durationMs(response.throttle_time) > 0:
                throttled = durationMs(response.throttle_time)
                break
        assert throttled is not None
        sent = time.monotonic()
        connection.send(frame)
        connection.readFrame()
        assert time.monotonic() - sent >= 0.8 * throttled / 1000.0
    finally:
        connection.close()
