"""
The cluster (issue 17): what replication costs and how long a fail-over takes.

    python -m bench cluster [--records 1000000] [--latency-seconds 20] [--rate 1000]
                            [--failovers 3] [--small-seconds 10] [--connections 32] [--quick]

A standalone ZooKeeper (Debian's package, L{kafkatwist.cluster.zkserver})
on a free loopback port and three brokers (L{tests.cluster.helpers.ClusterUnderTest},
the cluster tests' own), everything under a temporary directory, stopped
afterwards.  confluent-kafka clients, 100-byte values.

1. Throughput.  C{--records} records with acks=all (linger.ms=5) to a
   3-partition topic of replication factor 3 (min.insync.replicas=2), then to
   one of replication factor 1; leaders are spread over the three brokers.
   Records per second, and the brokers' CPU seconds (summed, from /proc) per
   million records.
2. Latency.  C{--rate} records per second for C{--latency-seconds} to the
   replication factor 3 topic, acks=all, with librdkafka's default linger.ms=5
   and then with linger.ms=0 (a request per record): produce -> delivery
   callback, p50/p99/max, and the p50 of each fifth of the run (a backlog
   building up shows as a climb).
3. Fail-over.  An idempotent acks=all producer sends one record every
   millisecond to a one-partition topic of replication factor 3
   (min.insync.replicas=2); the leader's broker is killed with SIGKILL; the
   time from the kill to the first acknowledgement of a record sent after
   the kill.  The broker is started again and back in the ISR before the next
   round; C{--failovers} rounds, each and the median.  (The controller learns
   of the death when ZooKeeper ends the broker's session:
   zookeeper.session.timeout.ms is 3000 here, Kafka's default 18000.)
4. Many small requests.  C{--connections} connections of the C load
   generator, each ping-ponging a one-record Produce (acks=1) to one of 8
   partitions of replication factor 1, for C{--small-seconds} after a
   warm-up: all partitions led by broker 1, then half by each of brokers 1
   and 2, two rounds.  Records per second, p50/p99, and each broker's, the
   generator's and each CPU's use (L{bench.twobrokers}, which also runs it
   alone with other CPU affinities).

The machine is shared and noisy: the load average is printed with each
part.  Every wait is bounded; with the defaults it takes about four minutes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

from bench.brokers import processCpuSeconds
from tests.cluster.helpers import REPLICATION, ClusterUnderTest, partitions
from kafkatwist.testing import ZooKeeper, waitUntil

VALUE = b"x" * 100
BROKERS = (1, 2, 3)


def log(message: str) -> None:
    sys.stderr.write(f"[cluster] {message}\n")
    sys.stderr.flush()


def loadAverage() -> str:
    return "%.1f / %.1f / %.1f" % os.getloadavg()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))]


def brokerCpu(cluster: ClusterUnderTest, ids=BROKERS) -> dict[int, float]:
    return {i: processCpuSeconds(cluster.brokers[i].process.pid) for i in ids}


def createTopic(cluster: ClusterUnderTest, topic: str, partitionCount: int = 3, replication: int = 1,
                assignment: list[list[int]] | None = None, config: dict | None = None) -> None:
    from confluent_kafka.admin import NewTopic

    if assignment is not None:
        new = NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment,
                       config=config or {})
    else:
        new = NewTopic(topic, num_partitions=partitionCount, replication_factor=replication,
                       config=config or {})
    admin = cluster.admin()
    admin.create_topics([new], request_timeout=30)[topic].result(60)
    wanted = len(assignment[0]) if assignment else replication
    waitUntil(lambda: (lambda p: p and all(len(isr) == wanted and l >= 0 for l, _, isr in p.values()))(
        partitions(admin, topic)), timeout=60, what=f"{topic}'s replicas in sync")


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    config.update(extra)
    return Producer(config)


def _send(producer, topic: str, callback=None, partition: int = -1) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=partition, on_delivery=callback)
            return
        except BufferError:
            producer.poll(0.001)


def throughput(cluster: ClusterUnderTest, topic: str, records: int, limit: float) -> dict:
    """
    @return: records/s, broker CPU-s per million records, records acknowledged.
    """
    producer = _producer(cluster.bootstrap())
    acked = [0]
    failed = [0]

    def delivered(error, message):
        if error is None:
            acked[0] += 1
        else:
            failed[0] += 1

    _send(producer, topic)
    producer.flush(30)
    before = brokerCpu(cluster)
    start = time.perf_counter()
    deadline = time.monotonic() + limit
    for _ in range(records):
        _send(producer, topic, delivered)
        if time.monotonic() > deadline:
            break
    producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - start
    after = brokerCpu(cluster)
    cpu = sum(after.values()) - sum(before.values())
    return {"rate": acked[0] / elapsed, "cpuPerMillion": cpu / max(acked[0], 1) * 1e6,
            "acked": acked[0], "failed": failed[0], "seconds": elapsed}


def latency(cluster: ClusterUnderTest, topic: str, rate: int, seconds: float, linger: int) -> dict:
    producer = _producer(cluster.bootstrap(), **{"linger.ms": linger})
    samples: list[float] = []
    sentAt: list[float] = []
    failed = [0]

    def delivered(sent):
        def callback(error, message):
            if error is None:
                samples.append(time.perf_counter() - sent)
                sentAt.append(sent)
            else:
                failed[0] += 1
        return callback

    _send(producer, topic)
    producer.flush(30)
    interval = 1.0 / rate
    start = time.perf_counter()
    n = 0
    total = int(rate * seconds)
    while n < total:
        due = start + n * interval
        now = time.perf_counter()
        if now < due:
            producer.poll(due - now)
            continue
        _send(producer, topic, delivered(time.perf_counter()))
        n += 1
        producer.poll(0)
    producer.flush(30)
    ms = [s * 1000 for s in samples]
    # p50 per fifth of the run: a backlog that builds up shows as a climb.
    fifths = [[m for m, t in zip(ms, sentAt) if k <= (t - start) * 5 / seconds < k + 1] for k in range(5)]
    return {"sent": n, "acked": len(ms), "failed": failed[0],
            "p50": percentile(ms, 0.5), "p99": percentile(ms, 0.99), "max": max(ms),
            "fifths": [percentile(f, 0.5) if f else float("nan") for f in fifths]}


def failovers(cluster: ClusterUnderTest, topic: str, rounds: int) -> list[float]:
    """
    @return: seconds from each kill -9 of the leader to the first
        acknowledgement of a record sent after it.
    """
    producer = _producer(cluster.bootstrap(), **{
        "enable.idempotence": True, "linger.ms": 0, "message.timeout.ms": 120000})
    admin = cluster.admin()
    lock = threading.Lock()
    killedAt = [float("inf")]
    firstAck: list[float | None] = [None]
    failed: list = []
    stop = threading.Event()

    def delivered(sent):
        def callback(error, message):
            if error is not None:
                failed.append(error)
                return
            now = time.monotonic()
            with lock:
                if sent > killedAt[0] and firstAck[0] is None:
                    firstAck[0] = now
        return callback

    def produce():
        while not stop.is_set():
            _send(producer, topic, delivered(time.monotonic()))
            producer.poll(0.001)
        producer.flush(120)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    times = []
    try:
        time.sleep(2)
        for n in range(rounds):
            leader = partitions(admin, topic)[0][0]
            with lock:
                firstAck[0] = None
                killedAt[0] = time.monotonic()
            cluster.brokers[leader].kill()
            others = [i for i in BROKERS if i != leader]
            waitUntil(lambda: firstAck[0] is not None, timeout=60, what="an acknowledgement after the kill")
            times.append(firstAck[0] - killedAt[0])
            with lock:
                killedAt[0] = float("inf")
            log(f"fail-over {n + 1}: broker {leader} killed, acknowledged again after {times[-1]:.2f} s")
            cluster.startBroker(leader, **REPLICATION)
            other = cluster.admin(*others)
            waitUntil(lambda: len(partitions(other, topic)[0][2]) == 3, timeout=90,
                      what=f"broker {leader} back in the ISR")
            time.sleep(1)
    finally:
        stop.set()
        thread.join(150)
    if failed:
        log(f"fail-over: {len(failed)} deliveries failed, first {failed[0]}")
    return times


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cluster", description=__doc__.split("\n")[1])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--latency-seconds", type=float, default=20)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--small-seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=32, help="part 4's connections")
    parser.add_argument("--parts", default="1234", help="which parts to run, e.g. 13 (default 1234)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small counts, short waits")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.latency_seconds, args.failovers, args.small_seconds = 20_000, 3, 1, 3
    root = tempfile.mkdtemp(prefix="bench-cluster-")
    zookeeper = ZooKeeper(os.path.join(root, "zookeeper"))
    zookeeper.start()
    cluster = ClusterUnderTest(zookeeper, root, "bench")
    lines = []

    def report(line: str) -> None:
        lines.append(line)
        log(line)

    try:
        for i in BROKERS:
            cluster.startBroker(i, **REPLICATION)
        admin = cluster.admin()
        waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, timeout=60, what="three brokers")
        log(f"ZooKeeper {zookeeper.address}, brokers {cluster.bootstrap()}, under {root}")
        synced = {"min.insync.replicas": "2"}
        createTopic(cluster, "rf3", 3, 3, config=synced)
        createTopic(cluster, "rf1", 3, 1)

        if "1" in args.parts:
            part1(cluster, args, report)
        if "2" in args.parts:
            part2(cluster, args, report)
        if "3" in args.parts:
            part3(cluster, args, report, synced)
        if "4" in args.parts:
            part4(cluster, args, report, zookeeper.server.process.pid)
    finally:
        cluster.stopAll()
        zookeeper.stop()
    print("\n".join(lines))
    return 0


def part1(cluster, args, report):
    report(f"## 1. acks=all throughput, {args.records:,} records of 100 bytes, 3 partitions (load {loadAverage()})")
    for topic in ("rf3", "rf1", "rf3", "rf1"):
        r = throughput(cluster, topic, args.records, limit=120)
        report(f"- {topic}: {r['rate']:,.0f} records/s, {r['cpuPerMillion']:.2f} broker CPU-s per million "
               f"({r['acked']:,} acknowledged, {r['failed']} failed, {r['seconds']:.1f} s)")


def part2(cluster, args, report):
    # linger.ms=5 is librdkafka's default; with 0 every record is a request
    # of its own, and a connection's requests are answered one at a time
    # (as Kafka does), each acks=all one after a replication round.
    for linger in (5, 0):
        report(f"## 2. produce->ack latency, RF 3, {args.rate} records/s for {args.latency_seconds:g} s, "
               f"acks=all, linger.ms={linger} (load {loadAverage()})")
        r = latency(cluster, "rf3", args.rate, args.latency_seconds, linger)
        report(f"- p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms, max {r['max']:.2f} ms "
               f"({r['acked']:,} of {r['sent']:,} acknowledged, {r['failed']} failed); p50 per fifth of the run: "
               + " / ".join(f"{v:.1f}" for v in r["fifths"]) + f" ms (load {loadAverage()})")


def part3(cluster, args, report, synced):
    report(f"## 3. fail-over, RF 3, min.insync.replicas=2, idempotent acks=all, a record per ms "
           f"(load {loadAverage()})")
    createTopic(cluster, "fo", 1, 3, config=synced)
    times = failovers(cluster, "fo", args.failovers)
    report("- kill -9 of the leader -> first acknowledgement of a record sent after it: "
           + ", ".join(f"{t:.2f} s" for t in times)
           + (f"; median {statistics.median(times):.2f} s" if times else ""))


def part4(cluster, args, report, zookeeperPid):
    # The C generator (bench.twobrokers): Python producer processes took the
    # CPU the second broker needed (bench/RESULTS.md).
    from bench import loadgen
    from bench.twobrokers import compare

    directory = tempfile.mkdtemp(prefix="bench-cluster-frames-")
    generator = loadgen.compiled(directory)
    if generator is None:
        report("## 4. skipped: no C compiler for bench/loadgen.c")
        return
    report(f"## 4. many small requests: {args.connections} connections of the C load generator, "
           f"one-record Produce v9 acks=1, 8 partitions RF 1, request.threads.cpu.affinity as "
           f"configured (auto) (load {loadAverage()})")
    try:
        compare(cluster, zookeeperPid, generator, directory, 8, args.connections, 1.5,
                args.small_seconds, 2, report)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
