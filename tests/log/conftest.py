"""
Fixtures running the same log tests over the in-memory and on-disk logs.
"""

from __future__ import annotations

import pytest
from twisted.logger import formatEvent, globalLogPublisher

from kafkatwist.log import LogManager, MemoryLogManager
from kafkatwist.log.throttle import storageLog


class Harness:
    """
    Makes log managers of one kind, and restarts on-disk ones.
    """

    def __init__(self, kind: str, directory) -> None:
        self.kind = kind
        self.directory = str(directory)
        self.managers = []
        self.defaults = {}
        self.kw = {}

    @property
    def onDisk(self) -> bool:
        return self.kind == "disk"

    def make(self, defaults=None, **kw):
        self.defaults, self.kw = dict(defaults or {}), kw
        if self.onDisk:
            manager = LogManager([self.directory], self.defaults, **kw)
        else:
            manager = MemoryLogManager(self.defaults, **kw)
        self.managers.append(manager)
        return manager

    def restart(self, manager, clean: bool = True):
        """
        Stop C{manager} (cleanly or as a crash) and load the directory again.
        """
        if not self.onDisk:
            pytest.skip("the in-memory log does not survive a restart")
        if clean:
            manager.close()
        else:
            manager.abandon()
        return self.make(self.defaults, **self.kw)

    def closeAll(self) -> None:
        for manager in self.managers:
            if self.onDisk and manager._closed:
                continue
            manager.close()


@pytest.fixture(params=["memory", "disk"])
def harness(request, tmp_path):
    h = Harness(request.param, tmp_path / "logs")
    yield h
    h.closeAll()


@pytest.fixture
def disk(tmp_path):
    h = Harness("disk", tmp_path / "logs")
    yield h
    h.closeAll()


class CapturedLog:
    """
    The twisted.logger events emitted while a test runs, formatted.
    """

    def __init__(self) -> None:
        self.events: list[dict] = []

    def __call__(self, event) -> None:
        self.events.append(event)

    @property
    def lines(self) -> list[str]:
        return [formatEvent(event) or "" for event in self.events]

    def count(self, text: str) -> int:
        return sum(text in line for line in self.lines)

    def matching(self, text: str) -> list[str]:
        return [line for line in self.lines if text in line]

    @property
    def failures(self) -> list:
        """
        Events carrying a traceback.
        """
        return [event for event in self.events if "log_failure" in event]


@pytest.fixture
def capturedLog():
    storageLog.reset()
    captured = CapturedLog()
    globalLogPublisher.addObserver(captured)
    yield captured
    globalLogPublisher.removeObserver(captured)
