"""
A ZooKeeper and N brokers on free loopback ports, in a directory of their
own:

    with Cluster(brokers=3) as cluster:
        cluster.bootstrap_servers
        cluster.kill(cluster.leader("orders", 0))

L{BrokerSet} is what every group of broker processes under test shares
(kill, pause, resume, restart, stop them all at once); L{Cluster} adds
ZooKeeper and the cluster's state as ZooKeeper holds it.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor

from kafkatwist.testing.broker import Broker
from kafkatwist.testing.wait import waitUntil
from kafkatwist.testing.zookeeper import ZooKeeper

__all__ = ["BrokerSet", "Cluster", "CLUSTER_DEFAULTS"]


def clusterDefaults(count: int) -> dict[str, str]:
    """
    What a cluster under test changes from Kafka's defaults: internal topics
    replicated as far as the brokers allow, few partitions (they are created
    on first use, and a test needs no more), no wait for more members before
    a group's first rebalance, a short controlled shutdown.
    """
    replicas = str(min(3, count))
    return {
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": str(min(2, count)),
        "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "zookeeper.session.timeout.ms": "6000",
        "controlled.shutdown.max.retries": "1",
        "controlled.shutdown.retry.backoff.ms": "1000",
    }


CLUSTER_DEFAULTS = clusterDefaults(3)


class BrokerSet:
    """
    Broker processes known by node id.

    @ivar brokers: node id -> L{Broker}.
    """

    def __init__(self) -> None:
        self.brokers: dict[int, Broker] = {}

    def alive(self) -> list[int]:
        """
        The node ids whose process runs (paused ones included).
        """
        return [n for n, b in self.brokers.items() if b.running()]

    def bootstrap(self, *nodeIds: int) -> str:
        """
        C{host:port,...} of these brokers (every running one by default).
        """
        nodeIds = nodeIds or tuple(self.alive())
        return ",".join(self.brokers[n].bootstrap for n in nodeIds)

    @property
    def bootstrap_servers(self) -> str:  # noqa: N802 -- the clients' name
        """
        The running brokers' addresses, for a client's C{bootstrap.servers}.
        """
        return ",".join(self.brokers[n].bootstrap_servers for n in self.alive())

    def kill(self, nodeId: int) -> None:
        """
        C{kill -9} broker C{nodeId}.
        """
        self.brokers[nodeId].kill()

    def pause(self, nodeId: int) -> None:
        """
        C{SIGSTOP} broker C{nodeId}: it keeps its sockets and its ZooKeeper
        session until the session times out, and answers nothing.
        """
        self.brokers[nodeId].pause()

    def resume(self, nodeId: int | None = None) -> None:
        """
        C{SIGCONT} broker C{nodeId} (every broker by default).
        """
        for n in ([nodeId] if nodeId is not None else list(self.brokers)):
            self.brokers[n].resume()

    def stopAll(self, timeout: float = 60.0) -> None:
        """
        Stop every broker, side by side.
        """
        running = [b for b in self.brokers.values() if b.process is not None]
        if not running:
            return
        with ThreadPoolExecutor(len(running)) as pool:
            list(pool.map(lambda b: b.stop(timeout=timeout), running))

    def logs(self) -> str:
        """
        Where each broker's log is: for a failure message.
        """
        return "\n".join(f"  broker {n}: {b.logPath}" for n, b in sorted(self.brokers.items()))


class Cluster(BrokerSet):
    """
    ZooKeeper plus C{brokers} brokers (node ids 1..N).

    @ivar zookeeper: the L{ZooKeeper} (shared or its own).
    @ivar connect: the brokers' C{zookeeper.connect}, with this cluster's
        chroot.
    @ivar directory: where the brokers keep their data and logs.
    """

    def __init__(self, brokers: int = 3, *, zookeeper: ZooKeeper | None = None,
                 directory: str | None = None, overrides: dict[str, str] | None = None,
                 tls: bool = False, sasl: dict[str, str] | bool | None = None,
                 keepLogs: bool = False, name: str = "cluster") -> None:
        """
        @param brokers: how many brokers L{start} starts.
        @param zookeeper: a running ZooKeeper to share (this cluster takes a
            chroot of it); by default the cluster starts its own.
        @param directory: where everything goes; a new temporary directory
            when C{None}, removed by L{stop} unless something failed or
            C{keepLogs} is set.
        @param overrides: broker properties for every broker (Kafka's
            names), over L{clusterDefaults}.
        @param tls: every broker also serves TLS (one CA for the cluster).
        @param sasl: user -> password: every broker serves SASL.
        """
        super().__init__()
        self.count = brokers
        self.ownsDirectory = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="kafkatwist-cluster-")
        self.directory = os.path.abspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        self.ownsZookeeper = zookeeper is None
        self.zookeeper = zookeeper or ZooKeeper(os.path.join(self.directory, "zookeeper"))
        self.name = name
        self.connect: str | None = None
        self.overrides = {**clusterDefaults(brokers), **(overrides or {})}
        self.tls = tls
        self.sasl = sasl
        self.pki = None
        self.keepLogs = keepLogs
        self.failed = False
        self._kazoo = None
        self.clusterId: str | None = None

    def _connect(self) -> str:
        if self.connect is None:
            if self.ownsZookeeper and self.zookeeper.server.process is None:
                self.zookeeper.start()
            self.connect = self.zookeeper.connect(self.name)
        return self.connect

    def broker(self, nodeId: int, **overrides) -> Broker:
        """
        Broker C{nodeId}, made (not started) on first use; C{overrides}
        change its properties from now on.
        """
        broker = self.brokers.get(nodeId)
        if broker is None:
            if self.tls and self.pki is None:
                from kafkatwist.testing.pki import makePki

                self.pki = makePki(os.path.join(self.directory, "pki"))
            if self.sasl and self.clusterId is None:
                # The users are written into each directory before the first
                # start, with the cluster's id (which ZooKeeper then keeps).
                self.clusterId = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            broker = Broker(
                os.path.join(self.directory, f"broker{nodeId}"), dict(self.overrides),
                nodeId=nodeId, zookeeper=self._connect(), tls=self.tls, sasl=self.sasl, pki=self.pki,
                clusterId=self.clusterId,
            )
            self.brokers[nodeId] = broker
        broker.overrides.update(overrides)
        return broker

    def start(self, timeout: float = 60.0) -> "Cluster":
        """
        Start ZooKeeper (unless shared) and the brokers side by side, and
        wait until every broker knows every other one and a controller.
        """
        try:
            brokers = [self.broker(n) for n in range(1, self.count + 1)]
            for broker in brokers:
                if not broker.running():
                    broker.launch()
            for broker in brokers:
                broker.waitStarted(timeout)
            self.waitReady(timeout)
        except BaseException:
            self.failed = True
            self.stop()
            raise
        return self

    def startBroker(self, nodeId: int, timeout: float = 60.0, **overrides) -> Broker:
        """
        Start (or start again) broker C{nodeId}, with C{overrides} on top of
        the cluster's, and wait until it serves.
        """
        broker = self.broker(nodeId, **overrides)
        if broker.running():
            broker.stop()
        return broker.start(timeout)

    def restart(self, nodeId: int, timeout: float = 60.0) -> Broker:
        """
        Stop broker C{nodeId} (if it still runs) and start it again on its
        data and its ports.
        """
        return self.brokers[nodeId].restart(timeout)

    def waitReady(self, timeout: float = 60.0, nodeIds=None) -> None:
        """
        Wait until each running broker's metadata lists every running
        broker and a controller.
        """
        from kafkatwist.client import KafkaWireClient

        nodeIds = list(nodeIds or self.alive())
        pending = set(nodeIds)

        def ready():
            for n in sorted(pending):
                with KafkaWireClient(self.brokers[n].bootstrap, timeout=10) as client:
                    md = client.metadata([])
                if set(md.brokers) >= set(nodeIds) and md.controllerId >= 0:
                    pending.discard(n)
            return not pending

        waitUntil(ready, timeout, f"brokers {sorted(pending)} to see the cluster", interval=0.05,
                  describe=lambda: f"ZooKeeper: {self.zookeeper.status()}\nlogs:\n{self.logs()}")

    # -- the cluster's state, as ZooKeeper holds it -------------------------

    def zk(self):
        """
        A kazoo client on this cluster's chroot (made on first use, closed
        by L{stop}).
        """
        if self._kazoo is None:
            from kazoo.client import KazooClient

            self._kazoo = KazooClient(hosts=self._connect(), timeout=10)
            self._kazoo.start(timeout=30)
        return self._kazoo

    def leader(self, topic: str, partition: int = 0) -> int | None:
        """
        The partition's leader as the controller last wrote it (its
        C{/brokers/topics/<topic>/partitions/<p>/state} znode), or C{None}
        (no such partition, or no leader).
        """
        from kafkatwist.cluster import zkdata

        zk = self.zk()
        path = zkdata.statePath(topic, partition)
        if not zk.exists(path):
            return None
        data, _ = zk.get(path)
        leader = json.loads(data)["leader"]
        return None if leader == zkdata.NO_LEADER else leader

    def controller(self) -> int | None:
        """
        The controller's node id, or C{None} while there is none.
        """
        from kafkatwist.cluster import zkdata

        zk = self.zk()
        if not zk.exists(zkdata.CONTROLLER):
            return None
        return json.loads(zk.get(zkdata.CONTROLLER)[0])["brokerid"]

    def waitLeader(self, topic: str, partition: int = 0, timeout: float = 60.0,
                   other: int | None = None) -> int:
        """
        Wait until the partition has a live leader (other than C{other}),
        and return it.
        """
        def found():
            leader = self.leader(topic, partition)
            if leader is not None and leader != other and leader in self.alive():
                return leader
            return None

        return waitUntil(found, timeout, f"a leader of {topic}-{partition}",
                         describe=lambda: f"ZooKeeper: {self.zookeeper.status()}")

    # -- stop ----------------------------------------------------------------

    def stopAll(self, timeout: float = 60.0) -> None:
        """
        Stop every broker: the others side by side, then the controller.
        All at once, each broker's controlled shutdown waited its whole
        bound (5 s) for a controller that was leaving too, with no broker
        staying to take the leaders; this way the others' leaders move to
        the controller, and the controller, last, has nobody to hand its
        own to.
        """
        controller = self._knownController()
        if controller is None:
            super().stopAll(timeout)
            return
        others = [b for n, b in self.brokers.items() if n != controller and b.process is not None]
        if others:
            with ThreadPoolExecutor(len(others)) as pool:
                list(pool.map(lambda b: b.stop(timeout=timeout), others))
        self.brokers[controller].stop(timeout=timeout)

    def _knownController(self) -> int | None:
        """
        The controller as a running broker names it (within a second or
        two), or C{None}.
        """
        from kafkatwist.client import KafkaWireClient

        for n, broker in sorted(self.brokers.items()):
            if not broker.running() or broker.paused:
                continue
            try:
                with KafkaWireClient(broker.bootstrap, timeout=2) as client:
                    controller = client.metadata([]).controllerId
            except Exception:  # noqa: BLE001 -- not answering: ask another
                continue
            if controller in self.brokers and self.brokers[controller].running():
                return controller
        return None

    def stop(self) -> None:
        """
        Stop the brokers (L{stopAll}) and the cluster's own ZooKeeper;
        remove a temporary directory unless something failed or the logs
        are to be kept (then its path is printed).
        """
        if self._kazoo is not None:
            try:
                self._kazoo.stop()
                self._kazoo.close()
            except Exception:  # noqa: BLE001 -- ZooKeeper already gone
                pass
            self._kazoo = None
        self.stopAll()
        if self.ownsZookeeper:
            self.zookeeper.server.stop()
        failed = self.failed or any(b.failed for b in self.brokers.values())
        if self.ownsDirectory and not (failed or self.keepLogs):
            shutil.rmtree(self.directory, ignore_errors=True)
        elif failed:
            print(f"kafkatwist: cluster logs kept in {self.directory}", file=sys.stderr)

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, excType, exc, tb) -> None:
        if excType is not None:
            self.failed = True
        self.stop()

    def __repr__(self) -> str:
        return f"<Cluster {self.bootstrap_servers or 'stopped'} on {self.connect}>"
