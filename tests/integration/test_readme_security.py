"""
The README's SASL_SSL + ACL example, run as written against a real broker:
its format command, its server.properties and its Python, with only the
host, port and file paths replaced.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest

from kafkatwist.testing import Broker
from kafkatwist.testing.broker import ROOT

pytestmark = pytest.mark.integration


def securitySection() -> list[tuple[str, str]]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("## Security: SASL and ACLs", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_readme_security_example(tmp_path, pki):
    blocks = securitySection()
    [shell] = [code for kind, code in blocks if kind == "sh"]
    [properties] = [code for kind, code in blocks if kind == "properties"]
    python = [code for kind, code in blocks if kind == "python"]
    data = tmp_path / "data"
    config = tmp_path / "server.properties"
    replaced = (
        properties.replace("/etc/kafkatwist/server.pem", pki.serverKeystore)
        .replace("/var/lib/kafkatwist", str(data))
        .replace("SASL_SSL://0.0.0.0:9094", "SASL_SSL://127.0.0.1:0")
    )
    # The bound port is only known once started: advertise what is bound.
    replaced = "\n".join(l for l in replaced.splitlines() if not l.startswith("advertised.listeners"))
    config.write_text(replaced)

    command = shlex.split(shell.replace("\\\n", " "), comments=True)
    assert command[:3] == ["python", "-m", "kafkatwist.security.format"]
    command = [sys.executable, *command[1:]]
    command[command.index("server.properties")] = str(config)
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr

    broker = Broker(str(tmp_path / "broker"), config=str(config), listeners="SASL_SSL://127.0.0.1:0")
    del broker.overrides["log.dir"]
    broker.overrides.pop("listeners")
    broker.start()
    try:
        port = broker.ports["SASL_SSL"]
        namespace: dict = {}
        for code in python:
            code = code.replace("broker.example.com:9094", f"localhost:{port}").replace('"ca.pem"', repr(pki.caFile))
            exec(compile(code, "README.md", "exec"), namespace)
    finally:
        broker.stop()
