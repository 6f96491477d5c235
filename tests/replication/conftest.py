import pytest

from tests.replication.cluster import StaticCluster


@pytest.fixture
def cluster(tmp_path):
    made = []

    def make(count=3, overrides=None):
        c = StaticCluster(tmp_path, count, overrides).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()
