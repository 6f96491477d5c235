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
        assert "__consumer_offsets created" in out
        from kafkatwist.client import KafkaWireClient

        client = KafkaWireClient(f"127.0.0.1:{base}", timeout=10)
        try:
            metadata = client.metadata(["__consumer_offsets"])
        finally:
            client.close()
        assert len(metadata.topics["__consumer_offsets"].partitions) == 50
    finally:
        local.stop(root)
    assertNothingRuns(root)
