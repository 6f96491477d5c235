"""
The web console (issue 28): HTML pages and the JSON they are built from,
served on C{metrics.http.listener} beside C{/metrics}.

  - L{kafkatwist.console.local}: asks the broker's own request handlers, in
    process, as a principal (the same code paths and ACL checks as the wire);
  - L{kafkatwist.console.source}: the one adapter that reads the broker's
    services (what each page shows, as JSON-ready dicts);
  - L{kafkatwist.console.history}: a few minutes of rates kept in memory;
  - L{kafkatwist.console.web}: the twisted.web resources (/, /api/...);
  - L{kafkatwist.console.pages}: the HTML, every name and byte escaped.
"""

from __future__ import annotations

import time


class Console:
    """
    The console of one broker: its figures over time and its data source.

    @param broker: the broker.
    @param server: the L{kafkatwist.network.server.SocketServer}.
    @param reactor: the main reactor.
    """

    def __init__(self, broker, server, reactor, secure: bool = False) -> None:
        from kafkatwist.console.actions import ConsoleActions
        from kafkatwist.console.history import History
        from kafkatwist.console.session import Sessions
        from kafkatwist.console.source import ConsoleSource

        self.broker = broker
        self.server = server
        self.reactor = reactor
        self.history = History(broker, server, clock=reactor)
        self.source = ConsoleSource(broker, reactor, self.history, startedAt=time.time())
        self.actions = ConsoleActions(self.source)
        #: served over TLS (HTTPS)
        self.secure = secure
        self.sessions = Sessions(secure=secure)

    def loginRequired(self) -> bool:
        """
        With an authorizer the console asks for a login (as the Kafka port
        asks for SASL); without one it is as open as a PLAINTEXT port.
        """
        return self.broker.authorizer is not None

    def clusterId(self) -> str | None:
        return self.broker.clusterId

    def start(self) -> None:
        self.history.start()

    def stop(self) -> None:
        self.history.stop()
