"""
The commands of README.md and docs/ run as written.

Each code block a page marks with C{<!-- doc-test: KIND -->} is run, in the
page's order, in a directory that looks like a fresh checkout (the tree's
files, this .venv), with the documented ports swapped for free ones:

- C{run}: a shell block that must succeed;
- C{serve}: a shell block that starts a broker: it must log that it started,
  and it serves the blocks after it until the next C{serve} or the end;
- C{client}: a Python block run with C{.venv/bin/python};
- C{skip (why)}: shown, not run (a real deployment's host names...).

Every shell block of README.md carries a mark, so none is left unchecked
by accident.  A block whose note says it needs ZooKeeper or Spark is
skipped with one line when Java is missing, with the rest of its section.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time

import pytest

from kafkatwist.testing.broker import ROOT
from kafkatwist.util import debian, jvm

pytestmark = pytest.mark.integration

MARKED = re.compile(r"<!-- doc-test: (\w+)(?: \((.*?)\))? -->\n```(\w+)\n(.*?)```", re.S)
FENCE = re.compile(r"^```(\w*)\n", re.M)
#: the documented ports, and those that must stay consecutive
FAMILIES = [(9092, 9093, 9094), (19192, 19193, 19194), (19092,), (12181,), (2181,)]
#: what a fresh checkout has; the rest (data, certs, a cluster) is made by the commands
LEFT_OUT = {".git", ".pytest_cache", "data", "cluster", "certs", "server.properties"}


def pages() -> list[str]:
    docs = sorted(os.path.join("docs", name) for name in os.listdir(os.path.join(ROOT, "docs"))
                  if name.endswith(".md"))
    return ["README.md", *docs]


def marked(page: str):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = f.read()
    out = []
    for match in MARKED.finditer(text):
        kind, note, language, code = match.groups()
        section = text.rfind("\n## ", 0, match.start())
        out.append((kind, note or "", language, code, section))
    return out


RUNNABLE = [page for page in pages() if any(kind != "skip" for kind, *_ in marked(page))]


def test_every_shell_block_of_the_readme_is_marked():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    unmarked = [
        text.count("\n", 0, m.start()) + 1
        for m in FENCE.finditer(text)
        if m.group(1) == "sh" and not text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1].startswith("<!-- doc-test:")
    ]
    assert not unmarked, f"README.md lines {unmarked}: a ```sh block without <!-- doc-test: ... -->"


def freePorts(count: int) -> int:
    """
    The first of C{count} consecutive free loopback ports.
    """
    for _ in range(500):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count >= 65536:
            continue
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free ports")


def portMap() -> dict[str, str]:
    mapping = {}
    for family in FAMILIES:
        base = freePorts(len(family))
        for i, port in enumerate(family):
            mapping[str(port)] = str(base + i)
    return mapping


def withPorts(code: str, mapping: dict[str, str]) -> str:
    return re.sub(r"\b(" + "|".join(mapping) + r")\b", lambda m: mapping[m.group(1)], code)


def checkout(directory) -> None:
    os.makedirs(directory)
    for name in os.listdir(ROOT):
        if name in LEFT_OUT or name.startswith(("data", "cluster")):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(directory, name))


def javaMissing() -> bool:
    try:
        jvm.ensureJava()
    except debian.PackageUnavailable:
        return True
    return False


class Server:
    def __init__(self, code: str, cwd: str, env: dict, log: str) -> None:
        self.log = log
        self.output = open(log, "ab")
        self.process = subprocess.Popen(
            ["bash", "-e", "-c", code], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=self.output, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def text(self) -> str:
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def waitStarted(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if re.search(r"kafkatwist node \d+ of cluster \S+ started", text):
                return
            if self.process.poll() is not None:
                raise AssertionError(f"the broker stopped at start-up:\n{text[-3000:]}")
            time.sleep(0.2)
        raise AssertionError(f"the broker did not start in {timeout:.0f} s:\n{self.text()[-3000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.output.close()


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("page", RUNNABLE)
def test_commands_run_as_written(page, tmp_path):
    if subprocess.run(["make", "-q", "-C", ROOT, "install"], capture_output=True).returncode != 0:
        pytest.skip(".venv is older than setup.cfg: run `make install` first (make test does)")
    work = str(tmp_path / "checkout")
    checkout(work)
    mapping = portMap()
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    # What the Makefile exports: the checkout's code, not .venv's installed copy.
    env["PYTHONPATH"] = os.pathsep.join([work, os.path.join(work, "spark")])
    server = None
    skippedSection = None
    skipped = []
    try:
        for number, (kind, note, language, code, section) in enumerate(marked(page), 1):
            where = f"{page}, block {number} ({kind}{': ' + note if note else ''})"
            if kind == "skip" or section == skippedSection:
                continue
            if re.search(r"ZooKeeper|Spark", note) and javaMissing():
                skipped.append(f"{where}: java not found")
                skippedSection = section
                continue
            code = withPorts(code, mapping)
            if kind == "run":
                result = subprocess.run(
                    ["bash", "-e", "-c", code], cwd=work, env=env, capture_output=True, text=True,
                    timeout=600,
                )
                assert result.returncode == 0, f"{where} failed:\n{code}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
            elif kind == "serve":
                if server is not None:
                    server.stop()
                server = Server(code, work, env, str(tmp_path / f"serve-{number}.log"))
                server.waitStarted()
            elif kind == "client":
                assert language == "python", where
                script = tmp_path / f"block-{number}.py"
                script.write_text(code)
                result = subprocess.run(
                    [os.path.join(work, ".venv", "bin", "python"), str(script)], cwd=work, env=env,
                    capture_output=True, text=True, timeout=600,
                )
                assert result.returncode == 0, f"{where} failed:\n{code}\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
            else:
                raise AssertionError(f"{where}: unknown doc-test kind {kind!r}")
    finally:
        if server is not None:
            server.stop()
        # Whatever a cluster block started, stopped even when a later block failed.
        if os.path.isdir(os.path.join(work, "cluster")):
            subprocess.run([os.path.join(work, ".venv", "bin", "python"), "-m", "kafkatwist.cluster.local",
                            "stop", "--dir", os.path.join(work, "cluster")], cwd=work, env=env,
                           capture_output=True, timeout=300)
    if skipped:
        pytest.skip("; ".join(skipped))
