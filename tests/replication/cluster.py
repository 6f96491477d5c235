"""
Brokers started as real processes without ZooKeeper, and a static
controller that tells them their roles through the test drop-in
(C{dropin/static_controller.py}).
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import time

from kafkatwist.client import KafkaWireClient
from kafkatwist.client.connection import BrokerConnection
from kafkatwist.testing import Broker, BrokerSet, waitUntil

DROPIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dropin")


def _dropin():
    spec = importlib.util.spec_from_file_location(
        "static_controller_client", os.path.join(DROPIN, "static_controller.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_module = None


def module():
    global _module
    if _module is None:
        _module = _dropin()
    return _module


class StaticCluster(BrokerSet):
    """
    @ivar brokers: node id -> L{Broker}.
    """

    def __init__(self, directory, count: int = 3, overrides=None) -> None:
        super().__init__()
        self.directory = str(directory)
        self.overrides = {
            "plugin.paths": DROPIN,
            "replica.lag.time.max.ms": "3000",
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "100",
            "replica.high.watermark.checkpoint.interval.ms": "500",
            "log.cleaner.enable": "false",
            "num.partitions": "1",
            **(overrides or {}),
        }
        for nodeId in range(1, count + 1):
            self.brokers[nodeId] = Broker(
                os.path.join(self.directory, f"broker{nodeId}"),
                {"node.id": str(nodeId), **self.overrides},
            )
        self.roles: dict = {}

    def start(self) -> "StaticCluster":
        for broker in self.brokers.values():
            broker.launch()
        for broker in self.brokers.values():
            broker.waitStarted()
        return self

    def restart(self, nodeId: int) -> None:
        broker = self.brokers[nodeId]
        broker.stop()
        broker.start()

    def stop(self) -> None:
        self.stopAll()

    def command(self, nodeId: int, command: dict) -> dict:
        m = module()
        # A broker just restarted on a loaded machine may take a while to
        # answer its first request: retry the connection, not the command.
        deadline = time.monotonic() + 60
        while True:
            connection = BrokerConnection("127.0.0.1", self.brokers[nodeId].port, timeout=20)
            try:
                connection.connect()
                break
            except OSError:
                connection.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        try:
            answer = connection.request(
                m.STATIC_CONTROLLER, 0, m.StaticControllerRequest(command=json.dumps(command))
            )
        finally:
            connection.close()
        return json.loads(bytes(answer.result))

    def createTopic(self, name: str, partitions: int = 1, configs=None, nodes=None) -> None:
        for nodeId in nodes or self.alive():
            with KafkaWireClient(self.bootstrap(nodeId)) as client:
                client.createTopics({name: (partitions, configs or None)})

    def elect(self, topic: str, partition: int, leader: int, epoch: int, isr, replicas=None,
              nodes=None) -> None:
        """
        Tell every broker (or C{nodes}) the partition's new state.
        """
        replicas = list(replicas or self.brokers)
        role = {
            "topic": topic, "partition": partition, "leader": leader, "epoch": epoch,
            "isr": list(isr), "replicas": replicas, "partitionEpoch": epoch,
        }
        self.roles[(topic, partition)] = role
        endpoints = {str(n): ["127.0.0.1", b.port] for n, b in self.brokers.items() if b.ports}
        for nodeId in nodes or self.alive():
            if nodeId in replicas:
                self.command(nodeId, {"op": "roles", "brokers": endpoints, "roles": [role]})

    def state(self, nodeId: int, topic: str, partition: int = 0) -> dict | None:
        return self.command(nodeId, {"op": "state"}).get(f"{topic}-{partition}")

    def dump(self, nodeId: int, topic: str, partition: int = 0) -> bytes:
        answer = self.command(nodeId, {"op": "dump", "topic": topic, "partition": partition})
        return base64.b64decode(answer["data"])

    def waitInSync(self, topic: str, partition: int = 0, nodes=None, timeout: float = 120.0):
        """
        Wait until every replica (or C{nodes}) has the leader's log end and
        high watermark, and return the logs' bytes (all identical).
        """
        nodes = nodes or self.alive()

        def same():
            states = {n: self.state(n, topic, partition) for n in nodes}
            if any(s is None for s in states.values()):
                return False
            ends = {s["leo"] for s in states.values()}
            hws = {s["hw"] for s in states.values()}
            if len(ends) != 1 or hws != ends:
                return False
            dumps = {n: self.dump(n, topic, partition) for n in nodes}
            return dumps if len(set(dumps.values())) == 1 else False

        return waitUntil(same, timeout, f"replicas of {topic}-{partition} in sync")


def produce(bootstrap, topic, values, acks="all", timeoutMs=60000, **extra):
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
        "message.timeout.ms": timeoutMs, "request.timeout.ms": timeoutMs, **extra,
    })
    results = []
    for value in values:
        producer.produce(
            topic, value=value, partition=0,
            on_delivery=lambda err, msg: results.append(err),
        )
    producer.flush(timeoutMs / 1000 + 10)
    return results
