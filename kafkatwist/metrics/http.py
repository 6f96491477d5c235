"""
The HTTP listener (C{metrics.http.listener}), served by twisted.web on the
main reactor (it is the Acceptors' reactor, not any Processor's): the
Prometheus scrape endpoint at C{/metrics} and the web console
(L{kafkatwist.console}) at C{/} and C{/api/}.
"""

from twisted.web.resource import NoResource, Resource
from twisted.web.server import Site

from kafkatwist.metrics.stats import render


class MetricsResource(Resource):
    isLeaf = True

    def __init__(self, broker, server) -> None:
        super().__init__()
        self.broker = broker
        self.socketServer = server

    def render_GET(self, request):
        if request.postpath:
            # A leaf sees the rest of the path: /metrics/x is not the metrics.
            return NoResource().render(request)
        request.setHeader(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")
        return render(self.broker, self.socketServer).encode("utf-8")


def metricsSite(broker, server, reactor=None) -> Site:
    """
    @return: the site; its C{console} is started and must be stopped with
        the listener.
    """
    from kafkatwist.console import Console
    from kafkatwist.console.web import ConsoleRoot

    if reactor is None:
        from twisted.internet import reactor
    console = Console(broker, server, reactor)
    root = ConsoleRoot(console)
    root.putChild(b"metrics", MetricsResource(broker, server))
    site = Site(root)
    site.displayTracebacks = False
    site.console = console
    console.start()
    return site
