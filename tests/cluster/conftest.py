import signal

import pytest

from kafkatwist.testing import ZooKeeper, ZooKeeperUnavailable
from tests.cluster.helpers import ClusterUnderTest


@pytest.fixture
def cluster(zookeeper, tmp_path):
    """
    Three brokers on the session's ZooKeeper, not started: the test starts
    them (C{cluster.startBroker(n, **overrides)}, or C{startAll}).
    """
    c = ClusterUnderTest(zookeeper, tmp_path)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def runningCluster(zookeeper, tmp_path_factory):
    """
    Three brokers started once for the tests of a module that leave them
    running (tests that kill, stop or pause a broker take C{cluster}).
    """
    c = ClusterUnderTest(zookeeper, tmp_path_factory.mktemp("cluster"), "shared").startAll()
    yield c
    c.stop()


@pytest.fixture
def ownZooKeeper(tmp_path):
    """
    A ZooKeeper of the test's own, to pause or stop (C{.server.process}),
    resumed and stopped afterwards.
    """
    zookeeper = ZooKeeper(str(tmp_path / "zookeeper"))
    try:
        zookeeper.start()
    except ZooKeeperUnavailable as e:
        pytest.skip(f"cluster tests skipped: {e}")
    try:
        yield zookeeper
    finally:
        process = zookeeper.server.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGCONT)
        zookeeper.stop()
