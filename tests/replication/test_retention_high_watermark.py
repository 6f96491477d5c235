"""
A leader's retention keeps what its ISR does not have yet (review 3, D5):
records with an old CreateTime appended with acks=-1 are not deleted before
the followers fetched them, and the log start offset never passes the high
watermark (Kafka's UnifiedLog.deletableSegments).  The replica manager's
harness, over the in-memory and on-disk logs.
"""

from __future__ import annotations

import pytest

from kafkatwist.log import LogManager, MemoryLogManager
from tests.log.batches import makeBatch
from tests.replication.test_manager import NOW, Harness


@pytest.fixture(params=["memory", "disk"])
def both(request, tmp_path):
    manager = MemoryLogManager() if request.param == "memory" else LogManager([str(tmp_path)], {})
    yield Harness(manager)
    if request.param == "disk":
        manager.close()


def test_retention_waits_for_the_isr(both):
    h = both
    h.logManager.createTopic("old", 1, {"retention.ms": "3600000", "segment.bytes": "1024"})
    log = h.logManager.getLog("old", 0)
    h.manager.becomeLeader("old", 0, 1, [1, 2], [1, 2], 0)
    h.run()
    for _ in range(20):
        log.append(makeBatch(5, baseTimestamp=NOW - 86_400_000, valueSize=50), NOW)
    assert (log.highWatermark, log.logEndOffset) == (0, 100) and len(log.segments) > 4
    bases = [s.baseOffset for s in log.segments]
    assert h.logManager.runRetention(NOW) == 0
    assert log.logStartOffset == 0 and log.logEndOffset == 100
    # Follower 2 has fetched half: the segments wholly below its position go.
    h.manager.recordFollowerFetch(2, [(("old", 0), 50, log.logEndOffset, None)])
    hw = log.highWatermark
    assert hw == 50
    h.logManager.runRetention(NOW)
    assert 0 < log.logStartOffset <= hw
    assert log.logStartOffset == max(base for base in bases if base <= hw)
    # All of it committed: retention deletes everything, as on a single broker.
    h.manager.recordFollowerFetch(2, [(("old", 0), 100, log.logEndOffset, None)])
    assert log.highWatermark == 100
    h.logManager.runRetention(NOW)
    assert log.logStartOffset == log.logEndOffset == 100
