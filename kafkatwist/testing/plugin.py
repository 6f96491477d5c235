"""
The C{kafkatwist} pytest plugin (entry point C{pytest11}: installed with the
package, nothing to import):

C{kafkatwist_broker}
    A broker shared by the whole session (started on first use, about a
    second).  A test marked C{@pytest.mark.kafkatwist(...)} gets a fresh
    one of its own instead, with the marker's options (C{overrides},
    C{tls}, C{sasl}; those of L{kafkatwist.testing.Broker}).
C{kafkatwist_cluster}
    ZooKeeper and three brokers, shared by the session likewise (a broker
    a test killed or paused is brought back after it); the marker gives a
    fresh one (options of L{kafkatwist.testing.Cluster}: C{brokers},
    C{overrides}, ...).
C{kafkatwist_broker_factory}, C{kafkatwist_cluster_factory}
    C{make(**options)} starts one more, stopped after the test.
C{kafkatwist_session_broker}, C{kafkatwist_session_cluster}
    The shared ones, for fixtures of a wider scope.
C{kafkatwist_zookeeper}
    The session's ZooKeeper (every cluster takes a chroot of it).

Each has C{.bootstrap_servers}.  Clusters need ZooKeeper (Debian's
package, installed on first use when running as root): without it their
tests are skipped with one line saying why.  When a test fails, its
brokers' logs are kept and their path is shown with the failure.
"""

from __future__ import annotations

import pytest

from kafkatwist.testing.broker import TEST_DEFAULTS, Broker
from kafkatwist.testing.cluster import Cluster
from kafkatwist.testing.zookeeper import ZooKeeper, ZooKeeperUnavailable

MARKER = "kafkatwist"
#: what a user's broker changes from Kafka's defaults (L{TEST_DEFAULTS})
USER_DEFAULTS = TEST_DEFAULTS


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{MARKER}(**options): a fresh kafkatwist_broker / kafkatwist_cluster for this test, "
        "started with these options (overrides={{...}}, tls=True, sasl={{user: password}}, "
        "brokers=N)",
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for value in list(getattr(item, "funcargs", {}).values()):
        for thing in _started(value):
            thing.failed = True
            report.sections.append(("kafkatwist", f"logs kept in {thing.directory}"))


def _started(value):
    if isinstance(value, (Broker, Cluster)):
        return [value]
    return list(getattr(value, "_kafkatwist_made", ()))


def _options(request) -> dict | None:
    marker = request.node.get_closest_marker(MARKER)
    if marker is None:
        return None
    return dict(marker.kwargs)


# -- ZooKeeper ---------------------------------------------------------------

_zookeeperUnavailable: list[str] = []


@pytest.fixture(scope="session")
def kafkatwist_zookeeper(tmp_path_factory):
    """
    One ZooKeeper for the session; each cluster takes a chroot of it.
    """
    if _zookeeperUnavailable:
        pytest.skip(_zookeeperUnavailable[0])
    zookeeper = ZooKeeper(str(tmp_path_factory.mktemp("zookeeper")))
    try:
        zookeeper.start()
    except ZooKeeperUnavailable as e:
        _zookeeperUnavailable.append(f"kafkatwist cluster skipped: {e}")
        pytest.skip(_zookeeperUnavailable[0])
    try:
        yield zookeeper
    finally:
        zookeeper.stop()


# -- brokers -----------------------------------------------------------------

class _Factory:
    def __init__(self, make):
        self._make = make
        self._kafkatwist_made: list = []

    def __call__(self, **options):
        thing = self._make(**options)
        self._kafkatwist_made.append(thing)
        return thing


def _newBroker(tmp_path_factory, **options) -> Broker:
    overrides = {**USER_DEFAULTS, **(options.pop("overrides", None) or {})}
    broker = Broker(str(tmp_path_factory.mktemp("kafkatwist-broker")), overrides, **options)
    try:
        return broker.start()
    except BaseException:
        broker.failed = True
        broker.stop()
        raise


@pytest.fixture(scope="session")
def kafkatwist_session_broker(tmp_path_factory):
    """
    The broker the session shares.
    """
    broker = _newBroker(tmp_path_factory)
    yield broker
    broker.stop()


@pytest.fixture
def kafkatwist_broker_factory(tmp_path_factory):
    """
    C{make(**options)}: a new broker (options of L{Broker}: C{overrides},
    C{tls}, C{sasl}, ...), stopped after the test.
    """
    factory = _Factory(lambda **options: _newBroker(tmp_path_factory, **options))
    yield factory
    for broker in factory._kafkatwist_made:
        broker.stop()


@pytest.fixture
def kafkatwist_broker(request):
    """
    The session's broker, or a fresh one for a test marked
    C{@pytest.mark.kafkatwist(...)}.
    """
    options = _options(request)
    if options is None:
        return request.getfixturevalue("kafkatwist_session_broker")
    options.pop("brokers", None)
    return request.getfixturevalue("kafkatwist_broker_factory")(**options)


# -- clusters ----------------------------------------------------------------

def _newCluster(zookeeper, tmp_path_factory, **options) -> Cluster:
    options.setdefault("brokers", 3)
    cluster = Cluster(zookeeper=zookeeper, directory=str(tmp_path_factory.mktemp("kafkatwist-cluster")),
                      **options)
    return cluster.start()


@pytest.fixture(scope="session")
def kafkatwist_session_cluster(kafkatwist_zookeeper, tmp_path_factory):
    """
    The three-broker cluster the session shares.
    """
    cluster = _newCluster(kafkatwist_zookeeper, tmp_path_factory)
    yield cluster
    cluster.stop()


@pytest.fixture
def kafkatwist_cluster_factory(request, tmp_path_factory):
    """
    C{make(**options)}: a new cluster (options of L{Cluster}: C{brokers},
    C{overrides}, C{tls}, C{sasl}), on the session's ZooKeeper, stopped
    after the test.
    """
    zookeeper = request.getfixturevalue("kafkatwist_zookeeper")
    factory = _Factory(lambda **options: _newCluster(zookeeper, tmp_path_factory, **options))
    yield factory
    for cluster in factory._kafkatwist_made:
        cluster.stop()


@pytest.fixture
def kafkatwist_cluster(request):
    """
    The session's cluster, or a fresh one for a test marked
    C{@pytest.mark.kafkatwist(...)}.  A broker of the shared cluster that
    the test killed, stopped or paused is brought back after it.
    """
    options = _options(request)
    if options is not None:
        yield request.getfixturevalue("kafkatwist_cluster_factory")(**options)
        return
    cluster = request.getfixturevalue("kafkatwist_session_cluster")
    yield cluster
    heal(cluster)


def heal(cluster: Cluster) -> None:
    """
    Resume paused brokers and start stopped ones, then wait until the
    cluster is whole again.
    """
    paused = [n for n, b in cluster.brokers.items() if b.paused]
    cluster.resume()
    down = [n for n in range(1, cluster.count + 1) if n not in cluster.alive()]
    for n in down:
        cluster.brokers[n].pinPorts()
        cluster.brokers[n].start()
    if paused or down:
        cluster.waitReady()
