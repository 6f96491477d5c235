"""
The C{kafkatwist} command as a user runs it: C{--version} names
kafkatwist's own version, the start-up log too, and a second SIGINT while
the broker stops (an impatient Ctrl-C) is one line, not a traceback.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from kafkatwist import __version__

pytestmark = pytest.mark.integration

COMMAND = os.path.join(os.path.dirname(sys.executable), "kafkatwist")


def freePort() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def waitFor(path: str, text: str, process: subprocess.Popen, seconds: float = 60) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(path, encoding="utf-8", errors="replace") as f:
            content = f.read()
        if text in content:
            return content
        if process.poll() is not None:
            break
        time.sleep(0.01)
    raise AssertionError(f"no {text!r} in {path}:\n{content}")


def test_version_names_kafkatwist():
    out = subprocess.run([COMMAND, "--version"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"kafkatwist {__version__} (Twisted "), out.stdout


def test_a_second_sigint_while_stopping_is_one_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    # The second SIGINT must land while the broker stops (a few tenths of a
    # second): a try where the broker was gone already proves nothing.
    for attempt in range(5):
        logPath = str(tmp_path / f"broker{attempt}.log")
        with open(logPath, "wb") as out:
            process = subprocess.Popen(
                [COMMAND, "--override", f"listeners=PLAINTEXT://127.0.0.1:{freePort()}",
                 "--override", f"log.dir={tmp_path / f'data{attempt}'}"],
                stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            content = waitFor(logPath, " started", process)
            assert f"kafkatwist version {__version__}" in content
            process.send_signal(signal.SIGINT)
            waitFor(logPath, "Received SIGINT", process)
            try:
                process.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            secondLanded = process.poll() is None
            # twistd ends by re-raising the signal that stopped it, as a shell expects.
            assert process.wait(60) in (0, -signal.SIGINT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        with open(logPath, encoding="utf-8", errors="replace") as f:
            content = f.read()
        assert "Traceback" not in content and "ReactorNotRunning" not in content, content
        assert "kafkatwist stopped" in content
        if secondLanded and "already stopping" in content:
            assert content.count("already stopping") == 1, content
            return
    pytest.skip("the second SIGINT never landed while the broker stopped (it stopped first each time)")


def makeDryRun(*args: str) -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run(["make", "-n", "-C", root, *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_make_run_announces_the_data_directory_the_broker_uses():
    assert "data in ./data (" in makeDryRun("run", "PORT=19092")
    assert "data in ./data2 (" in makeDryRun("run", "ARGS=--override log.dir=./data2")
    # log.dirs wins over log.dir, as in Kafka.
    assert "data in ./b (" in makeDryRun("run", "ARGS=--override log.dirs=./b --override log.dir=./a")


def test_make_spark_demo_uses_make_runs_port():
    assert "run_demo.py --bootstrap 127.0.0.1:19092" in makeDryRun("spark-demo", "PORT=19092")


def test_make_clean_removes_what_the_readmes_tls_and_sasl_steps_leave():
    line = [l for l in makeDryRun("clean").splitlines() if l.startswith("rm -rf")][0]
    for leftover in ("certs", "data-tls", "data-secured", "data", "cluster"):
        assert f" {leftover}" in line.split(".egg-info", 1)[1] + " ", line
    assert "server.properties" not in line
