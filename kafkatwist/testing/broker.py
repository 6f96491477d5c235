"""
One real broker process (C{twistd -n kafkatwist}) on free loopback ports,
in a directory of its own: what the project's tests and a user's tests
start.

    with Broker() as broker:
        Producer({"bootstrap.servers": broker.bootstrap_servers})

Nothing here imports Twisted or the broker: the broker runs in its own
process, as it does in production.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["Broker", "BrokerStartError", "TEST_DEFAULTS"]

#: the directory holding the C{kafkatwist} package: put first on the broker's
#: C{PYTHONPATH}, so a checkout's broker runs the checkout's code
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the C{twistd} script beside this interpreter
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
_LISTENING = re.compile(r"Listening on (\w+)://\S+ \(port (\d+)\)")
#: SASL mechanisms a C{sasl=} broker enables (one credential store serves all three)
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
#: what a broker for tests changes from Kafka's defaults (as testcontainers'
#: Kafka does): a group's first rebalance does not wait for more members
#: (3 s at each new group), and __consumer_offsets (made at start-up) has one
#: partition, not 50 (each one a directory and files written, synced and
#: closed again at shutdown); a test that needs Kafka's values names them
TEST_DEFAULTS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}


class BrokerStartError(RuntimeError):
    """
    The broker exited or did not say it started in time; the message holds
    its log.
    """


def twistdCommand() -> list[str]:
    """
    How to run C{twistd} with this interpreter: the script beside it, or the
    module when there is no script (a venv without its bin on C{PATH}).
    """
    if os.path.exists(TWISTD):
        return [TWISTD]
    return [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())"]


def _bytecodeCache(env: dict[str, str]) -> None:
    """
    Let the broker cache its compiled modules even where
    C{PYTHONDONTWRITEBYTECODE} is set (a checkout run without an install has
    no C{.pyc}: each start would compile the broker again, about 2 s), in a
    directory of the user's outside the source tree.
    """
    if env.get("PYTHONDONTWRITEBYTECODE") and not env.get("PYTHONPYCACHEPREFIX"):
        del env["PYTHONDONTWRITEBYTECODE"]
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), f"kafkatwist-pycache-{os.getuid()}")


def _protocol(tls: bool, sasl) -> str:
    if sasl:
        return "SASL_SSL" if tls else "SASL_PLAINTEXT"
    return "SSL" if tls else "PLAINTEXT"


class Broker:
    """
    A broker process.

    @ivar directory: its directory: C{data/} (C{log.dir}), C{broker.log},
        and C{pki/} when it serves TLS.
    @ivar overrides: the C{--override}s it starts with (C{listeners},
        C{log.dir} and whatever was asked).
    @ivar ports: listener name -> bound port, read from its start-up log.
    @ivar protocol: the security protocol of L{bootstrap_servers}.
    @ivar pki: the certificates (L{kafkatwist.testing.pki.Pki}) of a TLS
        broker, else C{None}.
    @ivar users: user -> password of a SASL broker.
    """

    def __init__(self, directory: str | None = None, overrides: dict[str, str] | None = None, *,
                 config: str | None = None, listeners: str | None = None, tls: bool = False,
                 sasl: dict[str, str] | bool | None = None, pki=None, nodeId: int | None = None,
                 zookeeper: str | None = None, clusterId: str | None = None,
                 ignoreSigint: bool = False,
                 env: dict[str, str] | None = None, keepLogs: bool = False) -> None:
        """
        @param directory: where it keeps everything; a new temporary
            directory when C{None}, removed by L{stop} unless the broker
            failed or C{keepLogs} is set.
        @param overrides: broker properties (Kafka's names), applied last.
        @param config: a C{server.properties} file to start from.
        @param listeners: C{listeners} as Kafka spells it; by default port 0
            (a free port) on 127.0.0.1 for each protocol asked, PLAINTEXT
            always among them.
        @param tls: also serve TLS (SSL, or SASL_SSL with C{sasl}), with a
            throwaway CA and server certificate (L{pki}).
        @param sasl: user -> password (C{True}: C{admin}/C{admin-secret}):
            serve SASL (PLAIN and SCRAM-SHA-256/512) with these users.
        @param pki: certificates to use instead of new ones.
        @param nodeId: C{node.id}.
        @param zookeeper: C{zookeeper.connect}: a broker of a cluster.
        @param clusterId: the cluster id a C{sasl} broker's directory is
            formatted with (the users are written before the first start):
            the same for every broker of a cluster.
        @param ignoreSigint: start the process with SIGINT ignored, as a
            shell's background job or a service manager does.
        @param env: extra environment variables.
        @param keepLogs: keep the directory even when all went well.
        """
        self.ownsDirectory = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="kafkatwist-broker-")
        self.directory = os.path.abspath(directory)
        self.ignoreSigint = ignoreSigint
        self.extraEnv = dict(env or {})
        self.keepLogs = keepLogs
        self.failed = False
        os.makedirs(self.directory, exist_ok=True)
        if sasl is True:
            sasl = {"admin": "admin-secret"}
        self.users: dict[str, str] = dict(sasl or {})
        self.protocol = _protocol(tls, self.users)
        self.pki = pki
        if tls and self.pki is None:
            from kafkatwist.testing.pki import makePki

            self.pki = makePki(os.path.join(self.directory, "pki"))
        if listeners is None:
            protocols = [self.protocol] + (["PLAINTEXT"] if self.protocol != "PLAINTEXT" else [])
            if zookeeper is not None:
                # Brokers of a cluster reach each other on the first listener.
                protocols.reverse()
            listeners = ",".join(f"{p}://127.0.0.1:0" for p in protocols)
        self.overrides = {"listeners": listeners, "log.dir": os.path.join(self.directory, "data")}
        if nodeId is not None:
            self.overrides["node.id"] = str(nodeId)
        if zookeeper is not None:
            self.overrides["zookeeper.connect"] = zookeeper
        if self.pki is not None and tls:
            self.overrides["ssl.keystore.location"] = self.pki.serverKeystore
        if self.users:
            self.overrides["sasl.enabled.mechanisms"] = ",".join(SASL_MECHANISMS)
        self.overrides.update(overrides or {})
        self.config = config
        self.process: subprocess.Popen | None = None
        self.logPath = os.path.join(self.directory, "broker.log")
        self.ports: dict[str, int] = {}
        self.pollInterval = 0.05
        self._log = None
        #: paused by L{pause} and not resumed since
        self.paused = False
        self._startedAt = 0
        self._formatted = False
        self.clusterId = clusterId

    # -- start and stop ------------------------------------------------------

    def command(self) -> list[str]:
        args = twistdCommand() + ["-n", "--pidfile=", "kafkatwist"]
        if self.config:
            args += ["--config", self.config]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def _formatUsers(self) -> None:
        if self._formatted or not self.users:
            return
        self._formatted = True
        dataDir = self.overrides["log.dir"]
        if os.path.exists(os.path.join(dataDir, "meta.properties")):
            return
        from kafkatwist.security.format import formatDirectory

        nodeId = int(self.overrides.get("node.id", 1))
        formatDirectory(dataDir, nodeId, self.clusterId, [
            f"{m}=[name={user},password={password}]"
            for user, password in self.users.items() for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
        ])

    def launch(self) -> "Broker":
        """
        Start the process without waiting for it (L{waitStarted} waits):
        a cluster starts its brokers side by side.
        """
        self._formatUsers()
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        _bytecodeCache(env)
        env.update(self.extraEnv)
        # A restart appends to the same log: only what this process writes
        # says it started (and on which ports).
        self._startedAt = os.path.getsize(self.logPath) if os.path.exists(self.logPath) else 0
        self._log = open(self.logPath, "ab")
        preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if self.ignoreSigint else None
        # A second start of the same broker listens where the first did, so
        # its clients' bootstrap stays valid however the test restarts it.
        self.pinPorts()
        self.ports = {}
        self.process = subprocess.Popen(
            self.command(), cwd=self.directory, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            stdin=subprocess.DEVNULL, preexec_fn=preexec,
        )
        return self

    def started(self) -> bool:
        """
        Whether the process said it started (then L{ports} are known).

        @raise BrokerStartError: it exited instead.
        """
        text = self.output(self._startedAt)
        if "started" in text and "kafkatwist node" in text:
            self.ports = {name: int(port) for name, port in _LISTENING.findall(text)}
            return True
        if self.process.poll() is not None:
            self.failed = True
            raise BrokerStartError(
                f"broker exited with {self.process.returncode} (log: {self.logPath}):\n{text}"
            )
        return False

    def waitStarted(self, timeout: float = 60.0) -> "Broker":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.started():
                return self
            time.sleep(self.pollInterval)
        self.failed = True
        raise BrokerStartError(f"broker did not start in {timeout}s (log: {self.logPath}):\n{self.output()}")

    def start(self, timeout: float = 60.0) -> "Broker":
        """
        Start the process and wait until it serves.

        @raise BrokerStartError: it exited or did not start in C{timeout}
            seconds (a bound for a hang: it takes about a second).
        """
        return self.launch().waitStarted(timeout)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> tuple[int, float]:
        """
        Stop the process (a paused one is resumed first) and wait for it.

        @return: (exit status, seconds it took to exit).
        """
        if not self.running():
            self._closeLog()
            return (self.process.returncode if self.process else 0), 0.0
        started = time.monotonic()
        if sig != signal.SIGKILL:
            self.resume()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._closeLog()
        return self.process.returncode, time.monotonic() - started

    def _closeLog(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def kill(self) -> None:
        """
        C{kill -9}: no shutdown at all.
        """
        self.stop(signal.SIGKILL)

    def pause(self) -> None:
        """
        C{SIGSTOP}: the process stops answering but keeps its sockets (a
        long garbage collection, a stalled machine).
        """
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.running():
            os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    def restart(self, timeout: float = 60.0) -> "Broker":
        """
        Stop it and start it again on the same data (and the same ports when
        they were chosen by the broker: a client's bootstrap stays valid).
        """
        self.stop()
        return self.start(timeout)

    def pinPorts(self) -> None:
        """
        Make the next start listen on the ports this run was given.
        """
        if not self.ports:
            return
        parts = []
        for listener in self.overrides["listeners"].split(","):
            name, _, address = listener.partition("://")
            host, _, port = address.rpartition(":")
            if port == "0" and name in self.ports:
                port = str(self.ports[name])
            parts.append(f"{name}://{host}:{port}")
        self.overrides["listeners"] = ",".join(parts)

    def close(self) -> None:
        """
        Stop it, and remove its temporary directory unless it failed or
        its logs are to be kept.
        """
        self.stop()
        if self.ownsDirectory and not (self.failed or self.keepLogs):
            shutil.rmtree(self.directory, ignore_errors=True)
        elif self.failed:
            print(f"kafkatwist: broker logs kept in {self.logPath}", file=sys.stderr)

    def __enter__(self) -> "Broker":
        try:
            return self.start()
        except BaseException:
            self.stop()
            print(f"kafkatwist: broker logs kept in {self.logPath}", file=sys.stderr)
            raise

    def __exit__(self, excType, exc, tb) -> None:
        if excType is not None:
            self.failed = True
        self.close()

    # -- what clients need ---------------------------------------------------

    @property
    def port(self) -> int:
        return self.ports["PLAINTEXT"]

    @property
    def bootstrap(self) -> str:
        """
        C{host:port} of the PLAINTEXT listener.
        """
        return f"127.0.0.1:{self.port}"

    @property
    def bootstrap_servers(self) -> str:  # noqa: N802 -- the clients' name
        """
        C{host:port} of the listener of L{protocol} (PLAINTEXT unless TLS
        or SASL was asked).
        """
        return f"127.0.0.1:{self.ports[self.protocol]}"

    def client_config(self, protocol: str | None = None, user: str | None = None,  # noqa: N802
                      mechanism: str = "PLAIN") -> dict[str, str]:
        """
        A confluent-kafka (librdkafka) configuration for this broker: its
        bootstrap servers and, on a TLS or SASL listener, the CA and the
        credentials (the first user unless C{user} is named).
        """
        protocol = protocol or self.protocol
        config = {"bootstrap.servers": f"127.0.0.1:{self.ports[protocol]}"}
        if protocol != "PLAINTEXT":
            config["security.protocol"] = protocol
        if protocol in ("SSL", "SASL_SSL"):
            config["ssl.ca.location"] = self.pki.caFile
        if protocol.startswith("SASL"):
            user = user or next(iter(self.users))
            config.update({"sasl.mechanism": mechanism, "sasl.username": user,
                           "sasl.password": self.users[user]})
        return config

    def output(self, offset: int = 0) -> str:
        """
        Its log (from C{offset}).
        """
        try:
            with open(self.logPath, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def __repr__(self) -> str:
        where = ",".join(f"{k}:{v}" for k, v in self.ports.items()) or "not started"
        return f"<Broker {where} in {self.directory}>"
