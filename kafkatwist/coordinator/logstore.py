"""
An L{IGroupStore} on the internal topic C{__consumer_offsets}, in Kafka's
own record formats, so the group coordinator's state survives a restart.

Layout (as Kafka's C{GroupMetadataManager}):

  - partition of a group: C{abs(javaStringHashCode(groupId)) % n}, with
    C{n} the topic's partition count (C{offsets.topic.num.partitions} when
    the topic is created; an existing topic keeps its count, since moving a
    group to another partition would break last-write-wins on replay);
  - a committed offset: key C{OffsetCommitKey} v1 (group, topic,
    partition), value C{OffsetCommitValue} v3 (offset, leader epoch,
    metadata, commit timestamp), or v1 (offset, metadata, commit timestamp,
    expire timestamp) when an old client (OffsetCommit v2-4) asked for an
    explicit retention time, as Kafka writes it;
  - group metadata: key C{GroupMetadataKey} v2 (group), value
    C{GroupMetadataValue} v3 (protocol type, generation, protocol, leader,
    current state timestamp, members);
  - deletion: the same key with a null value (a tombstone).

Keys and values start with an int16 schema version and use Kafka's
classic (non-flexible) encoding: int16-length UTF-8 strings (-1 for null),
int32-length bytes, int32-count arrays, big-endian integers.

Each store call is one record batch (magic 2, uncompressed, no producer
id), appended with C{isFromClient=False}; a multi-partition commit is thus
written atomically.  L{LogGroupStore.load} replays every partition from its
start: the last record per key wins and tombstones delete.

The topic is compacted (C{cleanup.policy=compact}, segments of
C{offsets.topic.segment.bytes}): the log cleaner keeps the latest record of
each key, and tombstones for C{delete.retention.ms}, so a load replays
what is live plus whatever arrived since the cleaner last ran (at least the
active segment, which is never cleaned).
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from zope.interface import implementer

from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.store import GroupSnapshot, IGroupStore, MemberSnapshot
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.region import readRecords
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches

__all__ = [
    "OFFSETS_TOPIC",
    "LogGroupStore",
    "decodeKey",
    "decodeGroupValue",
    "decodeOffsetValue",
    "encodeGroupKey",
    "encodeGroupValue",
    "encodeOffsetKey",
    "encodeOffsetValue",
    "javaStringHashCode",
    "partitionFor",
]

log = logging.getLogger(__name__)
E = ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's defaults for the offsets topic: compacted, 100 MiB segments
#: (C{offsets.topic.segment.bytes})
OFFSETS_TOPIC_SEGMENT_BYTES = 104857600
OFFSETS_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": str(OFFSETS_TOPIC_SEGMENT_BYTES),
}

#: key schema versions: 0 and 1 are OffsetCommitKey, 2 is GroupMetadataKey
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
#: the value version Kafka writes when an explicit expiry must be kept
OFFSET_COMMIT_VALUE_EXPIRING_VERSION = 1
GROUP_METADATA_VALUE_VERSION = 3

#: bytes read from a partition at a time during load
LOAD_BUFFER_BYTES = 5 * 1024 * 1024


# ---------------------------------------------------------------------------
# Partitioning


def javaStringHashCode(s: str) -> int:
    """
    Java's C{String.hashCode()}: C{s[0]*31^(n-1) + ... + s[n-1]} over
    UTF-16 code units, in signed 32-bit arithmetic.
    """
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partitionFor(groupId: str, numPartitions: int) -> int:
    """
    Kafka's C{GroupMetadataManager.partitionFor}:
    C{Utils.abs(groupId.hashCode) % n}, where C{Utils.abs(MIN_VALUE)} is 0.
    """
    h = javaStringHashCode(groupId)
    return (0 if h == -(2**31) else abs(h)) % numPartitions


# ---------------------------------------------------------------------------
# Encoding (Kafka's non-flexible message encoding)


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">h", v))
        return self

    def int32(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">i", v))
        return self

    def int64(self, v: int) -> _Writer:
        self.parts.append(struct.pack(">q", v))
        return self

    def string(self, v: str | None) -> _Writer:
        if v is None:
            return self.int16(-1)
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise KafkaError(E.invalid_request, "string too long for the offsets topic")
        self.int16(len(data))
        self.parts.append(data)
        return self

    def bytes(self, v: bytes | None) -> _Writer:
        if v is None:
            return self.int32(-1)
        self.int32(len(v))
        self.parts.append(bytes(v))
        return self

    def value(self) -> bytes:
        return b"".join(self.parts)


class CorruptGroupRecord(ValueError):
    """
    A key or value of C{__consumer_offsets} that cannot be parsed.
    """


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = bytes(data)
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise CorruptGroupRecord(f"truncated at {self.pos} (+{n}) of {len(self.data)}")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def int64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str | None:
        n = self.int16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptGroupRecord(str(e)) from e

    def bytes(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        return self._take(n)


def encodeOffsetKey(groupId: str, topic: str, partition: int) -> bytes:
    """
    C{OffsetCommitKey} v1.
    """
    return (
        _Writer()
        .int16(OFFSET_COMMIT_KEY_VERSION)
        .string(groupId)
        .string(topic)
        .int32(partition)
        .value()
    )


def encodeGroupKey(groupId: str) -> bytes:
    """
    C{GroupMetadataKey} v2.
    """
    return _Writer().int16(GROUP_METADATA_KEY_VERSION).string(groupId).value()


def decodeKey(data: bytes) -> tuple:
    """
    @return: C{("offset", groupId, (topic, partition))},
        C{("group", groupId)}, or C{("unknown", version)} for the record
        types of other coordinators (KIP-848 groups, share groups) that a
        classic coordinator skips.
    @raise CorruptGroupRecord: if the key cannot be parsed.
    """
    r = _Reader(data)
    version = r.int16()
    if version in (0, 1):
        groupId = r.string()
        topic = r.string()
        partition = r.int32()
        if groupId is None or topic is None:
            raise CorruptGroupRecord("null group or topic in an offset key")
        return ("offset", groupId, (topic, partition))
    if version == GROUP_METADATA_KEY_VERSION:
        groupId = r.string()
        if groupId is None:
            raise CorruptGroupRecord("null group in a group metadata key")
        return ("group", groupId)
    return ("unknown", version)


def encodeOffsetValue(om: OffsetAndMetadata) -> bytes:
    """
    C{OffsetCommitValue} v3, or v1 when the offset has an explicit expiry
    (Kafka's C{offsetCommitValue} does the same: only v1 has the field, so
    the leader epoch is dropped for such commits).
    """
    w = _Writer()
    if om.expireTimestampMs is not None:
        w.int16(OFFSET_COMMIT_VALUE_EXPIRING_VERSION)
        w.int64(om.offset).string(om.metadata or "").int64(om.commitTimestampMs)
        w.int64(om.expireTimestampMs)
    else:
        w.int16(OFFSET_COMMIT_VALUE_VERSION)
        w.int64(om.offset).int32(om.leaderEpoch).string(om.metadata or "")
        w.int64(om.commitTimestampMs)
    return w.value()


def decodeOffsetValue(data: bytes) -> OffsetAndMetadata:
    """
    Read C{OffsetCommitValue} v0-v3.

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptGroupRecord(f"OffsetCommitValue v{version} is not supported")
    offset = r.int64()
    leaderEpoch = r.int32() if version >= 3 else -1
    metadata = r.string() or ""
    commitTimestamp = r.int64()
    expireTimestamp = r.int64() if version == 1 else -1
    return OffsetAndMetadata(
        offset=offset,
        leaderEpoch=leaderEpoch,
        metadata=metadata,
        commitTimestampMs=commitTimestamp,
        expireTimestampMs=None if expireTimestamp < 0 else expireTimestamp,
    )


def encodeGroupValue(snap: GroupSnapshot) -> bytes:
    """
    C{GroupMetadataValue} v3.  A group without a protocol type is written
    with C{""}, which Kafka reads back as none.
    """
    w = _Writer().int16(GROUP_METADATA_VALUE_VERSION)
    w.string(snap.protocolType or "")
    w.int32(snap.generationId)
    w.string(snap.protocolName)
    w.string(snap.leaderId)
    w.int64(-1 if snap.currentStateTimestampMs is None else snap.currentStateTimestampMs)
    w.int32(len(snap.members))
    for m in snap.members:
        w.string(m.memberId)
        w.string(m.groupInstanceId)
        w.string(m.clientId)
        w.string(m.clientHost)
        w.int32(m.rebalanceTimeoutMs)
        w.int32(m.sessionTimeoutMs)
        w.bytes(m.subscription)
        w.bytes(m.assignment)
    return w.value()


def decodeGroupValue(groupId: str, data: bytes) -> GroupSnapshot:
    """
    Read C{GroupMetadataValue} v0-v3 (v0 lacks the rebalance timeout, which
    defaults to the session timeout as in Kafka; v0-1 lack the state
    timestamp; v0-2 the group instance id).

    @raise CorruptGroupRecord: for another version or bad bytes.
    """
    r = _Reader(data)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise CorruptGroupRecord(f"GroupMetadataValue v{version} is not supported")
    protocolType = r.string()
    generationId = r.int32()
    protocolName = r.string()
    leaderId = r.string()
    stateTimestamp = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0:
        count = 0
    members = []
    for _ in range(count):
        memberId = r.string() or ""
        groupInstanceId = r.string() if version >= 3 else None
        clientId = r.string() or ""
        clientHost = r.string() or ""
        rebalanceTimeout = r.int32() if version >= 1 else None
        sessionTimeout = r.int32()
        subscription = r.bytes() or b""
        assignment = r.bytes() or b""
        members.append(
            MemberSnapshot(
                memberId=memberId,
                groupInstanceId=groupInstanceId,
                clientId=clientId,
                clientHost=clientHost,
                rebalanceTimeoutMs=sessionTimeout if rebalanceTimeout is None else rebalanceTimeout,
                sessionTimeoutMs=sessionTimeout,
                subscription=subscription,
                assignment=assignment,
            )
        )
    return GroupSnapshot(
        groupId=groupId,
        protocolType=protocolType or None,
        generationId=generationId,
        protocolName=protocolName,
        leaderId=leaderId,
        currentStateTimestampMs=None if stateTimestamp < 0 else stateTimestamp,
        members=tuple(members),
    )


# ---------------------------------------------------------------------------
# Append errors, as Kafka maps them for each kind of write

# GroupMetadataManager.storeOffsets' callback.
_OFFSET_COMMIT_ERRORS = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.message_too_large: E.invalid_commit_offset_size,
    E.record_list_too_large: E.invalid_commit_offset_size,
    E.invalid_fetch_size: E.invalid_commit_offset_size,
}
# GroupMetadataManager.storeGroup's callback (also used for tombstones).
_GROUP_ERRORS = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.message_too_large: E.unknown_server_error,
    E.record_list_too_large: E.unknown_server_error,
    E.invalid_fetch_size: E.unknown_server_error,
}


# ---------------------------------------------------------------------------
# The store


@implementer(IGroupStore)
class LogGroupStore:
    """
    Group metadata and committed offsets in C{__consumer_offsets}.

    Besides the log, the store remembers which keys are live (offsets per
    group, groups with metadata) so that deleting a group can write a
    tombstone for each of its offsets.

    @param logManager: an L{kafkatwist.interfaces.ILogManager}; the topic
        is created there if missing.
    @param numPartitions: C{offsets.topic.num.partitions}, used when the
        topic is created.
    @param segmentBytes: C{offsets.topic.segment.bytes}, likewise.
    @param clock: milliseconds since the epoch, for record timestamps.
    @ivar numPartitions: the topic's actual partition count.
    """

    def __init__(
        self,
        logManager,
        numPartitions: int = 50,
        clock: Callable[[], int] | None = None,
        segmentBytes: int = OFFSETS_TOPIC_SEGMENT_BYTES,
    ) -> None:
        self._logManager = logManager
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        self._liveOffsets: dict[str, set[TopicPartition]] = {}
        self._liveGroups: set[str] = set()
        self.numPartitions = self._ensureTopic(numPartitions, segmentBytes)

    def _ensureTopic(self, numPartitions: int, segmentBytes: int) -> int:
        info = self._logManager.topics().get(OFFSETS_TOPIC)
        if info is None:
            try:
                info = self._logManager.createTopic(
                    OFFSETS_TOPIC,
                    numPartitions,
                    dict(OFFSETS_TOPIC_CONFIGS, **{"segment.bytes": str(segmentBytes)}),
                )
            except KafkaError as e:
                if e.code != E.topic_already_exists:
                    raise
                info = self._logManager.topics()[OFFSETS_TOPIC]
        if info.numPartitions != numPartitions:
            log.warning(
                "%s has %d partitions, not offsets.topic.num.partitions=%d: keeping %d",
                OFFSETS_TOPIC,
                info.numPartitions,
                numPartitions,
                info.numPartitions,
            )
        return info.numPartitions

    def partitionFor(self, groupId: str) -> int:
        """
        @return: the C{__consumer_offsets} partition holding C{groupId}.
        """
        return partitionFor(groupId, self.numPartitions)

    # -- writing ---------------------------------------------------------------

    def _append(self, groupId: str, pairs: list[tuple[bytes, bytes | None]], errors) -> None:
        """
        Append C{(key, value)} records as one batch to the group's
        partition.

        @param errors: how append errors map to the codes the client sees.
        @raise KafkaError: the mapped code.
        """
        if not pairs:
            return
        nowMs = self._clock()
        batch = buildBatch(
            [Record(timestamp=nowMs, key=k, value=v) for k, v in pairs]
        )
        partition = self.partitionFor(groupId)
        partitionLog = self._logManager.getLog(OFFSETS_TOPIC, partition)
        if partitionLog is None:
            raise KafkaError(E.coordinator_not_available, f"{OFFSETS_TOPIC}-{partition} is missing")
        try:
            partitionLog.append(batch, nowMs, isFromClient=False)
        except KafkaError as e:
            code = errors.get(e.code, E.unknown_server_error)
            log.warning("group %s: append to %s-%d failed: %s", groupId, OFFSETS_TOPIC, partition, e)
            raise KafkaError(code, str(e)) from e
        except OSError as e:
            # Kafka's KAFKA_STORAGE_ERROR: the client looks the coordinator
            # up again and retries.
            log.error("group %s: append to %s-%d failed: %s", groupId, OFFSETS_TOPIC, partition, e)
            raise KafkaError(E.not_coordinator, str(e)) from e

    def storeGroup(self, groupSnapshot: GroupSnapshot) -> None:
        groupId = groupSnapshot.groupId
        self._append(
            groupId,
            [(encodeGroupKey(groupId), encodeGroupValue(groupSnapshot))],
            _GROUP_ERRORS,
        )
        with self._lock:
            self._liveGroups.add(groupId)

    def storeOffsets(
        self, groupId: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]
    ) -> None:
        self._append(
            groupId,
            [
                (encodeOffsetKey(groupId, topic, partition), encodeOffsetValue(om))
                for (topic, partition), om in offsets.items()
            ],
            _OFFSET_COMMIT_ERRORS,
        )
        with self._lock:
            self._liveOffsets.setdefault(groupId, set()).update(offsets)

    def deleteOffsets(self, groupId: str, partitions: Iterable[TopicPartition]) -> None:
        partitions = list(dict.fromkeys(tuple(tp) for tp in partitions))
        self._append(
            groupId,
            [(encodeOffsetKey(groupId, t, p), None) for t, p in partitions],
            _GROUP_ERRORS,
        )
        with self._lock:
            live = self._liveOffsets.get(groupId)
            if live is not None:
                live.difference_update(partitions)
                if not live:
                    del self._liveOffsets[groupId]

    def deleteGroup(self, groupId: str) -> None:
        with self._lock:
            live = sorted(self._liveOffsets.get(groupId, ()))
        # The group tombstone goes last, as Kafka's cleanupGroupMetadata
        # writes it after the offsets' ones.
        pairs: list[tuple[bytes, bytes | None]] = [
            (encodeOffsetKey(groupId, t, p), None) for t, p in live
        ]
        pairs.append((encodeGroupKey(groupId), None))
        self._append(groupId, pairs, _GROUP_ERRORS)
        with self._lock:
            self._liveOffsets.pop(groupId, None)
            self._liveGroups.discard(groupId)

    # -- reading ---------------------------------------------------------------

    def load(self):
        """
        Replay every partition of C{__consumer_offsets}.

        Unparseable records are logged and skipped rather than refusing to
        start (Kafka would fail the partition's load); records of other
        coordinators' types are skipped silently.
        """
        groups: dict[str, GroupSnapshot] = {}
        offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        for partition in range(self.numPartitions):
            partitionLog = self._logManager.getLog(OFFSETS_TOPIC, partition)
            if partitionLog is None:
                continue
            for record in self._replay(partitionLog):
                try:
                    self._apply(record, groups, offsets)
                except CorruptGroupRecord as e:
                    log.warning(
                        "%s-%d offset %d: skipping unreadable record: %s",
                        OFFSETS_TOPIC,
                        partition,
                        record.offset,
                        e,
                    )
        with self._lock:
            self._liveGroups = set(groups)
            self._liveOffsets = {g: set(offs) for g, offs in offsets.items() if offs}
        return list(groups.values()), {g: offs for g, offs in offsets.items() if offs}

    @staticmethod
    def _replay(partitionLog):
        """
        @return: every data record of the partition, in offset order.
        """
        offset = partitionLog.logStartOffset
        while offset < partitionLog.logEndOffset:
            info = partitionLog.read(offset, LOAD_BUFFER_BYTES)
            data = readRecords(info.records)
            progressed = False
            for batch in decodeBatches(data):
                if batch.nextOffset <= offset:
                    continue
                progressed = True
                offset = batch.nextOffset
                if batch.isControl:
                    continue
                yield from batch.records
            if not progressed:
                break

    @staticmethod
    def _apply(record: Record, groups: dict, offsets: dict) -> None:
        if record.key is None:
            raise CorruptGroupRecord("record without a key")
        key = decodeKey(record.key)
        if key[0] == "offset":
            _, groupId, tp = key
            if record.value is None:
                groupOffsets = offsets.get(groupId)
                if groupOffsets is not None:
                    groupOffsets.pop(tp, None)
            else:
                offsets.setdefault(groupId, {})[tp] = decodeOffsetValue(record.value)
        elif key[0] == "group":
            groupId = key[1]
            if record.value is None:
                groups.pop(groupId, None)
            else:
                groups[groupId] = decodeGroupValue(groupId, record.value)
