"""
SCRAM (RFC 5802, RFC 7677): credentials and the server side of the exchange.

A credential is what Kafka keeps for a user and mechanism: C{salt},
C{StoredKey = H(HMAC(SaltedPassword, "Client Key"))},
C{ServerKey = HMAC(SaltedPassword, "Server Key")} and the iteration count.
Neither the password nor the salted password is kept: the server checks a
client proof against StoredKey and proves itself with ServerKey.

L{ScramServer} is sans-io: C{evaluate(token)} takes the client's message and
returns the server's, raising L{AuthenticationFailed} when the client is
refused.  A user that does not exist gets a made-up salt and fails only at
the proof, as RFC 5802 section 9 recommends, so the exchange does not tell
who has an account.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from typing import Callable

from kafkatwist.security.errors import AuthenticationFailed, invalidCredentialsMessage

__all__ = [
    "MECHANISMS",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "makeCredential",
    "credentialFromSaltedPassword",
    "saltedPassword",
    "verifyPassword",
]


@dataclass(frozen=True)
class ScramMechanism:
    """
    @ivar name: the SASL mechanism name, e.g. C{SCRAM-SHA-256}.
    @ivar type: Kafka's code in the SCRAM credential APIs (1 or 2).
    @ivar hashName: the C{hashlib} name.
    """

    name: str
    type: int
    hashName: str
    #: Kafka's bounds (ScramMechanism.minIterations, ScramControlManager.MAX_ITERATIONS)
    minIterations: int = 4096
    maxIterations: int = 16384

    @property
    def digestSize(self) -> int:
        return hashlib.new(self.hashName).digest_size

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hashName)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hashName, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE: dict[int, ScramMechanism] = {m.type: m for m in MECHANISMS.values()}

#: salt length for credentials made here (Kafka's formatter uses its hash length)
SALT_BYTES = 32


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    storedKey: bytes
    serverKey: bytes
    iterations: int

    def __repr__(self) -> str:
        # Keys are as good as the password to anyone who can replay them
        # against a broker: keep them out of logs and tracebacks.
        return f"<ScramCredential iterations={self.iterations}>"


def _password(password: str | bytes) -> bytes:
    # Kafka (and librdkafka, and the Python clients) use the UTF-8 bytes as
    # they are, without SASLprep.
    return password.encode("utf-8") if isinstance(password, str) else bytes(password)


def saltedPassword(mechanism: ScramMechanism, password: str | bytes, salt: bytes, iterations: int) -> bytes:
    """
    C{Hi(password, salt, i)}, which is PBKDF2 with the mechanism's HMAC.
    """
    return hashlib.pbkdf2_hmac(mechanism.hashName, _password(password), salt, iterations)


def credentialFromSaltedPassword(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """
    What AlterUserScramCredentials receives (the salted password) turned into
    what is kept.
    """
    clientKey = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=bytes(salt),
        storedKey=mechanism.hash(clientKey),
        serverKey=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def makeCredential(
    mechanism: ScramMechanism,
    password: str | bytes,
    iterations: int = 4096,
    salt: bytes | None = None,
) -> ScramCredential:
    if salt is None:
        salt = os.urandom(SALT_BYTES)
    return credentialFromSaltedPassword(
        mechanism, saltedPassword(mechanism, password, salt, iterations), salt, iterations
    )


def verifyPassword(mechanism: ScramMechanism, credential: ScramCredential, password: str | bytes) -> bool:
    """
    Whether C{password} is the one C{credential} was made from (PLAIN).
    Constant-time in the comparison; the PBKDF2 dominates anyway.
    """
    salted = saltedPassword(mechanism, password, credential.salt, credential.iterations)
    storedKey = mechanism.hash(mechanism.hmac(salted, b"Client Key"))
    return hmac.compare_digest(storedKey, credential.storedKey)


# -- the messages ------------------------------------------------------------

#: made-up salts for unknown users are derived from this, so they are stable
#: for the life of the process and say nothing about real users
_FAKE_SALT_KEY = os.urandom(32)


def fakeCredential(mechanism: ScramMechanism, username: str) -> ScramCredential:
    """
    A credential for a user that does not exist: the same salt each time the
    name is tried, and keys that match no proof.
    """
    salt = hmac.digest(_FAKE_SALT_KEY, mechanism.name.encode() + b"\0" + username.encode("utf-8"), "sha256")
    return ScramCredential(
        salt=salt, storedKey=os.urandom(mechanism.digestSize), serverKey=b"", iterations=mechanism.minIterations
    )


def _decodeSaslName(value: str) -> str:
    """
    RFC 5802 saslname: ',' and '=' arrive as '=2C' and '=3D'; any other '='
    is malformed.
    """
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == "=":
            code = value[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ValueError(f"bad escape in saslname {value!r}")
            i += 3
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _printable(value: str) -> bool:
    return bool(value) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in value)


def _b64decode(value: str) -> bytes:
    return base64.b64decode(value.encode("ascii"), validate=True)


@dataclass(frozen=True)
class ClientFirstMessage:
    gs2Header: str
    authorizationId: str
    username: str
    nonce: str
    bare: str
    extensions: dict[str, str]

    @classmethod
    def parse(cls, token: bytes) -> "ClientFirstMessage":
        """
        C{gs2-header [reserved-mext ","] username "," nonce ["," extensions]}.

        @raise ValueError: malformed.
        """
        text = token.decode("utf-8")
        flag, sep1, rest = text.partition(",")
        authz, sep2, bare = rest.partition(",")
        if not (sep1 and sep2):
            raise ValueError("no gs2 header")
        if flag.startswith("p="):
            raise ValueError("channel binding is not supported")
        if flag not in ("n", "y"):
            raise ValueError(f"bad channel binding flag {flag!r}")
        authorizationId = ""
        if authz:
            if not authz.startswith("a="):
                raise ValueError(f"bad authzid {authz!r}")
            authorizationId = _decodeSaslName(authz[2:])
        parts = bare.split(",")
        if parts[0].startswith("m="):
            raise ValueError("mandatory extensions are not supported")
        if len(parts) < 2 or not parts[0].startswith("n=") or not parts[1].startswith("r="):
            raise ValueError("expected n=<user>,r=<nonce>")
        username = _decodeSaslName(parts[0][2:])
        nonce = parts[1][2:]
        if not username:
            raise ValueError("empty user name")
        if not _printable(nonce):
            raise ValueError("bad nonce")
        extensions = {}
        for part in parts[2:]:
            key, sep, value = part.partition("=")
            if not sep or not key.isalpha():
                raise ValueError(f"bad extension {part!r}")
            extensions[key] = value
        return cls(f"{flag},{authz},", authorizationId, username, nonce, bare, extensions)


@dataclass(frozen=True)
class ClientFinalMessage:
    channelBinding: bytes
    nonce: str
    proof: bytes
    withoutProof: str

    @classmethod
    def parse(cls, token: bytes) -> "ClientFinalMessage":
        """
        C{channel-binding "," nonce ["," extensions] "," proof}.

        @raise ValueError: malformed.
        """
        text = token.decode("utf-8")
        withoutProof, sep, proof = text.rpartition(",p=")
        parts = withoutProof.split(",")
        if not sep or len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise ValueError("expected c=<binding>,r=<nonce>,...,p=<proof>")
        try:
            channelBinding = _b64decode(parts[0][2:])
            proofBytes = _b64decode(proof)
        except (binascii.Error, ValueError):
            raise ValueError("bad base64") from None
        return cls(channelBinding, parts[1][2:], proofBytes, withoutProof)


class ScramServer:
    """
    One SCRAM exchange, server side: client-first in, server-first out;
    client-final in, server-final out; then C{complete}.

    @param lookup: C{lookup(username)} -> L{ScramCredential} for this
        mechanism, or C{None}.
    @ivar authorizationId: the authenticated user name, once complete.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: Callable[[str], ScramCredential | None],
        *,
        reauthenticating: bool = False,
        nonceFactory: Callable[[], str] = lambda: secrets.token_urlsafe(24),
    ) -> None:
        self.mechanism = mechanism
        self.lookup = lookup
        self.reauthenticating = reauthenticating
        self.nonceFactory = nonceFactory
        self.complete = False
        self.authorizationId: str | None = None
        #: the user name the client gave, for log lines (known after the first message)
        self.username: str | None = None
        self._first: ClientFirstMessage | None = None
        self._serverFirst: str | None = None
        self._credential: ScramCredential | None = None
        self._known = False
        self._failed = False

    def _fail(self, reason: str, clientMessage: str | None = None) -> AuthenticationFailed:
        self._failed = True
        self._credential = None
        return AuthenticationFailed(
            reason, clientMessage or invalidCredentialsMessage(self.mechanism.name, self.reauthenticating)
        )

    def evaluate(self, token: bytes) -> bytes:
        """
        @return: the server's next message.
        @raise AuthenticationFailed: the client is refused; the exchange is over.
        """
        if self._failed or self.complete:
            raise self._fail("SCRAM message after the exchange ended")
        if self._first is None:
            return self._clientFirst(bytes(token))
        return self._clientFinal(bytes(token))

    def _clientFirst(self, token: bytes) -> bytes:
        try:
            first = ClientFirstMessage.parse(token)
        except (ValueError, UnicodeDecodeError) as e:
            raise self._fail(f"invalid SCRAM client first message: {e}") from None
        self.username = first.username
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise self._fail(
                f"user {first.username!r} asked for delegation token authentication, which is not supported"
            )
        if first.authorizationId and first.authorizationId != first.username:
            raise self._fail(
                f"user {first.username!r} asked for authorization id {first.authorizationId!r}",
                "Authentication failed: Client requested an authorization id that is different from username",
            )
        credential = self.lookup(first.username)
        self._known = credential is not None
        if credential is None:
            credential = fakeCredential(self.mechanism, first.username)
        elif credential.iterations < self.mechanism.minIterations:
            raise self._fail(
                f"credential of {first.username!r} has {credential.iterations} iterations, "
                f"below the minimum {self.mechanism.minIterations} for {self.mechanism.name}"
            )
        self._credential = credential
        self._first = first
        nonce = first.nonce + self.nonceFactory()
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._serverFirst = f"r={nonce},s={salt},i={credential.iterations}"
        return self._serverFirst.encode("ascii")

    def _clientFinal(self, token: bytes) -> bytes:
        first, credential = self._first, self._credential
        try:
            final = ClientFinalMessage.parse(token)
        except (ValueError, UnicodeDecodeError) as e:
            raise self._fail(f"invalid SCRAM client final message from {first.username!r}: {e}") from None
        if final.channelBinding != first.gs2Header.encode("utf-8"):
            raise self._fail(f"channel binding of {first.username!r} does not match its gs2 header")
        if final.nonce != self._serverFirst[2 : self._serverFirst.index(",")]:
            raise self._fail(f"invalid nonce in the final message of {first.username!r}")
        mechanism = self.mechanism
        if len(final.proof) != mechanism.digestSize:
            raise self._fail(f"client proof of {first.username!r} has the wrong length")
        authMessage = f"{first.bare},{self._serverFirst},{final.withoutProof}".encode("utf-8")
        clientSignature = mechanism.hmac(credential.storedKey, authMessage)
        clientKey = bytes(a ^ b for a, b in zip(final.proof, clientSignature))
        matches = hmac.compare_digest(mechanism.hash(clientKey), credential.storedKey)
        if not (matches and self._known):
            why = "wrong password for" if self._known else "unknown user"
            raise self._fail(f"{why} {first.username!r}")
        serverSignature = mechanism.hmac(credential.serverKey, authMessage)
        self._credential = None
        self.complete = True
        self.authorizationId = first.username
        return b"v=" + base64.b64encode(serverSignature)
