"""
The console's twisted.web resources, on the main reactor: each page or API
call asks L{kafkatwist.console.source.ConsoleSource} (which does its work
on request handler threads and through the handlers' owners) and writes the
answer when it comes; the reactor never waits.

  /                     overview            /api/brokers
  /topics[?q=]          topic list          /api/topics[?q=]
  /topics/<name>        one topic           /api/topics/<name>
  /groups[?q=]          group list          /api/groups[?q=]
  /groups/<id>          one group           /api/groups/<id>
  /api/history          the rates of the last minutes
  /static/console.css, /static/console.js
"""

from __future__ import annotations

import json

from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from kafkatwist.console import pages
from kafkatwist.console.assets import CSS, JS
from kafkatwist.console.login import basicCredentials
from kafkatwist.console.session import checkCsrf
from kafkatwist.console.source import ConsoleHTTPError

ANONYMOUS = "User:ANONYMOUS"

log = Logger()

#: what the browser may load: only this origin's script and styles (inline
#: style attributes for bar widths), nothing framed
SECURITY_HEADERS = {
    b"content-security-policy": (
        b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"same-origin",
    b"cache-control": b"no-store",
}


def _arg(request, name: str, default: str = "") -> str:
    values = request.args.get(name.encode())
    if not values:
        return default
    return values[0].decode("utf-8", "replace")


def messageArgs(request) -> dict:
    """
    The message browser's query: partition, mode, offset, timestamp,
    cursor, limit (400 for what does not parse).
    """
    from kafkatwist.console.messages import MAX_PAGE, parseTimestamp

    def number(name):
        text = _arg(request, name).strip()
        if not text or text == "all":
            return None
        try:
            return int(text)
        except ValueError:
            raise ConsoleHTTPError(400, f"{name} must be a number, not {text!r}") from None

    timestamp = None
    text = _arg(request, "timestamp").strip()
    if text:
        try:
            timestamp = parseTimestamp(text)
        except ValueError:
            raise ConsoleHTTPError(400, f"timestamp must be milliseconds or ISO 8601, not {text!r}") from None
    mode = _arg(request, "mode") or ("offset" if _arg(request, "offset") else "timestamp" if timestamp is not None else "newest")
    return {
        "partition": number("partition"),
        "mode": mode,
        "offset": number("offset"),
        "timestamp": timestamp,
        "cursor": _arg(request, "cursor"),
        "limit": number("limit") or MAX_PAGE,
    }


def _segments(request) -> list[str]:
    return [s.decode("utf-8", "replace") for s in request.postpath if s != b""]


class _Base(Resource):
    isLeaf = True

    def __init__(self, console) -> None:
        super().__init__()
        self.console = console

    def context(self, request, session=None):
        peer = request.getClientAddress()
        address = (getattr(peer, "host", "127.0.0.1"), getattr(peer, "port", 0))
        principal = (session.principal if session is not None else None) or ANONYMOUS
        return self.console.source.context(principal, clientAddress=address)

    def _headers(self, request, contentType: bytes) -> None:
        request.setHeader(b"content-type", contentType)
        for name, value in SECURITY_HEADERS.items():
            request.setHeader(name, value)

    def answer(self, request, deferred, render) -> object:
        """
        Write C{render(result)} once C{deferred} fires; an error as its
        status.
        """
        gone = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def ok(result) -> None:
            if gone:
                return
            status, contentType, body = render(result)
            request.setResponseCode(status)
            self._headers(request, contentType)
            request.write(body)
            request.finish()

        def failed(failure) -> None:
            if gone:
                return
            if failure.check(ConsoleHTTPError):
                status, message = failure.value.status, failure.value.message
            else:
                log.failure("Console request {uri} failed", failure, uri=request.uri)
                status, message = 500, "Internal error (see the broker's log)"
            code, contentType, body = self.error(status, message, request)
            request.setResponseCode(code)
            self._headers(request, contentType)
            request.write(body)
            request.finish()

        deferred.addCallbacks(ok, failed).addErrback(
            lambda f: log.failure("Console answer to {uri} not written", f, uri=request.uri)
        )
        return NOT_DONE_YET

    def error(self, status: int, message: str, request=None):
        raise NotImplementedError


class ApiResource(_Base):
    """
    /api/...: JSON.
    """

    def error(self, status: int, message: str, request=None):
        return status, b"application/json; charset=utf-8", _json({"error": message, "status": status})

    def render_GET(self, request):
        """
        Under an authorizer: as the session's user, or as the user an HTTP
        Basic header names (checked like a SASL/PLAIN login); else 401.
        """
        if not self.console.loginRequired():
            return self.answer(request, self.query(request, None), _jsonAnswer)
        session = self.console.sessions.find(request)
        if session is not None and session.principal:
            return self.answer(request, self.query(request, session), _jsonAnswer)
        basic = basicCredentials(request)
        if basic is None:
            request.setHeader(b"www-authenticate", b'Basic realm="kafkatwist console", charset="UTF-8"')
            return self._now(request, 401, "Log in first (or send HTTP Basic credentials of a SASL user)")
        from kafkatwist.console.login import checkPassword

        checked = self.console.source.onHandlerThread(checkPassword, self.console.broker.scramCredentials, *basic)

        def then(principal):
            if principal is None:
                request.setHeader(b"www-authenticate", b'Basic realm="kafkatwist console", charset="UTF-8"')
                raise ConsoleHTTPError(401, "Invalid username or password")
            return self.query(request, _Principal(principal))

        checked.addCallback(then)
        return self.answer(request, checked, _jsonAnswer)

    def _now(self, request, status: int, message: str):
        status, contentType, body = self.error(status, message)
        request.setResponseCode(status)
        self._headers(request, contentType)
        return body

    def query(self, request, session):
        """
        @return: a Deferred of the JSON answer to the request's path.
        """
        from twisted.internet.defer import fail, succeed

        parts = _segments(request)
        source = self.console.source
        context = self.context(request, session)
        try:
            if parts == ["brokers"]:
                return source.brokers(context)
            if parts == ["topics"]:
                return source.topics(context, _arg(request, "q"))
            if len(parts) == 2 and parts[0] == "topics":
                return source.topic(context, parts[1])
            if len(parts) == 3 and parts[0] == "topics" and parts[2] == "messages":
                return source.messages(context, parts[1], **messageArgs(request))
            if parts == ["groups"]:
                return source.groups(context, _arg(request, "q"))
            if len(parts) == 2 and parts[0] == "groups":
                return source.group(context, parts[1])
            if parts == ["acls"]:
                return source.acls(context).addCallback(lambda acls: {"acls": acls})
            if parts == ["scram-users"]:
                return source.scramUsers(context).addCallback(lambda users: {"users": users})
            if parts == ["security"]:
                return source.security(context)
            if parts == ["history"]:
                group = _arg(request, "group")
                if group:
                    return source.lagHistory(context, group)
                return succeed({"interval": self.console.history.interval, "series": self.console.history.series()})
            raise ConsoleHTTPError(404, "no such API")
        except ConsoleHTTPError as e:
            return fail(e)


class _Principal:
    """
    A request's identity without a session (HTTP Basic).
    """

    def __init__(self, principal: str) -> None:
        self.principal = principal


def _jsonAnswer(data):
    return 200, b"application/json; charset=utf-8", _json(data)


def _json(data) -> bytes:
    return json.dumps(data, default=str, ensure_ascii=True).encode("ascii")


class PageResource(_Base):
    """
    One HTML page: C{load(source, context, request, segments)} returns a
    Deferred of the data, C{render(data, request)} its body.
    """

    def __init__(self, console, active: str, load, render, title, post=None) -> None:
        super().__init__(console)
        self.active = active
        self.load = load
        self.renderBody = render
        self.title = title
        #: C{post(actions, context, request, segments)} returns (Deferred
        #: of a message, the path to go to after, or None for this page)
        self.post = post

    def error(self, status: int, message: str, request=None):
        body = pages.layout(
            "Error", self.active, pages.errorBody(status, message), clusterId=self.console.clusterId(),
            flash=getattr(request, "consoleFlash", None),
        )
        return status, b"text/html; charset=utf-8", body.encode("utf-8")

    def render_GET(self, request):
        parts = _segments(request)
        source = self.console.source
        sessions = self.console.sessions
        session = sessions.find(request) or sessions.start(request, None)
        loginRequired = self.console.loginRequired()
        if loginRequired and not session.principal:
            from urllib.parse import quote

            request.setResponseCode(303)
            request.setHeader(b"location", b"/login?next=" + quote(request.uri.decode("ascii", "replace"), safe="").encode())
            return b""
        flash = request.consoleFlash = session.takeFlash()
        try:
            d = self.load(source, self.context(request, session), request, parts)
        except ConsoleHTTPError as e:
            status, contentType, body = self.error(e.status, e.message, request)
            request.setResponseCode(status)
            self._headers(request, contentType)
            return body

        def render(data):
            title = self.title(data, request, parts)
            body = pages.layout(
                title, self.active, self.renderBody(data, request, session.csrf),
                clusterId=self.console.clusterId(), flash=flash,
                who=session.user if loginRequired else None,
                logout=pages.logoutForm(session.csrf) if loginRequired else "",
            )
            return 200, b"text/html; charset=utf-8", body.encode("utf-8")

        return self.answer(request, d, render)

    def render_POST(self, request):
        """
        An action: its form carries the session's CSRF token; the answer is
        a redirect (303) to the page to show next, with what happened.
        """
        session = self.console.sessions.find(request)
        if self.console.loginRequired() and (session is None or not session.principal):
            session = None
        if self.post is None or not checkCsrf(session, request):
            status, contentType, body = self.error(403, "This form expired or did not come from this console: reload the page and try again")
            request.setResponseCode(status)
            self._headers(request, contentType)
            return body
        parts = _segments(request)
        here = request.path.decode("utf-8", "surrogateescape")
        try:
            d, after = self.post(self.console.actions, self.context(request, session), request, parts)
        except ConsoleHTTPError as e:
            from twisted.internet.defer import fail

            d, after = fail(e), None

        def done(message):
            session.flash = ("ok", message)
            return after or here

        def failed(failure):
            if failure.check(ConsoleHTTPError):
                session.flash = ("err", failure.value.message)
            else:
                log.failure("Console action {uri} failed", failure, uri=request.uri)
                session.flash = ("err", "The action failed (see the broker's log)")
            return here

        d.addCallbacks(done, failed)
        return self.answer(request, d, lambda target: _redirect(request, target))


def _redirect(request, target: str):
    location = _location(target)
    request.setHeader(b"location", location)
    return 303, b"text/plain; charset=utf-8", b"see " + location


def _location(target: str) -> bytes:
    """
    C{target} as a C{Location}: anything outside printable ASCII (a path
    with a non-ASCII name) percent-encoded, what is already escaped kept.
    """
    from urllib.parse import quote

    return quote(target.encode("utf-8", "surrogateescape"), safe="/?&=%:;,+@!$'()*~#").encode("ascii")


def _form(request, name: str, default: str = "") -> str:
    return _arg(request, name, default)


def _formInt(request, name: str, default=None):
    text = _arg(request, name).strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConsoleHTTPError(400, f"{name} must be a number, not {text!r}") from None


def _confirmed(request, expected: str) -> None:
    if _arg(request, "confirm") != expected:
        raise ConsoleHTTPError(400, f"Not done: type {expected!r} to confirm")


def _postTopics(actions, context, request, parts):
    from urllib.parse import quote

    from kafkatwist.console.actions import parsePairs

    action = _arg(request, "action")
    if not parts and action == "create":
        name = _arg(request, "name").strip()
        d = actions.createTopic(
            context, name, _formInt(request, "partitions", -1), _formInt(request, "replicationFactor", -1),
            parsePairs(_arg(request, "configs"), "configs"),
        )
        return d, "/topics/" + quote(name, safe="")
    if len(parts) != 1:
        raise ConsoleHTTPError(404, "No such action")
    name = parts[0]
    if action == "delete":
        _confirmed(request, name)
        return actions.deleteTopic(context, name), "/topics"
    if action == "partitions":
        return actions.addPartitions(context, name, _formInt(request, "count", 0)), None
    if action == "config":
        key = _arg(request, "key").strip()
        if not key:
            raise ConsoleHTTPError(400, "Which config?")
        value = None if _arg(request, "reset") else _arg(request, "value")
        return actions.alterConfig(context, name, key, value), None
    if action == "produce":
        key = _arg(request, "key")
        headers = [(k, v.encode("utf-8")) for k, v in parsePairs(_arg(request, "headers"), "headers")]
        return actions.produce(
            context, name, _formInt(request, "partition"), key.encode("utf-8") if key else None,
            _arg(request, "value").encode("utf-8"), headers,
        ), None
    raise ConsoleHTTPError(400, f"unknown action {action!r}")


def _postGroups(actions, context, request, parts):
    from kafkatwist.console.messages import parseTimestamp

    if len(parts) != 1:
        raise ConsoleHTTPError(404, "No such action")
    groupId = parts[0]
    action = _arg(request, "action")
    if action == "delete":
        _confirmed(request, groupId)
        return actions.deleteGroup(context, groupId), "/groups"
    if action == "reset":
        strategy = _arg(request, "strategy")
        text = _arg(request, "value").strip()
        value = None
        if text:
            try:
                value = parseTimestamp(text) if strategy == "timestamp" else int(text)
            except ValueError:
                raise ConsoleHTTPError(400, f"{text!r} is not an offset or a timestamp") from None
        topic = _arg(request, "topic").strip() or None
        return actions.resetOffsets(
            context, groupId, strategy, topic, _formInt(request, "partition"), value
        ), None
    raise ConsoleHTTPError(400, f"unknown action {action!r}")


def _loadTopics(source, context, request, parts):
    if not parts:
        return source.topics(context, _arg(request, "q"))
    if len(parts) == 1:
        return source.topic(context, parts[0])
    if len(parts) == 2 and parts[1] == "messages":
        return source.messages(context, parts[0], **messageArgs(request))
    raise ConsoleHTTPError(404, "No such page")


def _renderTopics(data, request, csrf):
    if "records" in data:
        return pages.messages(data, {k: _arg(request, k) for k in ("partition", "mode", "offset", "timestamp", "format")})
    if "configs" in data:
        return pages.topic(data, csrf)
    return pages.topics(data, _arg(request, "q"), csrf)


def _one(parts) -> str:
    if len(parts) != 1:
        raise ConsoleHTTPError(404, "No such page")
    return parts[0]


def _none(parts) -> None:
    if parts:
        raise ConsoleHTTPError(404, "No such page")


class Static(Resource):
    isLeaf = True
    FILES = {
        b"console.css": (b"text/css; charset=utf-8", CSS.encode("utf-8")),
        b"console.js": (b"text/javascript; charset=utf-8", JS.encode("utf-8")),
    }

    def render_GET(self, request):
        entry = self.FILES.get(request.postpath[0] if len(request.postpath) == 1 else b"")
        if entry is None:
            request.setResponseCode(404)
            return b"not found"
        request.setHeader(b"content-type", entry[0])
        request.setHeader(b"x-content-type-options", b"nosniff")
        request.setHeader(b"cache-control", b"max-age=300")
        return entry[1]


class LoginResource(_Base):
    """
    /login: a user name and password of the broker's SASL users (only
    when an authorizer is configured); /logout (POST) ends the session.
    """

    def error(self, status: int, message: str, request=None):
        return status, b"text/html; charset=utf-8", pages.loginPage("", "", message).encode("utf-8")

    def _page(self, request, status: int, csrf: str, message: str = "", user: str = ""):
        request.setResponseCode(status)
        self._headers(request, b"text/html; charset=utf-8")
        return pages.loginPage(csrf, _safeNext(_arg(request, "next")), message, user).encode("utf-8")

    def render_GET(self, request):
        if not self.console.loginRequired():
            return _seeOther(request, "/")
        sessions = self.console.sessions
        session = sessions.find(request) or sessions.start(request, None)
        return self._page(request, 200, session.csrf)

    def render_POST(self, request):
        from kafkatwist.console.login import checkPassword

        if not self.console.loginRequired():
            return _seeOther(request, "/")
        session = self.console.sessions.find(request)
        if not checkCsrf(session, request):
            fresh = self.console.sessions.start(request, None)
            return self._page(request, 403, fresh.csrf, "This form expired: try again")
        user = _arg(request, "username")
        checked = self.console.source.onHandlerThread(
            checkPassword, self.console.broker.scramCredentials, user, _arg(request, "password")
        )
        gone = []
        request.notifyFinish().addErrback(lambda _: gone.append(True))

        def then(principal):
            if gone:
                return
            if principal is None:
                body = self._page(request, 401, session.csrf, "Invalid username or password", user)
            else:
                self.console.sessions.start(request, principal, user)
                body = _seeOther(request, _safeNext(_arg(request, "next")) or "/")
            request.write(body)
            request.finish()

        def failed(failure):
            log.failure("Console login failed", failure)
            if not gone:
                request.write(self._page(request, 500, session.csrf, "Login failed (see the broker's log)"))
                request.finish()

        checked.addCallbacks(then, failed)
        return NOT_DONE_YET


class LogoutResource(_Base):
    def render_POST(self, request):
        session = self.console.sessions.find(request)
        if checkCsrf(session, request):
            self.console.sessions.end(session)
        return _seeOther(request, "/login" if self.console.loginRequired() else "/")


def _seeOther(request, target: str) -> bytes:
    request.setResponseCode(303)
    request.setHeader(b"location", _location(target))
    return b""


def _safeNext(target: str) -> str:
    """
    Where to go after the login: a path on this listener only (browsers
    drop tabs and newlines and read a backslash as a slash, so C{/\\t/evil}
    would leave it: any of them refuses the target).
    """
    if (
        not target.startswith("/") or target.startswith("//") or not target.isascii()
        or any(c <= " " or c in "\\\x7f" for c in target)
    ):
        return ""
    return target


class ConsoleRoot(Resource):
    """
    The HTTP listener's root: the console's pages, its API and assets, and
    whatever else is put beside them (C{/metrics}).
    """

    def __init__(self, console) -> None:
        super().__init__()
        self.console = console
        self.putChild(b"api", ApiResource(console))
        self.putChild(b"static", Static())
        self.putChild(b"topics", PageResource(
            console, "topics", _loadTopics, _renderTopics,
            lambda data, r, p: (p[0] + (" · messages" if len(p) > 1 else "")) if p else "Topics",
            post=_postTopics,
        ))
        self.putChild(b"groups", PageResource(
            console, "groups",
            lambda s, c, r, p: s.group(c, _one(p)) if p else s.groups(c, _arg(r, "q")),
            lambda data, r, csrf: pages.group(data, csrf) if "offsets" in data else pages.groups(data, _arg(r, "q")),
            lambda data, r, p: p[0] if p else "Consumer groups",
            post=_postGroups,
        ))
        self.putChild(b"login", LoginResource(console))
        self.putChild(b"logout", LogoutResource(console))
        self.putChild(b"security", PageResource(
            console, "security",
            lambda s, c, r, p: (_none(p), s.security(c))[1],
            lambda data, r, csrf: pages.security(data),
            lambda data, r, p: "Security",
        ))
        self._overview = PageResource(
            console, "overview",
            lambda s, c, r, p: (_none(p), s.brokers(c, withHistory=True))[1],
            lambda data, r, csrf: pages.overview(data),
            lambda data, r, p: "Overview",
        )

    def getChild(self, path, request):
        if path == b"":
            return self._overview
        return super().getChild(path, request)
