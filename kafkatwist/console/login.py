"""
The console's login, with the broker's SASL users: a user name and password
are checked as a SASL/PLAIN exchange is on the Kafka port (against the
broker's SCRAM credentials, in constant time whoever asks), on a request
handler thread (PBKDF2 is not for the reactor).  The session then acts as
C{User:<name>}, authorized by the same ACLs.
"""

from __future__ import annotations

import base64

from kafkatwist.security.errors import AuthenticationFailed
from kafkatwist.security.plain import PlainServer


def checkPassword(credentials, username: str, password: str) -> str | None:
    """
    @param credentials: the broker's L{kafkatwist.security.credentials.CredentialStore}.
    @return: the principal, or C{None} for a wrong name or password.
    """
    if not username or not password or "\0" in username or "\0" in password:
        return None
    server = PlainServer(credentials.credentials)
    try:
        server.evaluate(b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8"))
    except AuthenticationFailed:
        return None
    return f"User:{server.authorizationId}" if server.complete else None


def basicCredentials(request) -> tuple[str, str] | None:
    """
    An HTTP Basic C{Authorization} header's user and password (for scripts
    calling C{/api/}), or C{None}.
    """
    raw = request.getHeader(b"authorization")
    header = raw.decode("latin-1") if isinstance(raw, bytes) else raw
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if sep else None
