import pytest

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
