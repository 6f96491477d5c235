"""
Server-side TLS settings from Kafka's PEM options.
"""

from __future__ import annotations

from OpenSSL import SSL
from twisted.internet.interfaces import IOpenSSLServerConnectionCreator
from zope.interface import implementer

from kafkatwist.config import ConfigError


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
    """

    def __init__(self, keystore: str, password: str | None, truststore: str | None, clientAuth: str):
        context = SSL.Context(SSL.TLS_SERVER_METHOD)
        context.set_min_proto_version(SSL.TLS1_2_VERSION)
        context.set_options(SSL.OP_NO_COMPRESSION | SSL.OP_CIPHER_SERVER_PREFERENCE)
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
