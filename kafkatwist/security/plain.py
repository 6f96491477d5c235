"""
SASL/PLAIN (RFC 4616), server side, checked against the SCRAM credentials.

One credential store serves every mechanism: the password a PLAIN client
sends is salted with a SCRAM credential's salt and iteration count and its
StoredKey compared with the kept one, in constant time.  A user with
credentials for both SCRAM mechanisms is accepted if either matches.  An
unknown user costs the same PBKDF2 as a known one, so timing does not tell
who has an account.
"""

from __future__ import annotations

from typing import Callable

from kafkatwist.security.errors import AuthenticationFailed, invalidCredentialsMessage
from kafkatwist.security.scram import MECHANISMS, SCRAM_SHA_256, ScramCredential, fakeCredential, verifyPassword

__all__ = ["PlainServer"]

PLAIN = "PLAIN"


class PlainServer:
    """
    @param lookup: C{lookup(username)} -> C{dict} SCRAM mechanism name ->
        L{ScramCredential} (empty for an unknown user).
    """

    mechanism = PLAIN

    def __init__(
        self,
        lookup: Callable[[str], dict[str, ScramCredential]],
        *,
        reauthenticating: bool = False,
    ) -> None:
        self.lookup = lookup
        self.reauthenticating = reauthenticating
        self.complete = False
        self.authorizationId: str | None = None
        self.username: str | None = None
        self._done = False

    def _fail(self, reason: str, clientMessage: str | None = None) -> AuthenticationFailed:
        self._done = True
        return AuthenticationFailed(reason, clientMessage or invalidCredentialsMessage(PLAIN, self.reauthenticating))

    def evaluate(self, token: bytes) -> bytes:
        """
        C{[authzid] NUL authcid NUL passwd}.

        @return: an empty challenge once authenticated.
        @raise AuthenticationFailed: the client is refused.
        """
        if self._done:
            raise self._fail("PLAIN message after the exchange ended")
        self._done = True
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise self._fail("invalid SASL/PLAIN response: not UTF-8") from None
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise self._fail(
                f"invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}",
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}",
            )
        authorizationId, username, password = tokens
        if not username:
            raise self._fail("PLAIN without a user name", "Authentication failed: username not specified")
        self.username = username
        if not password:
            raise self._fail(f"PLAIN without a password for {username!r}", "Authentication failed: password not specified")
        credentials = self.lookup(username)
        if credentials:
            ok = False
            for name, credential in credentials.items():
                # Every credential is tried, so the time taken does not say
                # which one matched.
                ok |= verifyPassword(MECHANISMS[name], credential, password)
        else:
            verifyPassword(SCRAM_SHA_256, fakeCredential(SCRAM_SHA_256, username), password)
            ok = False
        if not ok:
            why = "wrong password for" if credentials else "unknown user"
            raise self._fail(f"{why} {username!r}", "Authentication failed: Invalid username or password")
        if authorizationId and authorizationId != username:
            raise self._fail(
                f"user {username!r} asked for authorization id {authorizationId!r}",
                "Authentication failed: Client requested an authorization id that is different from username",
            )
        self.complete = True
        self.authorizationId = username
        return b""
