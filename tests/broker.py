"""
Run a real C{twistd -n kafkatwist} process for integration tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TWISTD = os.path.join(os.path.dirname(sys.executable), "twistd")
_LISTENING = re.compile(r"Listening on (\w+)://\S+ \(port (\d+)\)")


class BrokerProcess:
    """
    @ivar ports: listener name -> bound port, read from the startup log.
    """

    def __init__(self, directory: str, overrides: dict[str, str] | None = None,
                 config: str | None = None, listeners: str = "PLAINTEXT://127.0.0.1:0",
                 ignoreSigint: bool = False, env: dict[str, str] | None = None) -> None:
        """
        @param ignoreSigint: start the process with SIGINT ignored, as a
            shell's background job or a service manager does.
        @param env: extra environment variables.
        """
        self.directory = directory
        self.ignoreSigint = ignoreSigint
        self.extraEnv = dict(env or {})
        os.makedirs(directory, exist_ok=True)
        self.overrides = {"listeners": listeners, "log.dir": os.path.join(directory, "data")}
        self.overrides.update(overrides or {})
        self.config = config
        self.process: subprocess.Popen | None = None
        self.logPath = os.path.join(directory, "broker.log")
        self.ports: dict[str, int] = {}
        self.pollInterval = 0.05

    def command(self) -> list[str]:
        args = [TWISTD, "-n", "--pidfile=", "kafkatwist"]
        if self.config:
            args += ["--config", self.config]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        return args

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        env.update(self.extraEnv)
        # A restart appends to the same log: only what this process writes
        # says it started (and on which ports).
        startedAt = os.path.getsize(self.logPath) if os.path.exists(self.logPath) else 0
        self._log = open(self.logPath, "ab")
        preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if self.ignoreSigint else None
        self.process = subprocess.Popen(
            self.command(), cwd=self.directory, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=preexec,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.output(startedAt)
            if "started" in text and "kafkatwist node" in text:
                self.ports = {name: int(port) for name, port in _LISTENING.findall(text)}
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{text}")
            time.sleep(self.pollInterval)
        raise RuntimeError(f"broker did not start in {timeout}s:\n{self.output()}")

    @property
    def port(self) -> int:
        return self.ports["PLAINTEXT"]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def output(self, offset: int = 0) -> str:
        try:
            with open(self.logPath, "rb") as f:
                f.seek(offset)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> tuple[int, float]:
        """
        @return: (exit status, seconds it took to exit).
        """
        if self.process is None or self.process.poll() is not None:
            return (self.process.returncode if self.process else 0), 0.0
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()
        return self.process.returncode, time.monotonic() - started

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
