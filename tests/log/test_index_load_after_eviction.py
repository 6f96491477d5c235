"""
A read loads a segment's indexes after borrowing its descriptor (the
borrow noted the use).  If another thread's use evicts the segment between
the two, the load notes the use again: the segment is back in the handle
cache's LRU, so C{maxOpen} still bounds the segments holding indexes.
"""

from __future__ import annotations

from .batches import makeBatch
from .helpers import NOW


def withIndexes(cache, segments) -> list:
    return [s for s in segments if not s.pinned and s._offsetIndex is not None]


def test_a_segment_evicted_between_borrow_and_index_load_is_back_in_the_lru(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "300", "index.interval.bytes": "10"})
    log = manager.getLog("t", 0)
    while len(log.segments) < 4:
        log.append(makeBatch(2, valueSize=30), NOW)
    cache = manager.cache
    cache.maxOpen = 1
    first, second = log.segments[0], log.segments[1]
    cache.touch(second)  # evicts the others, their indexes dropped
    assert first._offsetIndex is None and first not in cache._lru

    realBorrow = cache.borrow
    interleaved = []

    def borrow(segment):
        fd = realBorrow(segment)
        if segment is first and not interleaved:
            # another thread's read of the second segment, just now
            interleaved.append(True)
            second._openReader().close()
        return fd

    cache.borrow = borrow
    region = first.read(first.baseOffset, 1 << 20, True, first.size)
    region.close()
    assert interleaved
    loaded = withIndexes(cache, log.segments)
    assert loaded and all(s in cache._lru for s in loaded)
    assert len(loaded) <= cache.maxOpen
    assert cache.borrowed == 0
