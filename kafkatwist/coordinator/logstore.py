"""
C{__consumer_offsets} as the group coordinator's L{ICoordinatorLog}: where
its L{Append} effects go, and where its state is read back from at start-up.

Each append is one record batch (magic 2, uncompressed, no producer id)
written with C{isFromClient=False}; a multi-partition commit is thus
written atomically.  Reading back never stops start-up: a batch that cannot
be read (bad CRC, a record that does not decode, a length that does not
add up, a region the log cannot read) is skipped with one log line naming
the topic, partition and offsets, and so is a batch the broker did not
write (one with a producer id that is not transactional: clients may not
write internal topics).  Transactional offset commits -- batches of the
committing producer, written by the group coordinator -- and the markers
that end their transactions are read back by L{OffsetsTopicLog.replayEvents}.

Blocking: every method reads or writes the log, so call them on handler or
coordinator threads, never on a reactor thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.coordinator.formats import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIGS
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import ICoordinatorLog
from kafkatwist.log.region import readRecords
from kafkatwist.protocol.batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, PREFIX
from kafkatwist.protocol.markers import MarkerError, readMarker
from kafkatwist.protocol.records import CorruptRecordError, Record, buildBatch, decodeBatches
from kafkatwist.replication.appends import COORDINATOR, appendMarker, appendToLeader

__all__ = ["OffsetsTopicLog"]

log = Logger()
E = ErrorCode

# What a batch read back is (see OffsetsTopicLog._kind).
_PLAIN, _TRANSACTIONAL, _MARKER = object(), object(), object()

#: bytes read from a partition at a time while loading
LOAD_BUFFER_BYTES = 5 * 1024 * 1024
#: the largest batch loading reads whole (a batch is at most a segment)
MAX_BATCH_BYTES = 1 << 30


@implementer(ICoordinatorLog)
class OffsetsTopicLog:
    """
    @param logManager: an L{kafkatwist.interfaces.ILogManager}; the topic is
        created there if missing.
    @param numPartitions: C{offsets.topic.num.partitions}, used when the
        topic is created; an existing topic keeps its count.
    @param segmentBytes: C{offsets.topic.segment.bytes}, used when the topic
        is created.
    @param clock: milliseconds since the epoch, for record timestamps.
    """

    topic = OFFSETS_TOPIC
    #: the configs the topic is created with
    topicConfigs = OFFSETS_TOPIC_CONFIGS
    #: the setting that names the partition count
    partitionsKey = "offsets.topic.num.partitions"

    def __init__(
        self,
        logManager,
        numPartitions: int = 50,
        clock: Callable[[], int] | None = None,
        segmentBytes: int | None = None,
    ) -> None:
        self._logManager = logManager
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.numPartitions = self._ensureTopic(numPartitions, segmentBytes)

    def _ensureTopic(self, numPartitions: int, segmentBytes: int | None) -> int:
        info = self._logManager.topics().get(self.topic)
        if info is None:
            configs = dict(self.topicConfigs)
            if segmentBytes is not None:
                configs["segment.bytes"] = str(segmentBytes)
            try:
                info = self._logManager.createTopic(self.topic, numPartitions, configs)
            except KafkaError as e:
                if e.code != E.topic_already_exists:
                    raise
                info = self._logManager.topics()[self.topic]
        if info.numPartitions != numPartitions:
            log.warn(
                "{topic} has {actual} partitions, not {key}={wanted}: keeping {actual}",
                topic=self.topic, actual=info.numPartitions, wanted=numPartitions,
                key=self.partitionsKey,
            )
        return info.numPartitions

    def _log(self, partition: int):
        partitionLog = self._logManager.getLog(self.topic, partition)
        if partitionLog is None:
            raise KafkaError(E.unknown_topic_or_partition, f"{self.topic}-{partition} is missing")
        return partitionLog

    # -- writing ---------------------------------------------------------------

    def append(
        self,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        producer: tuple[int, int] | None = None,
        marker: tuple[int, int, bool, int] | None = None,
    ):
        """
        @param producer: C{(producerId, epoch)}: write the records as that
            producer's transactional batch (no sequence number, as Kafka's
            coordinators write them); the log checks the epoch.
        @param marker: C{(producerId, epoch, commit, coordinatorEpoch)}:
            append that end-transaction marker instead.
        @return: the log's L{AppendInfo}, or C{None} if nothing was written.
        """
        nowMs = self._clock()
        # Through the replica manager's append path, as Kafka's coordinators
        # write (acks=-1; the runtime then waits for the ISR).
        if marker is not None:
            return appendMarker(self._log(partition), *marker, nowMs, origin=COORDINATOR)
        records = list(records)
        if not records:
            return None
        kw = {}
        if producer is not None:
            kw = dict(producerId=producer[0], producerEpoch=producer[1], isTransactional=True)
        batch = buildBatch([Record(timestamp=nowMs, key=k, value=v) for k, v in records], **kw)
        return appendToLeader(self._log(partition), batch, nowMs, -1, origin=COORDINATOR)

    # -- reading ---------------------------------------------------------------

    def replay(self, partition: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        for offset, key, value, producerId, marker in self._replay(partition, False):
            yield offset, key, value

    def replayEvents(self, partition: int) -> Iterator[tuple]:
        """
        Like L{replay}, with transactions: yield C{(offset, key, value,
        producerId, marker)}, where C{producerId} is -1 for the broker's
        own records and a producer's for its transactional records (offset
        commits of a transaction), and an end-transaction marker comes as
        C{(offset, None, None, producerId, commit)} (C{marker} is C{None}
        otherwise).
        """
        return self._replay(partition, True)

    def _replay(self, partition: int, transactions: bool) -> Iterator[tuple]:
        partitionLog = self._logManager.getLog(self.topic, partition)
        if partitionLog is None:
            return
        where = f"{self.topic}-{partition}"
        offset = partitionLog.logStartOffset
        end = partitionLog.logEndOffset
        maxBytes = LOAD_BUFFER_BYTES
        while offset < end:
            try:
                data = readRecords(partitionLog.read(offset, maxBytes, toLogEnd=True).records)
            except (KafkaError, OSError) as e:
                offset = self._skipUnreadable(partitionLog, where, offset, end, e)
                continue
            if not data:
                return
            pos, start = 0, offset
            grow = None
            while len(data) - pos >= LOG_OVERHEAD:
                baseOffset, length = PREFIX.unpack_from(data, pos)
                batchEnd = pos + LOG_OVERHEAD + length
                if length < HEADER_SIZE - LOG_OVERHEAD:
                    offset = self._skipUnreadable(
                        partitionLog, where, max(offset, baseOffset), end,
                        f"batch length {length}",
                    )
                    break
                if batchEnd > len(data):
                    if pos == 0:
                        grow = LOG_OVERHEAD + length
                    break
                batchStart, pos = pos, batchEnd
                lastDelta = HEADER.unpack_from(data, batchStart)[6]
                if baseOffset + max(lastDelta, 0) + 1 <= offset:
                    continue  # before where we are (the log answers whole batches)
                nextOffset = baseOffset + max(lastDelta, 0) + 1
                try:
                    (decoded,) = decodeBatches(memoryview(data)[batchStart:batchEnd])
                except (CorruptRecordError, ValueError) as e:
                    # Its header may be damaged too: where the next batch
                    # starts is the better guide to what it spans.
                    if len(data) - pos >= LOG_OVERHEAD:
                        nextOffset = PREFIX.unpack_from(data, pos)[0]
                    nextOffset = min(max(nextOffset, baseOffset + 1), end)
                    log.warn(
                        "{where}: skipping unreadable batch at offsets {first}-{last}: {error}",
                        where=where, first=baseOffset, last=nextOffset - 1, error=e,
                    )
                    offset = nextOffset
                    continue
                offset = nextOffset
                kind = self._kind(where, decoded, offset, transactions)
                if kind is _MARKER:
                    try:
                        marker = readMarker(memoryview(data)[batchStart:batchEnd])
                    except MarkerError as e:
                        log.warn(
                            "{where}: skipping unreadable marker at offset {offset}: {error}",
                            where=where, offset=baseOffset, error=e,
                        )
                        continue
                    if marker.isTransactionMarker:
                        yield (baseOffset, None, None, decoded.producerId,
                               not marker.isAborted)
                elif kind is not None:
                    producerId = decoded.producerId if kind is _TRANSACTIONAL else -1
                    for record in decoded.records:
                        yield record.offset, record.key, record.value, producerId, None
            if offset == start:
                if grow is not None and grow <= MAX_BATCH_BYTES and grow > maxBytes:
                    # One batch bigger than the buffer: read it whole.
                    maxBytes = grow
                else:
                    offset = self._skipUnreadable(
                        partitionLog, where, offset, end, "no whole batch"
                    )

    @staticmethod
    def _kind(where: str, batch, nextOffset: int, transactions: bool):
        """
        What C{batch} is: the broker's own records (L{_PLAIN}), a
        transaction's records or marker (L{_TRANSACTIONAL}, L{_MARKER}:
        only with C{transactions}), or C{None} to skip (a producer's batch
        that is not transactional is logged: clients may not write here).
        """
        if batch.isControl:
            return _MARKER if transactions and batch.producerId >= 0 else None
        if batch.producerId >= 0:
            if batch.isTransactional:
                return _TRANSACTIONAL if transactions else None
            log.warn(
                "{where}: skipping the batch at offsets {first}-{last}: written by producer"
                " {producer}, not by the broker",
                where=where, first=batch.baseOffset, last=nextOffset - 1, producer=batch.producerId,
            )
            return None
        return _PLAIN

    @staticmethod
    def _skipUnreadable(partitionLog, where: str, offset: int, end: int, error) -> int:
        """
        The log cannot give a batch at C{offset}: find the first offset
        after it that it can (what follows the damage), log the gap once.

        @return: that offset, or C{end}.
        """

        def readable(at: int) -> bool:
            try:
                readRecords(partitionLog.read(at, 1, toLogEnd=True).records)
            except (KafkaError, OSError):
                return False
            return True

        low, step = offset, 1
        while True:
            high = offset + step
            if high >= end:
                high = end
                break
            if readable(high):
                break
            low, step = high, step * 2
        while high - low > 1:
            middle = (low + high) // 2
            if readable(middle):
                high = middle
            else:
                low = middle
        log.warn(
            "{where}: skipping unreadable offsets {first}-{last}: {error}",
            where=where, first=offset, last=high - 1, error=error,
        )
        return high
