"""
Network-layer benchmark (issue 2, "Cost of the hops").

Compares, in one run and on the same workloads:

  - C{twistd -n kafkatwist} with 1, 2 and 4 Processors (C{num.network.threads})
    and the default C{num.io.threads};
  - a one-reactor Twisted server doing the same work in-line
    (L{bench.onereactor}): the baseline the 1.3x target is measured against.

Workloads (each a ping-pong of one pre-encoded frame per connection, driven by
the C load generator in L{bench.loadgen}):

  - C{apiversions}: ApiVersions v3, 64 connections;
  - C{metadata}: Metadata v12 with an empty topic list, 64 connections;
  - C{1mib}: ApiVersions v3 whose C{client_software_name} is padded so the
    request frame is exactly 1 MiB (size prefix = 1,048,576), 8 connections.
    Valid, answered cheaply (the handler ignores the name), so it exercises
    framing, buffering and memory accounting of 1 MiB requests.

    python -m bench network [--seconds 3] [--processors 1,2,4] [--sweep] ...

Broker CPU seconds come from C{/proc/<pid>/stat} (utime+stime, all threads)
around each load; "x base" is the one-reactor server's requests/s divided by
this row's, so the issue's target is x base <= 1.30.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench import loadgen
from bench.brokers import processCpuSeconds, terminate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIB = 1 << 20
_LISTENING = re.compile(r"Listening on (\w+)://\S+ \(port (\d+)\)")
_CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- request frames ----------------------------------------------------------


def frames() -> dict[str, bytes]:
    """
    @return: workload name -> the whole request frame, size prefix included.
    """
    from kafkatwist.protocol.apis import API_VERSIONS, METADATA, requestType
    from kafkatwist.protocol.codec import encodeRequestFrame

    ApiVersions = requestType(API_VERSIONS, 3)
    Metadata = requestType(METADATA, 12)

    def apiVersions(name: str) -> bytes:
        return encodeRequestFrame(
            API_VERSIONS, 3, 1, "kafkatwist-bench",
            ApiVersions(client_software_name=name, client_software_version="1.0"),
        )

    small = apiVersions("kafkatwist-bench")
    metadata = encodeRequestFrame(
        METADATA, 12, 1, "kafkatwist-bench",
        Metadata(topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False),
    )
    # Pad the software name so the size prefix says exactly 1 MiB.
    big = apiVersions("x" * MIB)
    excess = int.from_bytes(big[:4], "big") - MIB
    big = apiVersions("x" * (MIB - excess))
    assert int.from_bytes(big[:4], "big") == MIB, "1 MiB frame sizing"
    return {"apiversions": small, "metadata": metadata, "1mib": big}


WORKLOADS = {
    # name: (description, default connections)
    "apiversions": ("ApiVersions v3", 64),
    "metadata": ("Metadata v12, no topics", 64),
    "1mib": ("1 MiB ApiVersions v3", 8),
}


# -- servers -----------------------------------------------------------------


def contextSwitches(pid: int) -> int:
    """
    Voluntary + involuntary context switches of every thread of C{pid}.
    """
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def machineBusySeconds() -> float:
    """
    CPU seconds every CPU spent not idle since boot (C{/proc/stat}).
    """
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / _CLK_TCK


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


class Server:
    name = ""
    processors = "-"
    ioThreads = "-"
    pid = 0
    port = 0

    def start(self) -> "Server":
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class Kafkatwist(Server):
    """
    A real C{twistd -n kafkatwist} on port 0.
    """

    name = "kafkatwist"

    def __init__(self, processors: int, ioThreads: int | None, extra: dict[str, str]) -> None:
        self.processors = processors
        self.ioThreads = ioThreads if ioThreads is not None else "dflt"
        self.overrides = {"num.network.threads": str(processors)}
        if ioThreads is not None:
            self.overrides["num.io.threads"] = str(ioThreads)
        self.overrides.update(extra)
        self.process = None

    def start(self, timeout: float = 30.0) -> "Kafkatwist":
        self.directory = tempfile.mkdtemp(prefix="kafkatwist-bench-broker-")
        twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
        if os.path.exists(twistd):
            args = [twistd]
        else:
            args = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()"]
        args += ["-n", "--pidfile=", "kafkatwist"]
        overrides = {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dir": os.path.join(self.directory, "data"),
            **self.overrides,
        }
        for key, value in overrides.items():
            args += ["--override", f"{key}={value}"]
        self.logPath = os.path.join(self.directory, "broker.log")
        self._log = open(self.logPath, "wb")
        self.process = subprocess.Popen(
            args, cwd=self.directory, stdout=self._log, stderr=subprocess.STDOUT, env=_env()
        )
        self.pid = self.process.pid
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.logPath, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if "kafkatwist node" in text and "started" in text:
                ports = dict(_LISTENING.findall(text))
                self.port = int(ports["PLAINTEXT"])
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"kafkatwist exited with {self.process.returncode}:\n{text}")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"kafkatwist did not start in {timeout}s")

    def stop(self) -> None:
        terminate(self.process)
        self._log.close()
        shutil.rmtree(self.directory, ignore_errors=True)


class OneReactor(Server):
    """
    L{bench.onereactor} in its own process.
    """

    name = "one-reactor"
    processors = 0
    ioThreads = 0

    def __init__(self, extra: dict[str, str]) -> None:
        self.extra = extra
        self.process = None

    def start(self, timeout: float = 30.0) -> "OneReactor":
        self.directory = tempfile.mkdtemp(prefix="kafkatwist-bench-onereactor-")
        args = [sys.executable, "-m", "bench.onereactor", self.directory]
        args += [f"{k}={v}" for k, v in self.extra.items()]
        self.process = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), text=True
        )
        self.pid = self.process.pid
        line = self.process.stdout.readline()
        if not line.startswith("port "):
            terminate(self.process)
            raise RuntimeError(f"one-reactor server failed: {line}{self.process.stderr.read()}")
        self.port = int(line.split()[1])
        return self

    def stop(self) -> None:
        terminate(self.process)
        shutil.rmtree(self.directory, ignore_errors=True)


# -- running -----------------------------------------------------------------


def measure(server: Server, workload: str, frameFile: str, connections: int, args, prefix) -> dict:
    before = processCpuSeconds(server.pid)
    busyBefore = machineBusySeconds()
    switchesBefore = contextSwitches(server.pid)
    started = time.monotonic()
    result = loadgen.run(prefix, "127.0.0.1", server.port, connections, args.warmup, args.seconds, frameFile)
    wall = time.monotonic() - started
    after = processCpuSeconds(server.pid)
    busy = machineBusySeconds() - busyBefore
    switches = contextSwitches(server.pid) - switchesBefore
    seconds = result["seconds"]
    responses = result["responses"]
    return {
        "server": server.name,
        "processors": server.processors,
        "io_threads": server.ioThreads,
        "workload": workload,
        "connections": connections,
        "requests_per_s": responses / seconds,
        "mb_per_s": responses * result["frame_bytes"] / seconds / 1e6,
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        # CPU over the whole load (warm-up included), per response answered
        # in the window scaled to the whole wall time: an estimate of CPU cost
        # per request that the machine's noise barely moves.
        "broker_cpu_s": after - before,
        "cpu_us_per_req": (after - before) / max(1, responses * wall / seconds) * 1e6,
        "loadgen_cpu_s": result["cpu_seconds"],
        # broker context switches (all threads) per request: the price of
        # wake-ups between Processor and handler threads
        "switches_per_req": switches / max(1, responses * wall / seconds),
        # CPU the rest of the machine (other people's work) took meanwhile:
        # a noise indicator, in cores.
        "other_cores": max(0.0, busy - (after - before) - result["cpu_seconds"]) / wall,
        "errors": result["errors"] + result["closed_by_peer"] + result["connect_failures"],
        "answered_connections": result["answered_connections"],
    }


def machine() -> list[str]:
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import twisted

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()
    return [
        f"machine: nproc={usable} (cpu_count={os.cpu_count()}), CPU: {model}",
        f"         {platform.python_implementation()} {platform.python_version()}, "
        f"Twisted {twisted.__version__}, {platform.system()} {platform.release()}",
        f"         load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
    ]


def table(rows: list[dict]) -> str:
    base = {r["workload"]: r["requests_per_s"] for r in rows if r["server"] == "one-reactor"}
    head = (
        f"{'server':<12} {'P':>2} {'io':>4}  {'workload':<12} {'conns':>5} {'req/s':>9} {'MB/s':>8} "
        f"{'p50 ms':>8} {'p99 ms':>8} {'CPU s':>6} {'CPUus/req':>9} {'cs/req':>6} {'x base':>7} {'noise':>5}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio = base.get(r["workload"])
        ratio = f"{ratio / r['requests_per_s']:.2f}x" if ratio and r["requests_per_s"] else "-"
        mb = f"{r['mb_per_s']:8.1f}" if r["workload"] == "1mib" else f"{'':>8}"
        note = ""
        if r["errors"]:
            note += f"  errors={r['errors']}"
        if r["answered_connections"] < r["connections"]:
            note += f"  answered {r['answered_connections']}/{r['connections']} conns"
        lines.append(
            f"{r['server']:<12} {str(r['processors']):>2} {str(r['io_threads']):>4}  {r['workload']:<12} "
            f"{r['connections']:>5} {r['requests_per_s']:9.0f} {mb} {r['p50_ms']:8.2f} "
            f"{r['p99_ms']:8.2f} {r['broker_cpu_s']:6.2f} {r['cpu_us_per_req']:9.0f} {r['switches_per_req']:6.2f} {ratio:>7} {r['other_cores']:5.2f}{note}"
        )
    return "\n".join(lines)


def best(rows: list[dict]) -> list[dict]:
    """
    Keep the best run (highest requests/s) of each (server, P, io, workload),
    in first-seen order.
    """
    out: dict[tuple, dict] = {}
    for r in rows:
        key = (r["server"], r["processors"], r["io_threads"], r["workload"], r["connections"])
        if key not in out or r["requests_per_s"] > out[key]["requests_per_s"]:
            out[key] = r
    return list(out.values())


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench network", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="measuring window per load (default 3)")
    p.add_argument("--warmup", type=float, default=1.0, help="warm-up before each window (default 1)")
    p.add_argument("--processors", default="1,2,4", help="num.network.threads values (default 1,2,4)")
    p.add_argument("--io-threads", type=int, default=None,
                   help="num.io.threads for the main comparison (default: the broker's default)")
    p.add_argument("--workloads", default="apiversions,metadata,1mib",
                   help=f"comma separated, of {', '.join(WORKLOADS)}")
    p.add_argument("--connections", type=int, default=None, help="connections for small workloads (64)")
    p.add_argument("--bulk-connections", type=int, default=None, help="connections for 1mib (8)")
    p.add_argument("--repeat", type=int, default=1, help="rounds over all servers; the best is shown")
    p.add_argument("--no-baseline", action="store_true", help="skip the one-reactor server")
    p.add_argument("--sweep", action="store_true",
                   help="also sweep num.network.threads x num.io.threads on the small workloads "
                        "(adds about a minute) to pick defaults")
    p.add_argument("--sweep-processors", default="1,2", help="sweep: num.network.threads values")
    p.add_argument("--sweep-io-threads", default="1,2,4", help="sweep: num.io.threads values")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="extra broker setting for every server (repeatable)")
    p.add_argument("--python-loadgen", action="store_true", help="use the Python load generator")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
    if not 0 < args.seconds <= 120 or not 0 <= args.warmup <= 30:
        raise SystemExit("--seconds must be in (0, 120], --warmup in [0, 30]")
    extra = dict(kv.split("=", 1) for kv in args.override)

    if args.python_loadgen:
        prefix, kind = [sys.executable, "-m", "bench.loadgen"], "Python/selectors"
    else:
        prefix, kind = loadgen.command()
    workdir = tempfile.mkdtemp(prefix="kafkatwist-bench-frames-")
    frameFiles = {}
    for name, data in frames().items():
        frameFiles[name] = os.path.join(workdir, name)
        with open(frameFiles[name], "wb") as f:
            f.write(data)

    def connectionsFor(w: str) -> int:
        if w == "1mib":
            return args.bulk_connections or WORKLOADS[w][1]
        return args.connections or WORKLOADS[w][1]

    servers: list = []
    if not args.no_baseline:
        servers.append(lambda: OneReactor(extra))
    for p in _ints(args.processors):
        servers.append(lambda p=p: Kafkatwist(p, args.io_threads, extra))

    for line in machine():
        print(line)
    print(f"load generator: {kind}; window {args.seconds:g}s after {args.warmup:g}s warm-up per load")
    for w in workloads:
        print(f"  {w:<12} {WORKLOADS[w][0]}, {connectionsFor(w)} connections, "
              f"frame {len(open(frameFiles[w], 'rb').read()):,} bytes")
    sys.stdout.flush()

    rows: list[dict] = []

    def runServer(make, names) -> None:
        server = make().start()
        try:
            for w in names:
                row = measure(server, w, frameFiles[w], connectionsFor(w), args, prefix)
                rows.append(row)
                sys.stderr.write(
                    f"  {server.name} P={server.processors} io={server.ioThreads} {w}: "
                    f"{row['requests_per_s']:.0f} req/s\n"
                )
        finally:
            server.stop()

    started = time.monotonic()
    try:
        for _ in range(max(1, args.repeat)):
            for make in servers:
                runServer(make, workloads)
        mainRows = best(rows)
        print()
        print(table(mainRows))
        sweepRows: list[dict] = []
        if args.sweep:
            rows.clear()
            small = [w for w in workloads if w != "1mib"] or ["apiversions"]
            combos = [(p, io) for p in _ints(args.sweep_processors) for io in _ints(args.sweep_io_threads)]
            for _ in range(max(1, args.repeat)):
                for p, io in combos:
                    runServer(lambda p=p, io=io: Kafkatwist(p, io, extra), small)
            sweepRows = best(rows)
            baseRows = [r for r in mainRows if r["server"] == "one-reactor"]
            print()
            print("defaults sweep (num.network.threads x num.io.threads):")
            print(table(baseRows + sweepRows))
        print(f"\n(total {time.monotonic() - started:.0f}s; 'x base' = one-reactor req/s / row req/s, "
              f"target <= 1.30; CPUus/req = broker CPU per request;\n"
              f" cs/req = broker context switches per request;\n"
              f" noise = cores busy with other processes during the load -- rows with noise > 0.3 "
              f"are not comparable on 2 cores)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": machine(), "rows": mainRows, "sweep": sweepRows}, f, indent=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if prefix and prefix[0] != sys.executable:
            shutil.rmtree(os.path.dirname(prefix[0]), ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
