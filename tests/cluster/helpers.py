"""
What the cluster tests share: three brokers on the session's ZooKeeper
(L{kafkatwist.testing.Cluster}) with the settings these tests expect,
reading a topic's partitions as clients see them, and CPU-bound processes
to run beside them (the fail-over soak and bench/failover.py).
"""

from __future__ import annotations

import subprocess
import sys

from kafkatwist.testing import Cluster, waitUntil

#: the brokers' ZooKeeper session: short, so a killed broker is noticed fast
SESSION_MS = 3000
SETTINGS = {
    "zookeeper.session.timeout.ms": str(SESSION_MS),
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "controlled.shutdown.retry.backoff.ms": "1000",
    "controlled.shutdown.max.retries": "1",
    # librdkafka's admin client asks for topics with auto-creation
    # allowed: a deleted topic would come back.
    "auto.create.topics.enable": "false",
}
#: replication settings of the fail-over tests and the cluster benchmark:
#: a follower out of the ISR after 3 s, fetches answered within 200 ms
REPLICATION = {
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.wait.max.ms": "200",
    "log.cleaner.enable": "false",
}


class ClusterUnderTest(Cluster):
    """
    A L{Cluster} whose brokers the test starts (L{startBroker}), with
    L{SETTINGS}.
    """

    def __init__(self, zookeeper, directory, name: str = "brokers", overrides=None) -> None:
        super().__init__(3, zookeeper=zookeeper, directory=str(directory), name=name,
                         overrides={**SETTINGS, **(overrides or {})})

    def admin(self, *ids):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap(*ids)})

    def startAll(self, timeout: float = 60.0, **overrides) -> "ClusterUnderTest":
        """
        Start the three brokers side by side (with C{overrides}) and wait
        until each knows the others.
        """
        for n in range(1, self.count + 1):
            self.broker(n, **overrides)
        return self.start(timeout)


def partitions(admin, topic):
    """
    partition -> (leader, replicas, ISR) as C{admin}'s broker answers, or
    C{None} when the topic is unknown.
    """
    md = admin.list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        return None
    return {p.id: (p.leader, tuple(p.replicas), tuple(p.isrs)) for p in t.partitions.values()}


def createPlaced(cluster, topic, assignment, configs=None):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as PlainNewTopic

    plain = KafkaAdminClient(bootstrap_servers=cluster.bootstrap())
    try:
        plain.create_topics([PlainNewTopic(topic, -1, -1, replica_assignments=assignment,
                                           topic_configs=configs or {})])
    finally:
        plain.close()


def startThree(cluster, **overrides):
    for i in (1, 2, 3):
        cluster.startBroker(i, **overrides)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    return admin


def startHogs(count: int) -> list[subprocess.Popen]:
    """
    C{count} CPU-bound processes beside the cluster (the load under which
    issue 30's fail-over once did not come); L{stopHogs} ends them.
    """
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]


def stopHogs(hogs: list[subprocess.Popen]) -> None:
    for hog in hogs:
        hog.kill()
    for hog in hogs:
        hog.wait()


def agreedLeader(cluster, topic: str, brokers=(1, 2, 3)) -> int:
    """
    The leader of C{topic}'s partition 0 once every broker's metadata names
    the same one: a broker just back from a pause may still name the one
    it knew (the fault would then hit a follower).
    """
    admins = [cluster.admin(i) for i in brokers]

    def agreed():
        leaders = {partitions(admin, topic)[0][0] for admin in admins}
        return leaders.pop() if len(leaders) == 1 and leaders <= set(brokers) else None

    return waitUntil(agreed, timeout=120, what=f"the brokers agreeing on {topic}-0's leader")


def controllerId(admin, brokers=(1, 2, 3)) -> int:
    """
    The controller C{admin}'s metadata names, once it names one of
    C{brokers}: between a controller's session ending and the next one's
    election, a broker answers -1 (no controller known).
    """

    def named():
        controller = admin.list_topics(timeout=10).controller_id
        return controller if controller in brokers else None

    return waitUntil(named, timeout=60, what="a controller")
