"""
The periodic flush syncs rolled segments outside the log's lock, then moves
the recovery point to where they end.  A follower's truncation (KIP-101)
into a rolled segment makes it active again (review 3, D3): the flush must
neither fail on it -- which skipped the rest of the pass for every other
log -- nor take bytes written after its fsync as synced (the restart's
recovery skips everything below the recovery point).  The interleaving is
driven by hand: the truncation runs inside the segment's fsync.  Over the
in-memory and on-disk logs.
"""

from __future__ import annotations

from .batches import makeBatch
from .helpers import NOW, newLog


def rollOnce(log):
    for _ in range(3):
        log.append(makeBatch(5, valueSize=60), NOW)
    segments = log.segments
    assert len(segments) == 2 and log._rolledUnflushed == segments[:1]
    return segments


def test_a_flush_pass_after_a_truncation_into_a_rolled_segment(harness):
    manager, log = newLog(harness, {"segment.bytes": "1024"})
    manager.createTopic("u", 1, {"flush.ms": "0"})
    other = manager.getLog("u", 0)
    other.append(makeBatch(3), NOW)
    rolled, _ = rollOnce(log)
    log.truncateTo(rolled.baseOffset + 2)  # a new leader's log diverges
    assert log.segments == [rolled] and log.activeSegment is rolled
    manager.flushDirty(NOW + 10_000)
    assert log._rolledUnflushed == []
    # The rest of the pass ran: the other log is flushed.
    assert other.recoveryPoint == other.logEndOffset == 3
    assert log.recoveryPoint <= log.logEndOffset


def test_a_truncation_during_the_fsync_of_a_rolled_segment(harness):
    _, log = newLog(harness, {"segment.bytes": "1024"})
    rolled, _ = rollOnce(log)
    synced = []
    sync = rolled.sync

    def truncateDuringSync(indexes=False):
        sync(indexes=indexes)
        synced.append(rolled.size)
        if len(synced) == 1:
            # Meanwhile, on the fetcher's thread: truncate into the rolled
            # segment, append past the truncation point, roll again.
            log.truncateTo(rolled.baseOffset + 5)
            rollOnce2(log)

    rolled.sync = truncateDuringSync
    log.maybeFlush(NOW)
    assert len(log.segments) == 2 and log.segments[0] is rolled
    # The bytes appended to the rolled segment after its fsync are not taken
    # as synced: the recovery point stays below them.
    assert log.recoveryPoint <= rolled.baseOffset + 5
    assert rolled in log._rolledUnflushed
    # The next pass syncs it as it is now, and then moves the recovery point.
    log.maybeFlush(NOW)
    assert synced[-1] == rolled.size and len(synced) == 2
    assert log.recoveryPoint == log.segments[1].baseOffset
    assert log._rolledUnflushed == []


def rollOnce2(log):
    base = log.activeSegment.baseOffset
    while log.activeSegment.baseOffset == base:
        log.append(makeBatch(5, valueSize=60), NOW)


def test_a_truncation_during_the_fsync_without_a_roll_after_it(harness):
    _, log = newLog(harness, {"segment.bytes": "1024"})
    rolled, _ = rollOnce(log)
    sync = rolled.sync

    def truncateDuringSync(indexes=False):
        sync(indexes=indexes)
        log.truncateTo(rolled.baseOffset + 5)
        log.append(makeBatch(2, valueSize=60), NOW)

    rolled.sync = truncateDuringSync
    log.maybeFlush(NOW)  # no IndexError: the rolled segment is the active one
    assert log.activeSegment is rolled and log.recoveryPoint <= rolled.baseOffset + 5
    assert log._rolledUnflushed == []
