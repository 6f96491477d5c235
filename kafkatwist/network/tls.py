"""
Server-side TLS settings from Kafka's PEM options, C{ssl.enabled.protocols}
and C{ssl.cipher.suites}.

Defaults: TLS 1.2 and 1.3; for TLS 1.2 only forward-secret AEAD suites
(ECDHE with AES-GCM or ChaCha20-Poly1305) -- no static-RSA key exchange,
no CBC -- and every TLS 1.3 suite (all are).  Kafka leaves the suites to the
JVM; naming them here keeps a broker's defaults from depending on the
OpenSSL it happens to run on.
"""

from __future__ import annotations

from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.config import ConfigError

log = Logger()

#: C{ssl.enabled.protocols} names (Kafka's, from Java) -> OpenSSL versions
PROTOCOLS = {"TLSv1.2": SSL.TLS1_2_VERSION, "TLSv1.3": SSL.TLS1_3_VERSION}
#: older names Kafka accepts when the JVM allows them; refused here
OBSOLETE_PROTOCOLS = ("SSLv2", "SSLv3", "TLSv1", "TLSv1.1")

#: TLS 1.3 suites: the same names in Kafka (IANA) and OpenSSL
TLS13_SUITES = (
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
    "TLS_AES_128_CCM_SHA256",
    "TLS_AES_128_CCM_8_SHA256",
)

#: TLS 1.2 suites by the IANA names Kafka's C{ssl.cipher.suites} uses, with
#: their OpenSSL names (OpenSSL names are accepted as they are, too)
TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}

#: the TLS 1.2 suites used when C{ssl.cipher.suites} is empty: forward
#: secret (ECDHE; DHE would need parameters of our own) and AEAD
DEFAULT_TLS12_SUITES = (
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-RSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-RSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
    "ECDHE-RSA-CHACHA20-POLY1305",
)


def protocolRange(names) -> tuple[int, int]:
    """
    @param names: C{ssl.enabled.protocols}.
    @return: the lowest and highest OpenSSL protocol versions.
    @raise ConfigError: for an empty list, an unknown or obsolete name.
    """
    versions = []
    for name in names:
        if name in OBSOLETE_PROTOCOLS:
            raise ConfigError(
                "ssl.enabled.protocols", f"{name} is not supported (obsolete and insecure)"
            )
        if name not in PROTOCOLS:
            raise ConfigError(
                "ssl.enabled.protocols", f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS)})"
            )
        versions.append(PROTOCOLS[name])
    if not versions:
        raise ConfigError("ssl.enabled.protocols", "no protocol enabled")
    return min(versions), max(versions)


def _isOpenSSLSuite(name: str) -> bool:
    # One TLS 1.2 suite name, not a cipher string such as HIGH or ALL: the
    # list it selects must be exactly that suite.
    context = SSL.Context(SSL.TLS_SERVER_METHOD)
    try:
        context.set_cipher_list(name.encode("ascii"))
    except (SSL.Error, UnicodeEncodeError):
        return False
    selected = [c for c in SSL.Connection(context, None).get_cipher_list() if c not in TLS13_SUITES]
    return selected == [name]


def cipherSuites(names) -> tuple[list[str], list[str]]:
    """
    @param names: C{ssl.cipher.suites}, by Kafka (IANA) or OpenSSL names;
        empty for the defaults.
    @return: OpenSSL names of the TLS 1.2 suites and of the TLS 1.3 suites
        (an empty TLS 1.3 list means OpenSSL's, all forward-secret AEAD).
    @raise ConfigError: for an unknown name.
    """
    if not names:
        return list(DEFAULT_TLS12_SUITES), []
    tls12, tls13 = [], []
    for name in names:
        if name in TLS13_SUITES:
            tls13.append(name)
        elif name in TLS12_SUITES:
            tls12.append(TLS12_SUITES[name])
        elif _isOpenSSLSuite(name):
            tls12.append(name)
        else:
            raise ConfigError("ssl.cipher.suites", f"unknown cipher suite {name!r}")
    weak = [
        n for n in tls12
        if not n.startswith(("ECDHE-", "DHE-")) or ("GCM" not in n and "POLY1305" not in n)
    ]
    if weak:
        log.warn(
            "ssl.cipher.suites enables TLS 1.2 suites without forward secrecy or AEAD: {weak}",
            weak=", ".join(weak),
        )
    return tls12, tls13


@implementer(IOpenSSLServerConnectionCreator)
class ServerContextFactory:
    """
    Makes the server side of each TLS connection from one shared context.

    @param keystore: PEM with the certificate chain and the private key
        (C{ssl.keystore.location}).
    @param password: the key's password (C{ssl.key.password}).
    @param truststore: PEM CA bundle for client certificates
        (C{ssl.truststore.location}).
    @param clientAuth: C{none}, C{requested} or C{required}
        (C{ssl.client.auth}).
    @param protocols: C{ssl.enabled.protocols}.
    @param suites: C{ssl.cipher.suites} (empty: the defaults).
    """

    def __init__(
        self,
        keystore: str,
        password: str | None,
        truststore: str | None,
        clientAuth: str,
        protocols=("TLSv1.2", "TLSv1.3"),
        suites=(),
    ):
        lowest, highest = protocolRange(protocols)
        tls12, tls13 = cipherSuites(suites)
        # As the JVM does, a protocol none of the listed suites can serve is
        # not negotiated; if that leaves none, say so now.
        if suites and not tls13:
            highest = min(highest, SSL.TLS1_2_VERSION)
        if not tls12:
            lowest = max(lowest, SSL.TLS1_3_VERSION)
        if lowest > highest:
            raise ConfigError(
                "ssl.cipher.suites",
                f"no suite listed for the enabled protocols {', '.join(protocols)}",
            )
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(lowest)
        context.set_max_proto_version(highest)
        context.set_options(
            SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE | SSL.OP_NO_RENEGOTIATION
        )
        if tls12:
            context.set_cipher_list(":".join(tls12).encode("ascii"))
        if tls13:
            context.set_tls13_ciphersuites(":".join(tls13).encode("ascii"))
        if password is not None:
            context.set_passwd_cb(lambda *args: password.encode("utf-8"))
        try:
            context.use_certificate_chain_file(keystore)
        except SSL.Error as e:
            raise ConfigError("ssl.keystore.location", f"no PEM certificate chain in {keystore}: {e}") from None
        try:
            context.use_privatekey_file(keystore)
            context.check_privatekey()
        except SSL.Error as e:
            raise ConfigError(
                "ssl.key.password" if password is not None else "ssl.keystore.location",
                f"cannot use the private key in {keystore}: {e}",
            ) from None
        if clientAuth != "none":
            try:
                context.load_verify_locations(truststore)
            except SSL.Error as e:
                raise ConfigError("ssl.truststore.location", f"no PEM CA in {truststore}: {e}") from None
            mode = SSL.VERIFY_PEER
            if clientAuth == "required":
                mode |= SSL.VERIFY_FAIL_IF_NO_PEER_CERT
            context.set_verify(mode, lambda conn, cert, errno, depth, ok: bool(ok))
            context.set_session_id(b"kafkatwist")
        self._context = context

    def getContext(self) -> SSL.Context:
        return self._context

    def serverConnectionForTLS(self, tlsProtocol) -> SSL.Connection:
        return SSL.Connection(self._context, None)


def listenerContextFactory(settings) -> ServerContextFactory:
    """
    The context factory of one listener from its SSL settings
    (L{kafkatwist.config.BrokerConfig.sslSettings}).

    @raise ConfigError: a file or setting that cannot be used.
    """
    return ServerContextFactory(
        settings["ssl.keystore.location"],
        settings["ssl.key.password"],
        settings["ssl.truststore.location"],
        settings["ssl.client.auth"],
        settings["ssl.enabled.protocols"],
        settings["ssl.cipher.suites"],
    )


@implementer(IOpenSSLServerConnectionCreator)
class ReloadableContextFactory:
    """
    A listener's TLS settings, replaceable while it serves (a dynamic
    keystore update): each new connection is made from the context current
    when it is accepted; connections already made keep theirs.

    Threads: L{replace} from a request handler thread, connections made on
    Processor threads; the swap is one reference assignment.
    """

    def __init__(self, factory: ServerContextFactory) -> None:
        self.current = factory

    def replace(self, factory: ServerContextFactory) -> None:
        self.current = factory

    def getContext(self) -> SSL.Context:
        return self.current.getContext()

    def serverConnectionForTLS(self, tlsProtocol) -> SSL.Connection:
        return self.current.serverConnectionForTLS(tlsProtocol)


#: OpenSSL's reasons for a failed handshake, in an operator's words
_TLS_REASONS = (
    ("peer did not return a certificate", "the client sent no certificate (ssl.client.auth=required)"),
    ("certificate verify failed",
     "the client's certificate is not signed by a CA in ssl.truststore.location, or has expired"),
    ("alert unknown ca", "the client does not trust the broker's certificate (its CA is unknown to the client)"),
    ("alert bad certificate", "the client refused the broker's certificate"),
    ("alert certificate unknown",
     "the client refused the broker's certificate (does it name the host the client connected to?)"),
    ("alert certificate expired", "the client says the broker's certificate has expired"),
    ("wrong version number", "the client does not speak TLS (a PLAINTEXT client on an SSL listener?)"),
    ("http request", "an HTTP request on a TLS listener"),
    ("no shared cipher", "no cipher suite in common with the client (ssl.cipher.suites)"),
    ("unsupported protocol", "no TLS version in common with the client (ssl.enabled.protocols)"),
    ("alert protocol version", "no TLS version in common with the client (ssl.enabled.protocols)"),
    ("no suitable signature algorithm", "no signature algorithm in common with the client"),
)


def tlsFailureInWords(error: BaseException) -> str:
    """
    A failed TLS handshake said as Kafka says it ("SSL handshake failed")
    with OpenSSL's reason in words, instead of pyOpenSSL's tuple list
    (C{[('SSL routines', '', 'peer did not return a certificate')]}).
    """
    reasons = []
    details = error.args[0] if error.args and isinstance(error.args[0], list) else []
    for detail in details:
        reason = detail[-1] if isinstance(detail, tuple) and detail else str(detail)
        if reason and reason not in reasons:
            reasons.append(str(reason))
    if not reasons:
        reasons = [str(error) or type(error).__name__]
    words = []
    for reason in reasons:
        lowered = reason.lower()
        words.append(next((w for key, w in _TLS_REASONS if key in lowered), reason))
    return "SSL handshake failed: " + "; ".join(dict.fromkeys(words))
