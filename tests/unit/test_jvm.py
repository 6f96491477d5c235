"""
L{kafkatwist.util.jvm}: which Java ZooKeeper and PySpark get.
"""

from __future__ import annotations


import pytest

from kafkatwist.util import debian, jvm


def test_java_home_comes_first(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "java"
    binary.parent.mkdir()
    binary.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    assert jvm.java() == str(binary)


def test_a_java_home_without_java_is_passed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.setattr(jvm.shutil, "which", lambda name: "/opt/jdk/bin/java")
    assert jvm.java() == "/opt/jdk/bin/java"


def test_ensure_java_installs_debians_runtime(monkeypatch):
    asked: list[str] = []
    found: list[str] = []

    def ensurePackage(package, present, log=None):
        asked.append(package)
        found.append("/usr/bin/java")

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(jvm.debian, "ensurePackage", ensurePackage)
    monkeypatch.setattr(jvm.shutil, "which", lambda name: found[0] if found else None)
    monkeypatch.setattr(jvm.os.path, "exists", lambda path: False)
    assert jvm.ensureJava() == "/usr/bin/java"
    assert asked == ["default-jre-headless"]


def test_ensure_java_says_why_not(monkeypatch):
    def ensurePackage(package, present, log=None):
        raise debian.PackageUnavailable(f"{package} is not installed (apt-get install {package}, as root, provides it)")

    monkeypatch.setattr(jvm.debian, "ensurePackage", ensurePackage)
    with pytest.raises(debian.PackageUnavailable, match="default-jre-headless"):
        jvm.ensureJava()
