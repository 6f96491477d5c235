"""
A bounded fuzz run inside the test suite: KAFKATWIST_FUZZ_FRAMES mutated
frames (40,000 by default: 15-40 s on two shared cores), cut short after
KAFKATWIST_FUZZ_SECONDS (60 by default; 0 skips the run).  Bounded by
frames, a run does the same amount of fuzzing whatever the load.  The long
run is C{make fuzz}.
"""

import os

import pytest

from tests.fuzz.engine import FuzzRun

SECONDS = float(os.environ.get("KAFKATWIST_FUZZ_SECONDS", "60"))
FRAMES = int(os.environ.get("KAFKATWIST_FUZZ_FRAMES", "40000"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(SECONDS * 3 + 240)]


@pytest.mark.skipif(SECONDS <= 0, reason="KAFKATWIST_FUZZ_SECONDS=0")
def test_bounded_fuzz_run(tmp_path):
    results = FuzzRun(str(tmp_path), frames=FRAMES, seconds=SECONDS, connections=16, seed=11,
                      log=lambda line: None).run()
    detail = {k: results[k] for k in ("crashes", "tracebacks", "tracebackSignatures", "roundTrips")}
    assert results["frames"] > 1000 * min(SECONDS, 10), detail
    assert not results["crashes"], detail
    assert results["tracebackCount"] == 0, detail
    assert results["mismatchedAnswers"] == 0, detail
    assert results["roundTrips"]["failed"] == 0 and results["roundTrips"]["ok"] >= 2, detail
    rss = results["rssKiB"]
    assert rss["after"] - rss["before"] < 256 * 1024, rss
