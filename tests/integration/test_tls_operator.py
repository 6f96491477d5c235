"""
TLS as an operator sets it up from the docs: `make certs` (deploy/make-certs.sh)
gives certificates that work with the defaults; the broker warns when the
host it advertises is not in its certificate; principals follow Kafka's RFC
2253 order and ssl.principal.mapping.rules.
"""

import os
import shutil
import subprocess

import pytest

from kafkatwist.testing.broker import ROOT
from tests.integration.helpers import PRINCIPAL_PLUGIN, confluentMetadata

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("openssl") is None, reason="make-certs needs openssl"),
]

SCRIPT = os.path.join(ROOT, "deploy", "make-certs.sh")
NOT_NAMED = "which the server certificate"


def makeCerts(directory, **env):
    result = subprocess.run(
        ["sh", SCRIPT, str(directory)], env=dict(os.environ, **env),
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def sslBroker(brokerFactory, certs, tmp_path, **overrides):
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "principal_echo.py").write_text(PRINCIPAL_PLUGIN)
    settings = {
        "ssl.keystore.location": str(certs / "server-keystore.pem"),
        "ssl.truststore.location": str(certs / "ca.pem"),
        "ssl.client.auth": "required",
        "plugin.paths": str(plugins),
    }
    settings.update(overrides)
    return brokerFactory(settings, listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0").start()


def clientSettings(certs):
    # As the README shows it: bootstrap through localhost, hostname checks on
    # (librdkafka's default), the client certificate from make certs.
    return {
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs / "ca.pem"),
        "ssl.certificate.location": str(certs / "client.pem"),
        "ssl.key.location": str(certs / "client.key"),
        "ssl.endpoint.identification.algorithm": "https",
    }


def test_make_certs_work_with_the_defaults(brokerFactory, tmp_path):
    from confluent_kafka import Consumer, Producer

    certs = tmp_path / "certs"
    printed = makeCerts(certs)
    assert "principal User:O=acme,CN=app" in printed
    b = sslBroker(brokerFactory, certs, tmp_path)
    assert NOT_NAMED not in b.output()
    bootstrap = f"localhost:{b.ports['SSL']}"
    settings = clientSettings(certs)

    assert confluentMetadata(bootstrap, **settings).cluster_id == "User:O=acme,CN=app"
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    producer.produce("tls-docs", b"over TLS")
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "docs",
                         "auto.offset.reset": "earliest", **settings})
    consumer.subscribe(["tls-docs"])
    try:
        message = None
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"over TLS"
    finally:
        consumer.close()


def test_warning_when_the_advertised_host_is_not_in_the_certificate(brokerFactory, tmp_path):
    certs = tmp_path / "certs"
    makeCerts(certs, SERVER_NAMES="DNS:localhost")
    b = sslBroker(brokerFactory, certs, tmp_path)
    warnings = [l for l in b.output().splitlines() if NOT_NAMED in l]
    assert len(warnings) == 1, b.output()
    assert ("SSL listener SSL advertises 127.0.0.1, which the server certificate (DNS:localhost) "
            "does not name") in warnings[0]
    assert "Add IP:127.0.0.1 to its subjectAltName" in warnings[0]


def test_principal_mapping_rules(brokerFactory, tmp_path):
    certs = tmp_path / "certs"
    makeCerts(certs)
    b = sslBroker(brokerFactory, certs, tmp_path,
                  **{"ssl.principal.mapping.rules": "RULE:^O=(.*?),CN=(.*?)$/$2@$1/U, DEFAULT"})
    bootstrap = f"localhost:{b.ports['SSL']}"
    assert confluentMetadata(bootstrap, **clientSettings(certs)).cluster_id == "User:APP@ACME"


def test_no_matching_rule_fails_authentication(brokerFactory, tmp_path):
    from confluent_kafka import KafkaException

    certs = tmp_path / "certs"
    makeCerts(certs)
    b = sslBroker(brokerFactory, certs, tmp_path,
                  **{"ssl.principal.mapping.rules": "RULE:^CN=nobody$/nobody/"})
    bootstrap = f"localhost:{b.ports['SSL']}"
    with pytest.raises(KafkaException):
        from confluent_kafka.admin import AdminClient

        AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000,
                     **clientSettings(certs)}).list_topics(timeout=4)
    assert "no ssl.principal.mapping.rules rule applies to O=acme,CN=app" in b.output()
