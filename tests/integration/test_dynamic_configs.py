"""
Dynamic broker configs against a real C{twistd -n kafkatwist}, through the
clients' admin APIs: confluent-kafka's C{incremental_alter_configs},
kafka-python's and aiokafka's C{alter_configs}; durable across a restart;
a listener's certificate rotated without one.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from tests.integration.helpers import NODE_ID, confluentAdmin, incremental

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def describeDefault(broker):
    """
    @return: name -> (value, source) of the cluster default resource.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested
    from tests.rawclient import RawConnection

    Resource = nested(requestType(32, 4), "DescribeConfigsResource")
    connection = RawConnection(broker.port)
    try:
        [result] = connection.request(
            32, 4,
            resources=(Resource(resource_type=4, resource_name="", configuration_keys=None),),
            include_synonyms=True, include_documentation=False,
        ).results
    finally:
        connection.close()
    return {c.name: (c.value, int(c.config_source)) for c in result.configs}


def describeBroker(admin, name=NODE_ID):
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("broker", name)
    return admin.describe_configs([resource])[resource].result(timeout=15)


def produce(bootstrap, topic, size):
    """
    @return: the delivery error's name, or None.
    """
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.max.bytes": 10_000_000})
    producer.produce(topic, value=b"x" * size, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    [error] = errors
    return None if error is None else error.name()


def test_dynamic_message_max_bytes_and_restart(brokerFactory):
    from confluent_kafka.admin import ConfigSource, NewTopic

    broker = brokerFactory({"log.retention.hours": "24"}).start()
    admin = confluentAdmin(broker)
    topic = unique("dyn")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)
    assert produce(broker.bootstrap, topic, 50_000) is None

    # The cluster default, then this broker's own value over it.
    assert incremental(broker, "", message_max_bytes="40000", log_retention_ms="3600000") == (0, None)
    assert produce(broker.bootstrap, topic, 50_000) == "MSG_SIZE_TOO_LARGE"
    assert incremental(admin, NODE_ID, message_max_bytes="100000") == (0, None)
    assert produce(broker.bootstrap, topic, 50_000) is None

    configs = describeBroker(admin)
    entry = configs["message.max.bytes"]
    assert (entry.value, entry.source) == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not entry.is_read_only
    assert configs["log.dirs"].is_read_only
    assert describeDefault(broker) == {
        "message.max.bytes": ("40000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
        "log.retention.ms": ("3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
    }

    # The topic inherits the defaults and says where they come from.
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource("topic", topic)
    topicConfigs = admin.describe_configs([resource])[resource].result(timeout=15)
    assert topicConfigs["retention.ms"].value == "3600000"
    assert topicConfigs["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert topicConfigs["max.message.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value

    # Refusals, in Kafka's words.
    code, message = incremental(admin, NODE_ID, log_dirs="/elsewhere")
    assert code == 42 and "Cannot update these configs dynamically: Set(log.dirs)" in message
    code, message = incremental(admin, NODE_ID, log_retention_ms="soon")
    assert code == 42 and "log.retention.ms" in message

    # Durable: a restarted broker applies them before it serves.
    broker = restart(broker)
    try:
        admin = confluentAdmin(broker)
        entry = describeBroker(admin)["message.max.bytes"]
        assert (entry.value, entry.source) == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert incremental(admin, NODE_ID, message_max_bytes=None) == (0, None)
        assert produce(broker.bootstrap, topic, 50_000) == "MSG_SIZE_TOO_LARGE"
        assert "Dynamic broker configs applied" in broker.output()
    finally:
        broker.stop()


def test_kafka_python_and_aiokafka_alter_broker_configs(broker):
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    try:
        admin.alter_configs(
            [ConfigResource(ConfigResourceType.BROKER, NODE_ID, configs={"log.segment.bytes": "2000000"})],
            raise_on_unknown=False,
        )
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, NODE_ID)], config_filter="all"
        )
        segment = described["broker"][NODE_ID]["log.segment.bytes"]
        assert segment["value"] == "2000000"
        assert segment["config_source"] == "DYNAMIC_BROKER_CONFIG"
        assert segment["read_only"] is False
    finally:
        admin.close()

    async def aio():
        from aiokafka.admin import AIOKafkaAdminClient
        from aiokafka.admin.config_resource import ConfigResource as AioResource
        from aiokafka.admin.config_resource import ConfigResourceType as AioType

        client = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await client.start()
        try:
            # The legacy AlterConfigs: the given configs are the whole layer
            # (log.segment.bytes set above goes).
            return await client.alter_configs(
                [AioResource(AioType.BROKER, NODE_ID, configs={"log.retention.bytes": "123456789"})]
            )
        finally:
            await client.close()

    responses = asyncio.run(aio())
    assert [r[0] for response in responses for r in response.resources] == [0]
    admin = confluentAdmin(broker)
    configs = describeBroker(admin)
    assert configs["log.retention.bytes"].value == "123456789"
    assert configs["log.segment.bytes"].value == "1073741824"
    assert incremental(admin, NODE_ID, log_retention_bytes=None) == (0, None)


def test_num_io_threads(brokerFactory):
    broker = brokerFactory({"num.io.threads": "2"}).start()
    admin = confluentAdmin(broker)
    code, message = incremental(admin, NODE_ID, num_io_threads="5")
    assert code == 42 and "should not be greater than double the current value 2" in message
    assert incremental(broker, "", num_io_threads="4") == (0, None)
    assert incremental(admin, NODE_ID, num_io_threads="3") == (0, None)
    topic = unique("threads")
    assert produce(broker.bootstrap, topic, 100) is None


def connectFrom(broker, source):
    from tests.rawclient import RawConnection

    connection = RawConnection.__new__(RawConnection)
    connection.sock = socket.create_connection(("127.0.0.1", broker.port), 10, source_address=(source, 0))
    connection.correlationId = 0
    return connection


def waitForOutput(broker, text, timeout=20.0):
    deadline = time.monotonic() + timeout
    while text not in broker.output():
        assert time.monotonic() < deadline, f"{text!r} not logged"
        time.sleep(0.05)


def test_num_network_threads(brokerFactory):
    """
    Processors added and removed while clients are connected: new ones are
    handed connections at once; the connections of removed ones are closed
    and their clients, reconnecting, are served by the others.  Each
    connection comes from its own address so that its "opened" line is
    logged (they are rate-limited per address).
    """
    from confluent_kafka import Producer

    broker = brokerFactory({"num.network.threads": "2"}).start()
    admin = confluentAdmin(broker)
    topic = unique("net")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    delivered = []

    def send(value):
        producer.produce(topic, value=value, on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0

    send(b"before")
    before = [connectFrom(broker, f"127.0.0.{10 + i}") for i in range(2)]

    code, message = incremental(admin, NODE_ID, num_network_threads="5")
    assert code == 42 and "should not be greater than double the current value 2" in message
    assert incremental(broker, "", num_network_threads="4") == (0, None)
    waitForOutput(broker, "resized from 2 to 4: processors [0, 1, 2, 3]")
    after = [connectFrom(broker, f"127.0.0.{20 + i}") for i in range(4)]
    for connection in before + after:
        assert connection.apiVersions().error_code == 0
    output = broker.output()
    assert "(processor 2)" in output and "(processor 3)" in output

    code, message = incremental(admin, NODE_ID, num_network_threads="1")
    assert code == 42 and "should be at least half the current value 4" in message
    assert incremental(admin, NODE_ID, num_network_threads="2") == (0, None)
    waitForOutput(broker, "resized from 4 to 2: processors [0, 1]")
    # The connections of processors 2 and 3 (two of the four made after
    # the growth, round robin) are closed; the others are still served.
    closed: list = []
    deadline = time.monotonic() + 20
    while len(closed) < 2 and time.monotonic() < deadline:
        closed += [c for c in after if c not in closed and c.isClosedByPeer(0.2)]
    assert len(closed) == 2
    for connection in before + [c for c in after if c not in closed]:
        assert connection.apiVersions().error_code == 0
    assert "network thread removed (num.network.threads)" in broker.output()
    # A client whose connection was closed reconnects and is served.
    send(b"after")
    assert delivered == [None, None]
    for connection in before + after:
        connection.close()
    producer = None
    entry = describeBroker(admin)["num.network.threads"]
    assert (entry.value, entry.is_read_only) == ("2", False)
    assert "Traceback" not in broker.output()

    # Durable: a restarted broker starts with the stored count.
    assert incremental(admin, NODE_ID, num_network_threads="3") == (0, None)
    # A new Processor gets a new index (2 and 3 were removed).
    waitForOutput(broker, "resized from 2 to 3: processors [0, 1, 4]")
    broker = restart(broker)
    try:
        assert "resized from 2 to 3: processors [0, 1, 2]" in broker.output()
        assert produce(broker.bootstrap, topic, 100) is None
    finally:
        broker.stop()


def restart(old):
    from kafkatwist.testing import Broker

    old.stop()
    new = Broker(old.directory, dict(old.overrides))
    new.logPath = old.logPath + ".2"
    return new.start()


def servedCertificate(port: int, caFile: str) -> bytes:
    context = ssl.create_default_context(cafile=caFile)
    with socket.create_connection(("127.0.0.1", port)) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


def firstCertificate(pemFile: str) -> bytes:
    with open(pemFile, "rb") as f:
        return x509.load_pem_x509_certificates(f.read())[0].public_bytes(Encoding.DER)


def test_certificate_rotation_without_restart(brokerFactory, pki):
    broker = brokerFactory(
        {"ssl.keystore.location": pki.serverKeystore},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    port = broker.ports["SSL"]
    assert servedCertificate(port, pki.caFile) == firstCertificate(pki.serverKeystore)

    # A connection made before the rotation keeps its session.
    context = ssl.create_default_context(cafile=pki.caFile)
    before = context.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")

    admin = confluentAdmin(broker)
    key = "listener.name.ssl.ssl.keystore.location"
    code, message = incremental(admin, NODE_ID, **{key.replace(".", "_"): "/no/such.pem"})
    assert code == 42 and "cannot read /no/such.pem" in message
    assert servedCertificate(port, pki.caFile) == firstCertificate(pki.serverKeystore)

    code, message = incremental(broker, "", **{key.replace(".", "_"): pki.rsaServerKeystore})
    assert code == 42 and "broker id must be specified" in message

    assert incremental(admin, NODE_ID, **{key.replace(".", "_"): pki.rsaServerKeystore}) == (0, None)
    assert servedCertificate(port, pki.caFile) == firstCertificate(pki.rsaServerKeystore)
    assert before.getpeercert(binary_form=True) == firstCertificate(pki.serverKeystore)
    # ApiVersions v0 on the old connection still answers.
    before.sendall(bytes.fromhex("0000000a00120000000000010000"))
    assert len(before.recv(4)) == 4
    before.close()

    entry = describeBroker(admin)[key]
    assert entry.value == pki.rsaServerKeystore and not entry.is_read_only

    # ... and the new certificate is what a restarted broker serves.
    broker = restart(broker)
    try:
        assert servedCertificate(broker.ports["SSL"], pki.caFile) == firstCertificate(pki.rsaServerKeystore)
    finally:
        broker.stop()


def test_connection_limits_without_restart(brokerFactory):
    """
    max.connections.per.ip.overrides changed while connections come from
    127.0.0.2 (the admin client's, from 127.0.0.1, are not counted there).
    """
    from tests.rawclient import RawConnection

    def connectFrom(source):
        connection = RawConnection.__new__(RawConnection)
        connection.sock = socket.create_connection(("127.0.0.1", broker.port), 10, source_address=(source, 0))
        connection.correlationId = 0
        return connection

    broker = brokerFactory().start()
    admin = confluentAdmin(broker)
    assert incremental(admin, NODE_ID, max_connections_per_ip_overrides="127.0.0.2:1") == (0, None)
    first = connectFrom("127.0.0.2")
    assert first.apiVersions().error_code == 0
    second = connectFrom("127.0.0.2")
    assert second.isClosedByPeer(5)
    second.close()
    assert incremental(admin, NODE_ID, max_connections_per_ip_overrides="127.0.0.2:2") == (0, None)
    third = connectFrom("127.0.0.2")
    assert third.apiVersions().error_code == 0
    for connection in (first, third):
        connection.close()
