"""
C{make cluster} (L{kafkatwist.cluster.local}) on ports of the caller's
choosing: a failed start stops what it started, and a started cluster has
C{__consumer_offsets} already (created while all brokers were up).
"""

from __future__ import annotations

import os
import socket
import sys

import pytest

from kafkatwist.cluster import local

pytestmark = pytest.mark.integration


def freeRun(count: int) -> int:
    """
    The first of C{count} consecutive free loopback ports.
    """
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count < 65536 and not any(local._inUse(base + i) for i in range(count)):
            return base
    raise RuntimeError("no run of free ports")


def assertNothingRuns(root):
    for pidFile in ("zookeeper.pid", "broker1/broker.pid", "broker2/broker.pid"):
        pid = local._readPid(os.path.join(root, pidFile))
        assert pid is None or not local._alive(pid), pidFile


def test_a_failed_start_stops_what_it_started_then_a_cluster_with_its_offsets_topic(
    zookeeper, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    base = freeRun(3)
    zkPort = freeRun(1)

    # A port in use: nothing is started.
    root = str(tmp_path / "busy")
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", base + 1))
        blocker.listen()
        assert local.start(root, 2, base, zkPort) == 1
    out = capsys.readouterr().out
    assert out == f"Broker 2: port {base + 1} is in use: pick other ports with BASE_PORT= (make) or --base-port\n"
    assertNothingRuns(root)

    # A broker that cannot start: ZooKeeper and the other broker are stopped.
    root = str(tmp_path / "broken")
    os.makedirs(os.path.join(root, "broker2"))
    with open(os.path.join(root, "broker2", "data"), "w") as f:
        f.write("a file where the data directory goes")
    assert local.start(root, 2, base, zkPort) == 1
    out = capsys.readouterr().out
    assert "Broker 2 stopped at start-up: kafkatwist: " in out
    assert "Stopped what this start had started: broker2, broker1, ZooKeeper" in out
    assertNothingRuns(root)

    root = str(tmp_path / "cluster")
    try:
        assert local.start(root, 2, base, zkPort) == 0
        out = capsys.readouterr().out
        assert f"bootstrap.servers=127.0.0.1:{base},127.0.0.1:{base + 1}" in out
        assert "__consumer_offsets is ready" in out
        from kafkatwist.client import KafkaWireClient

        client = KafkaWireClient(f"127.0.0.1:{base}", timeout=10)
        try:
            metadata = client.metadata(["__consumer_offsets"])
        finally:
            client.close()
        assert len(metadata.topics["__consumer_offsets"].partitions) == 50

        # A second start on other ports: refused in one line, nothing
        # started (a second ZooKeeper would share the first one's data).
        other = freeRun(2)
        assert local.start(root, 2, other, freeRun(1)) == 1
        out = capsys.readouterr().out
        assert out == (
            f"A cluster is already running in {root} (brokers on 127.0.0.1:{base}-{base + 1}, "
            f"ZooKeeper on 127.0.0.1:{zkPort}): make cluster-stop first, or start another with --dir\n"
        )
        # The same ports again: what runs is kept.
        assert local.start(root, 2, base, zkPort) == 0
        out = capsys.readouterr().out
        assert "Broker 1 already running" in out and "ZooKeeper already running" in out
    finally:
        local.stop(root)
    assertNothingRuns(root)


def test_a_pid_file_naming_another_program_is_neither_taken_nor_signalled(tmp_path, capsys):
    """
    A pid file outlives its broker (a crash, a reboot) and its pid may be
    reused: that process is not "already running" and is never signalled.
    """
    import subprocess

    root = tmp_path / "cluster"
    (root / "broker1").mkdir(parents=True)
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (root / "broker1" / "broker.pid").write_text(str(stranger.pid))
        (root / "zookeeper.pid").write_text(str(stranger.pid))
        assert not local._ours(stranger.pid, "kafkatwist")
        assert local.stop(str(root)) == 0
        assert stranger.poll() is None  # not signalled
        assert not (root / "broker1" / "broker.pid").exists()
        assert not (root / "zookeeper.pid").exists()
        assert "Stopped" not in capsys.readouterr().out
    finally:
        stranger.kill()
        stranger.wait()


def test_overrides_go_to_every_broker_and_per_broker_settings_are_refused(tmp_path, capsys, monkeypatch):
    """
    C{make cluster ARGS="--override k=v"}: each broker is started with it;
    a setting the launcher sets per broker (a port, a directory) is refused
    in one line and nothing is started.
    """
    root = str(tmp_path / "refused")
    assert local.main(["start", "--dir", root, "--override", "metrics.http.listener=127.0.0.1:1"]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "metrics.http.listener" in out, out
    assert not os.path.exists(os.path.join(root, "zookeeper.pid"))
    assert local.main(["start", "--dir", root, "--override", "num.partitions"]) == 1
    assert "key=value" in capsys.readouterr().out

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in sys.path if p))
    base = freeRun(1)
    zkPort = freeRun(1)
    root = str(tmp_path / "overridden")
    try:
        assert local.main(["start", "--dir", root, "--brokers", "1", "--base-port", str(base),
                           "--zk-port", str(zkPort), "--override", "num.partitions=7"]) == 0, \
            capsys.readouterr().out
        pid = local._readPid(os.path.join(root, "broker1", "broker.pid"))
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().rstrip(b"\0").split(b"\0")
        assert argv[-2:] == [b"--override", b"num.partitions=7"]
    finally:
        local.stop(root)
    assertNothingRuns(root)
