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
