"""
ListOffsets: earliest, latest, max timestamp, and the first offset at or
after a timestamp.

The log's time index finds the batch; the record inside it is found by
decoding that one batch, since a batch's records may be out of timestamp
order and clients expect the exact record (as Kafka answers).  This is an
admin-path cost, never paid on produce or fetch.

ListOffsets v0 (still sent by old lag monitors and clients) answers a list
of offsets: Kafka's C{legacyFetchOffsetsBefore}, by segment, see
L{legacyOffsets}.

With an authorizer, each topic needs DESCRIBE (TOPIC_AUTHORIZATION_FAILED
for its partitions otherwise).

The batch is decoded as stored data is (L{kafkatwist.log.stored}): checked
again and inflated within a bound, so a damaged batch or a compression bomb
answers CORRUPT_MESSAGE for its partition, logged once, instead of closing
the connection or exhausting memory.
"""

from __future__ import annotations

import time

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.log.region import readRecords
from kafkatwist.log.stored import (
    StoredBatchError,
    decodeStoredBatches,
    decompressedLimit,
    reportCorrupt,
)
from kafkatwist.protocol.apis import LIST_OFFSETS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.replication.fencing import NO_EPOCH, checkReplica
from kafkatwist.security.acl import AclOperation, ResourceType
from kafkatwist.security.checks import filterAuthorized

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
READ_COMMITTED = 1
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2


class ListOffsetsHandler(Handler):
    apiKey = LIST_OFFSETS
    minVersion = 0
    maxVersion = 10

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(LIST_OFFSETS, version)
        Topic = nested(cls, "ListOffsetsTopicResponse")
        Partition = nested(cls, "ListOffsetsPartitionResponse")
        logManager = self.broker.logManager
        readCommitted = getattr(request, "isolation_level", 0) == READ_COMMITTED
        # A follower (replica_id >= 0) sees up to the log end, a consumer up
        # to the high watermark; -2 (debugging) may ask a follower too.
        fromReplica = request.replica_id >= 0
        requireLeader = request.replica_id != DEBUGGING_REPLICA_ID
        describable = filterAuthorized(
            self.authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics)
        )
        topics = []
        for topic in request.topics:
            partitions = []
            refused = topic.name not in describable
            for p in topic.partitions:
                log = logManager.getLog(topic.name, p.partition_index) if logManager and not refused else None
                offsets = ()
                timestamp = offset = -1
                leaderEpoch = -1
                fenced = (
                    None if log is None
                    else checkReplica(
                        log, getattr(p, "current_leader_epoch", NO_EPOCH), requireLeader
                    )
                )
                if refused:
                    error = ErrorCode.topic_authorization_failed
                elif version == 0 and p.timestamp < EARLIEST:
                    # v0 knows only latest and earliest among the special
                    # timestamps.
                    error = ErrorCode.unsupported_version
                elif log is None:
                    error = ErrorCode.unknown_topic_or_partition
                elif fenced is not None:
                    error = fenced
                elif version == 0:
                    error = ErrorCode.none
                    offsets = legacyOffsets(
                        log, p.timestamp, p.max_num_offsets, time.time(),
                        fromConsumer=request.replica_id == CONSUMER_REPLICA_ID,
                    )
                else:
                    try:
                        timestamp, offset = self.lookup(
                            log, p.timestamp, readCommitted, fromReplica
                        )
                        error = ErrorCode.none
                        leaderEpoch = _epochOf(log, p.timestamp, offset)
                    except KafkaError as e:
                        error, timestamp, offset = e.code, -1, -1
                partitions.append(
                    make(
                        Partition,
                        partition_index=p.partition_index,
                        error_code=error,
                        timestamp=timestamp,
                        offset=offset,
                        old_style_offsets=offsets,
                        leader_epoch=leaderEpoch,
                    )
                )
            topics.append(make(Topic, name=topic.name, partitions=tuple(partitions)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    @staticmethod
    def lookup(log, target: int, readCommitted: bool, fromReplica: bool = False) -> tuple[int, int]:
        """
        @return: (timestamp, offset) as ListOffsets answers for C{target}.
        """
        # Kafka's lastFetchableOffset: nothing at or past it is answered.
        if fromReplica:
            fetchable = log.logEndOffset
        else:
            fetchable = log.lastStableOffset if readCommitted else log.highWatermark
        if target in (EARLIEST, EARLIEST_LOCAL):
            return -1, log.logStartOffset
        # A leader just elected whose high watermark has not reached its
        # epoch's start knows too little to answer "latest" or a time that
        # falls past what is fetchable: OFFSET_NOT_AVAILABLE (retriable),
        # as Kafka's Partition.fetchOffsetForTimestamp, rather than an
        # offset behind what a consumer of the old leader already read.
        def lagging():
            return not fromReplica and _highWatermarkLagging(log)

        if target == LATEST or target == LATEST_TIERED:
            if lagging():
                raise _offsetNotAvailable(log)
            return -1, fetchable
        if target == MAX_TIMESTAMP:
            found = log.maxTimestamp()
            if found is None:
                if lagging():
                    raise _offsetNotAvailable(log)
                return -1, -1
            offset, timestamp = found
            exact = _recordAt(log, offset, lambda r: r.timestamp == timestamp)
            answer = (timestamp, exact[1] if exact else offset)
        elif target < 0:
            raise KafkaError(ErrorCode.invalid_request, f"unknown special timestamp {target}")
        else:
            found = log.offsetForTimestamp(target)
            if found is None:
                if lagging():
                    raise _offsetNotAvailable(log)
                return -1, -1
            exact = _recordAt(log, found[0], lambda r: r.timestamp >= target)
            answer = (found[1], found[0]) if exact is None else exact
        if answer[1] < fetchable:
            return answer
        if lagging():
            raise _offsetNotAvailable(log)
        return -1, -1


def _highWatermarkLagging(log) -> bool:
    """
    Whether this replica leads an epoch that began past its high watermark
    (its leader-epoch cache's newest entry is the epoch it leads, and the
    offset it began at).  A single broker's logs never are: their high
    watermark is their log end.
    """
    if not log.isLeader:
        return False
    entries = log.epochs.entries
    return bool(entries) and entries[-1][0] == log.leaderEpoch and entries[-1][1] > log.highWatermark


def _offsetNotAvailable(log) -> KafkaError:
    return KafkaError(
        ErrorCode.offset_not_available,
        f"the high watermark {log.highWatermark} of {log.topic}-{log.partition} is behind "
        f"the start of leader epoch {log.leaderEpoch}",
    )


def _epochOf(log, target: int, offset: int) -> int:
    """
    The leader epoch ListOffsets v4+ answers with an offset: the current
    epoch for the latest, else the epoch the offset was written in.
    """
    if offset < 0:
        return -1
    if target == LATEST or target == LATEST_TIERED:
        return log.leaderEpoch
    epoch = log.epochs.epochForOffset(offset)
    # A log written before it kept epochs: the current one (a single
    # broker's 0), as this broker answered before.
    return epoch if epoch >= 0 else log.leaderEpoch


def legacyOffsets(
    log, timestamp: int, maxNumOffsets: int, now: float, *, fromConsumer: bool
) -> tuple[int, ...]:
    """
    ListOffsets v0: up to C{maxNumOffsets} segment base offsets, newest
    first, as Kafka's C{legacyFetchOffsetsBefore}.  Each segment stands for
    (its base offset, its file's modification time), and a non-empty active
    segment adds (log end offset, now); latest (-1) starts from the last of
    these, earliest (-2) from the first, a time from the last segment
    modified at or before it (file times are wall-clock times, hence
    C{now} from C{time.time()}).  So the answer to "latest" begins with the
    end offset, which is what lag monitors read.  A consumer never sees an
    offset above the high watermark (Kafka's
    C{Partition.legacyFetchOffsetsForTimestamp}).
    """
    logStartOffset = log.logStartOffset
    segments = log.segments
    pairs = [(max(s.baseOffset, logStartOffset), s.lastModifiedMs()) for s in segments]
    if segments[-1].size > 0:
        pairs.append((log.logEndOffset, int(now * 1000)))
    if timestamp == LATEST:
        start = len(pairs) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(pairs) - 1
        while start >= 0 and pairs[start][1] > timestamp:
            start -= 1
    count = max(0, min(maxNumOffsets, start + 1))
    offsets = sorted((pairs[start - j][0] for j in range(count)), reverse=True)
    if fromConsumer:
        highWatermark = log.highWatermark
        if any(o > highWatermark for o in offsets):
            offsets = [highWatermark] + [o for o in offsets if o <= highWatermark]
    return tuple(offsets)


def _recordAt(log, offset: int, match) -> tuple[int, int] | None:
    """
    Decode the batch holding C{offset} (and following ones, if needed) and
    return (timestamp, offset) of the first record at or after C{offset}
    that C{match}es.
    """
    position = offset
    limit = decompressedLimit(log.config.maxMessageBytes)
    for _ in range(16):
        try:
            info = log.read(position, 1, True)
        except KafkaError:
            return None
        data = readRecords(info.records)
        if not data:
            return None
        last = position
        try:
            for batch in decodeStoredBatches(data, maxDecompressedBytes=limit):
                for record in batch.records:
                    if record.offset >= offset and match(record):
                        return record.timestamp, record.offset
                last = batch.lastOffset
        except StoredBatchError as e:
            reportCorrupt(log.topic, log.partition, e, "ListOffsets")
            raise
        position = last + 1
    return None


listOffsets = HandlerPlugin("builtin.list_offsets", LIST_OFFSETS, ListOffsetsHandler, priority=0)
