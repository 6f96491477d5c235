"""
SaslHandshake (17) v0-1 and SaslAuthenticate (36) v0-2: the SASL exchange on
a SASL_PLAINTEXT or SASL_SSL listener, driving the connection's
L{kafkatwist.security.session.SaslSession} (C{context.sasl}).

A refused client gets its error (UNSUPPORTED_SASL_MECHANISM, or
SASL_AUTHENTICATION_FAILED with Kafka's message) after
C{connection.failed.authentication.delay.ms}, and the connection closes once
it is sent; the refusal is logged with the client's address and the user it
claimed.  On other listeners, and after authentication (unless the client
re-authenticates, KIP-368), both answer ILLEGAL_SASL_STATE as Kafka's request
handler does.

The exchange runs on a handler thread: PLAIN costs a PBKDF2 per login, which
must not hold up a Processor's other connections.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import SASL_AUTHENTICATE, SASL_HANDSHAKE, responseType
from kafkatwist.util.logthrottle import connectionLogs
from kafkatwist.protocol.entities import make, ms
from kafkatwist.security.errors import AuthenticationFailed

log = Logger()

#: Kafka's words when SaslAuthenticate arrives on an authenticated connection
AFTER_AUTHENTICATION = "SaslAuthenticate request received after successful authentication"


def logFailure(context, session, reason: str) -> None:
    # A client with a wrong password retries at once, forever: throttled
    # per client host, user and reason, as refused TLS handshakes are.
    host, port = context.clientAddress
    connectionLogs.emit(
        log.info,
        ("authentication failed", host, session.username, reason),
        "Failed authentication with {host}:{port} on listener {listener} (user {user!r}, "
        "mechanism {mechanism}): {reason}",
        host=host,
        port=port,
        listener=context.listenerName,
        user=session.username,
        mechanism=session.mechanism,
        reason=reason,
    )


def answerAfter(context, delayMs: int, response):
    """
    Answer a refused client after Kafka's failed-authentication delay,
    without holding a handler thread, so password guessing is slowed down.
    """
    if delayMs <= 0:
        return response
    pending = context.respondLater()
    context.clock.callLater(delayMs / 1000.0, pending.complete, response)
    return pending.deferred


class SaslHandler(Handler):
    @property
    def failureDelayMs(self) -> int:
        return self.broker.config["connection.failed.authentication.delay.ms"]


class SaslHandshakeHandler(SaslHandler):
    apiKey = SASL_HANDSHAKE
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(SASL_HANDSHAKE, context.apiVersion)
        session = getattr(context, "sasl", None)
        if session is None:
            return make(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
        error = session.handshake(request.mechanism, context.apiVersion)
        mechanisms = () if error == ErrorCode.illegal_sasl_state else tuple(session.mechanisms)
        response = make(cls, error_code=error, mechanisms=mechanisms)
        if session.failed:
            logFailure(context, session, session.failure)
            return answerAfter(context, self.failureDelayMs, response)
        return response


class SaslAuthenticateHandler(SaslHandler):
    apiKey = SASL_AUTHENTICATE
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        cls = responseType(SASL_AUTHENTICATE, context.apiVersion)
        session = getattr(context, "sasl", None)
        if session is None or (session.authenticated and not session.reauthenticating):
            return make(
                cls,
                error_code=ErrorCode.illegal_sasl_state,
                error_message=AFTER_AUTHENTICATION,
                auth_bytes=b"",
                session_lifetime=ms(0),
            )
        try:
            token, lifetimeMs = session.authenticate(request.auth_bytes, context.apiVersion)
        except AuthenticationFailed as e:
            logFailure(context, session, e.reason)
            response = make(
                cls,
                error_code=ErrorCode.sasl_authentication_failed,
                error_message=e.clientMessage or e.reason,
                auth_bytes=b"",
                session_lifetime=ms(0),
            )
            return answerAfter(context, self.failureDelayMs, response)
        return make(
            cls,
            error_code=ErrorCode.none,
            error_message=None,
            auth_bytes=token,
            session_lifetime=ms(lifetimeMs),
        )


saslHandshake = HandlerPlugin("builtin.sasl_handshake", SASL_HANDSHAKE, SaslHandshakeHandler, priority=0)
saslAuthenticate = HandlerPlugin("builtin.sasl_authenticate", SASL_AUTHENTICATE, SaslAuthenticateHandler, priority=0)
