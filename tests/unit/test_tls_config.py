"""
ssl.enabled.protocols and ssl.cipher.suites, checked with a real TLS
client (Python's ssl module) handshaking against the broker's server
context in memory.
"""

import ssl

import pytest
from OpenSSL import SSL

from kafkatwist.config import ConfigError
from kafkatwist.network.tls import ServerContextFactory


def handshake(factory, caFile, ciphers=None, maximum=None, minimum=None):
    """
    @return: (protocol, cipher name) the client negotiated.
    @raise ssl.SSLError or SSL.Error: if the handshake was refused.
    """
    server = factory.serverConnectionForTLS(None)
    server.set_accept_state()
    context = ssl.create_default_context(cafile=caFile)
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if maximum is not None:
        context.maximum_version = maximum
    if minimum is not None:
        context.minimum_version = minimum
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    clientDone = serverDone = False
    for _ in range(20):
        if not clientDone:
            try:
                client.do_handshake()
                clientDone = True
            except ssl.SSLWantReadError:
                pass
        data = outgoing.read()
        if data:
            server.bio_write(data)
        if not serverDone:
            try:
                server.do_handshake()
                serverDone = True
            except SSL.WantReadError:
                pass
        try:
            data = server.bio_read(1 << 16)
        except SSL.WantReadError:
            data = b""
        if data:
            incoming.write(data)
        if clientDone and serverDone:
            return client.version(), client.cipher()[0]
    raise AssertionError("handshake did not finish")


def factory(keystore, **kw):
    return ServerContextFactory(keystore, None, None, "none", **kw)


TLS12 = ssl.TLSVersion.TLSv1_2


def test_defaults_negotiate_tls13(pki):
    assert handshake(factory(pki.serverKeystore), pki.caFile)[0] == "TLSv1.3"


@pytest.mark.parametrize("suite", ["ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"])
def test_default_tls12_accepts_forward_secret_aead(pki, suite):
    got = handshake(factory(pki.rsaServerKeystore), pki.caFile, ciphers=suite, maximum=TLS12)
    assert got == ("TLSv1.2", suite)


@pytest.mark.parametrize(
    "suite",
    [
        "AES128-GCM-SHA256",  # static RSA key exchange
        "AES256-SHA",  # static RSA, CBC, SHA-1
        "ECDHE-RSA-AES128-SHA",  # CBC-SHA1
        "ECDHE-RSA-AES256-SHA384",  # CBC
    ],
)
def test_default_tls12_refuses_static_rsa_and_cbc(pki, suite):
    with pytest.raises((ssl.SSLError, SSL.Error)):
        handshake(factory(pki.rsaServerKeystore), pki.caFile, ciphers=suite, maximum=TLS12)
    # The client did offer it: listed explicitly, it is negotiated.
    listed = factory(pki.rsaServerKeystore, suites=[suite])
    assert handshake(listed, pki.caFile, ciphers=suite, maximum=TLS12) == ("TLSv1.2", suite)


def test_kafka_suite_names_select_suites(pki):
    f = factory(
        pki.rsaServerKeystore,
        suites=["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "TLS_AES_256_GCM_SHA384"],
    )
    # Listed: a CBC suite (the operator's choice) for TLS 1.2...
    got = handshake(f, pki.caFile, ciphers="ECDHE-RSA-AES128-SHA", maximum=TLS12)
    assert got == ("TLSv1.2", "ECDHE-RSA-AES128-SHA")
    # ...and only the listed TLS 1.3 suite.
    assert handshake(f, pki.caFile) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")
    # Not listed: the default AEAD suite.
    with pytest.raises((ssl.SSLError, SSL.Error)):
        handshake(f, pki.caFile, ciphers="ECDHE-RSA-AES128-GCM-SHA256", maximum=TLS12)


def test_openssl_suite_names_are_accepted(pki):
    f = factory(pki.serverKeystore, suites=["ECDHE-ECDSA-AES256-GCM-SHA384"])
    got = handshake(f, pki.caFile)
    # No TLS 1.3 suite listed: TLS 1.3 is not negotiated, as on the JVM.
    assert got == ("TLSv1.2", "ECDHE-ECDSA-AES256-GCM-SHA384")


def test_enabled_protocols(pki):
    f = factory(pki.serverKeystore, protocols=["TLSv1.3"])
    with pytest.raises((ssl.SSLError, SSL.Error)):
        handshake(f, pki.caFile, maximum=TLS12)
    f = factory(pki.serverKeystore, protocols=["TLSv1.2"])
    assert handshake(f, pki.caFile)[0] == "TLSv1.2"


@pytest.mark.parametrize(
    "kw, key, why",
    [
        ({"protocols": ["TLSv1.1"]}, "ssl.enabled.protocols", "obsolete"),
        ({"protocols": ["TLSv9"]}, "ssl.enabled.protocols", "unknown protocol"),
        ({"protocols": []}, "ssl.enabled.protocols", "no protocol"),
        ({"suites": ["TLS_FOO"]}, "ssl.cipher.suites", "unknown cipher suite"),
        ({"suites": ["HIGH"]}, "ssl.cipher.suites", "unknown cipher suite"),
        (
            {"protocols": ["TLSv1.3"], "suites": ["ECDHE-RSA-AES128-GCM-SHA256"]},
            "ssl.cipher.suites",
            "no suite listed",
        ),
    ],
)
def test_bad_settings_name_the_key(pki, kw, key, why):
    with pytest.raises(ConfigError) as e:
        factory(pki.serverKeystore, **kw)
    assert e.value.key == key
    assert why in e.value.why


def test_tls_failures_in_words():
    from OpenSSL import SSL

    from kafkatwist.network.tls import tlsFailureInWords

    error = SSL.Error([("SSL routines", "", "peer did not return a certificate")])
    assert tlsFailureInWords(error) == (
        "SSL handshake failed: the client sent no certificate (ssl.client.auth=required)"
    )
    error = SSL.Error([("SSL routines", "", "some new reason")])
    assert tlsFailureInWords(error) == "SSL handshake failed: some new reason"
