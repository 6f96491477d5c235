"""
The Prometheus scrape endpoint, C{/metrics} on the HTTP listener
(C{metrics.http.listener}), served by twisted.web on the main reactor (it
is the Acceptors' reactor, not any Processor's).  The listener's site, with
the web console beside it, is L{kafkatwist.console.site.httpSite}.
"""

from twisted.web.resource import NoResource, Resource

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


def parseHttpListener(address: str) -> tuple[bool, str, int]:
    """
    C{metrics.http.listener}: C{host:port}, C{http://host:port} or
    C{https://host:port} (TLS with the broker's C{ssl.keystore.location}).

    @return: (TLS, host, port).
    """
    tls = address.startswith("https://")
    if tls:
        address = address[len("https://"):]
    elif address.startswith("http://"):
        address = address[len("http://"):]
    host, _, port = address.rpartition(":")
    return tls, host.strip("[]"), int(port)
