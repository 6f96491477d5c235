"""
deploy/: the systemd unit and the container image definition, checked as far
as this machine allows.

- The unit is linted by systemd-analyze (when installed), and its ExecStart
  command line is run as written (paths swapped for this checkout) under a fake
  NOTIFY_SOCKET: it must say READY=1.
- The Dockerfile is built and smoke-tested when a Docker daemon answers and a
  base image is at hand; otherwise skipped, saying which.
"""

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess

import pytest

from kafkatwist.testing.broker import ROOT, TWISTD

pytestmark = pytest.mark.integration

UNIT = os.path.join(ROOT, "deploy", "kafkatwist.service")
DOCKERFILE = os.path.join(ROOT, "Dockerfile")


def unitValue(key):
    with open(UNIT) as f:
        values = [line.split("=", 1)[1].strip() for line in f if line.startswith(key + "=")]
    assert len(values) == 1, key
    return values[0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_passes_systemd_analyze(tmp_path):
    # verify wants the executable to exist: point it at this venv's twistd.
    text = open(UNIT).read().replace("/opt/kafkatwist/venv/bin/twistd", TWISTD)
    unit = tmp_path / "kafkatwist.service"
    unit.write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    complaints = [l for l in (result.stdout + result.stderr).splitlines() if "kafkatwist.service" in l]
    assert result.returncode == 0 and not complaints, result.stdout + result.stderr


def test_unit_command_line_signals_ready(tmp_path):
    assert unitValue("Type") == "notify"
    argv = shlex.split(unitValue("ExecStart"))
    assert argv[0] == "/opt/kafkatwist/venv/bin/twistd" and "-n" in argv
    properties = tmp_path / "server.properties"
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:0\nlog.dir={tmp_path}/data\n")
    argv = [TWISTD] + [str(properties) if a == "/etc/kafkatwist/server.properties" else a for a in argv[1:]]

    notify = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(notify)
    sock.settimeout(30)
    env = dict(os.environ, PYTHONPATH=ROOT, NOTIFY_SOCKET=notify)
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        assert sock.recv(4096).startswith(b"READY=1")
        assert not (tmp_path / "twistd.pid").exists()
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
        sock.close()


# -- the container image ----------------------------------------------------------------

def dockerfileInstructions():
    instructions = []
    with open(DOCKERFILE) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def test_dockerfile_shape():
    instructions = dockerfileInstructions()
    words = [w for w, _ in instructions]
    assert words[0] in ("ARG", "FROM")
    assert ("EXPOSE", "9092") in instructions
    assert ("VOLUME", '["/var/lib/kafkatwist"]') in instructions
    users = [rest for w, rest in instructions if w == "USER"]
    assert users and users[-1] not in ("root", "0")
    entrypoint = [rest for w, rest in instructions if w == "ENTRYPOINT"][-1]
    assert re.search(r'"twistd", "-n", "--pidfile=", "kafkatwist"', entrypoint), entrypoint
    assert any(w == "HEALTHCHECK" for w in words)


def dockerAvailable():
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        return "no Docker daemon answers (docker info failed)"
    return None


@pytest.mark.skipif(os.environ.get("KAFKATWIST_DOCKER_TEST") != "1",
                    reason="container smoke test is opt-in: set KAFKATWIST_DOCKER_TEST=1 "
                           "(needs a Docker daemon; deploy/docker-smoke-test.sh)")
def test_container_smoke(tmp_path):
    missing = dockerAvailable()
    if missing:
        pytest.skip(missing)
    result = subprocess.run(["sh", os.path.join(ROOT, "deploy", "docker-smoke-test.sh")],
                            cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "smoke test passed" in result.stdout
