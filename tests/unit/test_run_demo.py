"""
spark/examples/run_demo.py as a user meets it: --help reads as plain text and
the output goes outside the checkout.
"""

import os
import subprocess
import sys

from kafkatwist.testing.broker import ROOT

DEMO = os.path.join(ROOT, "spark", "examples", "run_demo.py")


def test_help_has_no_epytext(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, XDG_CACHE_HOME=str(tmp_path / "cache"), COLUMNS="400")
    result = subprocess.run([sys.executable, DEMO, "--help"], capture_output=True, text=True, env=env)
    assert result.returncode == 0
    assert "C{" not in result.stdout and "L{" not in result.stdout
    assert "(make run)" in result.stdout
    assert f"default {tmp_path / 'cache' / 'kafkatwist' / 'spark-demo'}" in " ".join(result.stdout.split())
    assert not os.path.exists(os.path.join(ROOT, "demo-output"))
