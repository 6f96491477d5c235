"""
Fetch handlers driven in process: the fetch version they speak, fake services with an idle
limit, and a context whose answers come later on a clock of the test's.
"""

from __future__ import annotations

from kafkatwist.util.clock import ThreadSafeClock
from tests.unit.fakes import RespondsLater
from tests.fakeservices import FakeServices


VERSION = 12


def fetchServices(maxIdleMs=600_000):
    return FakeServices({"connections.max.idle.ms": maxIdleMs})


class Context(RespondsLater):
    apiVersion = VERSION

    def __init__(self, clock):
        self.clock = ThreadSafeClock(clock)
