"""
How a SASL exchange fails.
"""

from __future__ import annotations


class AuthenticationFailed(Exception):
    """
    The client is refused.

    @ivar reason: what the broker logs (may name the user; never a secret).
    @ivar clientMessage: what the client is told.  By default Kafka's
        generic words, which do not say whether the user exists.
    """

    def __init__(self, reason: str, clientMessage: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.clientMessage = clientMessage


def invalidCredentialsMessage(mechanism: str, reauthenticating: bool = False) -> str:
    """
    Kafka's answer to a failed exchange (C{SaslServerAuthenticator}).
    """
    what = "re-authentication" if reauthenticating else "authentication"
    return (
        f"Authentication failed during {what} due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )
