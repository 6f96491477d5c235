import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for path in (ROOT, os.path.join(ROOT, "spark")):
    if path not in sys.path:
        sys.path.insert(0, path)

from tests.broker import BrokerProcess  # noqa: E402
from tests.certs import makePki  # noqa: E402


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return makePki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def brokerFactory(tmp_path):
    started = []

    def make(overrides=None, **kw):
        broker = BrokerProcess(str(tmp_path / f"broker{len(started)}"), overrides, **kw)
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """
    One PLAINTEXT broker shared by a module's tests.
    """
    b = BrokerProcess(str(tmp_path_factory.mktemp("broker")))
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """
    A standalone ZooKeeper for the session (L{tests.zookeeper}); its
    C{connect(name)} gives each test a chroot of its own.
    """
    from tests.zookeeper import zookeeperSession

    yield from zookeeperSession(tmp_path_factory)
