"""
The start-up check of advertised hosts against the server certificate.
"""

from kafkatwist.config import Listener
from kafkatwist.server.servercert import advertisedHostWarnings


def listeners(*hosts):
    return [Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")] + [
        Listener(f"SSL{i}" if i else "SSL", host, 9093 + i, "SSL") for i, host in enumerate(hosts)
    ]


def test_named_hosts_pass(pki):
    assert advertisedHostWarnings(pki.serverKeystore, listeners("127.0.0.1", "localhost")) == []


def test_unnamed_host_and_ip_are_warned_about(pki):
    warnings = advertisedHostWarnings(pki.wrongHostKeystore, listeners("127.0.0.1", "localhost"))
    assert len(warnings) == 2
    assert warnings[0].startswith(
        "SSL listener SSL advertises 127.0.0.1, which the server certificate (DNS:elsewhere.example) "
        "does not name"
    )
    assert "Add IP:127.0.0.1 to its subjectAltName" in warnings[0]
    assert "Add DNS:localhost to its subjectAltName" in warnings[1]
