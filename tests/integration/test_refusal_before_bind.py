"""
Issue 30, item 6: a broker that will refuse its data directory (a bad
C{meta.properties}, a topic without usable metadata, a directory another
broker holds) says so before it binds a port, so it never accepts a TCP
connection: a port-based health check never sees a dying broker as up.
Run in a cluster (C{zookeeper.connect}), where start-up talks to ZooKeeper
before it opens the log: the window the issue saw.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from kafkatwist.util.dirlock import DataDirLock
from kafkatwist.cluster.zkserver import freePort
from kafkatwist.testing.broker import ROOT, TWISTD
from tests.integration.helpers import dataDirectory

pytestmark = pytest.mark.integration


def connectionsAccepted(tmp_path, directory, connect) -> tuple[int, str]:
    """
    Start the broker and try to connect to its port until it exits.

    @return: the connections accepted, and what it wrote.
    """
    port = freePort()
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    process = subprocess.Popen(
        [TWISTD, "-n", "--pidfile=", "kafkatwist", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
         "--override", f"log.dir={directory}", "--override", f"zookeeper.connect={connect}",
         "--override", "node.id=1"],
        cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    accepted = 0
    deadline = time.monotonic() + 60
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    accepted += 1
            except OSError:
                pass
            time.sleep(0.005)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode not in (None, 0)
    return accepted, (out + err).decode("utf-8", "replace")


def damageMeta(directory):
    with open(os.path.join(directory, "meta.properties"), "wb") as f:
        f.write(b"\x00\x9f\xff binary \xfe\x01")
    return "is not a properties file"


def removeMeta(directory):
    os.unlink(os.path.join(directory, "meta.properties"))
    return "missing or empty, but the directory holds data"


def truncateTopicMetadata(directory):
    with open(os.path.join(directory, "t-0", "topic-metadata.json"), "r+b") as f:
        f.truncate(20)
    return "topic metadata is not valid JSON"


@pytest.mark.parametrize("damage", [damageMeta, removeMeta, truncateTopicMetadata],
                         ids=["binary-meta", "missing-meta", "truncated-topic-metadata"])
def test_refused_directory_never_accepts(zookeeper, tmp_path, damage):
    directory = dataDirectory(tmp_path)
    words = damage(directory)
    accepted, output = connectionsAccepted(tmp_path, directory, zookeeper.connect("refuse"))
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0], output
    assert accepted == 0, f"{accepted} connections accepted before: {lines[0]}"


def test_directory_in_use_never_accepts(zookeeper, tmp_path):
    directory = dataDirectory(tmp_path)
    lock = DataDirLock([directory])
    lock.acquire()
    try:
        accepted, output = connectionsAccepted(tmp_path, directory, zookeeper.connect("refuse"))
    finally:
        lock.release()
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "is in use by another broker" in lines[0], output
    assert accepted == 0, f"{accepted} connections accepted before: {lines[0]}"
