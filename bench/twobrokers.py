"""
Two brokers against one on many small requests (issue 17: "the way past one
core per process").

    python -m bench twobrokers [--partitions 8] [--connections 32] [--seconds 5]
                               [--warmup 1.5] [--rounds 2] [--modes auto,spread,none]
                               [--reference kafkatwist:PATH] [--floor]
                               [--generators epoll,uring:N,...]

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
Per record: b, the brokers' CPU (summed; its system part and their context
switches), and g, the generator's (user and system, its syscalls and
context switches).  For each layout pair: the per-round ratios, and the
ceiling those costs set on two CPUs (L{summarize}): one broker is held to
one CPU by the GIL, R1 = 1/b1; two brokers and the generator share both,
R2 <= 2/(b2 + g); so R2/R1 <= 2 b1/(b2 + g) -- and records per
broker-CPU-second, the ratio with the generator's CPU left out.

C{--reference kafkatwist:PATH} runs another source tree's brokers (its code
on their PYTHONPATH, this interpreter) as a second cluster beside this
tree's, on the same ZooKeeper; C{--floor} adds two answer-only C servers
(C{loadgen -s}) in the brokers' places and CPUs: what the kernel alone
costs a server per request.  Rounds take every cluster (and every
C{--generators} entry: C{epoll}, C{uring:N} -- io_uring, woken once N
answers are ready -- with C{+batch} for SCHED_BATCH) in turn, starting one
further along each round.

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
import subprocess
import sys
import tempfile
import time

from bench import loadgen
from bench.brokers import processCpuTimes
from bench.instructions import produceFrame

_CLK_TCK = os.sysconf("SC_CLK_TCK")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: the load generator(s) by default (C{--generators})
DEFAULT_GENERATORS = "epoll"


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


def contextSwitches(pid: int) -> tuple[int, int]:
    """
    (voluntary, involuntary) context switches of C{pid}'s threads, summed.
    """
    voluntary = involuntary = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        voluntary += int(line.split()[1])
                    elif line.startswith("nonvoluntary_ctxt_switches:"):
                        involuntary += int(line.split()[1])
        except OSError:
            continue
    return voluntary, involuntary


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
        self.times = {name: processCpuTimes(pid) for name, pid in pids.items()}
        self.process = {name: sum(times) for name, times in self.times.items()}
        self.threads = {name: threadCpu(pid) for name, pid in pids.items() if name.startswith("broker")}
        self.switches = {name: contextSwitches(pid) for name, pid in pids.items() if name.startswith("broker")}


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
            warmup: float, seconds: float, options: list[str] = ()) -> dict:
    """
    Run the generator (with C{options}, L{generatorOptions}) over
    C{targets} and read everyone's CPU over its measuring window.
    """
    process = loadgen.startTargets(generator, "127.0.0.1", targets, warmup, seconds, checkProduce=True,
                                   options=options)
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
    records = max(result["responses"], 1)
    # Per record, µs: b, what the brokers spent (both, summed), and g, what
    # the generator spent (user + system; loopback TCP's receive work runs
    # in the sender's context, so each side's system time holds part of the
    # other's).
    result["b_us"] = sum(result["cores"][name] for name in pids if name.startswith("broker")) * wall / records * 1e6
    brokers = [name for name in pids if name.startswith("broker")]
    result["b_sys_us"] = sum(after.times[n][1] - before.times[n][1] for n in brokers) / records * 1e6
    result["b_switches"] = sum(sum(after.switches[n]) - sum(before.switches[n]) for n in brokers) / records
    result["b_involuntary"] = sum(after.switches[n][1] - before.switches[n][1] for n in brokers) / records
    result["g_us"] = result["cpu_window_s"] / records * 1e6
    result["g_user_us"] = result.get("cpu_user_s", 0.0) / records * 1e6
    result["g_sys_us"] = result.get("cpu_sys_s", 0.0) / records * 1e6
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
    records = max(r["responses"], 1)
    lines.append(
        f"  - per record: brokers {r['b_us']:.1f} µs (system {r['b_sys_us']:.1f}; {r['b_switches']:.2f} context "
        f"switches, {r['b_involuntary']:.3f} involuntary), generator {r['g_us']:.1f} µs (user {r['g_user_us']:.1f}, "
        f"system {r['g_sys_us']:.1f}; {r.get('engine', '?')}{' SCHED_BATCH' if r.get('sched_batch') else ''}, "
        f"waits for {r.get('wait_batch', 1)}: "
        f"{(r.get('sends', 0) + r.get('recvs', 0)) / records:.2f} sends+recvs, {r.get('waits', 0) / records:.3f} waits, "
        f"{(r.get('voluntary_switches', 0) + r.get('involuntary_switches', 0)) / records:.3f} context switches)")
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


def layoutTargets(cluster, directory: str, partitionCount: int, connections: int,
                  suffix: str = "") -> dict[str, list[tuple[int, str]]]:
    """
    On a running C{cluster} whose brokers 1 and 2 are up: the topics C{one}
    and C{two}, and for each the generator's (port, frame file) per
    connection.
    """
    from bench.cluster import createTopic

    layouts = {"one": [[1]] * partitionCount, "two": [[1 + p % 2] for p in range(partitionCount)]}
    targets = {}
    for layout, assignment in layouts.items():
        topic = f"{layout}{suffix}"
        if not isinstance(cluster, Floor):
            createTopic(cluster, topic, assignment=assignment)
        paths = frames(directory, topic, partitionCount)
        ports = [cluster.brokers[replicas[0]].port for replicas in assignment]
        targets[layout] = [(ports[k % partitionCount], paths[k % partitionCount]) for k in range(connections)]
    return targets


def compare(cluster, zookeeperPid: int, generator: list[str], directory: str, partitionCount: int,
            connections: int, warmup: float, seconds: float, rounds: int, report, suffix: str = "") -> dict:
    """
    On a running C{cluster} whose brokers 1 and 2 are up: the topics, then
    C{rounds} of one broker leading every partition against two each
    leading half, alternately.

    @return: layout (C{"one"}, C{"two"}) -> the runs' results.
    """
    results = compareAll({"": cluster}, zookeeperPid, {"": (generator, [])}, directory, partitionCount, connections,
                         warmup, seconds, rounds, report, suffix)
    return results[("", "")]


def compareAll(clusters: dict, zookeeperPid: int, generators: dict[str, tuple[list[str], list[str]]],
               directory: str,
               partitionCount: int, connections: int, warmup: float, seconds: float, rounds: int, report,
               suffix: str = "") -> dict:
    """
    L{compare} for several clusters (tree label -> cluster, each running
    its brokers 1 and 2) and several generators (label -> its command and
    its options, L{generatorOptions}), in one
    run: each round takes every (tree, generator) pair in turn, one broker
    then two, starting one pair further along each round, so the machine's
    drift falls on all alike.

    @return: (tree, generator) -> layout -> the runs' results.
    """
    targets = {tree: layoutTargets(cluster, directory, partitionCount, connections,
                                   suffix + (f"-t{n}" if len(clusters) > 1 else ""))
               for n, (tree, cluster) in enumerate(clusters.items())}
    brokerNames = ["broker 1", "broker 2"]
    pairs = [(tree, gen) for tree in clusters for gen in generators]
    results: dict[tuple[str, str], dict[str, list[dict]]] = {pair: {"one": [], "two": []} for pair in pairs}
    for n in range(rounds):
        for tree, gen in pairs[n % len(pairs):] + pairs[: n % len(pairs)]:
            cluster = clusters[tree]
            pids = {"broker 1": cluster.brokers[1].process.pid, "broker 2": cluster.brokers[2].process.pid,
                    "zookeeper": zookeeperPid}
            for layout in ("one", "two"):
                r = measure(generators[gen][0], targets[tree][layout], pids, warmup, seconds, generators[gen][1])
                results[(tree, gen)][layout].append(r)
                label = "one broker leads all" if layout == "one" else "two brokers lead half each"
                which = ", ".join(x for x in (tree, gen) if x)
                for line in describe(f"round {n + 1}, {which + ', ' if which else ''}{label}", r, brokerNames):
                    report(line)
    for pair in pairs:
        # the answer-only servers are not held to a CPU by a GIL: no ceiling for them
        for line in summarize(pair, results[pair], bounded=not isinstance(clusters[pair[0]], Floor)):
            report(line)
    return results


def summarize(pair: tuple[str, str], runs: dict[str, list[dict]], bounded: bool = True) -> list[str]:
    """
    The medians, the per-round ratios, and what bounds the ratio: with the
    generator costing g CPU-µs per record and the brokers b1 (one broker)
    and b2 (two, summed), on two CPUs one broker is held to one CPU by the
    GIL (R1 = 1/b1) and two brokers and the generator share both
    (R2 <= 2/(b2 + g)), so R2/R1 <= 2 b1/(b2 + g).  Not C{bounded} (servers
    that do not fill one CPU): the costs only.
    """
    median = statistics.median
    which = ", ".join(x for x in pair if x)
    one = median(r["rate"] for r in runs["one"])
    two = median(r["rate"] for r in runs["two"])
    perRound = ", ".join(f"{t['rate'] / o['rate']:.2f}" for o, t in zip(runs["one"], runs["two"]))
    lines = [f"- {which + ': ' if which else ''}median: one broker {one:,.0f} records/s, two brokers "
             f"{two:,.0f} records/s: **{two / one:.2f}x** (per round: {perRound})"]
    if runs["one"] and runs["two"]:
        b1 = median(r["b_us"] for r in runs["one"])
        b2 = median(r["b_us"] for r in runs["two"])
        g1 = median(r["g_us"] for r in runs["one"])
        g2 = median(r["g_us"] for r in runs["two"])
        costs = f"b1 {b1:.1f} µs (one broker), b2 {b2:.1f} µs (two, summed), g {g2:.1f} µs with two ({g1:.1f} with one)"
        if not bounded:
            lines.append(f"  - per record (medians): {costs}")
            return lines
        ceiling = 2 * b1 / (b2 + g2)
        lines.append(
            f"  - per record (medians): {costs}; ceiling 2 b1/(b2 + g) = {ceiling:.2f}x, "
            f"2 b/(b + g) at b = b1 {2 * b1 / (b1 + g2):.2f}x; records per broker-CPU-second: one "
            f"{1e6 / b1:,.0f}, two {1e6 / b2:,.0f} ({b1 / b2:.2f}x; each broker on a whole CPU of its own: "
            f"{2 * b1 / b2:.2f}x)")
        rest = median(r["others"] for r in runs["one"])
        if two / one > 1.05 * ceiling:
            lines.append(
                f"  - the ratio is above the ceiling: the one-broker runs did not have a CPU to themselves "
                f"(the rest of the machine took {rest:.2f} of a core, median) -- other work on the machine "
                f"inflates the ratio; take it on a quiet machine")
    return lines


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


class _Process:
    def __init__(self, process: subprocess.Popen, port: int) -> None:
        self.process = process
        self.port = port


class Floor:
    """
    Two of the generator's answer-only servers (C{loadgen -s}) standing in
    for brokers 1 and 2, each on the CPU C{auto} gives that broker: what a
    server that does nothing but answer pays per small request in the
    kernel, beside the brokers' figures (C{--floor}).
    """

    #: a Produce v9 response to a one-partition, one-record request, in bytes
    RESPONSE_BYTES = 54

    def __init__(self, binary: list[str]) -> None:
        self.brokers = {}
        for node, cpu in zip((1, 2), spreadCpus()):
            process = subprocess.Popen(binary + ["-s", "0", "3600", str(self.RESPONSE_BYTES)], stdout=subprocess.PIPE,
                                       text=True, preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {int(cpu)}))
            self.brokers[node] = _Process(process, int(process.stdout.readline()))

    def stopAll(self) -> None:
        for server in self.brokers.values():
            server.process.kill()
            server.process.wait()


def generatorOptions(spec: str) -> dict[str, list[str]]:
    """
    C{--generators}: label -> the generator's options.  C{epoll}, or
    C{uring} / C{uring:N} (io_uring, woken once N answers are ready); a
    C{+batch} suffix runs it as SCHED_BATCH (woken, it does not preempt
    the broker thread on its CPU).
    """
    commands = {}
    for item in spec.split(","):
        kind, _, batch = item.removesuffix("+batch").partition(":")
        policy = ["-B"] if item.endswith("+batch") else []
        if kind == "epoll" and not batch:
            commands[item] = policy
        elif kind == "uring":
            commands[item] = ["-u", "-w", batch or "1"] + policy
        else:
            raise SystemExit(f"unknown generator {item!r}: epoll, uring or uring:N")
    return commands


def startCluster(zookeeper, root: str, mode: str, tree: str | None):
    """
    Brokers 1 and 2 with C{mode}'s affinity, of this tree or (C{tree}) of
    another source tree: its code on the brokers' PYTHONPATH, run by this
    interpreter (as L{bench.brokers.startBroker} runs C{kafkatwist:PATH}).
    """
    from kafkatwist.testing import waitUntil
    from tests.cluster.helpers import REPLICATION, ClusterUnderTest

    name = f"{mode}-{os.path.basename(tree.rstrip('/')) if tree else 'this'}"
    cluster = ClusterUnderTest(zookeeper, os.path.join(root, name), name)
    try:
        for i, overrides in affinity(mode).items():
            broker = cluster.broker(i, **REPLICATION, **overrides)
            if tree:
                broker.extraEnv["PYTHONPATH"] = os.pathsep.join(
                    [tree, os.path.join(tree, "spark")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                                           if p and not os.path.abspath(p).startswith(ROOT)])
            cluster.startBroker(i)
        admin = cluster.admin()
        waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 2, timeout=60, what="two brokers")
    except BaseException:
        cluster.stopAll()
        raise
    return cluster


def main(argv: list[str]) -> int:
    from kafkatwist.testing import ZooKeeper

    parser = argparse.ArgumentParser(prog="python -m bench twobrokers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=1.5, help="uncounted seconds before each run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default="auto,spread,none", help="request.threads.cpu.affinity modes, one cluster each")
    parser.add_argument("--reference", action="append", default=[], metavar="kafkatwist:PATH",
                        help="another source tree's brokers beside this tree's, rounds alternated (repeatable)")
    parser.add_argument("--floor", action="store_true",
                        help="also two answer-only C servers in the brokers' places: the kernel's share of a request")
    parser.add_argument("--generators", default=DEFAULT_GENERATORS,
                        help="load generators, rounds alternated: epoll, uring, uring:N (default %(default)s)")
    args = parser.parse_args(argv)
    modes = args.modes.split(",")
    for mode in modes:
        affinity(mode)
    trees: dict[str, str | None] = {"this tree" if args.reference or args.floor else "": None}
    for reference in args.reference:
        path = reference.split(":", 1)[1] if reference.startswith("kafkatwist:") else reference
        if not os.path.isdir(os.path.join(path, "kafkatwist")):
            parser.error(f"{reference}: no kafkatwist/ there")
        trees[reference] = os.path.abspath(path)
    root = tempfile.mkdtemp(prefix="bench-twobrokers-")
    binary = loadgen.compiled(root)
    if binary is None:
        parser.error("needs a C compiler for bench/loadgen.c")
    generators = {label: (binary, options) for label, options in generatorOptions(args.generators).items()}
    if len(generators) == 1:
        generators = {"": next(iter(generators.values()))}
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
            clusters = {}
            try:
                for label, tree in trees.items():
                    clusters[label] = startCluster(zookeeper, root, mode, tree)
                if args.floor:
                    clusters["floor"] = Floor(binary)
                setting = ", ".join(f"broker {i}: {o.get('request.threads.cpu.affinity', 'auto')}"
                                    for i, o in affinity(mode).items())
                report(f"## request.threads.cpu.affinity {mode} ({setting}); {args.connections} connections, "
                       f"{args.partitions} partitions RF 1, one-record Produce v9 acks=1; "
                       f"{args.seconds:g} s after {args.warmup:g} s warm-up; generators {args.generators}"
                       f"{'; trees: ' + ', '.join(clusters) if len(clusters) > 1 else ''} (load {loadAverage()})")
                results = compareAll(clusters, zookeeper.server.process.pid, generators, root, args.partitions,
                                     args.connections, args.warmup, args.seconds, args.rounds, report)
                for (tree, gen), runs in results.items():
                    one = statistics.median(r["rate"] for r in runs["one"])
                    two = statistics.median(r["rate"] for r in runs["two"])
                    which = ", ".join(x for x in (mode, tree, gen) if x)
                    summary.append(f"{which}: {one:,.0f} -> {two:,.0f} records/s ({two / one:.2f}x)")
            finally:
                for cluster in clusters.values():
                    cluster.stopAll()
    finally:
        zookeeper.stop()
        shutil.rmtree(root, ignore_errors=True)
    print("\n".join(lines))
    print("summary (median one broker -> two brokers): " + "; ".join(summary))
    return 0
