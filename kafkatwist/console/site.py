"""
The HTTP listener's site (C{metrics.http.listener}): the web console at
C{/}, C{/api/} and below, with Prometheus' C{/metrics}
(L{kafkatwist.server.http}) beside it.
"""

from __future__ import annotations

from twisted.web.server import Site

from kafkatwist.server.http import MetricsResource


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
    site = Site(root)
    site.displayTracebacks = False
    site.console = console
    console.start()
    return site
