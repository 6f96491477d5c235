"""
A real ZooKeeper for the cluster tests: Debian's package, installed on first
use when missing, one standalone server per test session on a free loopback
port with its own data directory.  Tests that need one take the
C{zookeeper} fixture; without ZooKeeper they are skipped with one line.
"""

from __future__ import annotations

import itertools

import pytest

from kafkatwist.cluster.zkserver import ZooKeeperServer, ZooKeeperUnavailable

_chroots = itertools.count()


class ZooKeeperFixture:
    """
    @ivar server: the L{ZooKeeperServer}.
    """

    def __init__(self, server: ZooKeeperServer) -> None:
        self.server = server

    def connect(self, name: str | None = None) -> str:
        """
        A C{zookeeper.connect} with a chroot of its own, so tests sharing the
        server never see each other's clusters.
        """
        return f"{self.server.connect}/{name or 'kt'}-{next(_chroots)}"

    def status(self, timeout: float = 5.0) -> str:
        """
        ZooKeeper's C{srvr} four-letter word (latency, outstanding requests),
        or why it did not answer: for a test's failure message when the
        cluster did not react in time.
        """
        import socket

        host, port = self.server.connect.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=timeout) as s:
                s.sendall(b"srvr")
                chunks = []
                while chunk := s.recv(4096):
                    chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
        except OSError as e:
            return f"no answer: {e}"


_unavailable: str | None = None


def zookeeperSession(tmp_path_factory):
    global _unavailable
    if _unavailable is not None:
        pytest.skip(_unavailable)
    server = ZooKeeperServer(str(tmp_path_factory.mktemp("zookeeper")), forceSync=False)
    try:
        server.start()
    except ZooKeeperUnavailable as e:
        _unavailable = f"cluster tests skipped: {e}"
        pytest.skip(_unavailable)
    try:
        yield ZooKeeperFixture(server)
    finally:
        server.stop()
