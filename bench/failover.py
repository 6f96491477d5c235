"""
Fail-over time (issue 30): how long a partition has no leader after its
leader's broker is killed (kill -9) or paused (SIGSTOP past its ZooKeeper
session), on a quiet machine and with CPU-bound processes beside the cluster.

    python -m bench failover [--rounds 5] [--hogs 0,2] [--faults kill,pause]
                             [--session-ms 3000] [--budget 900] [--zk-fsync]

A standalone ZooKeeper (Debian's package, L{kafkatwist.cluster.zkserver},
without fsync as the tests run it unless C{--zk-fsync}) on a free loopback
port and three brokers (L{tests.cluster.helpers.ClusterUnderTest}, the cluster
tests' own, with C{zookeeper.session.timeout.ms} from C{--session-ms}),
everything under a temporary directory, stopped afterwards.  One topic of
one partition, replication factor 3, min.insync.replicas=2; an idempotent
acks=all confluent-kafka producer sends a 100-byte record every
millisecond throughout.

For each number of CPU hogs (C{python3 -c 'while 1: pass'} processes,
started before the cell and killed after it) and each fault, C{--rounds}
rounds: the partition's leader is killed or paused; measured from the
signal:

- new leader: until a surviving broker's metadata names another leader
  (polled every 50 ms);
- acknowledged again: until the first acknowledgement of a record sent
  after the signal.

Then the paused broker is resumed (the killed one started again) and the
next round waits until it is back in the ISR.  A round whose new leader
does not come within C{--session-ms} + 10 s is counted as over the bound
(issue 30's) and still waited for, up to 120 s.  Every wait is bounded and
C{--budget} seconds bound the whole run: no new round starts after it.

The table gives, per cell, the rounds, the median and maximum of both
times, and the rounds over the bound.  The machine is shared and noisy:
the load average is printed with each cell.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import threading
import time

from bench.cluster import _producer, _send, createTopic, loadAverage
from kafkatwist.testing import ZooKeeper, waitUntil
from tests.cluster.helpers import REPLICATION, ClusterUnderTest, agreedLeader, partitions, startHogs, stopHogs

BROKERS = (1, 2, 3)
TOPIC = "fo"


def log(message: str) -> None:
    sys.stderr.write(f"[failover] {message}\n")
    sys.stderr.flush()


class Acks:
    """
    An idempotent acks=all producer sending a record every millisecond, in
    a thread: C{since(t)} is the time of the first acknowledgement of a
    record sent after C{t}.
    """

    def __init__(self, cluster: ClusterUnderTest) -> None:
        self.producer = _producer(cluster.bootstrap(*BROKERS), **{
            "enable.idempotence": True, "linger.ms": 0, "message.timeout.ms": 300000,
            # A paused broker's connections stay open: without these the
            # client waits a minute for its requests in flight there.
            "request.timeout.ms": 5000, "socket.timeout.ms": 6000,
        })
        self._lock = threading.Lock()
        self._mark = float("inf")
        self._first: float | None = None
        self.failed: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, sent):
        def callback(error, message):
            if error is not None:
                self.failed.append(error)
                return
            now = time.monotonic()
            with self._lock:
                if sent > self._mark and self._first is None:
                    self._first = now
        return callback

    def mark(self, at: float) -> None:
        with self._lock:
            self._mark, self._first = at, None

    def since(self) -> float | None:
        with self._lock:
            return self._first

    def _run(self) -> None:
        while not self._stop.is_set():
            _send(self.producer, TOPIC, self._delivered(time.monotonic()))
            self.producer.poll(0.001)
        self.producer.flush(120)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)


def newLeader(cluster: ClusterUnderTest, others: list[int], timeout: float) -> float | None:
    """
    Poll the survivors' metadata until one names a leader among them.

    @return: when (monotonic), or C{None} after C{timeout}.
    """
    admins = [cluster.admin(i) for i in others]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for admin in admins:
            try:
                found = partitions(admin, TOPIC)
            except Exception:  # noqa: BLE001 -- a busy or down broker: not yet
                found = None
            if found and found[0][0] in others:
                return time.monotonic()
        time.sleep(0.05)
    return None


def round_(cluster: ClusterUnderTest, acks: Acks, fault: str, bound: float, settings: dict) -> dict:
    leader = agreedLeader(cluster, TOPIC, BROKERS)
    victim = cluster.brokers[leader]
    others = [i for i in BROKERS if i != leader]
    start = time.monotonic()
    acks.mark(start)
    victim.process.send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    try:
        elected = newLeader(cluster, others, 120)
        waitUntil(lambda: acks.since() is not None, timeout=120, what="an acknowledgement after the fault")
        acked = acks.since()
    finally:
        if fault == "pause":
            victim.process.send_signal(signal.SIGCONT)
    if fault == "kill":
        victim.process.wait()
        cluster.startBroker(leader, **settings)
    other = cluster.admin(*others)
    waitUntil(lambda: len(partitions(other, TOPIC)[0][2]) == 3, timeout=180,
              what=f"broker {leader} back in the ISR")
    leaderSeconds = (elected - start) if elected is not None else float("inf")
    return {"broker": leader, "leader": leaderSeconds, "acked": acked - start,
            "over": leaderSeconds > bound}


def cell(cluster: ClusterUnderTest, acks: Acks, hogs: int, fault: str, rounds: int, bound: float,
         deadline: float, settings: dict) -> dict:
    load = loadAverage()
    running = startHogs(hogs)
    results = []
    try:
        time.sleep(2 if hogs else 0)
        for n in range(rounds):
            if time.monotonic() > deadline:
                log(f"{hogs} hogs, {fault}: budget spent after {n} rounds")
                break
            r = round_(cluster, acks, fault, bound, settings)
            results.append(r)
            log(f"{hogs} hogs, {fault} {n + 1}: broker {r['broker']}, new leader after {r['leader']:.2f} s, "
                f"acknowledged again after {r['acked']:.2f} s (load {loadAverage()})")
    finally:
        stopHogs(running)
    return {"hogs": hogs, "fault": fault, "results": results, "load": load}


def table(cells: list[dict], bound: float) -> str:
    def stats(values):
        if not values:
            return "-", "-"
        return f"{statistics.median(values):.2f}", f"{max(values):.2f}"

    lines = [
        f"| CPU hogs | fault | rounds | new leader median s | max s | acknowledged again median s | max s "
        f"| over {bound:g} s | load at start |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        rs = c["results"]
        leaderMedian, leaderMax = stats([r["leader"] for r in rs])
        ackMedian, ackMax = stats([r["acked"] for r in rs])
        lines.append(f"| {c['hogs']} | {c['fault']} | {len(rs)} | {leaderMedian} | {leaderMax} | {ackMedian} "
                     f"| {ackMax} | {sum(r['over'] for r in rs)} | {c['load']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench failover", description=__doc__.split("\n")[1])
    parser.add_argument("--rounds", type=int, default=5, help="rounds per cell (default 5)")
    parser.add_argument("--hogs", default="0,2", help="CPU hog counts, one cell each (default 0,2)")
    parser.add_argument("--faults", default="kill,pause", help="kill, pause or both (default)")
    parser.add_argument("--session-ms", type=int, default=3000, help="zookeeper.session.timeout.ms")
    parser.add_argument("--budget", type=float, default=900, help="seconds; no round starts after")
    parser.add_argument("--zk-fsync", action="store_true", help="ZooKeeper fsyncs its log (its default)")
    args = parser.parse_args(argv)
    hogCounts = [int(h) for h in args.hogs.split(",")]
    faults = [f for f in args.faults.split(",") if f]
    if any(f not in ("kill", "pause") for f in faults):
        parser.error("--faults: kill and/or pause")
    bound = args.session_ms / 1000.0 + 10
    deadline = time.monotonic() + args.budget
    settings = {**REPLICATION, "zookeeper.session.timeout.ms": str(args.session_ms)}
    root = tempfile.mkdtemp(prefix="bench-failover-")
    zookeeper = ZooKeeper(os.path.join(root, "zookeeper"))
    zookeeper.server.forceSync = args.zk_fsync
    zookeeper.start()
    cluster = ClusterUnderTest(zookeeper, root, "bench")
    cells = []
    acks = None
    try:
        for i in BROKERS:
            cluster.startBroker(i, **settings)
        admin = cluster.admin()
        waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, timeout=60, what="three brokers")
        log(f"ZooKeeper {zookeeper.address}, brokers {cluster.bootstrap()}, under {root}")
        createTopic(cluster, TOPIC, 1, 3, config={"min.insync.replicas": "2"})
        acks = Acks(cluster)
        acks.mark(time.monotonic())
        waitUntil(lambda: acks.since() is not None, timeout=60, what="records acknowledged")
        for hogs in hogCounts:
            for fault in faults:
                cells.append(cell(cluster, acks, hogs, fault, args.rounds, bound, deadline, settings))
    finally:
        if acks is not None:
            acks.stop()
        cluster.stopAll()
        zookeeper.stop()
    print(f"## fail-over: RF 3, min.insync.replicas=2, idempotent acks=all, a record per ms; "
          f"zookeeper.session.timeout.ms={args.session_ms}, ZooKeeper fsync {'on' if args.zk_fsync else 'off'}; "
          f"bound {bound:g} s; {os.cpu_count()} CPUs")
    print(table(cells, bound))
    if acks is not None and acks.failed:
        print(f"{len(acks.failed)} deliveries failed, first: {acks.failed[0]}")
    return 0
