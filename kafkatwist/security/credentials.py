"""
The SCRAM credential store: user -> mechanism -> L{ScramCredential}, kept in
C{kafkatwist-scram-credentials.json} in the first data directory.

Threads: any thread reads (a lookup sees one immutable snapshot); changes
are serialised by a lock, written durably and only then published, so a
credential a client was told is stored survives a crash.
"""

from __future__ import annotations

import base64
import os
import threading

from twisted.logger import Logger

from kafkatwist.security.scram import MECHANISMS, ScramCredential
from kafkatwist.util.statefile import readRecords, writeRecords

__all__ = ["CREDENTIALS_FILE", "CredentialStore"]

log = Logger()

CREDENTIALS_FILE = "kafkatwist-scram-credentials.json"
_KIND = "scram-credentials"
_VERSION = 1

Credentials = dict[str, dict[str, ScramCredential]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _toRecord(user: str, mechanism: str, credential: ScramCredential) -> dict:
    return {
        "user": user,
        "mechanism": mechanism,
        "salt": _b64(credential.salt),
        "storedKey": _b64(credential.storedKey),
        "serverKey": _b64(credential.serverKey),
        "iterations": credential.iterations,
    }


def _fromRecord(record: dict) -> tuple[str, str, ScramCredential]:
    user = record["user"]
    mechanism = record["mechanism"]
    if not isinstance(user, str) or not user or mechanism not in MECHANISMS:
        raise ValueError(f"bad user {user!r} or mechanism {mechanism!r}")
    iterations = record["iterations"]
    if not isinstance(iterations, int) or iterations <= 0:
        raise ValueError(f"bad iteration count {iterations!r}")
    credential = ScramCredential(
        salt=base64.b64decode(record["salt"], validate=True),
        storedKey=base64.b64decode(record["storedKey"], validate=True),
        serverKey=base64.b64decode(record["serverKey"], validate=True),
        iterations=iterations,
    )
    return user, mechanism, credential


class CredentialStore:
    """
    @param path: the file; C{None} keeps everything in memory (tests).
    @param load: read the file now (else call L{load} before use).
    """

    def __init__(self, path: str | None, load: bool = True) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._users: Credentials = {}
        if load:
            self.load()

    @classmethod
    def inDirectory(cls, directory: str, load: bool = True) -> "CredentialStore":
        return cls(os.path.join(directory, CREDENTIALS_FILE), load)

    def load(self) -> None:
        """
        Read the file (at start-up).

        @raise kafkatwist.util.statefile.StateFileError: not a credential
            file this broker can read.
        """
        if self.path:
            self._users = self._read()

    def _read(self) -> Credentials:
        users: Credentials = {}
        for record in readRecords(self.path, _KIND, _VERSION):
            try:
                user, mechanism, credential = _fromRecord(record)
            except (KeyError, TypeError, ValueError) as e:
                log.error(
                    "Skipping a damaged SCRAM credential in {path}: {error}", path=self.path, error=e
                )
                continue
            users.setdefault(user, {})[mechanism] = credential
        if users:
            log.info("Loaded SCRAM credentials of {count} user(s) from {path}", count=len(users), path=self.path)
        return users

    # -- reading, from any thread -------------------------------------------

    def credentials(self, user: str) -> dict[str, ScramCredential]:
        """
        @return: mechanism name -> credential; empty for an unknown user.
        """
        return self._users.get(user, {})

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> list[str]:
        return sorted(self._users)

    def lookupFor(self, mechanism: str):
        """
        @return: C{lookup(user)} -> the user's credential for C{mechanism}.
        """
        return lambda user: self.get(user, mechanism)

    # -- changing ----------------------------------------------------------

    def alter(
        self,
        upsertions: list[tuple[str, str, ScramCredential]] = (),
        deletions: list[tuple[str, str]] = (),
    ) -> None:
        """
        Apply all changes at once, durably.

        @raise OSError: the file could not be written; nothing changed.
        """
        with self._lock:
            users = {user: dict(mechs) for user, mechs in self._users.items()}
            for user, mechanism in deletions:
                mechs = users.get(user, {})
                mechs.pop(mechanism, None)
                if not mechs:
                    users.pop(user, None)
            for user, mechanism, credential in upsertions:
                users.setdefault(user, {})[mechanism] = credential
            if self.path:
                records = [
                    _toRecord(user, mechanism, credential)
                    for user in sorted(users)
                    for mechanism, credential in sorted(users[user].items())
                ]
                writeRecords(self.path, _KIND, _VERSION, records)
            self._users = users
