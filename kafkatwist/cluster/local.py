"""
C{make cluster} / C{make cluster-stop}: a ZooKeeper and three brokers on
this machine for trying the cluster mode -- brokers 1-3 on
127.0.0.1:9092-9094, ZooKeeper on 127.0.0.1:2181, everything (data, logs,
pid files) under C{./cluster/}.

    python -m kafkatwist.cluster.local start [--dir cluster] [--brokers 3] [--base-port 9092] [--zk-port 2181]
    python -m kafkatwist.cluster.local stop [--dir cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional, Sequence

from kafkatwist.cluster.zkserver import ZooKeeperServer, ZooKeeperUnavailable, ruok

ZK_PORT = 2181
FIRST_PORT = 9092
#: the ports a started cluster runs on, under its directory
PORTS_FILE = "ports.json"


def _alive(pid: int) -> bool:
    try:
        # A child of this process (started by this call) that ended is a
        # zombie until reaped, and kill(pid, 0) finds zombies.
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _ours(pid: int | None, marker: str) -> bool:
    """
    Whether C{pid} is alive and is the process its pid file names: its
    command line holds C{marker} (C{kafkatwist} for a broker, C{zookeeper}
    for ZooKeeper).  A pid file outlives its process (a crash, a reboot),
    and the pid may since belong to something else, which must be neither
    taken for the cluster nor signalled.
    """
    if pid is None or not _alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return marker.encode() in f.read().lower()
    except OSError:
        return True  # no /proc: trust the pid file, as before


def _readPorts(root: str) -> dict | None:
    try:
        with open(os.path.join(root, PORTS_FILE)) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else None
    except (OSError, ValueError):
        return None


def _describe(ports: dict) -> str:
    base, count = int(ports.get("basePort", 0)), int(ports.get("brokers", 0))
    return (f"brokers on 127.0.0.1:{base}-{base + count - 1}, ZooKeeper on "
            f"127.0.0.1:{ports.get('zkPort')}")


def _readPid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


# Settings the launcher gives each broker its own value of: an --override
# of one would give every broker the same port or directory.
PER_BROKER = frozenset({
    "node.id", "broker.id", "listeners", "advertised.listeners", "log.dir", "log.dirs",
    "zookeeper.connect", "metrics.http.listener",
})


def refusedOverride(overrides: Sequence[str]) -> Optional[str]:
    """
    One line saying why C{overrides} (C{key=value} each) cannot be given to
    every broker, or L{None}.
    """
    for item in overrides:
        key, sep, _ = item.partition("=")
        if not sep or not key.strip():
            return f"--override wants key=value, not {item!r}"
        if key.strip() in PER_BROKER:
            return (f"--override {key.strip()}: the local cluster sets it per broker "
                    f"(it would be the same on every broker); settings it takes: "
                    f"--base-port, --zk-port, --dir")
    return None


def start(root: str, count: int, basePort: int = FIRST_PORT, zkPort: int = ZK_PORT,
          overrides: Sequence[str] = ()) -> int:
    """
    Start ZooKeeper and C{count} brokers (those not running yet); if one
    fails, stop what this call started and say why.  Once all are up,
    C{__consumer_offsets} is created (Kafka creates it at a client's first
    FindCoordinator, with C{offsets.topic.replication.factor} replicas:
    with a broker down by then, every new consumer group would wait).
    """
    refused = refusedOverride(overrides)
    if refused:
        print(refused)
        return 1
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    started: list[tuple[int, str]] = []

    def fail(message: str) -> int:
        print(message)
        for pid, what in reversed(started):
            _stopPid(pid, what, quiet=True)
        if any(what == "ZooKeeper" for _, what in started):
            os.unlink(zkPid)
        if started:
            print("Stopped what this start had started: " + ", ".join(what for _, what in reversed(started)))
        return 1

    # One cluster per directory: one already running (any of its
    # processes) keeps its own ports -- a second ZooKeeper on its data
    # directory would corrupt it.
    zkPid = os.path.join(root, "zookeeper.pid")
    running = [name for name, marker, path in _pidFiles(root) if _ours(_readPid(path), marker)]
    wanted = {"basePort": basePort, "zkPort": zkPort, "brokers": count}
    if running:
        recorded = _readPorts(root)
        if recorded is None and ruok("127.0.0.1", zkPort):
            recorded = wanted  # started before ports were recorded, on these ports
        if recorded != wanted:
            where = _describe(recorded) if recorded else "other ports"
            print(f"A cluster is already running in {root} ({where}): "
                  "make cluster-stop first, or start another with --dir")
            return 1
    # Ports first: a broker stopped half-way through its first start can
    # leave a data directory that no longer matches the cluster.
    for brokerId in range(1, count + 1):
        pid = _readPid(os.path.join(root, f"broker{brokerId}", "broker.pid"))
        port = basePort + brokerId - 1
        if not _ours(pid, "kafkatwist") and _inUse(port):
            print(f"Broker {brokerId}: port {port} is in use: pick other ports with BASE_PORT= (make) "
                  "or --base-port")
            return 1
    with open(os.path.join(root, PORTS_FILE), "w") as f:
        json.dump(wanted, f)
    pid = _readPid(zkPid)
    if _ours(pid, "zookeeper") and ruok("127.0.0.1", zkPort):
        print(f"ZooKeeper already running (pid {pid})")
    else:
        if ruok("127.0.0.1", zkPort):
            print(f"Port {zkPort} already serves a ZooKeeper that is not ours: stop it or pick another "
                  "with ZK_PORT= (make) or --zk-port")
            return 1
        if _inUse(zkPort):
            print(f"Port {zkPort} is in use: pick another with ZK_PORT= (make) or --zk-port")
            return 1
        server = ZooKeeperServer(os.path.join(root, "zookeeper"), port=zkPort, tickTimeMs=2000)
        try:
            server.start()
        except ZooKeeperUnavailable as e:
            print(f"ZooKeeper: {e}")
            return 1
        with open(zkPid, "w") as f:
            f.write(str(server.process.pid))
        started.append((server.process.pid, "ZooKeeper"))
        print(f"ZooKeeper on 127.0.0.1:{zkPort} (pid {server.process.pid}), data in {server.directory}")
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    waiting = {}
    for brokerId in range(1, count + 1):
        directory = os.path.join(root, f"broker{brokerId}")
        os.makedirs(directory, exist_ok=True)
        pidFile = os.path.join(directory, "broker.pid")
        logFile = os.path.join(directory, "broker.log")
        pid = _readPid(pidFile)
        if _ours(pid, "kafkatwist"):
            print(f"Broker {brokerId} already running (pid {pid})")
            continue
        port = basePort + brokerId - 1
        if _inUse(port):
            return fail(f"Broker {brokerId}: port {port} is in use: pick other ports with BASE_PORT= (make) "
                        "or --base-port")
        # In the foreground of a process of its own (twistd -n): the
        # broker's threads start before twistd would daemonize.
        command = [
            twistd, "-n", "--pidfile=", f"--logfile={logFile}", "kafkatwist",
            "--override", f"node.id={brokerId}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dir={os.path.join(directory, 'data')}",
            "--override", f"zookeeper.connect=127.0.0.1:{zkPort}/kafkatwist",
            "--override", f"default.replication.factor={min(3, count)}",
            "--override", f"offsets.topic.replication.factor={min(3, count)}",
            "--override", f"transaction.state.log.replication.factor={min(3, count)}",
        ]
        for item in overrides:  # after the launcher's: the user's win
            command += ["--override", item]
        offset = os.path.getsize(logFile) if os.path.exists(logFile) else 0
        errPath = os.path.join(directory, "stderr.log")
        with open(errPath, "ab") as err:
            process = subprocess.Popen(
                command, cwd=directory, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                start_new_session=True,
            )
        with open(pidFile, "w") as f:
            f.write(str(process.pid))
        started.append((process.pid, f"broker{brokerId}"))
        waiting[brokerId] = (logFile, offset, port, process, errPath)
    deadline = time.monotonic() + 90
    while waiting and time.monotonic() < deadline:
        for brokerId, (logFile, offset, port, process, errPath) in list(waiting.items()):
            try:
                with open(logFile, "rb") as f:
                    f.seek(offset)
                    text = f.read().decode("utf-8", "replace")
            except FileNotFoundError:
                text = ""
            if f"kafkatwist node {brokerId} of cluster" in text:
                print(f"Broker {brokerId} on 127.0.0.1:{port}")
                del waiting[brokerId]
            elif process.poll() is not None:
                with open(errPath, "rb") as f:
                    why = f.read().decode("utf-8", "replace").strip().splitlines()[-1:] or ["see " + logFile]
                return fail(f"Broker {brokerId} stopped at start-up: {why[0]}")
        time.sleep(0.2)
    if waiting:
        return fail(f"Brokers {sorted(waiting)} did not start in time: see their broker.log")
    bootstrap = ",".join(f"127.0.0.1:{basePort + i}" for i in range(count))
    try:
        problem = createOffsetsTopic(bootstrap)
    except Exception as e:  # e.g. no broker reachable at all: one line, not a traceback
        problem = f"{type(e).__name__}: {e}"
    if problem:
        print(f"__consumer_offsets not created yet ({problem}): the first consumer group creates it, "
              f"once {min(3, count)} brokers are up")
    else:
        print("__consumer_offsets is ready (consumer groups need it, on "
              f"{min(3, count)} brokers: offsets.topic.replication.factor)")
    print(f"bootstrap.servers={bootstrap}   (make cluster-stop stops everything)")
    return 0


def _inUse(port: int) -> bool:
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def createOffsetsTopic(bootstrap: str, timeout: float = 60.0) -> str | None:
    """
    Ask FindCoordinator until it answers: the first one creates
    C{__consumer_offsets}, later ones wait for its leaders.

    @return: C{None} once a coordinator is found, else the last error.
    """
    from kafkatwist.client import KafkaWireClient
    from kafkatwist.protocol.apis import FIND_COORDINATOR

    deadline = time.monotonic() + timeout
    problem = "no answer"
    client = KafkaWireClient(bootstrap, clientId="make-cluster", timeout=10)
    try:
        while time.monotonic() < deadline:
            try:
                _, response = client.call(FIND_COORDINATOR, _findCoordinator)
            except Exception as e:  # the broker is still settling
                problem = f"{type(e).__name__}: {e}"
            else:
                codes = [getattr(response, "error_code", None)] + [
                    c.error_code for c in getattr(response, "coordinators", ())
                ]
                errors = [c for c in codes if c is not None and int(c) != 0]
                if not errors:
                    return None
                problem = errors[0].name
            time.sleep(0.5)
    finally:
        client.close()
    return problem


def _findCoordinator(version, cls):
    if version >= 4:
        return cls(key_type=0, coordinator_keys=("make-cluster",))
    return cls(key="make-cluster", key_type=0) if version >= 1 else cls(key="make-cluster")


def _stopPid(pid: int, what: str, timeout: float = 60.0, quiet: bool = False) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    if not quiet:
        print(f"Stopped {what} (pid {pid})")


def _pidFiles(root: str) -> list[tuple[str, str, str]]:
    """
    C{(name, command-line marker, pid file)} of the cluster's processes:
    the brokers in order, then ZooKeeper.
    """
    found = []
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            path = os.path.join(root, name, "broker.pid")
            if os.path.exists(path):
                found.append((name, "kafkatwist", path))
    found.append(("ZooKeeper", "zookeeper", os.path.join(root, "zookeeper.pid")))
    return found


def stop(root: str) -> int:
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        print(f"No cluster under {root}")
        return 0
    # Brokers one at a time (each moves its leaders to the others first),
    # then ZooKeeper.  A pid file whose process is gone, or is now some
    # other program's, is removed without a signal.
    for name, marker, path in _pidFiles(root):
        pid = _readPid(path)
        if pid is None:
            continue
        if _ours(pid, marker):
            _stopPid(pid, name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkatwist.cluster.local")
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", default="cluster", help="where data, logs and pid files go")
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (start)")
    parser.add_argument("--base-port", type=int, default=FIRST_PORT,
                        help="broker 1's port; broker n listens on base + n - 1 (start)")
    parser.add_argument("--zk-port", type=int, default=ZK_PORT, help="ZooKeeper's port (start)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting given to every broker, repeatable (start)")
    args = parser.parse_args(argv)
    if args.action == "start":
        return start(args.dir, args.brokers, args.base_port, args.zk_port, args.override)
    return stop(args.dir)


if __name__ == "__main__":
    sys.exit(main())
