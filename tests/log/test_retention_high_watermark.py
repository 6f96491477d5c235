"""
Retention never deletes what is not committed (review 3, D5): as Kafka's
UnifiedLog.deletableSegments, retention.ms and retention.bytes delete a
segment only if its upper bound -- the next segment's base offset, or the
log end for the active segment -- is at or below the high watermark, so the
log start offset never passes it.  Over the in-memory and on-disk logs.
"""

from __future__ import annotations

from .batches import makeBatch, records
from .helpers import NOW, newLog, offsets

DAY = 86_400_000


def fillOld(log, batches: int = 10, count: int = 5):
    # Records a day old (replayed data, a skewed producer clock).
    for _ in range(batches):
        log.append(makeBatch(count, valueSize=50, baseTimestamp=NOW - DAY), NOW)


def readToEnd(log, offset: int) -> list:
    # Every offset from C{offset} on, as a follower reads them (to the log end).
    found = []
    while offset < log.logEndOffset:
        data = records(log.read(offset, 1 << 20, toLogEnd=True).records)
        last = offsets(data)[-1][1]
        found += range(offset, last + 1)
        offset = last + 1
    return found


def bases(log):
    return [s.baseOffset for s in log.segments]


def test_retention_ms_stops_at_the_high_watermark(harness):
    manager, log = newLog(harness, {"segment.bytes": "400", "retention.ms": "3600000"})
    fillOld(log)
    segments = bases(log)
    assert len(segments) > 4 and log.logEndOffset == 50
    # A leader whose followers have the records below the third segment's base
    # and part of the third segment.
    hw = segments[2] + 1
    log.setHighWatermark(hw)
    assert manager.runRetention(NOW) == 2
    assert bases(log) == segments[2:]
    assert log.logStartOffset == segments[2] <= log.highWatermark == hw
    # Nothing above the high watermark was lost (a follower's read goes to the log end).
    assert readToEnd(log, segments[2]) == list(range(segments[2], 50))
    # A high watermark exactly at a segment's end lets that segment go.
    log.setHighWatermark(segments[4])
    assert manager.runRetention(NOW) == 2
    assert log.logStartOffset == segments[4]
    # Nothing committed yet in the active segment: it stays, not rolled.
    log.setHighWatermark(segments[-1])
    manager.runRetention(NOW)
    assert bases(log) == segments[-1:] and log.logEndOffset == 50
    # Everything committed: the active segment is rolled and deleted, as before.
    log.setHighWatermark(50)
    assert manager.runRetention(NOW) == 1
    assert log.logStartOffset == log.logEndOffset == 50 and log.size == 0


def test_a_leader_with_nothing_committed_deletes_nothing(harness):
    manager, log = newLog(harness, {"segment.bytes": "400", "retention.ms": "3600000"})
    log.setHighWatermark(0)
    fillOld(log)
    assert manager.runRetention(NOW) == 0
    assert log.logStartOffset == 0 and log.logEndOffset == 50 and log.highWatermark == 0


def test_retention_bytes_stops_at_the_high_watermark(harness):
    batch = makeBatch(1, valueSize=50, baseTimestamp=NOW)
    manager, log = newLog(
        harness, {"segment.bytes": str(len(batch) * 2), "retention.bytes": str(len(batch) * 3)}
    )
    for _ in range(11):
        log.append(batch, NOW)
    log.setHighWatermark(4)
    manager.runRetention(NOW)
    # Only the two segments wholly below offset 4 go, although 8 batches are over.
    assert log.logStartOffset == 4 and log.size == len(batch) * 7
    log.setHighWatermark(11)
    manager.runRetention(NOW)
    assert log.logStartOffset == 8 and log.size == len(batch) * 3


def test_following_the_log_end_retention_is_unbounded(harness):
    """
    A single broker (and a leader alone in its ISR): the high watermark is the
    log end, so retention deletes everything expired, the active segment too.
    """
    manager, log = newLog(harness, {"segment.bytes": "400", "retention.ms": "3600000"})
    fillOld(log)
    assert not log.replicated()
    segments = bases(log)
    assert manager.runRetention(NOW) == len(segments) > 4
    assert log.logStartOffset == log.logEndOffset == log.highWatermark == 50
