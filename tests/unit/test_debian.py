"""
L{kafkatwist.util.debian}: when it installs, what it runs, and how it fails.
No package is installed here: C{subprocess.run} is replaced.
"""

from __future__ import annotations

import subprocess

import pytest

from kafkatwist.util import debian


class FakeApt:
    """
    Records the commands run; fails each C{install} until C{update} ran
    (a fresh image with no package lists), or always when C{broken}.
    """

    def __init__(self, listsPresent: bool = False, broken: bool = False) -> None:
        self.commands: list[list[str]] = []
        self.listsPresent = listsPresent
        self.broken = broken
        self.installed = False

    def run(self, command, **kwargs):
        self.commands.append(command)
        if command[1] == "update":
            self.listsPresent = True
            return subprocess.CompletedProcess(command, 0, b"")
        if self.broken or not self.listsPresent:
            return subprocess.CompletedProcess(command, 100, b"Reading package lists...\nE: Unable to locate package kcat\n")
        self.installed = True
        return subprocess.CompletedProcess(command, 0, b"")


@pytest.fixture
def apt(monkeypatch, tmp_path):
    fake = FakeApt()
    monkeypatch.setattr(debian.subprocess, "run", fake.run)
    monkeypatch.setattr(debian.os, "geteuid", lambda: 0)
    monkeypatch.setattr(debian.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(debian, "LOCK_PATH", str(tmp_path / "apt.lock"))
    monkeypatch.setattr(debian, "_updated", False)
    return fake


def verbs(apt: FakeApt) -> list[str]:
    return [c[1] for c in apt.commands]


def test_present_runs_nothing(apt):
    debian.ensurePackage("kcat", lambda: True)
    assert apt.commands == []


def test_warm_lists_install_without_update(apt):
    apt.listsPresent = True
    debian.ensurePackage("kcat", lambda: apt.installed)
    assert verbs(apt) == ["install"]
    assert apt.commands[0][-1] == "kcat"


def test_fresh_image_updates_once_then_installs(apt):
    logged: list[str] = []
    debian.ensurePackage("kcat", lambda: apt.installed, logged.append)
    assert verbs(apt) == ["install", "update", "install"]
    assert [line.split()[1] for line in logged] == ["install", "update", "install"]
    apt.installed = False
    debian.ensurePackage("chromium", lambda: apt.installed)
    assert verbs(apt)[3:] == ["install"]


def test_update_is_not_repeated_after_a_failure(apt):
    apt.broken = True
    with pytest.raises(debian.PackageUnavailable, match="apt-get install kcat failed: E: Unable to locate"):
        debian.ensurePackage("kcat", lambda: False)
    with pytest.raises(debian.PackageUnavailable):
        debian.ensurePackage("kcat", lambda: False)
    assert verbs(apt) == ["install", "update", "install", "install"]


def test_installed_but_not_found_is_one_line(apt):
    apt.listsPresent = True
    with pytest.raises(debian.PackageUnavailable, match="^apt-get installed kcat but"):
        debian.ensurePackage("kcat", lambda: False)


def test_not_root_installs_nothing(apt, monkeypatch):
    monkeypatch.setattr(debian.os, "geteuid", lambda: 1000)
    with pytest.raises(debian.PackageUnavailable, match=r"^kcat is not installed \(apt-get install kcat, as root"):
        debian.ensurePackage("kcat", lambda: False)
    assert apt.commands == []


def test_present_once_the_lock_is_held_installs_nothing(apt):
    answers = iter([False, True, True])
    debian.ensurePackage("kcat", lambda: next(answers))
    assert apt.commands == []
