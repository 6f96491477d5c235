"""
Reads through a segment's own descriptor, borrowed from the handle cache
(no C{os.dup} and C{close} per read), and small reads answered as bytes:
whatever would close a borrowed descriptor -- the segment deleted
(retention), closed, evicted from the cache, a roll -- leaves it open for
the read under way, and the read's end closes it.
"""

from __future__ import annotations

import os
import threading

import pytest

from kafkatwist.log.region import FileRegion

from .batches import makeBatch
from .helpers import NOW, openFds


def rolledLog(disk, segments: int = 4, **kw):
    manager = disk.make(**kw)
    manager.createTopic("t", 1, {"segment.bytes": "300", "index.interval.bytes": "10"})
    log = manager.getLog("t", 0)
    while len(log.segments) < segments:
        log.append(makeBatch(2, valueSize=30), NOW)
    return manager, log


def fileBytes(segment) -> bytes:
    with open(segment.logPath, "rb") as f:
        return f.read()


def target(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def test_a_deleted_segment_stays_readable_through_a_borrowed_descriptor(disk):
    manager, log = rolledLog(disk)
    segment = log.segments[0]
    expected = fileBytes(segment)
    reader = segment._openReader()
    fd = reader.fd
    region = reader.region(0, len(expected))
    segment.delete()  # as retention does: unlinked, forgotten by the cache
    assert not os.path.exists(segment.logPath)
    assert segment._fd is None
    assert target(fd).endswith("(deleted)")
    assert reader.pread(len(expected), 0) == expected
    reader.close()
    assert manager.cache.borrowed == 0
    assert not os.path.exists(f"/proc/self/fd/{fd}") or not target(fd).startswith(segment.logPath)
    # The region has a descriptor of its own.
    assert region.read() == expected
    region.close()


def test_eviction_leaves_a_borrowed_descriptor_open_until_given_back(disk):
    manager, log = rolledLog(disk)
    cache = manager.cache
    cache.maxOpen = 1
    first, second = log.segments[0], log.segments[1]
    expected = fileBytes(first)
    reader = first._openReader()
    fd = reader.fd
    second._openReader().close()  # evicts the first from the LRU
    assert first._fd is None and cache._orphans == {fd}
    assert reader.pread(len(expected), 0) == expected
    reader.close()
    assert cache.borrowed == 0 and not cache._orphans
    # The next read opens the file again.
    assert log.read(first.baseOffset, 1 << 20).records.read()[:60] == expected[:60]


def test_the_active_segment_rolled_and_evicted_under_a_read(disk):
    manager, log = rolledLog(disk, maxOpenActive=1)
    active = log.activeSegment
    reader = active._openReader()
    written = active.size
    while log.activeSegment is active:  # rolls
        log.append(makeBatch(2, valueSize=30), NOW)
    assert reader.pread(written, 0) == fileBytes(active)[:written]
    # A second partition's active descriptor pushes the first's out.
    manager.createTopic("u", 1, {})
    manager.getLog("u", 0).append(makeBatch(1), NOW)
    active.close()
    assert reader.pread(written, 0) == fileBytes(active)[:written]
    reader.close()
    assert manager.cache.borrowed == 0 and not manager.cache._orphans


def test_a_read_takes_no_duplicate_descriptor(disk, monkeypatch):
    manager, log = rolledLog(disk)
    dups = []
    realDup = os.dup
    monkeypatch.setattr(os, "dup", lambda fd: dups.append(fd) or realDup(fd))
    for segment in log.segments:
        info = log.read(segment.baseOffset, 1 << 20, inline=16 * 1024)
        assert info.records.__class__ is bytes
    assert dups == []
    # A region (for sendfile) owns a duplicate.
    region = log.read(0, 1 << 20).records
    assert isinstance(region, FileRegion) and len(dups) == 1
    region.close()
    assert manager.cache.borrowed == 0


@pytest.mark.parametrize("offset", [0, 1, 2, 5])
def test_inline_reads_are_the_region_bytes(harness, offset):
    manager = harness.make()
    manager.createTopic("t", 1, {"segment.bytes": "100000", "index.interval.bytes": "10"})
    log = manager.getLog("t", 0)
    for i in range(4):
        log.append(makeBatch(2, valueSize=30 + i), NOW)
    region = log.read(offset, 1 << 20).records
    expected = region if isinstance(region, bytes) else region.read()
    if not isinstance(region, bytes):
        region.close()
    inline = log.read(offset, 1 << 20, inline=len(expected)).records
    assert inline.__class__ is bytes and inline == expected
    # Over the limit: the storage's own answer.
    over = log.read(offset, 1 << 20, inline=len(expected) - 1).records
    assert (over if isinstance(over, bytes) else over.read()) == expected
    if not isinstance(over, bytes):
        over.close()
    # One batch past maxBytes (minOneBatch), and maxBytes stopping after it.
    one = log.read(offset, 1, inline=1 << 20).records
    assert one.__class__ is bytes and expected.startswith(one) and 0 < len(one) < len(expected)


def test_concurrent_reads_and_evictions_leak_nothing(disk):
    manager, log = rolledLog(disk, segments=8)
    manager.cache.maxOpen = 2
    expected = {s.baseOffset: fileBytes(s) for s in log.segments[:-1]}
    before = openFds()
    failures = []

    def reader(inline):
        try:
            for _ in range(30):
                for base, data in expected.items():
                    records = log.read(base, 1 << 20, inline=inline).records
                    got = records if isinstance(records, bytes) else records.read()
                    if not isinstance(records, bytes):
                        records.close()
                    if not data.startswith(got) or not got:
                        failures.append((base, len(got)))
        except Exception as e:  # pragma: no cover - reported below
            failures.append(e)

    threads = [threading.Thread(target=reader, args=(i * 4096,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert manager.cache.borrowed == 0 and not manager.cache._orphans
    assert openFds() <= before


class CountingLock:
    def __init__(self, lock):
        self.lock = lock
        self.acquired = 0

    def __enter__(self):
        self.acquired += 1
        return self.lock.__enter__()

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)

    def acquire(self, *args, **kw):
        self.acquired += 1
        return self.lock.acquire(*args, **kw)

    def release(self):
        return self.lock.release()

    def locked(self):
        return self.lock.locked()


def test_a_read_takes_the_cache_lock_once(disk):
    manager, log = rolledLog(disk)
    cache = manager.cache
    for segment in log.segments:
        log.read(segment.baseOffset, 1 << 20, inline=16 * 1024)  # indexes loaded
    cache._lock = counting = CountingLock(cache._lock)
    for segment in log.segments:
        counting.acquired = 0
        assert log.read(segment.baseOffset, 1 << 20, inline=16 * 1024).records
        assert counting.acquired == 1


def test_borrows_given_back_while_others_detach_close_each_descriptor_once(disk, monkeypatch):
    # The give-back takes no lock unless it closes: hammer it against
    # evictions (detaches) of the same segment from another thread.  A
    # descriptor closed under a holder would fail its pread (EBADF), one
    # closed twice would fail the second close, one never closed would
    # stay open.
    manager, log = rolledLog(disk, segments=4)
    cache = manager.cache
    cache.maxOpen = 1
    hot, others = log.segments[0], log.segments[1:-1]
    expected = fileBytes(hot)[:16]
    before = openFds()
    failures = []
    done = threading.Event()

    def holder():
        try:
            for _ in range(2000):
                fd = cache.borrow(hot)
                try:
                    os.sched_yield()  # (let the evictor detach it meanwhile)
                    if os.pread(fd, 16, 0) != expected:
                        failures.append("wrong bytes")
                finally:
                    cache.giveBack(fd)
        except Exception as e:  # pragma: no cover - reported below
            failures.append(e)

    def evictor():
        try:
            while not done.is_set():
                for segment in others:
                    cache.giveBack(cache.borrow(segment))  # evicts the hot one
                os.sched_yield()
        except Exception as e:  # pragma: no cover - reported below
            failures.append(e)

    holders = [threading.Thread(target=holder) for _ in range(3)]
    evicting = threading.Thread(target=evictor)
    evicting.start()
    for t in holders:
        t.start()
    for t in holders:
        t.join()
    done.set()
    evicting.join()
    assert failures == []
    assert cache.borrowed == 0 and not cache._orphans
    assert openFds() <= before


def test_a_late_last_holder_leaves_a_reused_descriptor_number_alone(disk):
    # Two last holders of an orphaned descriptor both see "no holder left,
    # orphaned" and go for the lock.  The first closes it; before the
    # second gets the lock, the same number is opened again for another
    # segment, borrowed, and orphaned again.  The second must not close
    # that one under its new reader.
    manager, log = rolledLog(disk)
    cache = manager.cache
    first, second = log.segments[0], log.segments[1]
    fd = cache.borrow(first)
    stale = cache._borrowed[fd]
    cache._orphans.add(fd)  # the segment was detached under the read
    first._fd = None
    late = threading.Thread(target=cache.giveBack, args=(fd,))
    with cache._lock:
        late.start()
        # Once it has given its hold back it can only go on to the lock
        # (the number stays orphaned throughout), which this holds.
        deadline = threading.Event()
        while stale and not deadline.wait(0.001):
            pass
        assert not stale
        # The other last holder closed it; the number comes back for the
        # second segment, whose reader holds it and whose descriptor is
        # then detached too.
        del cache._borrowed[fd]
        os.close(fd)
        again = os.open(second.logPath, os.O_RDONLY)
        assert again == fd
        cache._borrowed[fd] = [None]
    late.join(timeout=30)
    assert not late.is_alive()
    assert target(fd) == second.logPath  # still open, still the second segment's
    cache.giveBack(fd)  # its own last holder closes it
    assert not cache._orphans and cache.borrowed == 0


class _RacingOrphans(set):
    """
    The cache's orphans, whose C{add} first lets a reader give its
    descriptor back: the give-back (which takes no lock) runs between the
    detach's "has holders" and its publishing of the orphan.
    """

    race = None

    def add(self, fd):
        race, self.race = self.race, None
        if race is not None:
            t = threading.Thread(target=race)
            t.start()
            t.join(timeout=30)
        super().add(fd)


def test_a_give_back_between_the_detachs_check_and_its_orphan_closes_it_once(disk):
    manager, log = rolledLog(disk)
    cache = manager.cache
    segment = log.segments[0]
    before = openFds()
    reader = segment._openReader()
    fd = reader.fd
    cache._orphans = orphans = _RacingOrphans()
    orphans.race = reader.close
    segment.delete()  # detached under the read: unlinked, forgotten
    assert reader.fd is None and cache.borrowed == 0
    assert not cache._orphans
    assert not os.path.exists(f"/proc/self/fd/{fd}") or "(deleted)" not in target(fd)
    assert openFds() <= before


def test_a_header_scan_left_to_the_garbage_collector_holds_no_borrow(disk):
    # A generator's finally may run in the collector, at any allocation --
    # inside the handle cache's lock too: the header scan reads through a
    # descriptor of its own, whose close needs no lock.
    import gc

    manager, log = rolledLog(disk)
    cache = manager.cache
    first, second = log.segments[0], log.segments[1]
    scan = first.batchHeaders(first.baseOffset)
    next(scan)
    assert cache.borrowed == 0
    cycle: list = [scan]
    cycle.append(cycle)
    del scan, cycle
    first.delete()
    done = threading.Event()

    def touchUnderTheLock():
        threshold = gc.get_threshold()
        with cache._lock:
            gc.set_threshold(1)
            try:
                cache._touchLocked(second)
            finally:
                gc.set_threshold(*threshold)
        done.set()

    t = threading.Thread(target=touchUnderTheLock, daemon=True)
    t.start()
    assert done.wait(30)
    gc.collect()
    assert cache.borrowed == 0 and not cache._orphans
