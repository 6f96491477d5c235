"""
A second SIGINT or SIGTERM while the broker stops logs one line; Twisted's
own handler would call C{reactor.stop} again and log a critical
C{ReactorNotRunning} traceback.
"""

from __future__ import annotations

import signal

from twisted.internet import error
from twisted.logger import globalLogPublisher

from kafkatwist.service import _stopOnce


class Reactor:
    def __init__(self):
        self.stops = 0

    def _stop(self):
        if self.stops:
            raise error.ReactorNotRunning("Can't stop reactor that isn't running.")
        self.stops += 1

    def sigInt(self, number, frame=None):
        self._stop()

    def sigTerm(self, number, frame=None):
        self._stop()

    def sigBreak(self, number, frame=None):
        self._stop()


def test_a_second_signal_while_stopping_is_one_line():
    reactor = Reactor()
    _stopOnce(reactor)
    lines = []
    globalLogPublisher.addObserver(lines.append)
    try:
        reactor.sigInt(signal.SIGINT)
        reactor.sigInt(signal.SIGINT)
        reactor.sigTerm(signal.SIGTERM)
    finally:
        globalLogPublisher.removeObserver(lines.append)
    assert reactor.stops == 1
    already = [e for e in lines if "already stopping" in e.get("log_format", "")]
    assert len(already) == 2
