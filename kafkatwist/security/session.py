"""
One connection's SASL state on a SASL_PLAINTEXT or SASL_SSL listener
(Kafka's C{SaslServerAuthenticator}), without I/O.

States::

    HANDSHAKE --SaslHandshake(mechanism enabled)--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate/raw tokens, exchange done--> COMPLETE
    any --refused--> FAILED (the answer is sent, then the connection closed)
    COMPLETE --SaslHandshake, client supports KIP-368--> AUTHENTICATE (re-authentication)

Before COMPLETE only ApiVersions and the SASL requests are served
(L{SaslSession.admits}); after SaslHandshake v0 the client sends bare
length-prefixed tokens without Kafka headers (L{SaslSession.rawTokens}).

Threads: the SASL requests of a connection run one at a time on handler
threads (a connection has one request in flight), and they alone change
this object; the connection's Processor reads it when the answer has been
handed back, which orders those reads after the writes.
"""

from __future__ import annotations

import struct
import time

from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE, apiName, requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.security.errors import AuthenticationFailed
from kafkatwist.security.plain import PLAIN, PlainServer
from kafkatwist.security.scram import MECHANISMS, ScramServer

__all__ = [
    "SASL_MAX_RECEIVE_SIZE",
    "SASL_HANDSHAKE",
    "SaslSession",
    "rawTokenRequestFrame",
    "rawTokenResponse",
]

#: Kafka's sasl.server.max.receive.size default: the largest frame taken
#: from a client that has not authenticated yet
SASL_MAX_RECEIVE_SIZE = 524288

HANDSHAKE = "HANDSHAKE"
AUTHENTICATE = "AUTHENTICATE"
COMPLETE = "COMPLETE"
FAILED = "FAILED"

_INT32 = struct.Struct(">i")


class SaslSession:
    """
    @param mechanisms: the listener's enabled mechanisms, in order.
    @param credentials: the L{kafkatwist.security.credentials.CredentialStore}.
    @param maxReauthMs: C{connections.max.reauth.ms}; 0 means sessions
        never expire.
    @param monotonic: the clock sessions expire on.
    """

    def __init__(self, mechanisms, credentials, maxReauthMs: int = 0, monotonic=time.monotonic) -> None:
        self.mechanisms = list(mechanisms)
        self.credentials = credentials
        self.maxReauthMs = maxReauthMs
        self.monotonic = monotonic
        self.state = HANDSHAKE
        #: the mechanism chosen by SaslHandshake
        self.mechanism: str | None = None
        #: C{User:<name>} once authenticated
        self.principal: str | None = None
        #: SaslHandshake v0 was used: tokens come bare, without Kafka headers
        self.rawTokens = False
        #: the client sent SaslAuthenticate v1+, so it can re-authenticate
        self.clientSupportsReauthentication = False
        #: why the session failed (for the close log line)
        self.failure: str | None = None
        #: the user name the client claimed, once its first token said so
        self.username: str | None = None
        self._server = None
        self._reauthenticating = False
        self._reauthMechanismError: str | None = None
        self._expiresAt: float | None = None

    @property
    def authenticated(self) -> bool:
        return self.state == COMPLETE

    @property
    def failed(self) -> bool:
        return self.state == FAILED

    @property
    def reauthenticating(self) -> bool:
        return self._reauthenticating

    def refusal(self, apiKey: int) -> str | None:
        """
        Why a request of C{apiKey} may not be served now (the connection is
        closed with this reason), or C{None} if it may.
        """
        state = self.state
        if state == COMPLETE and not self._reauthenticating:
            if apiKey in (SASL_HANDSHAKE, SASL_AUTHENTICATE) or not self.expired():
                return None
            return "SASL session expired (connections.max.reauth.ms) and the client did not re-authenticate"
        if state == HANDSHAKE:
            if apiKey in (API_VERSIONS, SASL_HANDSHAKE):
                return None
            return f"unexpected Kafka request of type {apiName(apiKey)} during SASL handshake"
        if state == AUTHENTICATE:
            if apiKey == SASL_AUTHENTICATE:
                return None
            return f"unexpected Kafka request of type {apiName(apiKey)} during SASL authentication"
        return f"request after SASL authentication failed: {self.failure}"

    def admits(self, apiKey: int) -> bool:
        return self.refusal(apiKey) is None

    def expired(self) -> bool:
        return self._expiresAt is not None and self.monotonic() > self._expiresAt

    def startsReauthentication(self) -> bool:
        """
        Whether a SaslHandshake now is a re-authentication (KIP-368) rather
        than one Kafka's request handler answers with ILLEGAL_SASL_STATE.
        """
        return self.state == COMPLETE and self.clientSupportsReauthentication

    # -- the requests --------------------------------------------------------

    def handshake(self, mechanism: str, version: int) -> ErrorCode:
        """
        SaslHandshake: choose the mechanism.

        @return: NONE, or UNSUPPORTED_SASL_MECHANISM (the session failed),
            or ILLEGAL_SASL_STATE (not a time for a handshake).
        """
        if self.state == COMPLETE:
            if not self.startsReauthentication():
                return ErrorCode.illegal_sasl_state
            self._reauthenticating = True
            if mechanism != self.mechanism:
                # Kafka answers this handshake and refuses the token after it.
                self._reauthMechanismError = (
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'"
                )
            self.state = AUTHENTICATE
            self._server = self._newServer(self.mechanism)
            return ErrorCode.none
        if self.state != HANDSHAKE:
            self.fail(f"unexpected SaslHandshake in state {self.state}")
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.mechanisms:
            self.fail(f"unsupported SASL mechanism {mechanism!r} (enabled: {', '.join(self.mechanisms)})")
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self.rawTokens = version == 0
        self.state = AUTHENTICATE
        self._server = self._newServer(mechanism)
        return ErrorCode.none

    def _newServer(self, mechanism: str):
        if mechanism == PLAIN:
            return PlainServer(self.credentials.credentials, reauthenticating=self._reauthenticating)
        return ScramServer(
            MECHANISMS[mechanism],
            self.credentials.lookupFor(mechanism),
            reauthenticating=self._reauthenticating,
        )

    def authenticate(self, token: bytes, version: int = 0) -> tuple[bytes, int]:
        """
        One SASL token from the client.

        @param version: the SaslAuthenticate version (0 for a bare token).
        @return: (the server's token, the session lifetime in ms, 0 for
            none or while the exchange goes on).
        @raise AuthenticationFailed: refused; the session failed.
        """
        if self.state != AUTHENTICATE:
            raise AuthenticationFailed(f"SASL token in state {self.state}")
        if version > 0:
            self.clientSupportsReauthentication = True
        if self._reauthMechanismError:
            message, self._reauthMechanismError = self._reauthMechanismError, None
            self.fail(message)
            raise AuthenticationFailed(message, message)
        server = self._server
        try:
            answer = server.evaluate(token)
        except AuthenticationFailed as e:
            self.fail(e.reason)
            raise
        finally:
            self.username = server.username
        if not server.complete:
            return answer, 0
        principal = f"User:{server.authorizationId}"
        if self._reauthenticating and principal != self.principal:
            message = (
                f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            )
            self.fail(message)
            raise AuthenticationFailed(message, message)
        self.principal = principal
        self.state = COMPLETE
        self._server = None
        self._reauthenticating = False
        lifetimeMs = 0
        if self.maxReauthMs > 0:
            lifetimeMs = self.maxReauthMs
            self._expiresAt = self.monotonic() + lifetimeMs / 1000.0
        return answer, lifetimeMs

    def fail(self, reason: str) -> None:
        self.state = FAILED
        self.failure = reason
        self._server = None


# -- SaslHandshake v0: bare tokens ---------------------------------------------


def rawTokenRequestFrame(token: bytes) -> bytes:
    """
    A bare token, re-framed as the SaslAuthenticate v0 request it stands
    for (without the size prefix), so it takes the same path as a framed one.
    """
    entity = requestType(SASL_AUTHENTICATE, 0)(auth_bytes=bytes(token))
    return encodeRequestFrame(SASL_AUTHENTICATE, 0, 0, None, entity)[4:]


def rawTokenResponse(chunks) -> bytes | None:
    """
    The bare answer to a bare token, from the SaslAuthenticate v0 response
    frame the handler produced.

    @return: the size-prefixed token to send, or C{None} if the handler
        refused the client (the bare protocol has no way to say so: the
        connection is closed).
    """
    frame = b"".join(bytes(chunk) for chunk in chunks)
    _, response = decodeResponseFrame(SASL_AUTHENTICATE, 0, frame[4:])
    if response.error_code != ErrorCode.none:
        return None
    return _INT32.pack(len(response.auth_bytes)) + response.auth_bytes
