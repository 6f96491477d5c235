"""
Kafka for tests (issue 25): how long the pytest plugin's fixtures take, from
the fixture's request to the first record a confluent-kafka producer sent
being acknowledged.

    python -m bench testing [--rounds 5] [--quick]

1. C{kafkatwist_broker}: one broker (L{kafkatwist.testing.Broker}, what the
   fixture starts), then a producer's first record (acks=all) to a new topic
   (auto-created).
2. C{kafkatwist_cluster}: three brokers on the session's ZooKeeper (already
   running, as from the second cluster of a session on), ready when each
   knows the others; then the first record (acks=all) to a new topic of
   replication factor 3.
3. The same cluster with ZooKeeper started first (a session's first
   cluster).

Minimum, median and maximum of C{--rounds} rounds each.  For comparison, a
JVM Kafka in a container (testcontainers) is documented to take seconds to
tens of seconds (docs/testing.md cites the figures).  The machine is shared:
the load average is printed with each part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from kafkatwist.testing import Broker, Cluster, ZooKeeper
from kafkatwist.testing.plugin import USER_DEFAULTS


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def loadAverage() -> str:
    return "%.1f %.1f %.1f" % os.getloadavg()


def firstAck(bootstrap: str, topic: str, admin: bool = False) -> None:
    from confluent_kafka import Producer

    if admin:
        from confluent_kafka.admin import AdminClient, NewTopic

        client = AdminClient({"bootstrap.servers": bootstrap, "logger": _quiet()})
        client.create_topics([NewTopic(topic, 1, 3)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "logger": _quiet()})
    done = []
    producer.produce(topic, b"first", on_delivery=lambda e, m: done.append(e))
    if producer.flush(60) != 0 or done != [None]:
        raise RuntimeError(f"the first record was not acknowledged: {done}")


def _quiet():
    import logging

    logger = logging.getLogger("bench.testing.librdkafka")
    logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger


def broker() -> tuple[float, float]:
    started = time.monotonic()
    with Broker(overrides=dict(USER_DEFAULTS)) as b:
        ready = time.monotonic()
        firstAck(b.bootstrap_servers, "first")
        acked = time.monotonic()
    return ready - started, acked - started


def cluster(zookeeper: ZooKeeper | None) -> tuple[float, float]:
    started = time.monotonic()
    with Cluster(brokers=3, zookeeper=zookeeper) as c:
        ready = time.monotonic()
        firstAck(c.bootstrap_servers, "first", admin=True)
        acked = time.monotonic()
    return ready - started, acked - started


def summary(name: str, samples: list[tuple[float, float]]) -> str:
    def spread(values):
        return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"

    return (f"{name:<44} ready {spread([r for r, _ in samples])} s   "
            f"first ack {spread([a for _, a in samples])} s")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench testing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one round each")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    lines = [f"# fixture request -> ready -> first record acknowledged (min / median / max of {rounds}); "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    # The first start compiles and caches the broker's modules: not counted.
    broker()
    samples = []
    for _ in range(rounds):
        samples.append(broker())
        log(f"broker: {samples[-1][0]:.2f} s ready, {samples[-1][1]:.2f} s acked (load {loadAverage()})")
    lines.append(summary("kafkatwist_broker (1 broker)", samples) + f"   load {loadAverage()}")
    with ZooKeeper() as zookeeper:
        samples = []
        for _ in range(rounds):
            samples.append(cluster(zookeeper))
            log(f"cluster: {samples[-1][0]:.2f} s ready, {samples[-1][1]:.2f} s acked (load {loadAverage()})")
        lines.append(summary("kafkatwist_cluster (3 brokers, ZooKeeper up)", samples)
                     + f"   load {loadAverage()}")
    samples = []
    for _ in range(rounds):
        samples.append(cluster(None))
        log(f"cold cluster: {samples[-1][0]:.2f} s ready, {samples[-1][1]:.2f} s acked (load {loadAverage()})")
    lines.append(summary("first kafkatwist_cluster (ZooKeeper started)", samples)
                 + f"   load {loadAverage()}")
    print("\n".join(lines))
    return 0
