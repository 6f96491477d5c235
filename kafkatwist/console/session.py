"""
The console's browser sessions, kept in memory: a random id in an
HttpOnly, SameSite=Strict cookie, the principal the session acts as, and
the CSRF token every changing request (POST) must carry in its form.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from urllib.parse import urlsplit

COOKIE = b"kafkatwist_console"
#: an idle session ends after this long
IDLE_SECONDS = 8 * 3600
#: the most sessions kept (the least recently used goes first)
MAX_SESSIONS = 10_000


class Session:
    __slots__ = ("id", "csrf", "principal", "user", "lastSeen", "flash")

    def __init__(self, principal: str | None, user: str | None = None) -> None:
        self.id = secrets.token_urlsafe(32)
        self.csrf = secrets.token_urlsafe(32)
        #: C{User:<name>}, or C{None} for a session not logged in
        self.principal = principal
        self.user = user
        self.lastSeen = time.monotonic()
        #: a message shown once on the next page: (kind, text)
        self.flash: tuple[str, str] | None = None

    def takeFlash(self):
        flash, self.flash = self.flash, None
        return flash


class Sessions:
    """
    Only the main reactor uses this (no lock).
    """

    def __init__(self, secure: bool = False, clock=time.monotonic) -> None:
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self.secure = secure
        self._clock = clock

    def __len__(self) -> int:
        return len(self._sessions)

    def find(self, request) -> Session | None:
        sid = request.getCookie(COOKIE)
        if not sid:
            return None
        session = self._sessions.get(sid.decode("ascii", "replace"))
        if session is None:
            return None
        now = self._clock()
        if now - session.lastSeen > IDLE_SECONDS:
            del self._sessions[session.id]
            return None
        session.lastSeen = now
        self._sessions.move_to_end(session.id)
        return session

    def start(self, request, principal: str | None, user: str | None = None) -> Session:
        """
        A new session, its cookie set on C{request}'s answer (a login
        replaces the session it came with: no fixation).
        """
        old = self.find(request)
        if old is not None:
            self.end(old)
        session = Session(principal, user)
        session.lastSeen = self._clock()
        self._sessions[session.id] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        request.addCookie(
            COOKIE, session.id.encode("ascii"), path=b"/", httpOnly=True, secure=self.secure,
            sameSite=b"strict",
        )
        return session

    def end(self, session: Session) -> None:
        self._sessions.pop(session.id, None)


def sameOrigin(request) -> bool:
    """
    A POST's Origin (or, lacking it, Referer) names this listener's host,
    as browsers send it; a request with neither (a script) is let through
    to the token check.
    """
    host = request.getHeader(b"host")
    for header in (b"origin", b"referer"):
        value = request.getHeader(header)
        if value:
            if value == b"null" or host is None:
                return False
            return urlsplit(value).netloc == host
    return True


def checkCsrf(session: Session | None, request) -> bool:
    if session is None:
        return False
    values = request.args.get(b"csrf")
    if not values:
        return False
    return hmac.compare_digest(values[0], session.csrf.encode("ascii")) and sameOrigin(request)
