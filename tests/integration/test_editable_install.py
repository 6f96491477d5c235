"""
C{pip install -e .}, the usual way to develop, keeps C{twistd kafkatwist}
working (setuptools' editable import hook alone hides twisted/plugins from
Twisted's plugin scan).

The install goes into a fresh venv that sees this venv's dependencies
through a "shadow" site directory of links, minus any installed kafkatwist,
so only the editable install can provide it.  pip builds with its usual
isolation (it fetches setuptools and wheel once, then uses its cache).
"""

import os
import shutil
import site
import subprocess
import sys
import time

import pytest

from kafkatwist.testing.broker import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: what of this venv the new one must not see
HIDDEN = ("kafkatwist", "__editable__", "_kafkatwist", "kafkatwist_source_tree.pth")
#: pip's words when it cannot reach an index: skip, do not fail
OFFLINE = ("No matching distribution found for setuptools", "Failed to establish a new connection",
           "Temporary failure in name resolution", "Network is unreachable")


def sitePackages() -> str:
    for path in site.getsitepackages():
        if os.path.isdir(os.path.join(path, "twisted")):
            return path
    pytest.skip("cannot find the site-packages holding twisted")


def linkAllBut(source: str, target: str, hidden) -> None:
    os.makedirs(target, exist_ok=True)
    for name in os.listdir(source):
        if any(name.startswith(h) for h in hidden) or name in ("__pycache__", "dropin.cache"):
            continue
        os.symlink(os.path.join(source, name), os.path.join(target, name))


def shadowSite(directory: str) -> str:
    """
    This venv's packages as links, twisted/plugins rebuilt without kafkatwist's module.
    """
    real = sitePackages()
    shadow = os.path.join(directory, "shadow")
    linkAllBut(real, shadow, HIDDEN + ("twisted",) + tuple(n for n in os.listdir(real) if n.endswith(".pth")))
    linkAllBut(os.path.join(real, "twisted"), os.path.join(shadow, "twisted"), ("plugins",))
    linkAllBut(os.path.join(real, "twisted", "plugins"), os.path.join(shadow, "twisted", "plugins"),
               ("kafkatwist",))
    return shadow


def copyTree(target: str) -> None:
    shutil.copytree(
        ROOT, target, symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "data", "__pycache__", "*.egg-info", "build",
                                      "demo-output", "dropin.cache"),
    )


def test_editable_install_keeps_twistd_kafkatwist(tmp_path):
    source = str(tmp_path / "src")
    copyTree(source)
    venv = str(tmp_path / "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    newSite = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    with open(os.path.join(newSite, "shadow.pth"), "w") as f:
        f.write(shadowSite(str(tmp_path)) + "\n")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_REQUIRE_VIRTUALENV")}
    check = subprocess.run([python, "-c", "import kafkatwist"], capture_output=True, env=clean, cwd="/")
    assert check.returncode != 0, "the new venv sees an installed kafkatwist; the test proves nothing"

    install = subprocess.run(
        [python, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-e", source],
        capture_output=True, text=True, env=clean, cwd=str(tmp_path), timeout=300,
    )
    if install.returncode != 0 and any(word in install.stdout + install.stderr for word in OFFLINE):
        pytest.skip("pip cannot reach a package index for setuptools/wheel (build isolation)")
    assert install.returncode == 0, install.stdout + install.stderr

    where = subprocess.run(
        [python, "-c", "import kafkatwist, kafkatwist_spark; print(kafkatwist.__file__); "
                       "print(kafkatwist_spark.__file__)"],
        capture_output=True, text=True, env=clean, cwd="/", check=True,
    ).stdout.split()
    assert where == [os.path.join(source, "kafkatwist", "__init__.py"),
                     os.path.join(source, "spark", "kafkatwist_spark", "__init__.py")]

    # The daemon itself: what the twistd script runs (no script here: twisted
    # comes through the shadow site, not installed into this venv).
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        broker = subprocess.Popen(
            [python, "-c", "import sys; sys.argv[0] = 'twistd'; from twisted.scripts.twistd import run; run()",
             "-n", "--pidfile=", "kafkatwist",
             "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dir={tmp_path}/data"],
            stdout=out, stderr=subprocess.STDOUT, env=clean, cwd="/",
        )
    try:
        deadline = time.monotonic() + 60
        while "started" not in log.read_text() and broker.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "kafkatwist node 1 of cluster" in log.read_text(), log.read_text()
    finally:
        broker.terminate()
        broker.wait(30)

    uninstall = subprocess.run([python, "-m", "pip", "uninstall", "-y", "kafkatwist"],
                               capture_output=True, text=True, env=clean)
    assert uninstall.returncode == 0, uninstall.stderr
    assert not [n for n in os.listdir(newSite) if "kafkatwist" in n]
