"""
Connection creation rates against a real C{twistd -n kafkatwist}: the
broker-wide and per-listener C{max.connection.creation.rate} (KIP-612) set
with confluent-kafka's AdminClient, and the per-IP
C{connection_creation_rate} client quota set with AlterClientQuotas (built
with kafka-python's protocol classes: no Python client has an admin call
for it).  The bounds are loose: a loaded 2-core machine is slow, never
faster than the limits allow.
"""

from __future__ import annotations

import gc
import socket
import time
import uuid

import pytest

from tests.integration.helpers import alterQuotas, describeQuotas
from tests.integration.helpers import NODE_ID, confluentAdmin, incremental

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: short windows, so that rates converge within a test
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


def connectFrom(port, source="127.0.0.1"):
    from tests.rawclient import RawConnection

    connection = RawConnection.__new__(RawConnection)
    connection.sock = socket.create_connection(("127.0.0.1", port), 10, source_address=(source, 0))
    connection.correlationId = 0
    return connection


def timeToServe(port, count, source="127.0.0.1"):
    """
    Open C{count} connections at once and send each an ApiVersions.

    @return: seconds until all were answered.
    """
    started = time.monotonic()
    connections = [connectFrom(port, source) for _ in range(count)]
    try:
        for connection in connections:
            connection.sock.settimeout(30)
            assert connection.apiVersions().error_code == 0
        return time.monotonic() - started
    finally:
        for connection in connections:
            connection.close()


def test_broker_and_listener_connection_creation_rates(brokerFactory):
    broker = brokerFactory(
        {**WINDOWS, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT"},
        listeners="PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    ).start()
    plain, internal = broker.ports["PLAINTEXT"], broker.ports["INTERNAL"]
    admin = confluentAdmin(broker)
    assert timeToServe(plain, 20) < 5

    # Broker-wide: 16 connections at 4/s, measured over at least one
    # window, take about 3 s (the first 4 are within the rate).
    assert incremental(admin, NODE_ID, max_connection_creation_rate="4") == (0, None)
    time.sleep(2.1)  # what the admin client's connections counted has passed
    elapsed = timeToServe(plain, 16)
    assert 1.5 < elapsed < 30, elapsed

    # A listener's own limit (a cluster-wide key): INTERNAL at 2/s, PLAINTEXT
    # unlimited again.
    assert incremental(admin, NODE_ID, max_connection_creation_rate=None) == (0, None)
    assert incremental(broker, "", **{"listener_name_internal_max_connection_creation_rate": "2"}) == (0, None)
    time.sleep(2.1)
    assert timeToServe(plain, 16) < 5
    elapsed = timeToServe(internal, 8)
    assert 1.5 < elapsed < 30, elapsed
    code, message = incremental(admin, NODE_ID, listener_name_internal_max_connection_creation_rate="0")
    assert code == 42 and "Invalid max.connection.creation.rate 0" in message

    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("broker", NODE_ID)
    entry = admin.describe_configs([resource])[resource].result(timeout=15)[
        "listener.name.internal.max.connection.creation.rate"]
    assert entry.value == "2" and not entry.is_read_only
    assert "Traceback" not in broker.output()


def test_ip_connection_creation_rate(brokerFactory):
    from confluent_kafka import Producer

    broker = brokerFactory(WINDOWS).start()
    ok = (0, None)
    assert alterQuotas(broker, [({"ip": "127.0.0.5"}, {"connection_creation_rate": 1})]) == [ok]
    assert describeQuotas(broker, [("ip", 0, "127.0.0.5")]) == {
        (("ip", "127.0.0.5"),): {"connection_creation_rate": 1.0}}
    assert alterQuotas(broker, [
        ({"ip": "127.0.0.5", "user": "alice"}, {"connection_creation_rate": 1}),
        ({"ip": "127.0.0.6"}, {"producer_byte_rate": 1}),
        ({"ip": "127.0.0.6"}, {"connection_creation_rate": 1.5}),
    ]) == [
        (42, "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
        (42, "Invalid configuration key producer_byte_rate"),
        (42, "Invalid value 1.5 for connection_creation_rate: must be an integer"),
    ]

    # The first connection from 127.0.0.5 is served; the next, within the
    # second, is never read and closed once its throttle passed (up to a
    # window); other addresses are not affected.
    first = connectFrom(broker.port, "127.0.0.5")
    assert first.apiVersions().error_code == 0
    second = connectFrom(broker.port, "127.0.0.5")
    started = time.monotonic()
    assert second.isClosedByPeer(10)
    assert time.monotonic() - started < 5
    assert timeToServe(broker.port, 5, "127.0.0.6") < 5
    assert "over its connection_creation_rate" in broker.output()
    for connection in (first, second):
        connection.close()

    # A real client over its address's rate (the default ip entity, 2/s;
    # a first connection already counted): its connection over the rate
    # is closed, it reconnects and delivers.
    assert alterQuotas(broker, [({"ip": None}, {"connection_creation_rate": 2})]) == [ok]
    counted = connectFrom(broker.port)
    assert counted.apiVersions().error_code == 0
    topic = f"ip-{uuid.uuid4().hex[:8]}"
    delivered = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                         "reconnect.backoff.ms": 200, "reconnect.backoff.max.ms": 1000})
    for i in range(3):
        producer.produce(topic, value=b"%d" % i, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(60) == 0
    assert delivered == [None, None, None]
    assert "Closing connection from 127.0.0.1 on PLAINTEXT" in broker.output()
    counted.close()
    del producer
    gc.collect()

    # Removing the quotas lifts them (once the producer's reconnections
    # have left the sampled windows, this request's connection is within
    # the rate).
    time.sleep(2.5)
    assert alterQuotas(broker, [({"ip": None}, {"connection_creation_rate": None}),
                                ({"ip": "127.0.0.5"}, {"connection_creation_rate": None})]) == [ok, ok]
    assert timeToServe(broker.port, 5, "127.0.0.5") < 5
    assert "Traceback" not in broker.output()
