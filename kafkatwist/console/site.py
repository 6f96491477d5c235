"""
The HTTP listener's site (C{metrics.http.listener}): the web console at
C{/}, C{/api/} and below, with Prometheus' C{/metrics}
(L{kafkatwist.server.http}) beside it.
"""

from __future__ import annotations

from io import BytesIO

from twisted.web.server import Request, Site

from kafkatwist.server.http import MetricsResource

#: the largest request body the listener reads (its forms are a few KB)
MAX_BODY = 1024 * 1024

_TOO_LARGE = (
    b"HTTP/1.1 413 Content Too Large\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: 24\r\n"
    b"Connection: close\r\n\r\n"
    b"Request body too large.\n"
)


class LimitedRequest(Request):
    """
    A request whose body is at most L{MAX_BODY} bytes, kept in memory: a
    larger one is answered 413 and its connection closed as soon as its
    declared length is known, or as soon as a chunked body grows past it,
    before any resource (login, CSRF check) sees it.
    """

    tooLarge = False
    _received = 0

    def gotLength(self, length):
        if length is not None and length > MAX_BODY:
            self._refuse()
        # never Twisted's temporary file (disk I/O on the reactor thread)
        self.content = BytesIO()

    def handleContentChunk(self, data):
        if self.tooLarge:
            return
        self._received += len(data)
        if self._received > MAX_BODY:
            self._refuse()
            return
        self.content.write(data)

    def requestReceived(self, command, path, version):
        if self.tooLarge:
            return
        super().requestReceived(command, path, version)

    def _refuse(self) -> None:
        if self.tooLarge:
            return
        self.tooLarge = True
        self.channel.transport.write(_TOO_LARGE)
        self.channel.loseConnection()


def httpSite(broker, server, reactor, secure: bool = False) -> Site:
    """
    @param secure: the listener is HTTPS (the console's cookies are then
        C{Secure}).
    @return: the site; its C{console} is started and must be stopped with
        the listener.
    """
    from kafkatwist.console import Console
    from kafkatwist.console.web import ConsoleRoot

    console = Console(broker, server, reactor, secure=secure)
    root = ConsoleRoot(console)
    root.putChild(b"metrics", MetricsResource(broker, server))
    site = Site(root, requestFactory=LimitedRequest)
    site.displayTracebacks = False
    site.console = console
    console.start()
    return site
