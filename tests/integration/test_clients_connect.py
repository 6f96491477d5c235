"""
Unmodified clients negotiate versions and read cluster metadata from a real
C{twistd -n kafkatwist}, over PLAINTEXT and over TLS with CA verification and
hostname checks; with C{ssl.client.auth=required} the certificate's DN is
the principal handlers see.
"""

import asyncio

import pytest
from tests.integration.helpers import PRINCIPAL_PLUGIN, confluentMetadata

pytestmark = pytest.mark.integration


def kafkaPythonCluster(bootstrap, **extra):
    from kafka.admin import KafkaAdminClient

    extra.setdefault("request_timeout_ms", 15000)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **extra)
    try:
        # The admin client's own version probe has run by now; ask again
        # explicitly so the check is part of the test.
        version = admin._client.check_version()
        return version, admin.describe_cluster()
    finally:
        admin.close()


def aiokafkaBrokers(bootstrap, **extra):
    from aiokafka import AIOKafkaClient

    async def main():
        client = AIOKafkaClient(bootstrap_servers=bootstrap, **extra)
        await client.bootstrap()
        try:
            return client.cluster.brokers()
        finally:
            await client.close()

    return asyncio.run(main())


@pytest.fixture(scope="module")
def tlsBroker(tmp_path_factory, pki):
    from kafkatwist.testing import Broker

    b = Broker(
        str(tmp_path_factory.mktemp("tls")),
        {"ssl.keystore.location": pki.serverKeystore},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    )
    b.start()
    yield b
    b.stop()


def test_confluent_plaintext(tlsBroker):
    metadata = confluentMetadata(tlsBroker.bootstrap)
    assert list(metadata.brokers) == [1]
    assert metadata.brokers[1].port == tlsBroker.port
    assert metadata.cluster_id


def test_kafka_python_plaintext(tlsBroker):
    version, cluster = kafkaPythonCluster(tlsBroker.bootstrap)
    # Inferred from the APIs served: grows as handlers are added.
    assert version >= (0, 10)
    assert cluster["brokers"][0]["port"] == tlsBroker.port
    assert cluster["controller_id"] == 1


def test_aiokafka_plaintext(tlsBroker):
    brokers = aiokafkaBrokers(tlsBroker.bootstrap)
    assert [(b.nodeId, b.port) for b in brokers] == [(1, tlsBroker.port)]


def test_confluent_ssl(tlsBroker, pki):
    port = tlsBroker.ports["SSL"]
    metadata = confluentMetadata(
        f"localhost:{port}",
        **{
            "security.protocol": "SSL",
            "ssl.ca.location": pki.caFile,
            "ssl.endpoint.identification.algorithm": "https",
        },
    )
    # Metadata answers with the endpoint of the listener asked.
    assert metadata.brokers[1].port == port


def test_kafka_python_ssl(tlsBroker, pki):
    port = tlsBroker.ports["SSL"]
    version, cluster = kafkaPythonCluster(
        f"127.0.0.1:{port}", security_protocol="SSL", ssl_cafile=pki.caFile, ssl_check_hostname=True
    )
    assert cluster["brokers"][0]["port"] == port


def test_aiokafka_ssl(tlsBroker, pki):
    from aiokafka.helpers import create_ssl_context

    port = tlsBroker.ports["SSL"]
    context = create_ssl_context(cafile=pki.caFile)
    assert context.check_hostname
    brokers = aiokafkaBrokers(f"127.0.0.1:{port}", security_protocol="SSL", ssl_context=context)
    assert [b.port for b in brokers] == [port]


def test_large_fetch_over_tls_streams_whole(tlsBroker, pki):
    """
    Fetch responses of about 1 MiB each over TLS (record data streamed from
    the segment in chunks read on handler threads) arrive whole and in
    order.
    """
    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": tlsBroker.bootstrap, "linger.ms": 5})
    values = [bytes([i]) * 100_000 for i in range(30)]
    for value in values:
        producer.produce("tls-large", value)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": f"localhost:{tlsBroker.ports['SSL']}",
            "security.protocol": "SSL",
            "ssl.ca.location": pki.caFile,
            "group.id": "tls-large",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["tls-large"])
        got = []
        for _ in range(200):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
            if len(got) == len(values):
                break
    finally:
        consumer.close()
    assert got == values


def test_hostname_mismatch_is_refused_by_client(brokerFactory, pki):
    """
    A certificate for another host fails the client's hostname check.
    """
    from kafka.errors import KafkaError

    b = brokerFactory(
        {"ssl.keystore.location": pki.wrongHostKeystore},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    with pytest.raises((KafkaError, OSError)):
        kafkaPythonCluster(
            f"127.0.0.1:{b.ports['SSL']}",
            security_protocol="SSL",
            ssl_cafile=pki.caFile,
            ssl_check_hostname=True,
            # Each bootstrap attempt fails the same way: give up sooner than
            # the default 30 s of retries.
            request_timeout_ms=3000,
            api_version_auto_timeout_ms=3000,
        )


def test_client_auth_required(brokerFactory, pki, tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "principal_echo.py").write_text(PRINCIPAL_PLUGIN)
    b = brokerFactory(
        {
            "ssl.keystore.location": pki.serverKeystore,
            "ssl.truststore.location": pki.caFile,
            "ssl.client.auth": "required",
            "plugin.paths": str(plugins),
        },
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    assert "test.principal [plugin.paths, priority 50] -> builtin.metadata" in b.output()
    port = b.ports["SSL"]
    common = {
        "security.protocol": "SSL",
        "ssl.ca.location": pki.caFile,
        "socket.timeout.ms": 3000,
    }
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": f"localhost:{port}", **common}).list_topics(timeout=3)

    metadata = confluentMetadata(
        f"localhost:{port}",
        **common,
        **{"ssl.certificate.location": pki.clientCert, "ssl.key.location": pki.clientKey},
    )
    assert metadata.cluster_id == f"User:{pki.clientDn}"
    # PLAINTEXT requests are anonymous.
    assert confluentMetadata(b.bootstrap).cluster_id == "User:ANONYMOUS"


def tlsHandshake(port, caFile, ciphers=None, maximum=None):
    import socket
    import ssl

    context = ssl.create_default_context(cafile=caFile)
    if ciphers:
        context.set_ciphers(ciphers)
    if maximum:
        context.maximum_version = maximum
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return tls.version(), tls.cipher()[0]


def test_tls_defaults_refuse_static_rsa_and_cbc(brokerFactory, pki):
    """
    A real TLS client offering only a static-RSA or a CBC suite is refused
    by a broker with an RSA certificate and default settings; a
    forward-secret AEAD suite is accepted.
    """
    import ssl

    b = brokerFactory(
        {"ssl.keystore.location": pki.rsaServerKeystore},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    port = b.ports["SSL"]
    tls12 = ssl.TLSVersion.TLSv1_2
    for suite in ("AES128-GCM-SHA256", "ECDHE-RSA-AES128-SHA"):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            tlsHandshake(port, pki.caFile, suite, tls12)
    assert tlsHandshake(port, pki.caFile, "ECDHE-RSA-AES128-GCM-SHA256", tls12) == (
        "TLSv1.2",
        "ECDHE-RSA-AES128-GCM-SHA256",
    )
    assert tlsHandshake(port, pki.caFile)[0] == "TLSv1.3"
    assert "Traceback" not in b.output()


def test_tls_protocols_and_suites_from_config(brokerFactory, pki):
    import ssl

    b = brokerFactory(
        {
            "ssl.keystore.location": pki.rsaServerKeystore,
            "ssl.enabled.protocols": "TLSv1.3",
            "ssl.cipher.suites": "TLS_AES_256_GCM_SHA384",
        },
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    port = b.ports["SSL"]
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tlsHandshake(port, pki.caFile, maximum=ssl.TLSVersion.TLSv1_2)
    assert tlsHandshake(port, pki.caFile) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")


def test_unknown_cipher_suite_refuses_to_start(brokerFactory, pki):
    b = brokerFactory(
        {"ssl.keystore.location": pki.serverKeystore, "ssl.cipher.suites": "TLS_NOT_A_SUITE"},
        listeners="SSL://127.0.0.1:0",
    )
    with pytest.raises(RuntimeError) as e:
        b.start()
    assert "Invalid value for ssl.cipher.suites: unknown cipher suite 'TLS_NOT_A_SUITE'" in str(e.value)
