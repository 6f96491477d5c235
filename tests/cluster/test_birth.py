"""
Issue 30, item 2: brokers started in the same instant on an empty
ZooKeeper (as C{make cluster} does) form one cluster.  The loser of the
race to create C{/cluster/id} must never have written its own generated id
into C{meta.properties} (it then refused to start: "cluster.id ... differs
from ... in meta.properties"): the file gets ZooKeeper's id only.

C{KAFKATWIST_BIRTH_ROUNDS} rounds (3 by default; the issue's bar is 20),
each with its own chroot and empty data directories.
"""

from __future__ import annotations

import os


from kafkatwist.cluster import zkdata as Z
from kafkatwist.testing import Broker, BrokerStartError, waitUntil

BROKERS = 3


def startTogether(brokers: list[Broker], timeout: float = 90.0) -> None:
    """
    Start every broker at once (the processes launched back to back, no
    waiting in between), then wait until each has started or exited.
    """
    for broker in brokers:
        broker.launch()

    def settled(broker):
        try:
            return broker.started()
        except BrokerStartError:
            return True

    waitUntil(lambda: all(settled(b) for b in brokers), timeout, "every broker started or exited")


def test_brokers_started_at_once_form_one_cluster(zookeeper, tmp_path):
    from kazoo.client import KazooClient

    rounds = int(os.environ.get("KAFKATWIST_BIRTH_ROUNDS", "3"))
    failures = []
    for n in range(rounds):
        connect = zookeeper.connect("birth")
        brokers = [
            Broker(str(tmp_path / f"round{n}" / f"broker{i}"), {
                "node.id": str(i), "zookeeper.connect": connect, "zookeeper.session.timeout.ms": "6000",
                "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
            })
            for i in range(1, BROKERS + 1)
        ]
        try:
            startTogether(brokers)
            exited = {i + 1: b.output()[-400:] for i, b in enumerate(brokers) if b.process.poll() is not None}
            if exited:
                failures.append((n, exited))
                continue
            zk = KazooClient(connect)
            zk.start()
            try:
                clusterId = Z.decodeClusterId(zk.get(Z.CLUSTER_ID)[0])
            finally:
                zk.stop()
                zk.close()
            for broker in brokers:
                with open(os.path.join(broker.directory, "data", "meta.properties")) as f:
                    assert f"cluster.id={clusterId}\n" in f.read()
                text = broker.output()
                assert f"of cluster {clusterId} started" in text
                assert "Traceback" not in text and "Unhandled" not in text, text[-2000:]
        finally:
            # Nothing here is about stopping: kill -9 (a round has its own
            # chroot and directories, nothing of it is read again).
            for broker in brokers:
                broker.kill()
    assert not failures, f"{len(failures)} of {rounds} rounds did not form a cluster: {failures[:2]}"
