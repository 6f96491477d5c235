"""
Debian packages installed on demand: ZooKeeper for a cluster, and for the
tests Prometheus, Chromium and kcat.

One function does it for all of them, so they share its rules:

- nothing is installed unless this process is root and C{apt-get} exists;
- installs are serialised across processes (the test suite's xdist workers
  may want the same package at once) by an exclusive lock on one file, and
  the package is looked for again once the lock is held;
- C{apt-get update} runs at most once per process, and only when an install
  without it failed (a fresh image has no package lists; a warm one needs
  no update);
- apt waits for a dpkg lock someone else holds instead of failing.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable

#: the lock that serialises installs between processes
LOCK_PATH = os.path.join(tempfile.gettempdir(), "kafkatwist-apt.lock")
#: seconds one apt-get command may take (Chromium's download is the largest)
APT_TIMEOUT = 900.0

_updated = False
_lock = threading.Lock()


class PackageUnavailable(Exception):
    """
    A package is missing and cannot be installed here; the message says why
    in one line.
    """


def ensurePackage(package: str, present: Callable[[], bool],
                  log: Callable[[str], object] | None = None) -> None:
    """
    Install Debian's C{package} unless C{present()} already says it is there.

    @param present: whether what the caller needs from the package exists
        (a binary on C{PATH}, a jar); asked before and after installing.
    @param log: called with each command line before it runs.
    @raise PackageUnavailable: it is missing and cannot be installed.
    """
    if present():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise PackageUnavailable(
            f"{package} is not installed (apt-get install {package}, as root, provides it)"
        )
    with _lock, open(LOCK_PATH, "a") as lockFile:
        fcntl.flock(lockFile, fcntl.LOCK_EX)
        try:
            if present():
                return
            _install(package, log)
        finally:
            fcntl.flock(lockFile, fcntl.LOCK_UN)
    if not present():
        raise PackageUnavailable(f"apt-get installed {package} but what is needed from it is missing")


def _install(package: str, log: Callable[[str], object] | None) -> None:
    global _updated
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends",
               "-o", "DPkg::Lock::Timeout=600", package]
    failure = _run(install, log)
    if failure is None:
        return
    if _updated:
        raise PackageUnavailable(failure)
    _updated = True
    failure = _run(["apt-get", "update", "-qq", "-o", "DPkg::Lock::Timeout=600"], log)
    if failure is None:
        failure = _run(install, log)
    if failure is not None:
        raise PackageUnavailable(failure)


def _run(command: list[str], log: Callable[[str], object] | None) -> str | None:
    """
    @return: C{None} on success, else one line saying what failed.
    """
    if log is not None:
        log(" ".join(command))
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        result = subprocess.run(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=APT_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"{' '.join(command[:2])} {command[-1]} timed out after {APT_TIMEOUT:.0f} s"
    if result.returncode == 0:
        return None
    tail = result.stdout.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    return f"{' '.join(command[:2])} {command[-1]} failed: {tail[0]}"
