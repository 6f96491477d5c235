"""
A connection on a SASL listener, over Twisted's StringTransport: what it
serves before authentication, the bare tokens after SaslHandshake v0, the
close after a refusal, and the principal handlers see.
"""

import struct

from kafkatwist.errors import ErrorCode
from kafkatwist.network.channel import Response
from kafkatwist.network.connection import KafkaConnection
from kafkatwist.protocol.apis import responseType
from kafkatwist.protocol.codec import encodeResponseFrame
from kafkatwist.protocol.entities import make
from kafkatwist.security.credentials import CredentialStore
from kafkatwist.security.scram import SCRAM_SHA_256, makeCredential
from kafkatwist.security.session import SASL_MAX_RECEIVE_SIZE, SaslSession
from tests.unit.fakes import FakeOwner, apiVersionsFrame, metadataFrame
from twisted.internet.testing import StringTransport

SUPPORTED = {3: (0, 12), 17: (0, 1), 18: (0, 3), 36: (0, 2)}


def saslConnection():
    store = CredentialStore(None)
    store.alter([("alice", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "secret"))])
    owner = FakeOwner(supported=SUPPORTED)
    session = SaslSession(["PLAIN"], store)
    connection = KafkaConnection(owner, "SASL_PLAINTEXT", 1, securityProtocol="SASL_PLAINTEXT", sasl=session)
    transport = StringTransport()
    connection.makeConnection(transport)
    return owner, connection, transport, session


def answer(connection, request, entity):
    header = request.header
    chunks = encodeResponseFrame(header.apiKey, header.apiVersion, header.correlationId, entity)
    connection.sendResponse(Response(request, chunks))


def test_only_api_versions_and_handshake_before_authentication():
    owner, connection, transport, session = saslConnection()
    assert connection.principal == "User:ANONYMOUS"
    assert connection.securityProtocol == "SASL_PLAINTEXT"
    connection.dataReceived(apiVersionsFrame(1))
    assert [r.header.apiKey for r in owner.submitted] == [18]
    answer(connection, owner.submitted[0], make(responseType(18, 0), error_code=ErrorCode.none, api_keys=()))
    connection.dataReceived(metadataFrame(2))
    assert transport.disconnecting
    assert connection.closeReason == "unexpected Kafka request of type metadata during SASL handshake"
    assert len(owner.submitted) == 1


def test_large_frames_refused_before_authentication():
    owner, connection, transport, session = saslConnection()
    connection.dataReceived(struct.pack(">i", SASL_MAX_RECEIVE_SIZE + 1))
    assert transport.disconnecting
    assert connection.closeReason.startswith(f"invalid request size {SASL_MAX_RECEIVE_SIZE + 1} (allowed ")


def test_bare_tokens_after_handshake_v0():
    owner, connection, transport, session = saslConnection()
    session.handshake("PLAIN", 0)
    token = b"\0a\0b"  # shorter than any Kafka header
    connection.dataReceived(struct.pack(">i", len(token)) + token)
    [request] = owner.submitted
    assert (request.header.apiKey, request.header.apiVersion) == (36, 0)
    answer(connection, request, make(responseType(36, 0), error_code=ErrorCode.none, error_message=None, auth_bytes=b"ok"))
    assert transport.value() == b"\0\0\0\x02ok"
    assert not transport.disconnecting


def test_bare_token_refused_closes_without_an_answer():
    owner, connection, transport, session = saslConnection()
    session.handshake("PLAIN", 0)
    connection.dataReceived(struct.pack(">i", 4) + b"\0a\0b")
    session.fail("wrong password for 'a'")
    refused = make(responseType(36, 0), error_code=ErrorCode.sasl_authentication_failed,
                   error_message="no", auth_bytes=b"")
    answer(connection, owner.submitted[0], refused)
    assert transport.value() == b""
    assert transport.disconnecting
    assert connection.closeReason == "SASL authentication failed: wrong password for 'a'"


def test_refusal_is_sent_then_the_connection_closes():
    owner, connection, transport, session = saslConnection()
    connection.dataReceived(apiVersionsFrame(1))
    session.handshake("GSSAPI", 1)
    answer(connection, owner.submitted[0], make(responseType(18, 0), error_code=ErrorCode.none, api_keys=()))
    assert transport.value()
    assert transport.disconnecting
    assert "unsupported SASL mechanism 'GSSAPI'" in connection.closeReason


def test_authenticated_principal():
    owner, connection, transport, session = saslConnection()
    session.handshake("PLAIN", 1)
    session.authenticate(b"\0alice\0secret", 1)
    assert connection.principal == "User:alice"
    connection.dataReceived(metadataFrame(5))
    assert owner.submitted[-1].context.principal == "User:alice"
    assert owner.submitted[-1].context.securityProtocol == "SASL_PLAINTEXT"
    assert owner.submitted[-1].context.sasl is session
