"""
BrokerService start-up ordering, with the reactor and the broker stubbed.
"""

from types import SimpleNamespace

from twisted.logger import globalLogPublisher

from kafkatwist.config import BrokerConfig
from kafkatwist.server.sdnotify import Notifier
from kafkatwist.service import BrokerService
from tests.fakeservices import FakeServices


class RecordingReactor:
    def __init__(self) -> None:
        self.whenRunning = []

    def callWhenRunning(self, f, *args, **kw):
        self.whenRunning.append((f, args, kw))


def preparedService(reactor):
    config = BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0"})
    service = BrokerService(config, reactor, logManagerFactory=None, notifier=Notifier({}))
    service.server = SimpleNamespace(
        start=lambda: None, boundPorts=lambda: {"PLAINTEXT": 1234}, handlerPool=SimpleNamespace(numThreads=2)
    )
    service.broker = FakeServices(config, clusterId="c", advertisedListeners=config.advertisedListeners)
    return service


def test_started_is_logged_once_the_reactor_runs(monkeypatch):
    """
    twistd starts services before the reactor installs its signal handlers:
    the "started" line waits for callWhenRunning, which runs after them.
    """
    # start-up freezes the heap for the broker's sake, not this test process's
    monkeypatch.setattr("gc.freeze", lambda: None)
    reactor = RecordingReactor()
    service = preparedService(reactor)
    seen = []
    globalLogPublisher.addObserver(seen.append)
    try:
        service.startService()
        assert not [e for e in seen if "started" in e.get("log_format", "")]
        assert len(reactor.whenRunning) == 1
        f, args, kw = reactor.whenRunning[0]
        f(*args, **kw)
        started = [e for e in seen if e.get("log_format", "").endswith("started")]
        assert len(started) == 1
    finally:
        globalLogPublisher.removeObserver(seen.append)
