"""
A full disk (issue 11): a segment roll hitting ENOSPC escaped as an
unhandled OSError and closed the producer's connection; the periodic
checkpoint logged a traceback every second.  Now the append answers
KAFKA_STORAGE_ERROR, periodic work logs one line a minute, and everything
works again once space is back.  Failures are injected into the file system
calls the log makes.
"""

from __future__ import annotations

import errno
import os

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import manager as managerModule
from kafkatwist.log.checkpoint import CLEAN_SHUTDOWN

from .batches import makeBatch
from .helpers import NOW, offsets, readAll


def enospc(*args, **kw):
    raise OSError(errno.ENOSPC, "No space left on device")


def failWhen(monkeypatch, module, name, predicate):
    """
    C{module.name} raises ENOSPC when C{predicate(*args)}.
    """
    real = getattr(module, name)

    def fake(*args, **kw):
        if predicate(*args):
            enospc()
        return real(*args, **kw)

    monkeypatch.setattr(module, name, fake)


def newSegmentFiles(path, flags=0, *rest):
    return isinstance(path, str) and path.endswith(".log") and flags & os.O_CREAT


def test_roll_hitting_enospc(disk, monkeypatch, capturedLog):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "500"})
    log = manager.getLog("t", 0)
    while len(log.segments) == 1 or log.activeSegment.size + 200 <= 500:
        log.append(makeBatch(2, valueSize=30), NOW)
    end, segments = log.logEndOffset, len(log.segments)
    failWhen(monkeypatch, os, "open", newSegmentFiles)
    for _ in range(3):
        with pytest.raises(KafkaError) as e:
            log.append(makeBatch(2, valueSize=30), NOW)
        assert e.value.code == ErrorCode.kafka_storage_error
    assert (log.logEndOffset, len(log.segments)) == (end, segments)
    assert len(capturedLog.matching("t-0: roll failed")) == 1
    assert capturedLog.failures == []
    monkeypatch.undo()
    # Space is back: the same append works, and nothing was lost.
    info = log.append(makeBatch(2, valueSize=30), NOW)
    assert info.firstOffset == end and len(log.segments) == segments + 1
    assert offsets(readAll(log, end)) == [(end, end + 1)]


def test_index_write_hitting_enospc_at_roll(disk, monkeypatch, capturedLog):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "500", "index.interval.bytes": "10"})
    log = manager.getLog("t", 0)
    failWhen(monkeypatch, os, "pwrite",
             lambda fd, data, position: os.readlink(f"/proc/self/fd/{fd}").endswith("index"))
    for _ in range(12):
        log.append(makeBatch(2, valueSize=30), NOW)
    assert len(log.segments) > 2
    assert len(capturedLog.matching("Could not write the indexes")) == 1
    monkeypatch.undo()
    manager = disk.restart(manager)
    log = manager.getLog("t", 0)
    assert log.logEndOffset == 24
    assert offsets(readAll(log, 22)) == [(22, 23)]
    assert capturedLog.failures == []


def test_fsync_hitting_enospc(disk, monkeypatch, capturedLog):
    # flush.messages=1: the append is written but cannot be made durable.
    manager = disk.make()
    manager.createTopic("t", 1, {"flush.messages": "1"})
    log = manager.getLog("t", 0)
    log.append(makeBatch(1), NOW)
    monkeypatch.setattr(os, "fsync", enospc)
    with pytest.raises(KafkaError) as e:
        log.append(makeBatch(1), NOW)
    assert e.value.code == ErrorCode.kafka_storage_error
    monkeypatch.undo()
    log.append(makeBatch(1), NOW)
    assert log.recoveryPoint == log.logEndOffset == 3


def test_periodic_work_hitting_enospc(disk, monkeypatch, capturedLog):
    manager = disk.make()
    manager.createTopic("t", 2, {"segment.bytes": "300", "flush.ms": "0"})
    for p in range(2):
        for _ in range(5):
            manager.getLog("t", p).append(makeBatch(2, valueSize=30), NOW)
    monkeypatch.setattr(managerModule, "writeCheckpoint", enospc)
    monkeypatch.setattr(os, "fsync", enospc)
    for _ in range(5):
        manager.flushDirty(NOW)
        manager.runRetention(NOW)
    assert capturedLog.failures == []
    # One line per problem, not one per attempt.
    assert len(capturedLog.matching("Could not write")) == 2  # both checkpoints
    assert len(capturedLog.matching("t-0: periodic flush failed")) == 1
    monkeypatch.undo()
    manager.flushDirty(NOW)
    assert len(capturedLog.matching("again")) == 2
    assert all(manager.getLog("t", p).recoveryPoint == 10 for p in range(2))


def test_close_hitting_enospc_leaves_no_clean_marker(disk, monkeypatch, capturedLog):
    manager = disk.make()
    manager.createTopic("t", 1)
    manager.getLog("t", 0).append(makeBatch(3), NOW)
    monkeypatch.setattr(os, "fsync", enospc)
    manager.close()
    monkeypatch.undo()
    assert not os.path.exists(os.path.join(disk.directory, CLEAN_SHUTDOWN))
    assert capturedLog.failures == []
    manager = disk.make()
    assert manager.getLog("t", 0).logEndOffset == 3
