"""
How C{make test} spreads the suite over pytest-xdist's workers (loaded with
C{-p tests.scheduling}; it takes effect with C{--dist loadfile}):

- a test file's tests run on one worker, in their order (a module-scoped
  cluster or broker starts once), as with C{--dist loadfile}; the Spark
  files share one worker (one SparkSession for them all: three JVMs at
  once, one per worker, starve a two-core machine);
- the longest units start first (C{tests/durations.json}: seconds per file
  as a whole run measured them; a file not listed counts a second a test),
  so the run does not end waiting for one long file started last;
- a worker gets its next unit when its last test is about to run, not two
  tests before (xdist's default), so a unit does not wait behind a long
  test on one worker while another worker is idle.

Regenerate the table after a run with C{--junitxml=FILE}:
C{python -m tests.scheduling FILE > tests/durations.json}.
"""

from __future__ import annotations

import json
import os
import sys
from collections import OrderedDict, defaultdict

import pytest

DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
#: units of several files: every file under the prefix runs on one worker
GROUPS = ("tests/spark/",)
#: the estimate for a test of a file the table does not list
DEFAULT_SECONDS = 1.0


def unitOf(nodeid: str) -> str:
    """
    The unit a test belongs to: its file, or the group of files it is in.
    """
    path = nodeid.split("::", 1)[0]
    for prefix in GROUPS:
        if path.startswith(prefix):
            return prefix.rstrip("/")
    return path


def loadDurations(path: str = DURATIONS) -> dict[str, float]:
    try:
        with open(path) as f:
            return {k: float(v) for k, v in json.load(f).items()}
    except (OSError, ValueError):
        return {}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    return longestFirst(config, log)


def longestFirst(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class LongestFirst(LoadScopeScheduling):
        """
        xdist's C{loadscope}, whose scopes are L{unitOf}, assigned longest
        first.
        """

        def __init__(self, config, log=None) -> None:
            super().__init__(config, log)
            self.durations = loadDurations()
            self.ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return unitOf(nodeid)

        def estimate(self, unit: str, nodeids) -> float:
            known = [seconds for path, seconds in self.durations.items() if unitOf(path) == unit]
            return sum(known) if known else DEFAULT_SECONDS * len(nodeids)

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:
                self.workqueue = OrderedDict(sorted(
                    self.workqueue.items(), key=lambda item: -self.estimate(*item)))
                self.ordered = True
            super()._assign_work_unit(node)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            # A worker holds its last test until it knows the next (or
            # that there is none): one pending test is a worker about to
            # run its last.
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LongestFirst(config, log)


def fromJunit(path: str) -> dict[str, float]:
    """
    Seconds per file of a junit XML report (pytest's C{--junitxml}).
    """
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).iter("testcase"):
        classname = case.get("classname", "")
        # pytest writes tests.cluster.test_failover (a class: .Class after)
        parts = classname.split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if not parts:
            continue
        seconds["/".join(parts) + ".py"] += float(case.get("time", 0))
    return {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    json.dump(fromJunit(sys.argv[1]), sys.stdout, indent=1)
    sys.stdout.write("\n")
