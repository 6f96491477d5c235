"""
A real ZooKeeper for clusters under test: Debian's package, installed on
first use when missing (L{kafkatwist.cluster.zkserver}), one standalone
server on a free loopback port; each cluster takes a chroot of its own, so
one server serves a whole test session.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import sys
import tempfile

from kafkatwist.cluster.zkserver import ZooKeeperServer, ZooKeeperUnavailable

__all__ = ["ZooKeeper", "ZooKeeperUnavailable"]

_chroots = itertools.count()


class ZooKeeper:
    """
    A standalone ZooKeeper process.

    @ivar server: the L{ZooKeeperServer}.
    """

    def __init__(self, directory: str | None = None, keepLogs: bool = False) -> None:
        self.ownsDirectory = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="kafkatwist-zookeeper-")
        self.directory = directory
        self.keepLogs = keepLogs
        self.failed = False
        # No fsync: a test's ZooKeeper keeps nothing worth a crash, and on a
        # loaded machine one slow fsync stalls every session's heartbeat.
        self.server = ZooKeeperServer(directory, forceSync=False)

    def start(self, timeout: float = 60.0) -> "ZooKeeper":
        """
        @raise ZooKeeperUnavailable: it cannot be installed or started here
            (the message says why, in one line).
        """
        try:
            self.server.start(timeout)
        except ZooKeeperUnavailable:
            self.failed = True
            raise
        return self

    def stop(self) -> None:
        self.server.stop()
        if self.ownsDirectory and not (self.failed or self.keepLogs):
            shutil.rmtree(self.directory, ignore_errors=True)
        elif self.failed:
            print(f"kafkatwist: ZooKeeper logs kept in {self.server.logPath}", file=sys.stderr)

    @property
    def address(self) -> str:
        """
        C{host:port}, without a chroot.
        """
        return self.server.connect

    def connect(self, name: str | None = None) -> str:
        """
        A C{zookeeper.connect} with a chroot of its own, so clusters sharing
        the server never see each other.
        """
        return f"{self.server.connect}/{name or 'kt'}-{os.getpid()}-{next(_chroots)}"

    def status(self, timeout: float = 5.0) -> str:
        """
        ZooKeeper's C{srvr} four-letter word (latency, outstanding requests),
        or why it did not answer: for a failure message when a cluster did
        not react in time.
        """
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

    def __enter__(self) -> "ZooKeeper":
        return self.start()

    def __exit__(self, excType, exc, tb) -> None:
        if excType is not None:
            self.failed = True
        self.stop()
