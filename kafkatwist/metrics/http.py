"""
The Prometheus scrape endpoint, served by twisted.web on the main reactor
(it is the Acceptors' reactor, not any Processor's).
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


def metricsSite(broker, server) -> Site:
    root = Resource()
    root.putChild(b"metrics", MetricsResource(broker, server))
    site = Site(root)
    site.displayTracebacks = False
    return site
