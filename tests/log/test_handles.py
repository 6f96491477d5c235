"""
The handle cache (issue 12: eviction wrote index files under the cache's
global lock, so every reader on every partition waited on one disk write).
"""

from __future__ import annotations

import threading

from kafkatwist.log import handles
from kafkatwist.log.segment import FileSegment

from .batches import makeBatch
from .helpers import NOW


def rolledLog(disk, **kw):
    manager = disk.make(**kw)
    manager.createTopic("t", 1, {"segment.bytes": "300", "index.interval.bytes": "10"})
    log = manager.getLog("t", 0)
    for _ in range(30):
        log.append(makeBatch(2, valueSize=30), NOW)
    return manager, log


def test_eviction_writes_and_closes_outside_the_lock(disk, monkeypatch):
    manager, log = rolledLog(disk)
    cache = manager.cache
    cache.maxOpen = 2
    underLock = []
    realPersist, realClose = FileSegment.persistIndexes, handles.os.close

    def persist(segment, *args, **kw):
        underLock.append(("persist", cache._lock.locked()))
        return realPersist(segment, *args, **kw)

    def close(fd):
        underLock.append(("close", cache._lock.locked()))
        return realClose(fd)

    monkeypatch.setattr(FileSegment, "persistIndexes", persist)
    monkeypatch.setattr(handles.os, "close", close)
    # Indexes not yet written, so that eviction has something to write.
    for segment in log.segments[:-1]:
        segment.indexes()[0].written = 0
    for segment in log.segments[:-1]:
        log.read(segment.baseOffset, 1).records.close()
    monkeypatch.undo()
    assert ("persist", False) in underLock and ("close", False) in underLock
    assert all(not locked for _, locked in underLock)
    assert len(cache) <= 2


def test_active_descriptor_of_a_busy_partition_is_not_closed(disk):
    # Past the active budget, the oldest active descriptor is closed -- but
    # never under a write: a partition whose lock is held keeps it.
    manager = disk.make(maxOpenActive=1)
    manager.createTopic("t", 3)
    first, second = manager.getLog("t", 0), manager.getLog("t", 1)
    first.append(makeBatch(1), NOW)
    busy = first.activeSegment
    assert busy._fd is not None
    holding, release = threading.Event(), threading.Event()

    def writer():
        with first._lock:
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        holding.wait(10)
        second.append(makeBatch(1), NOW)  # opens a second active descriptor
        assert busy._fd is not None
    finally:
        release.set()
        thread.join()
    # The next descriptor opened closes what is past the budget.
    manager.getLog("t", 2).append(makeBatch(1), NOW)
    assert busy._fd is None and manager.cache.openActive == 1
    first.append(makeBatch(1), NOW)  # reopened on its next write
    assert first.logEndOffset == 2
