"""
An in-memory log with the on-disk log's semantics.

Same segments, indexes, rolling and retention logic as the on-disk log (the
shared code is L{kafkatwist.log.partition} and L{kafkatwist.log.segment});
only storage differs: a segment is a C{bytearray}, reads return C{bytes},
and flushing is a no-op that still advances the recovery point.  Nothing
survives the process.  For tests and brokers that need no durability.
"""

from __future__ import annotations

from zope.interface import implementer

from kafkatwist.interfaces import ILogManager
from kafkatwist.log.index import OffsetIndex, TimeIndex
from kafkatwist.log.partition import PartitionLog
from kafkatwist.log.producerstate import producerIdExpirationMs
from kafkatwist.log.segment import Segment
from kafkatwist.log.topics import BaseLogManager, TopicState

__all__ = ["MemoryLogManager", "MemoryPartitionLog", "MemorySegment"]


class _MemoryReader:
    def __init__(self, data: bytearray) -> None:
        self.data = data

    def pread(self, n: int, position: int) -> bytes:
        # A copy: a memoryview would pin the bytearray against appends.
        return bytes(self.data[position : position + n])

    def region(self, position: int, length: int) -> bytes:
        return bytes(self.data[position : position + length])

    def close(self) -> None:
        pass


class MemorySegment(Segment):
    """
    A segment held in a C{bytearray}.
    """

    def __init__(self, baseOffset: int, createdMs: int) -> None:
        super().__init__(baseOffset, 0, createdMs)
        self.data = bytearray()
        self._offsetIndex, self._timeIndex = OffsetIndex(baseOffset), TimeIndex(baseOffset)

    def _write(self, data, position: int) -> None:
        # Appends only ever happen at the published end (== len(self.data)).
        self.data += data

    def _openReader(self) -> _MemoryReader:
        if self.deleted:
            raise FileNotFoundError(f"segment {self.baseOffset} was deleted")
        return _MemoryReader(self.data)

    def _loadIndexes(self):
        return self._rebuildIndexes()

    def sync(self, indexes: bool = False) -> None:
        pass

    def truncateTo(self, size: int) -> None:
        del self.data[size:]
        self.size = size

    def delete(self) -> None:
        self.deleted = True

    def close(self) -> None:
        pass

    # As a log cleaner's output (see kafkatwist.log.cleaning).

    def finish(self, mtimeMs: int) -> None:
        self.onBecomeInactive()
        self.createdMs = mtimeMs

    def abort(self) -> None:
        self.deleted = True


class MemoryPartitionLog(PartitionLog):
    """
    A partition log in memory.
    """

    def __init__(self, topic: str, partition: int, config, *, nowMs: int = 0, **kw) -> None:
        super().__init__(topic, partition, config, [MemorySegment(0, nowMs)], **kw)

    def _newSegment(self, baseOffset: int, nowMs: int) -> MemorySegment:
        return MemorySegment(baseOffset, nowMs)

    def _installCleaned(self, cleaned: MemorySegment, old: list, goneAborted=frozenset()) -> MemorySegment:
        entries = [
            e for s in old if getattr(s, "txnIndex", None) for e in s.txnIndex.entries
            if (e.producerId, e.lastOffset) not in goneAborted
        ]
        if entries:
            self.txnIndexOf(cleaned).replace(entries)
        for segment in old:
            segment.delete()
        return cleaned


@implementer(ILogManager)
class MemoryLogManager(BaseLogManager):
    """
    All topics' logs, in memory.

    @param defaults: broker-level settings, as for
        L{kafkatwist.log.LogManager}.
    @param clock: milliseconds since the epoch (segment creation times).
    """

    #: no data directory: nothing for DescribeLogDirs to describe
    logDirs: list[str] = []

    def __init__(self, defaults=None, *, clock=None) -> None:
        super().__init__(defaults, clock=clock)
        self.producerIdExpirationMs = producerIdExpirationMs(defaults)

    def directoryOf(self, topic: str, partition: int) -> None:
        return None

    def _createLog(self, topic: TopicState, partition: int) -> MemoryPartitionLog:
        return MemoryPartitionLog(
            topic.name,
            partition,
            topic.config,
            nowMs=self.clock(),
            producerIdExpirationMs=self.producerIdExpirationMs,
        )

    def close(self) -> None:
        for log in self.logs():
            log.close()
