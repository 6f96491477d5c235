"""
Headless Chromium (Debian's C{chromium} package) for the console's page
tests: load a page, return its DOM after the scripts ran, save a
screenshot.  Each run gets a new profile directory and its whole process
group is killed when it ends or times out.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from kafkatwist.util import debian

FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--virtual-time-budget=3000",
)


def chromium() -> str:
    """
    The browser's path: installed with apt-get when missing and possible,
    else the test is skipped.
    """
    try:
        debian.ensurePackage("chromium", lambda: shutil.which("chromium") is not None)
    except debian.PackageUnavailable as e:
        pytest.skip(str(e))
    path = shutil.which("chromium")
    assert path is not None
    return path


def _run(args: list[str], timeout: float) -> str:
    profile = tempfile.mkdtemp(prefix="console-chromium-")
    command = [chromium(), *FLAGS, f"--user-data-dir={profile}", *args]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        out, _ = process.communicate(timeout=timeout)
        return out.decode("utf-8", "replace")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        shutil.rmtree(profile, ignore_errors=True)


def dumpDom(url: str, timeout: float = 90.0) -> str:
    """
    The page's DOM once loaded and its scripts ran.
    """
    return _run(["--dump-dom", url], timeout)


def screenshot(url: str, path: str, size: str = "1280,860", timeout: float = 90.0) -> None:
    _run([f"--window-size={size}", f"--screenshot={path}", url], timeout)
    assert os.path.getsize(path) > 1000, f"no screenshot of {url}"
