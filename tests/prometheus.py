"""
A real Prometheus server scraping a test broker, and the Grafana dashboard's
queries run against it.  Used by tests/integration/test_prometheus.py and by
docs/grafana/picture.py (which draws the dashboard from such a run).

Prometheus is Debian's C{prometheus} package; L{findPrometheus} installs it
with apt-get when it is missing and this process may (root, apt-get present).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

from kafkatwist.util import debian

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DASHBOARD = os.path.join(ROOT, "docs", "grafana", "kafkatwist.json")
_installTried: list[str] = []


def findPrometheus() -> tuple[str | None, str]:
    """
    @return: (path of the prometheus binary, or None with why not).
    """
    found = shutil.which("prometheus")
    if found:
        return found, ""
    if _installTried:
        return None, _installTried[0]
    why = _install()
    _installTried.append(why)
    return shutil.which("prometheus"), why


def _install() -> str:
    try:
        debian.ensurePackage("prometheus", lambda: shutil.which("prometheus") is not None)
    except debian.PackageUnavailable as e:
        return str(e)
    return ""


def freePort() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrometheusServer:
    """
    C{prometheus} scraping C{target} (host:port) every second, on loopback.
    """

    def __init__(self, binary: str, directory: str, target: str) -> None:
        self.port = freePort()
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        config = os.path.join(directory, "prometheus.yml")
        with open(config, "w") as f:
            f.write(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: kafkatwist\n"
                f"    static_configs:\n      - targets: ['{target}']\n"
            )
        self.log = open(os.path.join(directory, "prometheus.log"), "wb")
        self.process = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={directory}/tsdb",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT,
        )

    def api(self, path: str, **params):
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"{path}: {body}")
        return body["data"]

    def waitForTarget(self, timeout: float = 60.0) -> dict:
        """
        @return: the target once it has been scraped successfully.
        """
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.output()}")
            try:
                targets = self.api("targets")["activeTargets"]
            except OSError:
                targets = []
            if targets:
                last = targets[0]
                if last["health"] == "up" and not last["lastError"]:
                    return last
            time.sleep(0.5)
        raise AssertionError(f"target never up: {last}\n{self.output()}")

    def output(self) -> str:
        with open(os.path.join(self.directory, "prometheus.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def dashboardTargets(path: str = DASHBOARD) -> list[tuple[str, str, str]]:
    """
    (panel title, expression, legend format) of every query on the dashboard.
    """
    with open(path) as f:
        dashboard = json.load(f)
    return [(panel["title"], target["expr"], target.get("legendFormat", ""))
            for panel in dashboard["panels"] for target in panel.get("targets", [])]


def concrete(expr: str, rateInterval: str = "15s") -> str:
    """
    A dashboard expression as Grafana would send it.
    """
    return expr.replace("$__rate_interval", rateInterval)


def metricNames(expr: str) -> set[str]:
    return set(re.findall(r"\bkafka_[a-z0-9_]+", expr))


def legend(fmt: str, labels: dict) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: str(labels.get(m.group(1), "")), fmt)
