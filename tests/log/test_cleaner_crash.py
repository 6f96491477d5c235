"""
A crash at any step of a cleaning pass leaves a log that loads as either
the old or the new segments: nothing lost, nothing doubled.

Every file system change a pass makes (renames and deletions of the swap
protocol) is counted, and the test crashes the pass at the first, the
second, ... of them in turn, plus in the middle of writing a cleaned
segment; each time the broker's log is dropped as a crash would drop it and
loaded again.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.log import swap
from kafkatwist.log.cleaner import LogCleaner

from tests.log.compacted import append, expectedLatest, readAll

NOW = 1_700_000_000_000
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}


class Crash(BaseException):
    """
    The process dies here (not an Exception: nothing may handle it).
    """


def fill(log, rounds: int, keys: int = 10) -> None:
    for r in range(rounds):
        for k in range(keys):
            append(log, [(f"k{k}", f"v{r}-{k}")], NOW)
    append(log, [("k4", None)], NOW)


def _prepared(disk):
    """
    A log cleaned once (so the next pass merges small cleaned segments as
    well as cleaning new ones), then dirtied again.
    """
    manager = disk.make()
    manager.createTopic("t", 1, CONFIGS)
    log = manager.getLog("t", 0)
    fill(log, 10)
    LogCleaner(manager, inProcess=True, clock=lambda: NOW).cleanOnce()
    fill(log, 10)
    return manager, log


def _crashAfter(monkeypatch, limit: int) -> list:
    """
    Make the C{limit}-th rename, replace or unlink (counting from 0) crash.
    """
    count = [0]
    for name in ("rename", "replace", "unlink"):
        original = getattr(os, name)

        def counted(*args, _original=original, **kw):
            if count[0] == limit:
                raise Crash(f"crash before file system change #{limit}")
            count[0] += 1
            return _original(*args, **kw)

        monkeypatch.setattr(os, name, counted)
    return count


def _check(disk, manager, before) -> None:
    manager.abandon()
    manager = disk.make()
    log = manager.getLog("t", 0)
    after = readAll(log)
    assert set(after) <= set(before), "records appeared that were never written"
    assert expectedLatest(after) == expectedLatest(before), "a latest value was lost"
    assert log.logEndOffset == before[-1][0] + 1
    leftovers = [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]
    assert leftovers == []
    # And the log is usable: it cleans and takes appends.
    LogCleaner(manager, inProcess=True, clock=lambda: NOW).cleanOnce()
    append(log, [("k1", "last")], NOW)
    assert expectedLatest(readAll(log))[b"k1"][1] == b"last"
    manager.close()


@pytest.mark.slow
def test_crash_at_every_file_system_step(disk, monkeypatch, tmp_path):
    step = 0
    while True:
        disk.directory = str(tmp_path / f"logs-{step}")
        manager, log = _prepared(disk)
        before = readAll(log)
        with monkeypatch.context() as patch:
            count = _crashAfter(patch, step)
            cleaner = LogCleaner(manager, inProcess=True, clock=lambda: NOW)
            try:
                cleaner.cleanOnce()
                crashed = False
            except Crash:
                crashed = True
        _check(disk, manager, before)
        if not crashed:
            break
        step += 1
    # The pass swapped several segments, each in several steps.
    print(f"{step} crash points")
    assert step > 10, f"only {step} file system changes"
    assert count[0] == step


def test_crash_while_writing_cleaned_segment(disk, monkeypatch):
    manager, log = _prepared(disk)
    before = readAll(log)
    writes = [0]
    original = swap.CleanedSegment._write

    def write(self, data, position):
        writes[0] += 1
        if writes[0] == 1:
            original(self, bytes(data)[: len(data) // 2], position)
            raise Crash("crash mid-write")
        original(self, data, position)

    monkeypatch.setattr(swap.CleanedSegment, "_write", write)
    # A dead process cleans nothing up.
    monkeypatch.setattr(swap.CleanedSegment, "abort", lambda self: None)
    with pytest.raises(Crash):
        LogCleaner(manager, inProcess=True, clock=lambda: NOW).cleanOnce()
    monkeypatch.undo()
    assert any(n.endswith(".cleaned") for n in os.listdir(log.directory))
    _check(disk, manager, before)
