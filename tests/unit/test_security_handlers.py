"""
The security APIs' handlers called directly, every request and response
through the wire codec: SaslHandshake and SaslAuthenticate driving a
connection's SASL session, the ACL APIs over the built-in authorizer, and the
SCRAM credential APIs over the credential store.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import acls, sasl, scram_credentials
from kafkatwist.protocol.apis import knownVersions, responseType
from kafkatwist.protocol.codec import decodeRequest
from kafkatwist.protocol.entities import durationMs, make
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as P,
    ResourceType as R,
)
from kafkatwist.security.authorizer import StandardAuthorizer
from kafkatwist.security.credentials import CredentialStore
from kafkatwist.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, makeCredential, saltedPassword
from kafkatwist.security.session import SaslSession, rawTokenRequestFrame, rawTokenResponse
from tests.unit.securityhelpers import (
    Ctx,
    aclBroker,
    admin,
    call,
    securityServices,
)
from tests.unit.adminhelpers import req


@pytest.mark.parametrize(
    "handlerClass",
    [
        sasl.SaslHandshakeHandler,
        sasl.SaslAuthenticateHandler,
        acls.DescribeAclsHandler,
        acls.CreateAclsHandler,
        acls.DeleteAclsHandler,
        scram_credentials.DescribeUserScramCredentialsHandler,
        scram_credentials.AlterUserScramCredentialsHandler,
    ],
)
def test_versions_have_schemas_and_plugins(handlerClass):
    known = knownVersions(handlerClass.apiKey)
    assert handlerClass.minVersion in known and handlerClass.maxVersion in known
    registry = HandlerRegistry(discoverPlugins())
    [(plugin, origin)] = registry.chains[handlerClass.apiKey]
    assert (origin, plugin.priority) == ("builtin", 0)


# -- SASL ------------------------------------------------------------------------


@pytest.fixture
def store():
    store = CredentialStore(None)
    store.alter([
        ("alice", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "alice-secret")),
        ("alice", "SCRAM-SHA-512", makeCredential(SCRAM_SHA_512, "alice-secret")),
    ])
    return store


def session(store, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), **kw):
    return SaslSession(mechanisms, store, **kw)


def handshake(broker, context, mechanism, version=1):
    return call(sasl.SaslHandshakeHandler, broker, version, context, mechanism=mechanism)


def authenticate(broker, context, token, version=2):
    return call(sasl.SaslAuthenticateHandler, broker, version, context, auth_bytes=token)


def scramLogin(broker, context, mechanism, user, password, version=2):
    from kafka.net.sasl.scram import ScramClient

    client = ScramClient(user, password, mechanism)
    first = authenticate(broker, context, client.first_message(), version)
    if first.error_code:
        return first
    client.process_server_first_message(first.auth_bytes)
    final = authenticate(broker, context, client.final_message(), version)
    if final.error_code == 0:
        client.process_server_final_message(final.auth_bytes)
    return final


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_scram_login(store, mechanism, version):
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store))
    response = handshake(broker, context, mechanism)
    assert response.error_code == ErrorCode.none
    assert response.mechanisms == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    assert not context.sasl.admits(3)
    final = scramLogin(broker, context, mechanism, "alice", "alice-secret", version)
    assert final.error_code == ErrorCode.none
    assert context.sasl.authenticated and context.sasl.principal == "User:alice"
    assert context.sasl.admits(3) and context.sasl.admits(0)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_plain_login(store, version):
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store))
    handshake(broker, context, "PLAIN")
    response = authenticate(broker, context, b"\0alice\0alice-secret", version)
    assert response.error_code == ErrorCode.none and response.auth_bytes == b""
    assert context.sasl.principal == "User:alice"


@pytest.mark.parametrize(
    "mechanism, token",
    [("PLAIN", b"\0alice\0wrong"), ("PLAIN", b"\0mallory\0x"), ("SCRAM-SHA-256", None)],
)
def test_refused_login_is_answered_late_logged_and_fails_the_session(store, mechanism, token, capsys):
    from twisted.logger import globalLogPublisher

    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        broker = securityServices(scramCredentials=store)
        context = Ctx(0, 0, sasl=session(store), clientAddress=("10.1.2.3", 4567))
        handshake(broker, context, mechanism)
        if token is None:
            response = scramLogin(broker, context, mechanism, "alice", "nope")
        else:
            response = authenticate(broker, context, token)
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert response.error_message in (
        "Authentication failed: Invalid username or password",
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
    )
    assert context.sasl.failed and not context.sasl.admits(36)
    [event] = [e for e in events if "Failed authentication" in e.get("log_format", "")]
    assert event["host"] == "10.1.2.3" and event["port"] == 4567
    assert event["user"] in ("alice", "mallory")


def test_unsupported_mechanism(store):
    context = Ctx(0, 0, sasl=session(store, ["SCRAM-SHA-512"]))
    response = handshake(securityServices(scramCredentials=store), context, "PLAIN", version=0)
    assert response.error_code == ErrorCode.unsupported_sasl_mechanism
    assert response.mechanisms == ("SCRAM-SHA-512",)
    assert context.sasl.failed


def test_sasl_requests_on_a_listener_without_sasl():
    broker = securityServices()
    assert handshake(broker, Ctx(0, 0), "PLAIN").error_code == ErrorCode.illegal_sasl_state
    response = authenticate(broker, Ctx(0, 0), b"x")
    assert response.error_code == ErrorCode.illegal_sasl_state
    assert response.error_message == sasl.AFTER_AUTHENTICATION


def test_sasl_requests_after_authentication(store):
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store))
    handshake(broker, context, "PLAIN")
    authenticate(broker, context, b"\0alice\0alice-secret", version=0)
    # A v0 client cannot re-authenticate: Kafka's request handler answers.
    assert handshake(broker, context, "PLAIN").error_code == ErrorCode.illegal_sasl_state
    assert authenticate(broker, context, b"x").error_code == ErrorCode.illegal_sasl_state
    assert context.sasl.authenticated


def test_gate_before_authentication(store):
    s = session(store)
    assert s.admits(18) and s.admits(17)
    assert not s.admits(36) and not s.admits(0) and not s.admits(3)
    s.handshake("PLAIN", 1)
    assert s.admits(36) and not s.admits(17) and not s.admits(18)


def test_reauthentication(store):
    now = [0.0]
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store, maxReauthMs=60_000, monotonic=lambda: now[0]))
    handshake(broker, context, "SCRAM-SHA-256")
    final = scramLogin(broker, context, "SCRAM-SHA-256", "alice", "alice-secret")
    assert durationMs(final.session_lifetime) == 60_000
    now[0] = 61.0
    assert context.sasl.expired() and not context.sasl.admits(0) and context.sasl.admits(17)
    assert handshake(broker, context, "SCRAM-SHA-256").error_code == ErrorCode.none
    assert not context.sasl.admits(0)
    final = scramLogin(broker, context, "SCRAM-SHA-256", "alice", "alice-secret")
    assert final.error_code == ErrorCode.none and context.sasl.admits(0)


def test_reauthentication_cannot_change_principal_or_mechanism(store):
    store.alter([("bob", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "bob-secret"))])
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store, maxReauthMs=60_000))
    handshake(broker, context, "SCRAM-SHA-256")
    scramLogin(broker, context, "SCRAM-SHA-256", "alice", "alice-secret")
    handshake(broker, context, "SCRAM-SHA-256")
    response = scramLogin(broker, context, "SCRAM-SHA-256", "bob", "bob-secret")
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert "Cannot change principals" in response.error_message

    context = Ctx(0, 0, sasl=session(store, maxReauthMs=60_000))
    handshake(broker, context, "SCRAM-SHA-256")
    scramLogin(broker, context, "SCRAM-SHA-256", "alice", "alice-secret")
    assert handshake(broker, context, "PLAIN").error_code == ErrorCode.none
    response = authenticate(broker, context, b"\0alice\0alice-secret")
    assert response.error_code == ErrorCode.sasl_authentication_failed
    assert "not supported for re-authentication of mechanism 'SCRAM-SHA-256'" in response.error_message


def test_raw_tokens_after_handshake_v0(store):
    broker = securityServices(scramCredentials=store)
    context = Ctx(0, 0, sasl=session(store))
    handshake(broker, context, "PLAIN", version=0)
    assert context.sasl.rawTokens
    frame = rawTokenRequestFrame(b"\0alice\0alice-secret")
    header = parseRequestHeader(frame)
    assert (header.apiKey, header.apiVersion) == (36, 0)
    request = decodeRequest(36, 0, frame, header.bodyOffset)
    answer = sasl.SaslAuthenticateHandler(broker).handle(context, request)
    from kafkatwist.protocol.codec import encodeResponseFrame

    assert rawTokenResponse(encodeResponseFrame(36, 0, 0, answer)) == b"\0\0\0\0"
    refused = make(responseType(36, 0), error_code=ErrorCode.sasl_authentication_failed,
                   error_message="no", auth_bytes=b"")
    assert rawTokenResponse(encodeResponseFrame(36, 0, 0, refused)) is None


# -- ACLs ----------------------------------------------------------------------------


def creation(version, name, rtype=R.TOPIC, pattern=P.LITERAL, principal="User:alice", host="*",
             op=Op.READ, perm=Perm.ALLOW):
    return req(30, version, "AclCreation", resource_type=rtype, resource_name=name,
               resource_pattern_type=pattern, principal=principal, host=host,
               operation=op, permission_type=perm)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_describe_delete_acls(version):
    broker = aclBroker()
    response = call(acls.CreateAclsHandler, broker, version, admin(30, version), creations=(
        creation(version, "orders"),
        creation(version, "logs-", pattern=P.PREFIXED, op=Op.WRITE),
        creation(version, CLUSTER_NAME, rtype=R.CLUSTER, op=Op.ALTER),
        creation(version, "bad", rtype=R.CLUSTER),
        creation(version, "x", principal="nocolon"),
        creation(version, "x", op=99),
    ))
    codes = [r.error_code for r in response.results]
    assert codes == [0, 0, 0, ErrorCode.invalid_request, ErrorCode.invalid_request, ErrorCode.invalid_request]
    assert "only valid name for the CLUSTER" in response.results[3].error_message

    described = call(acls.DescribeAclsHandler, broker, version, admin(29, version),
                     resource_type_filter=R.TOPIC, resource_name_filter="logs-app",
                     pattern_type_filter=P.MATCH, principal_filter=None, host_filter=None,
                     operation=Op.ANY, permission_type=Perm.ANY)
    assert described.error_code == 0
    [resource] = described.resources
    assert (resource.resource_type, resource.resource_name, resource.pattern_type) == (R.TOPIC, "logs-", P.PREFIXED)
    [entry] = resource.acls
    assert (entry.principal, entry.host, entry.operation, entry.permission_type) == ("User:alice", "*", Op.WRITE, Perm.ALLOW)

    deleted = call(acls.DeleteAclsHandler, broker, version, admin(31, version), filters=(
        req(31, version, "DeleteAclsFilter", resource_type_filter=R.ANY, resource_name_filter=None,
            pattern_type_filter=P.ANY, principal_filter="User:alice", host_filter=None,
            operation=Op.READ, permission_type=Perm.ANY),
        req(31, version, "DeleteAclsFilter", resource_type_filter=0, resource_name_filter=None,
            pattern_type_filter=P.ANY, principal_filter=None, host_filter=None,
            operation=Op.ANY, permission_type=Perm.ANY),
    ))
    first, second = deleted.filter_results
    assert first.error_code == 0
    assert [(m.resource_name, m.operation) for m in first.matching_acls] == [("orders", Op.READ)]
    assert second.error_code == ErrorCode.invalid_request
    assert broker.authorizer.aclCount() == 2


def test_acl_apis_need_cluster_permissions():
    broker = aclBroker()
    context = Ctx(30, 3, principal="User:alice")
    response = call(acls.CreateAclsHandler, broker, 3, context, creations=(creation(3, "t"),))
    assert [r.error_code for r in response.results] == [ErrorCode.cluster_authorization_failed]
    described = call(acls.DescribeAclsHandler, broker, 3, Ctx(29, 3, principal="User:alice"),
                     resource_type_filter=R.ANY, resource_name_filter=None, pattern_type_filter=P.ANY,
                     principal_filter=None, host_filter=None, operation=Op.ANY, permission_type=Perm.ANY)
    assert described.error_code == ErrorCode.cluster_authorization_failed
    deleted = call(acls.DeleteAclsHandler, broker, 3, Ctx(31, 3, principal="User:alice"), filters=(
        req(31, 3, "DeleteAclsFilter", resource_type_filter=R.ANY, resource_name_filter=None,
            pattern_type_filter=P.ANY, principal_filter=None, host_filter=None,
            operation=Op.ANY, permission_type=Perm.ANY),))
    assert deleted.filter_results[0].error_code == ErrorCode.cluster_authorization_failed
    # ALTER on the cluster is enough to manage ACLs.
    broker.authorizer.createAcls(admin(30, 3), [AclBinding(R.CLUSTER, CLUSTER_NAME, P.LITERAL, "User:alice",
                                                           "*", Op.ALTER, Perm.ALLOW)])
    response = call(acls.CreateAclsHandler, broker, 3, Ctx(30, 3, principal="User:alice"),
                    creations=(creation(3, "t"),))
    assert [r.error_code for r in response.results] == [0]


def test_acl_apis_without_an_authorizer():
    broker = securityServices()
    response = call(acls.CreateAclsHandler, broker, 2, creations=(creation(2, "t"),))
    assert response.results[0].error_code == ErrorCode.security_disabled
    described = call(acls.DescribeAclsHandler, broker, 2, resource_type_filter=R.ANY,
                     resource_name_filter=None, pattern_type_filter=P.ANY, principal_filter=None,
                     host_filter=None, operation=Op.ANY, permission_type=Perm.ANY)
    assert described.error_code == ErrorCode.security_disabled
    assert described.error_message == acls.NO_AUTHORIZER


def test_describe_acls_groups_entries_by_pattern():
    broker = aclBroker()
    broker.authorizer.createAcls(admin(30, 3), [
        AclBinding(R.GROUP, "g", P.LITERAL, f"User:u{i}", "*", Op.READ, Perm.ALLOW) for i in range(3)
    ])
    described = call(acls.DescribeAclsHandler, broker, 3, admin(29, 3), resource_type_filter=R.GROUP,
                     resource_name_filter="g", pattern_type_filter=P.LITERAL, principal_filter=None,
                     host_filter=None, operation=Op.READ, permission_type=Perm.ALLOW)
    [resource] = described.resources
    assert [a.principal for a in resource.acls] == ["User:u0", "User:u1", "User:u2"]


# -- SCRAM credentials ------------------------------------------------------------------


def upsertion(name, mechanism=SCRAM_SHA_256, password="pw", iterations=4096, salt=b"salt-salt"):
    return req(51, 0, "ScramCredentialUpsertion", name=name, mechanism=mechanism.type, iterations=iterations,
               salt=salt, salted_password=saltedPassword(mechanism, password, salt, max(iterations, 1)))


def deletion(name, mechanism=1):
    return req(51, 0, "ScramCredentialDeletion", name=name, mechanism=mechanism)


def alter(broker, context=None, upsertions=(), deletions=()):
    response = call(scram_credentials.AlterUserScramCredentialsHandler, broker, 0, context,
                    upsertions=tuple(upsertions), deletions=tuple(deletions))
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def describe(broker, *names, context=None):
    users = tuple(req(50, 0, "UserName", name=n) for n in names) if names else None
    return call(scram_credentials.DescribeUserScramCredentialsHandler, broker, 0, context, users=users)


def test_alter_then_login_with_the_new_credential(tmp_path):
    broker = securityServices(scramCredentials=CredentialStore.inDirectory(str(tmp_path)))
    assert alter(broker, upsertions=[upsertion("alice", password="wonderland")]) == {"alice": (0, None)}
    again = CredentialStore.inDirectory(str(tmp_path))
    context = Ctx(0, 0, sasl=SaslSession(["SCRAM-SHA-256"], again))
    handshake(broker, context, "SCRAM-SHA-256")
    assert scramLogin(broker, context, "SCRAM-SHA-256", "alice", "wonderland").error_code == 0
    assert "wonderland" not in (tmp_path / os.listdir(tmp_path)[0]).read_text()


def test_alter_refusals():
    broker = securityServices()
    broker.scramCredentials.alter([("bob", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "x"))])
    results = alter(
        broker,
        upsertions=[
            upsertion("weak", iterations=1000),
            upsertion("strong", iterations=20000),
            upsertion("twice"),
            upsertion("twice", SCRAM_SHA_512),
            upsertion(""),
            req(51, 0, "ScramCredentialUpsertion", name="odd", mechanism=7, iterations=4096, salt=b"s",
                salted_password=b"p"),
        ],
        deletions=[deletion("ghost"), deletion("bob")],
    )
    assert results == {
        "bob": (0, None),
        "weak": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "strong": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "twice": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "odd": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "ghost": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
    }
    assert broker.scramCredentials.users() == []


def test_describe_credentials():
    broker = securityServices()
    alter(broker, upsertions=[upsertion("alice"), upsertion("bob", SCRAM_SHA_512, iterations=8192)])
    response = describe(broker)
    assert response.error_code == 0
    assert {r.user: [(i.mechanism, i.iterations) for i in r.credential_infos] for r in response.results} == {
        "alice": [(1, 4096)], "bob": [(2, 8192)],
    }
    response = describe(broker, "alice", "carol", "bob", "bob")
    results = {r.user: (r.error_code, r.error_message) for r in response.results}
    assert results["alice"] == (0, None)
    assert results["carol"] == (
        ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: carol"
    )
    assert results["bob"][0] == ErrorCode.duplicate_resource


def test_credential_apis_need_cluster_permissions():
    broker = securityServices(authorizer=StandardAuthorizer(None))
    context = Ctx(51, 0, principal="User:alice")
    assert alter(broker, context, upsertions=[upsertion("alice")]) == {
        "alice": (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    }
    response = describe(broker, "alice", context=Ctx(50, 0, principal="User:alice"))
    assert response.error_code == ErrorCode.cluster_authorization_failed
    assert broker.scramCredentials.users() == []


def test_refused_logins_from_one_client_are_throttled_like_refused_handshakes(store):
    # A client with a wrong password retries at once, forever.
    from twisted.logger import globalLogPublisher

    from kafkatwist.util.logthrottle import BURST

    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        broker = securityServices(scramCredentials=store)
        for port in range(20):
            context = Ctx(0, 0, sasl=session(store), clientAddress=("10.9.8.7", 40000 + port))
            handshake(broker, context, "PLAIN")
            authenticate(broker, context, b"\0alice\0guess")
    finally:
        globalLogPublisher.removeObserver(events.append)
    lines = [e for e in events if "Failed authentication" in e.get("log_format", "")]
    assert len(lines) == BURST
    assert "are not logged" in lines[-1]["log_format"]
