"""
SCRAM and PLAIN as sans-io servers: RFC 7677's exchange, a real client's
(kafka-python's SCRAM code), every way a client can be refused, and the
durable credential store they share.
"""

import base64
import os

import pytest

from kafkatwist.security.credentials import CREDENTIALS_FILE, CredentialStore
from kafkatwist.security.errors import AuthenticationFailed
from kafkatwist.security.plain import PlainServer
from kafkatwist.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramServer,
    credentialFromSaltedPassword,
    makeCredential,
    saltedPassword,
    verifyPassword,
)
from kafkatwist.util.statefile import StateFileError

# RFC 7677 section 3
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO" + RFC_SERVER_NONCE
RFC_CLIENT_FINAL = f"c=biws,r={RFC_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode()
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfcServer(credential=None):
    credential = credential or makeCredential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    users = {"user": credential}
    return ScramServer(SCRAM_SHA_256, users.get, nonceFactory=lambda: RFC_SERVER_NONCE)


def test_rfc7677_exchange():
    server = rfcServer()
    first = server.evaluate(RFC_CLIENT_FIRST)
    assert first == f"r={RFC_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete
    assert server.authorizationId == "user"


def test_credential_keeps_no_password():
    credential = makeCredential(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    salted = saltedPassword(SCRAM_SHA_256, "pencil", RFC_SALT, 4096)
    assert b"pencil" not in repr(credential).encode()
    assert salted not in (credential.storedKey, credential.serverKey)
    assert credentialFromSaltedPassword(SCRAM_SHA_256, salted, RFC_SALT, 4096) == credential
    assert verifyPassword(SCRAM_SHA_256, credential, "pencil")
    assert not verifyPassword(SCRAM_SHA_256, credential, "pencil2")


def kafkaPythonExchange(server, user, password, mechanism):
    """
    Run kafka-python's own SCRAM client against C{server}.
    """
    from kafka.net.sasl.scram import ScramClient

    client = ScramClient(user, password, mechanism)
    client.process_server_first_message(server.evaluate(client.first_message()))
    final = server.evaluate(client.final_message())
    client.process_server_final_message(final)
    return server


@pytest.mark.parametrize("mechanism", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_real_client(mechanism):
    store = CredentialStore(None)
    store.alter([("alice", mechanism.name, makeCredential(mechanism, "s3cret, with=signs"))])
    server = ScramServer(mechanism, store.lookupFor(mechanism.name))
    kafkaPythonExchange(server, "alice", "s3cret, with=signs", mechanism.name)
    assert server.complete and server.authorizationId == "alice"


def test_wrong_password_fails_at_the_proof():
    server = rfcServer()
    server.evaluate(RFC_CLIENT_FIRST)
    bad = RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=dHzc")
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(bad)
    assert "wrong password for 'user'" in e.value.reason
    assert e.value.clientMessage == (
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"
    )
    assert not server.complete
    with pytest.raises(AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FINAL)


def test_unknown_user_looks_like_a_known_one_until_the_proof():
    from kafka.net.sasl.scram import ScramClient

    server = ScramServer(SCRAM_SHA_256, {}.get)
    client = ScramClient("nobody", "x", "SCRAM-SHA-256")
    first = server.evaluate(client.first_message())
    nonce, salt, iterations = (part[2:] for part in first.decode().split(","))
    assert iterations == "4096" and base64.b64decode(salt)
    # The same made-up salt each time, so asking twice tells nothing.
    again = ScramServer(SCRAM_SHA_256, {}.get).evaluate(b"n,,n=nobody,r=abc").decode()
    assert again.split(",")[1] == "s=" + salt
    client.process_server_first_message(first)
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(client.final_message())
    assert "unknown user 'nobody'" in e.value.reason
    assert "invalid credentials" in e.value.clientMessage


@pytest.mark.parametrize(
    "token, why",
    [
        (b"", "no gs2 header"),
        (b"p=tls-unique,,n=user,r=abc", "channel binding is not supported"),
        (b"x,,n=user,r=abc", "bad channel binding flag"),
        (b"n,,m=ext,n=user,r=abc", "mandatory extensions"),
        (b"n,,n=us=ZZer,r=abc", "bad escape"),
        (b"n,,r=abc,n=user", "expected n=<user>,r=<nonce>"),
        (b"n,,n=,r=abc", "empty user name"),
        (b"n,,n=user,r=a\x7fb", "bad nonce"),
        (b"n,,n=user,r=abc,tokenauth=true", "delegation token"),
        (b"\xff\xfe", "invalid SCRAM client first message"),
    ],
)
def test_bad_first_messages(token, why):
    server = rfcServer()
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(token)
    assert why in e.value.reason


def test_authzid_must_be_the_user():
    server = rfcServer()
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(b"n,a=admin,n=user,r=abc")
    assert e.value.clientMessage == (
        "Authentication failed: Client requested an authorization id that is different from username"
    )
    # The same name is fine, and escaped names are decoded.
    credential = makeCredential(SCRAM_SHA_256, "pw")
    server = ScramServer(SCRAM_SHA_256, {"a,b=c": credential}.get)
    assert server.evaluate(b"n,a=a=2Cb=3Dc,n=a=2Cb=3Dc,r=abc").startswith(b"r=abc")


@pytest.mark.parametrize(
    "final, why",
    [
        (f"c=biws,r={RFC_NONCE}".encode(), "expected c=<binding>"),
        (f"c=eSws,r={RFC_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=".encode(), "channel binding"),
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqO,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", "invalid nonce"),
        (f"c=biws,r={RFC_NONCE},p=AAAA".encode(), "wrong length"),
        (f"c=biws,r={RFC_NONCE},p=not*base64".encode(), "bad base64"),
    ],
)
def test_bad_final_messages(final, why):
    server = rfcServer()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(final)
    assert why in e.value.reason


def test_too_few_iterations_refused():
    weak = makeCredential(SCRAM_SHA_256, "pencil", 1000)
    server = ScramServer(SCRAM_SHA_256, {"user": weak}.get)
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(RFC_CLIENT_FIRST)
    assert "1000 iterations" in e.value.reason


def test_message_after_completion_refused():
    server = rfcServer()
    server.evaluate(RFC_CLIENT_FIRST)
    server.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(AuthenticationFailed):
        server.evaluate(RFC_CLIENT_FIRST)


# -- PLAIN ---------------------------------------------------------------------


@pytest.fixture
def store():
    store = CredentialStore(None)
    store.alter([("alice", "SCRAM-SHA-512", makeCredential(SCRAM_SHA_512, "wonderland"))])
    store.alter([("bob", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "builder"))])
    return store


@pytest.mark.parametrize("user, password", [("alice", "wonderland"), ("bob", "builder")])
def test_plain_checks_scram_credentials(store, user, password):
    server = PlainServer(store.credentials)
    assert server.evaluate(f"\0{user}\0{password}".encode()) == b""
    assert server.complete and server.authorizationId == user


def test_plain_authzid(store):
    assert PlainServer(store.credentials).evaluate(b"alice\0alice\0wonderland") == b""
    with pytest.raises(AuthenticationFailed) as e:
        PlainServer(store.credentials).evaluate(b"bob\0alice\0wonderland")
    assert "different from username" in e.value.clientMessage


@pytest.mark.parametrize(
    "token, reason, message",
    [
        (b"\0alice\0wrong", "wrong password for 'alice'", "Authentication failed: Invalid username or password"),
        (b"\0carol\0x", "unknown user 'carol'", "Authentication failed: Invalid username or password"),
        (b"alice\0wonderland", "expected 3 tokens, got 2", "Invalid SASL/PLAIN response: expected 3 tokens, got 2"),
        (b"\0\0pw", "without a user name", "Authentication failed: username not specified"),
        (b"\0alice\0", "without a password", "Authentication failed: password not specified"),
        (b"\0al\xffice\0pw", "not UTF-8", None),
    ],
)
def test_plain_refusals(store, token, reason, message):
    server = PlainServer(store.credentials)
    with pytest.raises(AuthenticationFailed) as e:
        server.evaluate(token)
    assert reason in e.value.reason
    if message:
        assert e.value.clientMessage == message
    assert not server.complete


def test_plain_accepts_either_mechanism_credential():
    store = CredentialStore(None)
    store.alter([
        ("dual", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "old")),
        ("dual", "SCRAM-SHA-512", makeCredential(SCRAM_SHA_512, "new")),
    ])
    for password in ("old", "new"):
        assert PlainServer(store.credentials).evaluate(f"\0dual\0{password}".encode()) == b""


# -- the store -----------------------------------------------------------------


def test_store_survives_a_restart(tmp_path):
    store = CredentialStore.inDirectory(str(tmp_path))
    credential = makeCredential(SCRAM_SHA_256, "pw")
    store.alter([("alice", "SCRAM-SHA-256", credential), ("bob", "SCRAM-SHA-512", makeCredential(SCRAM_SHA_512, "x"))])
    store.alter(deletions=[("bob", "SCRAM-SHA-512")])
    text = (tmp_path / CREDENTIALS_FILE).read_text()
    assert "pw" not in text.replace("kind", "")
    assert oct(os.stat(tmp_path / CREDENTIALS_FILE).st_mode & 0o777) == "0o600"
    again = CredentialStore.inDirectory(str(tmp_path))
    assert again.users() == ["alice"]
    assert again.get("alice", "SCRAM-SHA-256") == credential
    assert not os.path.exists(tmp_path / (CREDENTIALS_FILE + ".tmp"))


def test_store_skips_a_damaged_line(tmp_path):
    store = CredentialStore.inDirectory(str(tmp_path))
    store.alter([("alice", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "pw")),
                 ("bob", "SCRAM-SHA-256", makeCredential(SCRAM_SHA_256, "pw"))])
    path = tmp_path / CREDENTIALS_FILE
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:20]
    lines.append('{"user": "eve", "mechanism": "SCRAM-SHA-1", "salt": "", "storedKey": "", "serverKey": "", "iterations": 1}')
    path.write_text("\n".join(lines) + "\n")
    assert CredentialStore.inDirectory(str(tmp_path)).users() == ["bob"]


def test_store_refuses_another_kind_of_file(tmp_path):
    (tmp_path / CREDENTIALS_FILE).write_text('{"kind": "acls", "version": 1}\n')
    with pytest.raises(StateFileError):
        CredentialStore.inDirectory(str(tmp_path))
