"""
A standalone ZooKeeper for development and tests: Debian's C{zookeeper}
package (installed on demand with apt-get when running as root), started as
C{java ... ZooKeeperServerMain} on a loopback port with its own data
directory.  Production clusters run their own ZooKeeper ensemble; this is
what C{make cluster} and the cluster tests use.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

from kafkatwist.util import debian, jvm

JAVA_DIR = "/usr/share/java"
#: what ZooKeeperServerMain needs on its class path (3.8, NIO server)
_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "metrics-core.jar",
    "commons-cli.jar",
)
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"


class ZooKeeperUnavailable(RuntimeError):
    """
    ZooKeeper cannot be installed or started here; the message says why in
    one line.
    """


def installed() -> bool:
    return os.path.exists(os.path.join(JAVA_DIR, "zookeeper.jar"))


def ensureInstalled(log=None) -> None:
    """
    Install Debian's C{zookeeper} package if it is missing (root only; see
    L{kafkatwist.util.debian}).

    @raise ZooKeeperUnavailable: it is missing and cannot be installed.
    """
    if installed():
        return
    try:
        debian.ensurePackage("zookeeper", installed, log)
    except debian.PackageUnavailable as e:
        raise ZooKeeperUnavailable(str(e)) from None


def freePort(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    """
    ZooKeeper's C{ruok} four-letter word: C{True} once the server serves.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    """
    One standalone ZooKeeper process.

    @ivar connect: its C{zookeeper.connect} string (C{host:port}).
    @param forceSync: fsync ZooKeeper's transaction log before answering
        (its default).  Tests turn it off: their ZooKeeper keeps nothing
        worth a crash, and on a loaded machine one slow fsync (1.25 s seen)
        stalls every session's heartbeat at once.
    """

    def __init__(self, directory: str, port: int = 0, host: str = "127.0.0.1",
                 tickTimeMs: int = 500, forceSync: bool = True) -> None:
        self.directory = os.path.abspath(directory)
        self.host = host
        self.port = port or freePort(host)
        self.tickTimeMs = tickTimeMs
        self.forceSync = forceSync
        self.process: subprocess.Popen | None = None
        self.logPath = os.path.join(self.directory, "zookeeper.log")

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def _writeConfig(self) -> str:
        dataDir = os.path.join(self.directory, "data")
        os.makedirs(dataDir, exist_ok=True)
        path = os.path.join(self.directory, "zoo.cfg")
        with open(path, "w") as f:
            f.write(
                f"tickTime={self.tickTimeMs}\n"
                f"dataDir={dataDir}\n"
                f"clientPort={self.port}\n"
                f"clientPortAddress={self.host}\n"
                # No Jetty admin server on 8080: several may run at once.
                "admin.enableServer=false\n"
                "4lw.commands.whitelist=ruok,srvr\n"
                "maxClientCnxns=0\n"
                "minSessionTimeout=1000\n"
                "maxSessionTimeout=60000\n"
                + ("" if self.forceSync else "forceSync=no\n")
            )
        return path

    def command(self) -> list[str]:
        try:
            javaPath = jvm.ensureJava()
        except debian.PackageUnavailable as e:
            raise ZooKeeperUnavailable(f"ZooKeeper needs Java: {e}") from None
        classpath = os.pathsep.join(
            os.path.join(JAVA_DIR, jar) for jar in _JARS if os.path.exists(os.path.join(JAVA_DIR, jar))
        )
        return [
            javaPath, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dzookeeper.log.dir=" + self.directory,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", classpath, MAIN, self._writeConfig(),
        ]

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        """
        @raise ZooKeeperUnavailable: it did not come up (the log's last line
            says why).
        """
        ensureInstalled()
        os.makedirs(self.directory, exist_ok=True)
        command = self.command()
        log = open(self.logPath, "ab")
        try:
            self.process = subprocess.Popen(
                command, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ruok(self.host, self.port):
                return self
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise ZooKeeperUnavailable(f"ZooKeeper did not start on {self.connect}: {self.lastLogLine()}")

    def lastLogLine(self) -> str:
        try:
            with open(self.logPath, "rb") as f:
                lines = f.read().decode("utf-8", "replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no output"

    def stop(self, timeout: float = 10.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
