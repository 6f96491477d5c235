"""
kazoo's stdlib log records reach the broker's Twisted log as one line
each, under kazoo's logger name (issue 30, item 7: they were
"[stderr#error]" lines).
"""

from __future__ import annotations

import logging

from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from kafkatwist.cluster.kazoolog import TwistedLogHandler, routeKazooLogging


def test_records_become_one_line_events():
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        routeKazooLogging()
        routeKazooLogging()  # idempotent: one handler
        kazoo = logging.getLogger("kazoo.client")
        kazoo.warning("Connection dropped: %s", "socket connection error: Connection refused")
        kazoo.info("Connecting to %s", "127.0.0.1:2181")  # below warnings: not routed
        try:
            raise ConnectionError("refused\nsecond line")
        except ConnectionError:
            kazoo.exception("Failed connecting")
    finally:
        globalLogPublisher.removeObserver(events.append)
    ours = [e for e in events if e.get("log_namespace") == "kazoo.client"]
    assert [(e["log_level"], formatEvent(e)) for e in ours] == [
        (LogLevel.warn, "Connection dropped: socket connection error: Connection refused"),
        (LogLevel.error, "Failed connecting: ConnectionError: refused second line"),
    ]
    assert sum(isinstance(h, TwistedLogHandler) for h in logging.getLogger("kazoo").handlers) == 1
    assert not logging.getLogger("kazoo").propagate
