"""
Index entries are published whole (issue 12: the time index appended the
timestamp, then the offset, while a lookup on another thread read without a
lock; in between, the lookup raised IndexError and the client's connection
was closed).

The interleaving is forced, not waited for: the index's arrays run a
reader at the moment each of their elements is appended, which is exactly
where the writer's thread can be preempted.
"""

from __future__ import annotations

from array import array

from kafkatwist.log.index import OffsetIndex, TimeIndex


class Interrupting(array):
    """
    An array that calls C{reader()} just before each append takes effect.
    """

    reader = staticmethod(lambda: None)

    def append(self, value) -> None:
        self.reader()
        super().append(value)


def interrupted(index, names, reader):
    for name in names:
        old = getattr(index, name)
        new = Interrupting(old.typecode, old)
        new.reader = reader
        setattr(index, name, new)


def test_time_index_lookup_during_append():
    index = TimeIndex(100)
    index.maybeAppend(1000, 105)
    seen = []
    interrupted(index, ("timestamps", "relativeOffsets"), lambda: seen.append(
        (index.lookup(5000), index.lastEntry(), len(index))
    ))
    index.maybeAppend(2000, 110)
    # Both preemption points saw the index as before the append.
    assert seen == [(105, (1000, 105), 1)] * 2
    assert (index.lookup(5000), index.lastEntry(), len(index)) == (110, (2000, 110), 2)


def test_offset_index_lookup_during_append():
    index = OffsetIndex(100)
    index.append(105, 4096)
    seen = []
    interrupted(index, ("relativeOffsets", "positions"), lambda: seen.append(
        (index.lookup(500), index.lookupEntry(500), index.floorPosition(10**6),
         index.lastPosition())
    ))
    index.append(110, 8192)
    assert seen == [(4096, (105, 4096), 4096, 4096)] * 2
    assert index.lookup(500) == 8192 and index.encode() == OffsetIndex.decode(
        100, index.encode(), 10**6).encode()
