"""
L{KafkaWireClient} over TLS (pyOpenSSL, service_identity) against the fake
broker wrapped in a stdlib TLS server, with certificates made for the test.
"""

import pytest
from OpenSSL import SSL

from kafkatwist.client import (
    KafkaConnectionError,
    KafkaWireClient,
    TLSVerificationError,
)
from kafkatwist.protocol.records import Record


def tlsClient(address, pki, **kwargs):
    kwargs.setdefault("timeout", 5.0)
    kwargs.setdefault("sslCafile", pki.cafile)
    return KafkaWireClient(address, securityProtocol="SSL", **kwargs)


def test_verified_by_ip_address(cluster, pki):
    """
    Connecting to 127.0.0.1 checks the certificate's IP SAN; every broker
    connection (bootstrap and node) is TLS, and data goes through intact.
    """
    b1 = cluster.addBroker(tlsContext=pki.serverContext())
    b2 = cluster.addBroker(tlsContext=pki.serverContext())
    cluster.createTopic("t", 2, leaders=[1, 2])
    with tlsClient(f"127.0.0.1:{b1.port}", pki) as c:
        assert c.metadata().clusterId == "fake-cluster"
        # big enough for many TLS records each way
        big = [Record(key=b"%d" % i, value=bytes([i % 256]) * 20000) for i in range(30)]
        for p in (0, 1):
            assert c.produce("t", p, big, compression="none") == 0
            got = c.fetch("t", p, 0, maxBytes=10 << 20).records
            assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in big]
    assert b1.accepted == 1 and b2.accepted == 1
    assert not b1.handshakeErrors and not b2.handshakeErrors


def test_verified_by_host_name(cluster, pki):
    """
    Connecting to "localhost" checks the DNS SAN (and sends SNI).
    """
    b = cluster.addBroker(tlsContext=pki.serverContext(), advertisedHost="localhost")
    with tlsClient(f"localhost:{b.port}", pki) as c:
        assert c.metadata().brokers[1].host == "localhost"
        assert c.connection(1).connected


def test_wrong_host_name(cluster, pki):
    """
    A certificate for another name is refused, unless host name checking
    is off (the chain is still verified).
    """
    b = cluster.addBroker(tlsContext=pki.serverContext("wrongServer"))
    with pytest.raises(TLSVerificationError, match="does not match"):
        tlsClient(f"127.0.0.1:{b.port}", pki)
    with pytest.raises(TLSVerificationError):
        tlsClient(f"localhost:{b.port}", pki)
    with tlsClient(f"127.0.0.1:{b.port}", pki, sslCheckHostname=False) as c:
        assert c.metadata().clusterId == "fake-cluster"


def test_untrusted_certificate(cluster, pki):
    """
    A broker certificate from a CA we do not trust fails the handshake,
    even with host name checking off.
    """
    b = cluster.addBroker(tlsContext=pki.serverContext())
    with pytest.raises(KafkaConnectionError, match="TLS handshake"):
        tlsClient(f"127.0.0.1:{b.port}", pki, sslCafile=pki.otherCafile)
    with pytest.raises(KafkaConnectionError, match="TLS handshake"):
        tlsClient(f"127.0.0.1:{b.port}", pki, sslCafile=pki.otherCafile, sslCheckHostname=False)


def test_mutual_tls(cluster, pki):
    """
    A client certificate whose key needs a password, for a broker that
    requires one.
    """
    b = cluster.addBroker(tlsContext=pki.serverContext(requireClientCert=True))
    certfile, keyfile = pki.client
    with tlsClient(
        f"127.0.0.1:{b.port}",
        pki,
        sslCertfile=certfile,
        sslKeyfile=keyfile,
        sslPassword=pki.clientPassword,
    ) as c:
        assert c.metadata().clusterId == "fake-cluster"
    # without a certificate the broker refuses the handshake
    with pytest.raises(KafkaConnectionError):
        tlsClient(f"127.0.0.1:{b.port}", pki)


def test_wrong_key_password(pki):
    certfile, keyfile = pki.client
    with pytest.raises(ValueError, match="cannot load TLS settings") as info:
        tlsClient(
            "127.0.0.1:1", pki, sslCertfile=certfile, sslKeyfile=keyfile, sslPassword="wrong"
        )
    assert isinstance(info.value.__cause__, SSL.Error)
    with pytest.raises(ValueError, match="cannot load TLS settings"):
        tlsClient("127.0.0.1:1", pki, sslCafile=keyfile)


def test_plaintext_client_to_tls_broker(cluster, pki):
    """
    Speaking plaintext to a TLS port fails cleanly, not by hanging.
    """
    b = cluster.addBroker(tlsContext=pki.serverContext())
    with pytest.raises(KafkaConnectionError):
        KafkaWireClient(f"127.0.0.1:{b.port}", timeout=2)
