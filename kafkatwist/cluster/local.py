"""
C{make cluster} / C{make cluster-stop}: a ZooKeeper and three brokers on
this machine for trying the cluster mode -- brokers 1-3 on
127.0.0.1:9092-9094, ZooKeeper on 127.0.0.1:2181, everything (data, logs,
pid files) under C{./cluster/}.

    python -m kafkatwist.cluster.local start [--dir cluster] [--brokers 3]
    python -m kafkatwist.cluster.local stop [--dir cluster]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from kafkatwist.cluster.zkserver import ZooKeeperServer, ZooKeeperUnavailable, ruok

ZK_PORT = 2181
FIRST_PORT = 9092


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _readPid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def start(root: str, count: int) -> int:
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    zkPid = os.path.join(root, "zookeeper.pid")
    pid = _readPid(zkPid)
    if pid is not None and _alive(pid) and ruok("127.0.0.1", ZK_PORT):
        print(f"ZooKeeper already running (pid {pid})")
    else:
        if ruok("127.0.0.1", ZK_PORT):
            print(f"Port {ZK_PORT} already serves a ZooKeeper that is not ours: stop it first")
            return 1
        server = ZooKeeperServer(os.path.join(root, "zookeeper"), port=ZK_PORT, tickTimeMs=2000)
        try:
            server.start()
        except ZooKeeperUnavailable as e:
            print(f"ZooKeeper: {e}")
            return 1
        with open(zkPid, "w") as f:
            f.write(str(server.process.pid))
        print(f"ZooKeeper on 127.0.0.1:{ZK_PORT} (pid {server.process.pid}), data in {server.directory}")
    twistd = os.path.join(os.path.dirname(sys.executable), "twistd")
    waiting = {}
    for brokerId in range(1, count + 1):
        directory = os.path.join(root, f"broker{brokerId}")
        os.makedirs(directory, exist_ok=True)
        pidFile = os.path.join(directory, "broker.pid")
        logFile = os.path.join(directory, "broker.log")
        pid = _readPid(pidFile)
        if pid is not None and _alive(pid):
            print(f"Broker {brokerId} already running (pid {pid})")
            continue
        port = FIRST_PORT + brokerId - 1
        # In the foreground of a process of its own (twistd -n): the
        # broker's threads start before twistd would daemonize.
        command = [
            twistd, "-n", "--pidfile=", f"--logfile={logFile}", "kafkatwist",
            "--override", f"node.id={brokerId}",
            "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override", f"log.dir={os.path.join(directory, 'data')}",
            "--override", f"zookeeper.connect=127.0.0.1:{ZK_PORT}/kafkatwist",
            "--override", f"default.replication.factor={min(3, count)}",
            "--override", f"offsets.topic.replication.factor={min(3, count)}",
            "--override", f"transaction.state.log.replication.factor={min(3, count)}",
        ]
        offset = os.path.getsize(logFile) if os.path.exists(logFile) else 0
        errPath = os.path.join(directory, "stderr.log")
        with open(errPath, "ab") as err:
            process = subprocess.Popen(
                command, cwd=directory, stdin=subprocess.DEVNULL, stdout=err, stderr=err,
                start_new_session=True,
            )
        with open(pidFile, "w") as f:
            f.write(str(process.pid))
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
                print(f"Broker {brokerId} stopped at start-up: {why[0]}")
                return 1
        time.sleep(0.2)
    if waiting:
        print(f"Brokers {sorted(waiting)} did not start in time: see their broker.log")
        return 1
    bootstrap = ",".join(f"127.0.0.1:{FIRST_PORT + i}" for i in range(count))
    print(f"bootstrap.servers={bootstrap}   (make cluster-stop stops everything)")
    return 0


def _stopPid(pid: int, what: str, timeout: float = 60.0) -> None:
    if not _alive(pid):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
    print(f"Stopped {what} (pid {pid})")


def stop(root: str) -> int:
    root = os.path.abspath(root)
    if not os.path.isdir(root):
        print(f"No cluster under {root}")
        return 0
    # Brokers one at a time (each moves its leaders to the others first),
    # then ZooKeeper.
    for name in sorted(os.listdir(root)):
        pid = _readPid(os.path.join(root, name, "broker.pid"))
        if pid is not None:
            _stopPid(pid, name)
    pid = _readPid(os.path.join(root, "zookeeper.pid"))
    if pid is not None:
        _stopPid(pid, "ZooKeeper")
        os.unlink(os.path.join(root, "zookeeper.pid"))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkatwist.cluster.local")
    parser.add_argument("action", choices=("start", "stop"))
    parser.add_argument("--dir", default="cluster", help="where data, logs and pid files go")
    parser.add_argument("--brokers", type=int, default=3, help="how many brokers (start)")
    args = parser.parse_args(argv)
    if args.action == "start":
        return start(args.dir, args.brokers)
    return stop(args.dir)


if __name__ == "__main__":
    sys.exit(main())
