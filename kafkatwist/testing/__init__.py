"""
Kafka for tests: a real kafkatwist broker, or ZooKeeper plus N brokers, in a
temporary directory on free loopback ports, started from Python::

    from kafkatwist.testing import Broker, Cluster

    with Broker() as broker:
        Producer({"bootstrap.servers": broker.bootstrap_servers})

    with Cluster(brokers=3) as cluster:
        cluster.kill(cluster.leader("orders", 0))

With pytest, the C{kafkatwist} plugin (loaded by entry point once the
package is installed) gives the fixtures C{kafkatwist_broker} and
C{kafkatwist_cluster}; see docs/testing.md.
"""

from kafkatwist.testing.broker import Broker, BrokerStartError
from kafkatwist.testing.cluster import BrokerSet, Cluster, clusterDefaults
from kafkatwist.testing.pki import Pki, makePki
from kafkatwist.testing.wait import waitUntil
from kafkatwist.testing.zookeeper import ZooKeeper, ZooKeeperUnavailable

__all__ = [
    "Broker", "BrokerSet", "BrokerStartError", "Cluster", "Pki", "ZooKeeper", "ZooKeeperUnavailable",
    "clusterDefaults", "makePki", "waitUntil",
]
