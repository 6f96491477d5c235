"""
Two brokers against one on many small requests (issue 17: "the way past one
core per process").

    python -m bench twobrokers [--partitions 8] [--connections 32] [--seconds 5]
                               [--warmup 1.5] [--rounds 2] [--modes auto,spread,none]

A standalone ZooKeeper and two brokers in cluster mode on loopback, under a
temporary directory, stopped afterwards.  Two topics of replication factor 1
with the same partition count: C{one}, every partition led by broker 1, and
C{two}, partitions led by brokers 1 and 2 alternately.  The load is the C
generator (L{bench.loadgen}, C{loadgen -m -p}): C{--connections}
connections, connection k producing to partition k mod C{--partitions}
through its leader, each ping-ponging one pre-encoded Produce v9 request
(one record of 100 bytes in a v2 batch, acks=1, not idempotent, so the same
frame appends again).  Every response's error code is checked: a failed one
is counted and reported, never counted as throughput.  Same connections,
same partitions, only the leadership differs; C{one} and C{two} alternate
for C{--rounds} rounds.

For each run: records/s, p50/p99 produce->ack, each broker's CPU and the
generator's and ZooKeeper's (cores: CPU-s per second of the window), each
CPU's busy share (/proc/stat), and the broker threads that used more than
0.05 of a core with the CPUs each may run on (its affinity) -- who is on CPU.

C{--modes} chooses the brokers' C{request.threads.cpu.affinity}, one cluster
per mode: C{auto} (the default: in a cluster, broker N puts its request threads on
the CPU N-1 below the highest-numbered -- before 2026-11-23 every broker took
the highest, the same CPU for both), C{spread} (broker 1 on the
highest-numbered CPU, broker 2 on the next, given explicitly: what C{auto}
now chooses), C{none} (wherever the OS puts them).

Why a cluster and not two standalone brokers: a cluster is what issue 17
offers as the way past one core (a client's partitions led by several
processes), so its costs -- leadership checks, ZooKeeper sessions, the
controller -- belong in the figure.  With replication factor 1 and acks=1
nothing is replicated: the second broker's CPU is only the work it leads.

Needs a C compiler (the Python load generator would take the CPU the second
broker needs, which is what this replaces).  About 2 minutes with the
defaults (three modes).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from bench import loadgen
from bench.brokers import processCpuSeconds
from bench.instructions import produceFrame

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    sys.stderr.write(f"[twobrokers] {message}\n")
    sys.stderr.flush()


def loadAverage() -> str:
    return "%.1f / %.1f / %.1f" % os.getloadavg()


# -- who is on CPU -------------------------------------------------------------


def cpuBusySeconds() -> dict[int, float]:
    """
    CPU number -> seconds it spent not idle since boot (C{/proc/stat}).
    """
    busy = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            values = [int(v) for v in fields[:8]]
            busy[int(name[3:])] = (sum(values) - values[3] - values[4]) / _CLK_TCK
    return busy


def threadCpu(pid: int) -> dict[int, tuple[float, frozenset[int]]]:
    """
    Thread id -> (CPU seconds, the CPUs it may run on) for each thread of C{pid}.
    """
    threads = {}
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return threads
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            threads[tid] = ((int(fields[11]) + int(fields[12])) / _CLK_TCK,
                            frozenset(os.sched_getaffinity(tid)))
        except OSError:
            continue
    return threads


class Snapshot:
    def __init__(self, pids: dict[str, int]) -> None:
        self.at = time.monotonic()
        self.busy = cpuBusySeconds()
        self.process = {name: processCpuSeconds(pid) for name, pid in pids.items()}
        self.threads = {name: threadCpu(pid) for name, pid in pids.items() if name.startswith("broker")}


def showCpus(cpus: frozenset[int]) -> str:
    return "{" + ",".join(map(str, sorted(cpus))) + "}"


# -- one run -------------------------------------------------------------------


def frames(directory: str, topic: str, partitionCount: int) -> list[str]:
    """
    @return: a frame file per partition of C{topic}.
    """
    paths = []
    for p in range(partitionCount):
        path = os.path.join(directory, f"{topic}-{p}.frame")
        with open(path, "wb") as f:
            f.write(produceFrame(1, topic, p))
        paths.append(path)
    return paths


def measure(generator: list[str], targets: list[tuple[int, str]], pids: dict[str, int],
            warmup: float, seconds: float) -> dict:
    """
    Run the generator over C{targets} and read everyone's CPU over its
    measuring window.
    """
    process = loadgen.startTargets(generator, "127.0.0.1", targets, warmup, seconds, checkProduce=True)
    try:
        time.sleep(warmup)
        before = Snapshot(pids)
        time.sleep(seconds)
        after = Snapshot(pids)
        result = loadgen.finish(process, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    wall = after.at - before.at
    result["cores"] = {name: (after.process[name] - before.process[name]) / wall for name in pids}
    result["cores"]["generator"] = result["cpu_window_s"] / result["seconds"]
    result["busy"] = {cpu: (after.busy[cpu] - before.busy.get(cpu, 0)) / wall for cpu in after.busy}
    # Everything else on the machine: other people's work, and kernel work
    # charged to no process of ours.
    result["others"] = sum(result["busy"].values()) - sum(result["cores"].values())
    result["threads"] = {}
    for name, threads in after.threads.items():
        used = []
        for tid, (cpu, allowed) in threads.items():
            start = before.threads[name].get(tid, (0.0, allowed))[0]
            if (cpu - start) / wall > 0.05:
                used.append(((cpu - start) / wall, allowed))
        result["threads"][name] = sorted(used, key=lambda u: -u[0])
    result["rate"] = result["responses"] / result["seconds"]
    return result


def describe(label: str, r: dict, brokerNames: list[str]) -> list[str]:
    cores = ", ".join(f"{name} {r['cores'][name]:.2f}" for name in brokerNames)
    busy = ", ".join(f"cpu{cpu} {share:.2f}" for cpu, share in sorted(r["busy"].items()))
    failed = r["failed_responses"] + r["unparsed_responses"]
    lines = [
        f"- {label}: **{r['rate']:,.0f} records/s**, p50 {r['p50_us'] / 1000:.2f} ms, "
        f"p99 {r['p99_us'] / 1000:.2f} ms; cores: {cores}, generator {r['cores']['generator']:.2f}, "
        f"ZooKeeper {r['cores']['zookeeper']:.2f}, the rest of the machine {r['others']:.2f}; busy: {busy}; "
        f"{failed} failed responses{' ' + str(r['error_codes']) if failed else ''} "
        f"(load {loadAverage()})"
    ]
    if r["errors"] or r["closed_by_peer"] or r["connect_failures"] or r["answered_connections"] != r["connections"]:
        lines.append(f"  - connections: {r['answered_connections']} of {r['connections']} answered, "
                     f"{r['errors']} errors, {r['closed_by_peer']} closed by the broker, "
                     f"{r['connect_failures']} failed to connect")
    threads = "; ".join(
        f"{name}: " + ", ".join(f"{c:.2f} on {showCpus(a)}" for c, a in r["threads"][name])
        for name in brokerNames if r["threads"].get(name))
    if threads:
        lines.append(f"  - threads over 0.05 cores (cores on the CPUs each may use): {threads}")
    return lines


def compare(cluster, zookeeperPid: int, generator: list[str], directory: str, partitionCount: int,
            connections: int, warmup: float, seconds: float, rounds: int, report, suffix: str = "") -> dict:
    """
    On a running C{cluster} whose brokers 1 and 2 are up: the topics, then
    C{rounds} of one broker leading every partition against two each
    leading half, alternately.

    @return: layout (C{"one"}, C{"two"}) -> the runs' results.
    """
    from bench.cluster import createTopic

    layouts = {"one": [[1]] * partitionCount, "two": [[1 + p % 2] for p in range(partitionCount)]}
    targets = {}
    for layout, assignment in layouts.items():
        topic = f"{layout}{suffix}"
        createTopic(cluster, topic, assignment=assignment)
        paths = frames(directory, topic, partitionCount)
        ports = [cluster.brokers[replicas[0]].port for replicas in assignment]
        targets[layout] = [(ports[k % partitionCount], paths[k % partitionCount]) for k in range(connections)]
    pids = {"broker 1": cluster.brokers[1].process.pid, "broker 2": cluster.brokers[2].process.pid,
            "zookeeper": zookeeperPid}
    brokerNames = ["broker 1", "broker 2"]
    results: dict[str, list[dict]] = {"one": [], "two": []}
    for n in range(rounds):
        for layout in ("one", "two"):
            r = measure(generator, targets[layout], pids, warmup, seconds)
            results[layout].append(r)
            label = "one broker leads all" if layout == "one" else "two brokers lead half each"
            for line in describe(f"round {n + 1}, {label}", r, brokerNames):
                report(line)
    one = statistics.median(r["rate"] for r in results["one"])
    two = statistics.median(r["rate"] for r in results["two"])
    report(f"- median: one broker {one:,.0f} records/s, two brokers {two:,.0f} records/s: **{two / one:.2f}x**")
    return results


def spreadCpus() -> tuple[str, str]:
    """
    The CPUs for brokers 1 and 2 in the C{spread} mode: the highest-numbered
    (where C{auto} puts a broker's request threads) and the next.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("spread needs two CPUs")
    return str(cpus[-1]), str(cpus[-2])


def affinity(mode: str) -> dict[int, dict[str, str]]:
    if mode == "auto":
        return {1: {}, 2: {}}
    if mode == "none":
        return {1: {"request.threads.cpu.affinity": "none"}, 2: {"request.threads.cpu.affinity": "none"}}
    if mode == "spread":
        first, second = spreadCpus()
        return {1: {"request.threads.cpu.affinity": first}, 2: {"request.threads.cpu.affinity": second}}
    raise SystemExit(f"unknown mode {mode!r}: auto, spread or none")


def main(argv: list[str]) -> int:
    from kafkatwist.testing import ZooKeeper, waitUntil
    from tests.cluster.helpers import REPLICATION, ClusterUnderTest

    parser = argparse.ArgumentParser(prog="python -m bench twobrokers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.5, help="uncounted seconds before each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="auto,spread,none", help="request.threads.cpu.affinity modes, one cluster each")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    for mode in modes:
        affinity(mode)
    root = tempfile.mkdtemp(prefix="bench-twobrokers-")
    generator = loadgen.compiled(root)
    if generator is None:
        parser.error("needs a C compiler for bench/loadgen.c")
    lines: list[str] = []

    def report(line: str) -> None:
        lines.append(line)
        log(line)

    # Others' load: every CPU's busy share over 3 s before anything of ours runs.
    before = cpuBusySeconds()
    time.sleep(3)
    others = ", ".join(f"cpu{cpu} {(seconds - before.get(cpu, 0)) / 3:.2f}"
                       for cpu, seconds in sorted(cpuBusySeconds().items()))
    report(f"# before the run: busy {others} (load {loadAverage()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    zookeeper = ZooKeeper(os.path.join(root, "zookeeper"))
    zookeeper.start()

    summary = []
    try:
        for mode in modes:
            cluster = ClusterUnderTest(zookeeper, os.path.join(root, mode), mode)
            try:
                for i, overrides in affinity(mode).items():
                    cluster.startBroker(i, **REPLICATION, **overrides)
                admin = cluster.admin()
                waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 2, timeout=60, what="two brokers")
                setting = ", ".join(f"broker {i}: {o.get('request.threads.cpu.affinity', 'auto')}"
                                    for i, o in affinity(mode).items())
                report(f"## request.threads.cpu.affinity {mode} ({setting}); {args.connections} connections, "
                       f"{args.partitions} partitions RF 1, one-record Produce v9 acks=1; "
                       f"{args.seconds:g} s after {args.warmup:g} s warm-up (load {loadAverage()})")
                results = compare(cluster, zookeeper.server.process.pid, generator, root, args.partitions,
                                  args.connections, args.warmup, args.seconds, args.rounds, report)
                one = statistics.median(r["rate"] for r in results["one"])
                two = statistics.median(r["rate"] for r in results["two"])
                summary.append(f"{mode}: {one:,.0f} -> {two:,.0f} records/s ({two / one:.2f}x)")
            finally:
                cluster.stopAll()
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))
    print("summary (median one broker -> two brokers): " + "; ".join(summary))
    return 0
