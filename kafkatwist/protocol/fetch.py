"""
The Fetch response, encoded by hand so record data can stay in the segment
files: the encoder emits bytes for everything around the records and passes
each partition's L{IFileRegion} through untouched, for the PLAINTEXT
transport to C{sendfile}.

Layouts (v4-v16): v5 adds log_start_offset, v7 the top-level error code and
session id, v11 preferred_read_replica, v12 the flexible encoding (compact
arrays/strings/bytes and tagged fields), v13 topic ids in place of names.

The request, by hand too (every Fetch a consumer or follower sends):
L{decodeFetchRequest} reads v0-v16 straight from the frame, with the
bounds checks in the decoder itself -- every count is checked against the
bytes left before anything loops on it -- instead of the generic walk and
C{kio}'s reader.  Request layout: replica_id int32 (below v15; v15+ in the
ReplicaState tagged field), max_wait_ms int32, min_bytes int32, max_bytes
int32 (v3+), isolation_level int8 (v4+), session_id and session_epoch int32
(v7+), topics [topic string, or topic_id uuid from v13, partitions
[partition int32, current_leader_epoch int32 (v9+), fetch_offset int64,
last_fetched_epoch int32 (v12+), log_start_offset int64 (v5+),
partition_max_bytes int32]], forgotten_topics_data (v7+) [topic or
topic_id, partitions [int32]], rack_id string (v11+); from v12 compact
arrays and strings and tagged fields after every struct (the request's:
cluster_id, tag 0; replica_state, tag 1, v15+).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import datetime
import uuid

from kafkatwist.protocol.codec import EncodedResponse, MalformedRequest, chunkLength
# MalformedHeader is a ValueError: decodeFetchRequest turns it into MalformedRequest.
from kafkatwist.protocol.header import (
    INT16,
    INT32,
    readLength,
    readUnsignedVarint,
    skipTaggedFields,
    writeLength,
    writeString,
)

_PARTITION_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_I16_I32 = struct.Struct(">hi")
_ZERO_ID = bytes(16)
#: v12+: throttle_time_ms, error_code, session_id
_FLEX_HEAD = struct.Struct(">ihi")
#: v12+, a partition without aborted transactions: partition_index,
#: error_code, high_watermark, last_stable_offset, log_start_offset, the
#: null compact array, preferred_read_replica
_FLEX_PLAIN = struct.Struct(">ihqqqBi")
_FLEX_PARTITION = struct.Struct(">ihqqq")
#: v12+: an aborted transaction and its (empty) tagged fields
_ABORTED_FLEX = struct.Struct(">qqB")

MIN_VERSION = 4
MAX_VERSION = 16
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13
#: replica_id moves into the ReplicaState tagged field (KIP-903)
REPLICA_STATE_FROM = 15
#: Kafka's "no epoch" (KIP-320): a current leader epoch not given
NO_EPOCH = -1
_INT32_MAX = 0x7FFFFFFF


@dataclass(slots=True)
class PartitionData:
    """
    One partition of a Fetch response.

    @ivar records: C{bytes} or an L{IFileRegion}.
    @ivar abortedTransactions: C{(producerId, firstOffset)} pairs for a
        read_committed fetch, C{None} (encoded null) otherwise.
    """

    partition: int
    errorCode: int
    highWatermark: int = -1
    lastStableOffset: int = -1
    logStartOffset: int = -1
    records: object = b""
    abortedTransactions: tuple | None = None
    #: v11+: the replica the consumer should fetch from (KIP-392), -1: none
    preferredReadReplica: int = -1

    @property
    def size(self) -> int:
        return chunkLength(self.records)


def encodeFetchResponse(
    version: int,
    topics: list[tuple[Any, list[PartitionData]]],
    errorCode: int = 0,
    sessionId: int = 0,
    throttleMs: int = 0,
) -> EncodedResponse:
    """
    @param topics: (topic name, or C{uuid.UUID} -- C{None} for the zero
        id -- from v13, partitions).
    @return: the body; C{chunks} alternate bytes and file regions.
    """
    if version >= FLEXIBLE_FROM:
        return _encodeFlexible(version >= TOPIC_IDS_FROM, topics, errorCode, sessionId, throttleMs)
    chunks: list = []
    size = 0
    out = bytearray(INT32.pack(throttleMs))
    if version >= 7:
        out += _I16_I32.pack(errorCode, sessionId)
    out += INT32.pack(len(topics))
    withStart = version >= 5
    withReplica = version >= 11
    for topic, partitions in topics:
        writeString(out, topic, False)
        out += INT32.pack(len(partitions))
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.partition, p.errorCode, p.highWatermark, p.lastStableOffset)
            if withStart:
                out += _I64.pack(p.logStartOffset)
            aborted = p.abortedTransactions
            if aborted is None:
                out += b"\xff\xff\xff\xff"
            else:
                out += INT32.pack(len(aborted))
                for producerId, firstOffset in aborted:
                    out += _ABORTED.pack(producerId, firstOffset)
            if withReplica:
                out += INT32.pack(p.preferredReadReplica)
            records = p.records
            if isinstance(records, (bytes, bytearray)):
                out += INT32.pack(len(records))
                out += records
            else:
                length = chunkLength(records)
                out += INT32.pack(length)
                if length:
                    size += len(out) + length
                    chunks.append(bytes(out))
                    chunks.append(records)
                    out = bytearray()
    size += len(out)
    chunks.append(bytes(out))
    return EncodedResponse(chunks, size, _errorCounts(topics, errorCode))


def _errorCounts(topics, errorCode: int) -> dict[int, int]:
    # Kafka's FetchResponse.errorCounts: the top-level error (NONE before
    # v7, which has none on the wire) and each partition's.
    counts: dict[int, int] = {int(errorCode): 1}
    for _, partitions in topics:
        for p in partitions:
            code = int(p.errorCode)
            counts[code] = counts.get(code, 0) + 1
    return counts


def _encodeFlexible(byId: bool, topics, errorCode: int, sessionId: int, throttleMs: int) -> EncodedResponse:
    # v12+: a consumer's answer (no aborted transactions) packs each
    # partition's fixed fields and the null array in one go, and the
    # compact lengths of one or two bytes are written inline.
    chunks: list = []
    size = 0
    out = bytearray(_FLEX_HEAD.pack(throttleMs, errorCode, sessionId))
    n = len(topics) + 1
    if n < 0x80:
        out.append(n)
    else:
        writeLength(out, n - 1, True, INT32)
    plain = _FLEX_PLAIN.pack
    for topic, partitions in topics:
        if byId:
            out += _ZERO_ID if topic is None else topic.bytes
        else:
            writeString(out, topic, True)
        n = len(partitions) + 1
        if n < 0x80:
            out.append(n)
        else:
            writeLength(out, n - 1, True, INT32)
        for p in partitions:
            aborted = p.abortedTransactions
            if aborted is None:
                out += plain(
                    p.partition, p.errorCode, p.highWatermark, p.lastStableOffset, p.logStartOffset,
                    0, p.preferredReadReplica,
                )
            else:
                out += _FLEX_PARTITION.pack(
                    p.partition, p.errorCode, p.highWatermark, p.lastStableOffset, p.logStartOffset,
                )
                writeLength(out, len(aborted), True, INT32)
                for producerId, firstOffset in aborted:
                    out += _ABORTED_FLEX.pack(producerId, firstOffset, 0)
                out += INT32.pack(p.preferredReadReplica)
            records = p.records
            inline = isinstance(records, (bytes, bytearray))
            length = len(records) if inline else chunkLength(records)
            n = length + 1
            if n < 0x80:
                out.append(n)
            elif n < 0x4000:
                out.append((n & 0x7F) | 0x80)
                out.append(n >> 7)
            else:
                writeLength(out, length, True, INT32)
            if length:
                if inline:
                    out += records
                else:
                    size += len(out) + length
                    chunks.append(bytes(out))
                    chunks.append(records)
                    out = bytearray()
            out.append(0)
        out.append(0)
    out.append(0)
    size += len(out)
    chunks.append(bytes(out))
    return EncodedResponse(chunks, size, _errorCounts(topics, errorCode))


# -- the request ---------------------------------------------------------------


class ReplicaState:
    """
    v15+: the fetching replica (KIP-903), under C{kio}'s names.
    """

    __slots__ = ("replica_id", "replica_epoch")

    def __init__(self, replicaId: int = -1, replicaEpoch: int = -1) -> None:
        self.replica_id = replicaId
        self.replica_epoch = replicaEpoch


class FetchPartition:
    __slots__ = (
        "partition", "current_leader_epoch", "fetch_offset", "last_fetched_epoch",
        "log_start_offset", "partition_max_bytes",
    )

    def __init__(self, partition, currentLeaderEpoch, fetchOffset, lastFetchedEpoch, logStartOffset,
                 partitionMaxBytes) -> None:
        self.partition = partition
        self.current_leader_epoch = currentLeaderEpoch
        self.fetch_offset = fetchOffset
        self.last_fetched_epoch = lastFetchedEpoch
        self.log_start_offset = logStartOffset
        self.partition_max_bytes = partitionMaxBytes


class FetchTopic:
    """
    A topic of the request (or of its forgotten topics): C{topic} below
    v13, C{topic_id} from v13 (the other one C{None}).
    """

    __slots__ = ("topic", "topic_id", "partitions")

    def __init__(self, topic, topicId, partitions: tuple) -> None:
        self.topic = topic
        self.topic_id = topicId
        self.partitions = partitions


class FetchRequest:
    """
    The fields of a Fetch request, flattened the way the handler reads
    them; C{kio}'s names for the scalars, and C{topics},
    C{forgotten_topics_data} and C{replica_state} built on demand for code
    that reads the request as C{kio}'s entity.

    @ivar replica_id: the fetching replica (-1: a consumer), wherever the
        version puts it.
    @ivar replica_epoch: its broker epoch (v15+; -1: not said).
    @ivar max_wait_ms: C{max_wait} in milliseconds.
    @ivar entries: C{(topic key, partition, fetch offset, partition max
        bytes, current leader epoch)} for each partition, in order: the key
        is the name below v13, the topic id (a C{uuid.UUID}, C{None} for
        the zero id) from v13; the epoch is -1 below v9.
    @ivar extras: C{(last fetched epoch, log start offset)} for each of
        C{entries} (-1 where the version has no such field).
    @ivar runs: C{(topic key, first entry, entry after the last)}: the
        request's topics.
    @ivar forgotten: C{(topic key, (partition, ...))}: its forgotten topics.
    """

    __slots__ = (
        "version", "replica_id", "replica_epoch", "cluster_id", "max_wait_ms", "min_bytes",
        "max_bytes", "isolation_level", "session_id", "session_epoch", "entries", "extras", "runs",
        "forgotten", "rack_id",
    )

    #: the fields under kio's names, in kio's order (what an error answer
    #: mirrors: L{kafkatwist.protocol.errorresponse})
    kafkaFields = (
        "cluster_id", "replica_id", "replica_state", "max_wait", "min_bytes", "max_bytes",
        "isolation_level", "session_id", "session_epoch", "topics", "forgotten_topics_data",
        "rack_id",
    )

    def __init__(
        self, version, replicaId, replicaEpoch, clusterId, maxWaitMs, minBytes, maxBytes,
        isolationLevel, sessionId, sessionEpoch, entries, extras, runs, forgotten, rackId,
    ) -> None:
        self.version = version
        self.replica_id = replicaId
        self.replica_epoch = replicaEpoch
        self.cluster_id = clusterId
        self.max_wait_ms = maxWaitMs
        self.min_bytes = minBytes
        self.max_bytes = maxBytes
        self.isolation_level = isolationLevel
        self.session_id = sessionId
        self.session_epoch = sessionEpoch
        self.entries = entries
        self.extras = extras
        self.runs = runs
        self.forgotten = forgotten
        self.rack_id = rackId

    @property
    def max_wait(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.max_wait_ms)

    @property
    def replica_state(self) -> ReplicaState:
        return ReplicaState(self.replica_id, self.replica_epoch)

    @property
    def topics(self) -> tuple:
        byId = self.version >= TOPIC_IDS_FROM
        entries, extras = self.entries, self.extras
        return tuple(
            FetchTopic(
                None if byId else key,
                key if byId else None,
                tuple(
                    FetchPartition(
                        entries[i][1], entries[i][4], entries[i][2], extras[i][0], extras[i][1],
                        entries[i][3],
                    )
                    for i in range(start, stop)
                ),
            )
            for key, start, stop in self.runs
        )

    @property
    def forgotten_topics_data(self) -> tuple:
        byId = self.version >= TOPIC_IDS_FROM
        return tuple(
            FetchTopic(None if byId else key, key if byId else None, partitions)
            for key, partitions in self.forgotten
        )


def fetchRequestFrom(version: int, entity) -> FetchRequest:
    """
    A L{FetchRequest} of the same fields as C{entity}, C{kio}'s decoded
    request (or one a test or a drop-in built).
    """
    if isinstance(entity, FetchRequest):
        return entity
    byId = version >= TOPIC_IDS_FROM
    entries: list = []
    extras: list = []
    runs: list = []
    for t in entity.topics:
        key = t.topic_id if byId else t.topic
        start = len(entries)
        for p in t.partitions:
            entries.append((
                key, p.partition, p.fetch_offset, p.partition_max_bytes,
                getattr(p, "current_leader_epoch", NO_EPOCH) if version >= 9 else NO_EPOCH,
            ))
            extras.append((getattr(p, "last_fetched_epoch", -1), getattr(p, "log_start_offset", -1)))
        runs.append((key, start, len(entries)))
    forgotten = [
        (t.topic_id if byId else t.topic, tuple(t.partitions))
        for t in getattr(entity, "forgotten_topics_data", ())
    ]
    if version >= REPLICA_STATE_FROM:
        state = getattr(entity, "replica_state", None)
        replicaId = state.replica_id if state is not None else -1
        replicaEpoch = int(state.replica_epoch) if state is not None else -1
    else:
        replicaId, replicaEpoch = getattr(entity, "replica_id", -1), -1
    maxWait = entity.max_wait
    if isinstance(maxWait, datetime.timedelta):
        maxWait = round(maxWait.total_seconds() * 1000)
    return FetchRequest(
        version, replicaId, replicaEpoch, getattr(entity, "cluster_id", None), int(maxWait),
        entity.min_bytes, getattr(entity, "max_bytes", _INT32_MAX),
        getattr(entity, "isolation_level", 0), getattr(entity, "session_id", 0),
        getattr(entity, "session_epoch", -1), entries, extras, runs, forgotten,
        getattr(entity, "rack_id", "") if version >= 11 else "",
    )


def _headStruct(version: int) -> struct.Struct:
    return struct.Struct(
        ">"
        + ("i" if version < REPLICA_STATE_FROM else "")  # replica_id
        + "ii"  # max_wait_ms, min_bytes
        + ("i" if version >= 3 else "")  # max_bytes
        + ("b" if version >= 4 else "")  # isolation_level
        + ("ii" if version >= 7 else "")  # session_id, session_epoch
    )


def _partitionStruct(version: int) -> struct.Struct:
    return struct.Struct(
        ">i"  # partition
        + ("i" if version >= 9 else "")  # current_leader_epoch
        + "q"  # fetch_offset
        + ("i" if version >= FLEXIBLE_FROM else "")  # last_fetched_epoch
        + ("q" if version >= 5 else "")  # log_start_offset
        + "i"  # partition_max_bytes
    )


_HEADS = [_headStruct(v) for v in range(MAX_VERSION + 1)]
_PARTITIONS = [_partitionStruct(v) for v in range(MAX_VERSION + 1)]
_REPLICA_STATE = struct.Struct(">iq")
_HEAD_V12 = _HEADS[FLEXIBLE_FROM]
_HEAD_V15 = _HEADS[REPLICA_STATE_FROM]
_PARTITION_V12 = _PARTITIONS[FLEXIBLE_FROM]
#: topic ids seen, to the C{uuid.UUID} the handler looks up (building one
#: is a few microseconds of Python per topic per request)
_TOPIC_IDS: dict = {}
_TOPIC_IDS_KEPT = 4096


def decodeFetchRequest(version: int, frame, offset: int) -> FetchRequest:
    """
    @param frame: the request frame (after the size prefix).
    @param offset: where the body starts.
    @raise MalformedRequest: if the body does not parse.
    """
    if not 0 <= version <= MAX_VERSION:
        raise MalformedRequest(f"Fetch v{version} is not served")
    try:
        if version >= FLEXIBLE_FROM:
            return _decodeFlexible(version, memoryview(frame), offset)
        return _decode(version, memoryview(frame), offset)
    except MalformedRequest:
        raise
    except (IndexError, struct.error, UnicodeDecodeError, ValueError, OverflowError) as e:
        raise MalformedRequest(f"{type(e).__name__}: {e}") from e


def _topicId(raw: bytes):
    found = _TOPIC_IDS.get(raw)
    if found is None:
        if raw == _ZERO_ID:
            # kio reads the zero UUID as None (answered UNKNOWN_TOPIC_ID).
            return None
        if len(_TOPIC_IDS) >= _TOPIC_IDS_KEPT:
            _TOPIC_IDS.clear()
        found = _TOPIC_IDS[raw] = uuid.UUID(bytes=raw)
    return found


def _decodeFlexible(version: int, view: memoryview, offset: int) -> FetchRequest:
    # v12+, what every current client sends: L{_decode}'s reading with its
    # version tests settled, and the one-byte compact lengths and empty
    # tagged fields of the usual request read inline.  Anything else (a
    # name or count past 126, tagged fields, forgotten topics) goes the
    # general way from where it is met.
    end = len(view)
    byId = version >= TOPIC_IDS_FROM
    if version >= REPLICA_STATE_FROM:
        maxWaitMs, minBytes, maxBytes, isolationLevel, sessionId, sessionEpoch = _HEAD_V15.unpack_from(
            view, offset
        )
        offset += 21
        replicaId = -1
    else:
        replicaId, maxWaitMs, minBytes, maxBytes, isolationLevel, sessionId, sessionEpoch = (
            _HEAD_V12.unpack_from(view, offset)
        )
        offset += 25
    smallestTopic = 18 if byId else 3
    unpackPartition = _PARTITION_V12.unpack_from
    b = view[offset]
    if b < 0x80:
        count = b - 1
        offset += 1
    else:
        count, offset = readLength(view, offset, True, INT32)
    if count < 0:
        raise MalformedRequest("topics is null")
    if count * smallestTopic > end - offset:
        raise MalformedRequest(f"{count} topics cannot fit in {end - offset} bytes")
    entries: list = []
    extras: list = []
    runs: list = []
    for _ in range(count):
        if byId:
            if offset + 16 > end:
                raise MalformedRequest("topic id runs past the end")
            raw = bytes(view[offset : offset + 16])
            key = _TOPIC_IDS.get(raw)
            if key is None:
                key = _topicId(raw)
            offset += 16
        else:
            b = view[offset]
            if 0 < b < 0x80:
                offset += 1
                n = offset + b - 1
                if n > end:
                    raise MalformedRequest("a string runs past the end")
                key = str(view[offset:n], "utf-8")
                offset = n
            else:
                key, offset = _string(view, offset, True, end)
                if key is None:
                    raise MalformedRequest("topic name is null")
        b = view[offset]
        if b < 0x80:
            partitions = b - 1
            offset += 1
        else:
            partitions, offset = readLength(view, offset, True, INT32)
        if partitions < 0:
            raise MalformedRequest("partitions is null")
        if partitions * 33 > end - offset:
            raise MalformedRequest(f"{partitions} partitions cannot fit in {end - offset} bytes")
        start = len(entries)
        for _ in range(partitions):
            partition, epoch, fetchOffset, lastFetched, logStart, maxPartitionBytes = unpackPartition(
                view, offset
            )
            offset += 32
            if view[offset] == 0:
                offset += 1
            else:
                offset = skipTaggedFields(view, offset)
            entries.append((key, partition, fetchOffset, maxPartitionBytes, epoch))
            extras.append((lastFetched, logStart))
        if view[offset] == 0:
            offset += 1
        else:
            offset = skipTaggedFields(view, offset)
        runs.append((key, start, len(entries)))
    if view[offset] == 1 and view[offset + 1] == 1 and view[offset + 2] == 0:
        # No forgotten topics, no rack, no tagged fields: a consumer's
        # request as librdkafka, the Java client and kafka-python send it.
        if offset + 3 > end:
            raise MalformedRequest("the request runs past the end of the frame")
        return FetchRequest(
            version, replicaId, -1, None, maxWaitMs, minBytes, maxBytes, isolationLevel,
            sessionId, sessionEpoch, entries, extras, runs, [], "",
        )
    forgotten, offset = _forgotten(version, view, offset, end, True, byId, smallestTopic)
    return _rest(
        version, view, offset, end, True, replicaId, maxWaitMs, minBytes, maxBytes,
        isolationLevel, sessionId, sessionEpoch, entries, extras, runs, forgotten,
    )


def _decode(version: int, view: memoryview, offset: int) -> FetchRequest:
    end = len(view)
    flexible = version >= FLEXIBLE_FROM
    byId = version >= TOPIC_IDS_FROM
    head = _HEADS[version]
    fields = head.unpack_from(view, offset)
    offset += head.size
    if version < REPLICA_STATE_FROM:
        replicaId = fields[0]
        i = 1
    else:
        replicaId = -1
        i = 0
    maxWaitMs = fields[i]
    minBytes = fields[i + 1]
    maxBytes = fields[i + 2] if version >= 3 else _INT32_MAX
    isolationLevel = fields[i + 3] if version >= 4 else 0
    if version >= 7:
        sessionId = fields[i + 4]
        sessionEpoch = fields[i + 5]
    else:
        sessionId, sessionEpoch = 0, -1

    # Counts are bounded by the bytes left before anything loops on them:
    # the smallest topic is an empty name (or an id) and an empty partition
    # array (and its tagged fields).
    if byId:
        smallestTopic = 18
    elif flexible:
        smallestTopic = 3
    else:
        smallestTopic = 6
    partitionStruct = _PARTITIONS[version]
    unpackPartition = partitionStruct.unpack_from
    partitionSize = partitionStruct.size
    smallestPartition = partitionSize + 1 if flexible else partitionSize
    # -- topics
    if flexible:
        b = view[offset]
        if b < 0x80:
            count = b - 1
            offset += 1
        else:
            count, offset = readLength(view, offset, True, INT32)
    else:
        (count,) = INT32.unpack_from(view, offset)
        offset += 4
    if count < 0:
        raise MalformedRequest("topics is null")
    if count * smallestTopic > end - offset:
        raise MalformedRequest(f"{count} topics cannot fit in {end - offset} bytes")
    entries: list = []
    extras: list = []
    runs: list = []
    for _ in range(count):
        if byId:
            if offset + 16 > end:
                raise MalformedRequest("topic id runs past the end")
            key = _topicId(bytes(view[offset : offset + 16]))
            offset += 16
        else:
            key, offset = _string(view, offset, flexible, end)
            if key is None:
                raise MalformedRequest("topic name is null")
        if flexible:
            b = view[offset]
            if b < 0x80:
                partitions = b - 1
                offset += 1
            else:
                partitions, offset = readLength(view, offset, True, INT32)
        else:
            (partitions,) = INT32.unpack_from(view, offset)
            offset += 4
        if partitions < 0:
            raise MalformedRequest("partitions is null")
        if partitions * smallestPartition > end - offset:
            raise MalformedRequest(f"{partitions} partitions cannot fit in {end - offset} bytes")
        start = len(entries)
        for _ in range(partitions):
            fields = unpackPartition(view, offset)
            offset += partitionSize
            if version >= FLEXIBLE_FROM:
                partition, epoch, fetchOffset, lastFetched, logStart, maxPartitionBytes = fields
                if view[offset] == 0:
                    offset += 1
                else:
                    offset = skipTaggedFields(view, offset)
            elif version >= 9:
                partition, epoch, fetchOffset, logStart, maxPartitionBytes = fields
                lastFetched = -1
            elif version >= 5:
                partition, fetchOffset, logStart, maxPartitionBytes = fields
                epoch = lastFetched = NO_EPOCH
            else:
                partition, fetchOffset, maxPartitionBytes = fields
                epoch = lastFetched = NO_EPOCH
                logStart = -1
            entries.append((key, partition, fetchOffset, maxPartitionBytes, epoch))
            extras.append((lastFetched, logStart))
        if flexible:
            if view[offset] == 0:
                offset += 1
            else:
                offset = skipTaggedFields(view, offset)
        runs.append((key, start, len(entries)))
    forgotten, offset = _forgotten(version, view, offset, end, flexible, byId, smallestTopic)
    return _rest(
        version, view, offset, end, flexible, replicaId, maxWaitMs, minBytes, maxBytes,
        isolationLevel, sessionId, sessionEpoch, entries, extras, runs, forgotten,
    )


def _forgotten(version, view, offset, end, flexible, byId, smallestTopic) -> tuple[list, int]:
    """
    The forgotten topics (v7+), and the offset after them.
    """
    forgotten: list = []
    if version < 7:
        return forgotten, offset
    if flexible:
        count, offset = readLength(view, offset, True, INT32)
    else:
        (count,) = INT32.unpack_from(view, offset)
        offset += 4
    if count < 0:
        raise MalformedRequest("forgotten_topics_data is null")
    if count * smallestTopic > end - offset:
        raise MalformedRequest(f"{count} forgotten topics cannot fit in {end - offset} bytes")
    for _ in range(count):
        if byId:
            if offset + 16 > end:
                raise MalformedRequest("topic id runs past the end")
            key = _topicId(bytes(view[offset : offset + 16]))
            offset += 16
        else:
            key, offset = _string(view, offset, flexible, end)
            if key is None:
                raise MalformedRequest("forgotten topic name is null")
        partitions, offset = readLength(view, offset, flexible, INT32)
        if partitions < 0:
            raise MalformedRequest("forgotten partitions is null")
        if partitions * 4 > end - offset:
            raise MalformedRequest(f"{partitions} partitions cannot fit in {end - offset} bytes")
        indexes = struct.unpack_from(f">{partitions}i", view, offset)
        offset += 4 * partitions
        if flexible:
            offset = skipTaggedFields(view, offset)
        forgotten.append((key, indexes))
    return forgotten, offset


def _rest(
    version, view, offset, end, flexible, replicaId, maxWaitMs, minBytes, maxBytes, isolationLevel,
    sessionId, sessionEpoch, entries, extras, runs, forgotten,
) -> FetchRequest:
    """
    From rack_id (v11+) to the end: the request's tagged fields (v12+).
    """
    rackId: str | None = ""
    if version >= 11:
        rackId, offset = _string(view, offset, flexible, end)
        if rackId is None:
            raise MalformedRequest("rack_id is null")
    clusterId = None
    replicaEpoch = -1
    if flexible:
        if view[offset] == 0:
            offset += 1
        else:
            count, offset = readUnsignedVarint(view, offset)
            for _ in range(count):
                tag, offset = readUnsignedVarint(view, offset)
                size, offset = readUnsignedVarint(view, offset)
                stop = offset + size
                if stop > end:
                    raise MalformedRequest("a tagged field runs past the end of the frame")
                if tag == 0:
                    clusterId, after = _string(view, offset, True, stop)
                    if after > stop:
                        raise MalformedRequest("cluster_id runs past its tagged field")
                elif tag == 1 and version >= REPLICA_STATE_FROM:
                    if offset + _REPLICA_STATE.size >= stop:
                        raise MalformedRequest("replica_state runs past its tagged field")
                    replicaId, replicaEpoch = _REPLICA_STATE.unpack_from(view, offset)
                    if skipTaggedFields(view[:stop], offset + _REPLICA_STATE.size) > stop:
                        raise MalformedRequest("replica_state runs past its tagged field")
                offset = stop
    if offset > end:
        raise MalformedRequest("the request runs past the end of the frame")
    return FetchRequest(
        version, replicaId, replicaEpoch, clusterId, maxWaitMs, minBytes, maxBytes, isolationLevel,
        sessionId, sessionEpoch, entries, extras, runs, forgotten, rackId,
    )


def _string(view: memoryview, offset: int, flexible: bool, end: int) -> tuple[str | None, int]:
    """
    A nullable string (compact in flexible versions) ending by C{end}.
    """
    if flexible:
        b = view[offset]
        if b < 0x80:
            n = b - 1
            offset += 1
        else:
            n, offset = readLength(view, offset, True, INT16)
    else:
        (n,) = INT16.unpack_from(view, offset)
        offset += 2
    if n < 0:
        if n != -1:
            raise MalformedRequest(f"string length {n}")
        return None, offset
    if offset + n > end:
        raise MalformedRequest("a string runs past the end")
    return str(view[offset : offset + n], "utf-8"), offset + n


# -- the commonest Fetch, straight from its frame -------------------------------

#: v12-v14 up to the topic count: replica_id, max_wait_ms, min_bytes,
#: max_bytes, isolation_level, session_id, session_epoch, topics
_SMALL_V12 = struct.Struct(">iiiibiiB")
#: v15-v16: the same without replica_id (in the request's tagged fields)
_SMALL_V15 = struct.Struct(">iiibiiB")
#: after the one partition: its tagged fields, the topic's, no forgotten
#: topics, an empty rack_id, no tagged fields
_SMALL_TAIL = b"\x00\x00\x01\x01\x00"
#: topic key -> the answer's packer and fixed size (L{encodeSmallFetchAnswer})
_smallAnswers: dict = {}
#: a null aborted_transactions array, preferred_read_replica -1
_NO_REPLICA = b"\x00\xff\xff\xff\xff"


def readSmallFetch(version: int, frame, offset: int):
    """
    Recognise the Fetch a consumer sends most (v12-v16): sessionless,
    read_uncommitted, one topic of one partition, no forgotten topics, no
    rack, no tagged fields.

    @return: C{(topic key, partition, current leader epoch, fetch offset,
        partition max bytes, max wait ms, min bytes, max bytes)} -- the key
        a name, or from v13 a C{uuid.UUID} -- or C{None} for any other
        request (or one that does not parse: the general decoder says why).
    """
    try:
        if version >= REPLICA_STATE_FROM:
            maxWaitMs, minBytes, maxBytes, isolation, sessionId, sessionEpoch, topics = (
                _SMALL_V15.unpack_from(frame, offset)
            )
            offset += 22
        else:
            replicaId, maxWaitMs, minBytes, maxBytes, isolation, sessionId, sessionEpoch, topics = (
                _SMALL_V12.unpack_from(frame, offset)
            )
            if replicaId != -1:
                return None
            offset += 26
        if topics != 2 or isolation != 0 or sessionId != 0 or sessionEpoch != -1:
            return None
        if version >= TOPIC_IDS_FROM:
            raw = bytes(frame[offset : offset + 16])
            key = _TOPIC_IDS.get(raw)
            if key is None:
                if len(raw) != 16:
                    return None
                key = _topicId(raw)
                if key is None:
                    return None
            offset += 16
        else:
            n = frame[offset] - 1
            if not 0 < n < 0x7F:
                return None
            offset += 1
            key = str(frame[offset : offset + n], "utf-8")
            offset += n
        if frame[offset] != 2:
            return None
        partition, epoch, fetchOffset, _, _, partitionMaxBytes = _PARTITION_V12.unpack_from(
            frame, offset + 1
        )
        offset += 33
        if offset + 5 != len(frame) or frame[offset : offset + 5] != _SMALL_TAIL:
            return None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return key, partition, epoch, fetchOffset, partitionMaxBytes, maxWaitMs, minBytes, maxBytes


def encodeSmallFetchAnswer(
    version: int, correlationId: int, topicKey, partition: int, highWatermark: int,
    lastStableOffset: int, logStartOffset: int, records, size: int,
) -> list:
    """
    The whole response frame (size prefix, header v1, body) of a v12+
    Fetch of one partition answered without error, throttle or session, as
    L{encodeFetchResponse} and the response header give it: the fixed part
    packed at once from a layout kept per topic, then the records (bytes,
    or a file region left to C{sendfile}).

    @param size: the records' length (not 0).
    @return: the chunks to write.
    """
    layout = _smallAnswers.get(topicKey)
    if layout is None:
        # Everything but the size, correlation id, partition and offsets is
        # the same in every such answer: header tagged fields, throttle,
        # error code, session id, one topic, its key, one partition.
        if version >= TOPIC_IDS_FROM:
            key = _ZERO_ID if topicKey is None else topicKey.bytes
        else:
            raw = topicKey.encode("utf-8")
            if len(raw) > 126:
                raise ValueError("topic name too long for the one-byte layout")
            key = bytes((len(raw) + 1,)) + raw
        middle = b"\x00" + bytes(10) + b"\x02" + key + b"\x02"
        shape = struct.Struct(f">ii{len(middle)}sihqqq")
        # the answer after its records' length: the null aborted array and
        # no preferred read replica before it, the tagged fields after
        layout = (shape.pack, shape.size + 5 + 3 - 4, middle)
        if len(_smallAnswers) < 10_000:
            _smallAnswers[topicKey] = layout
    pack, fixedSize, middle = layout
    n = size + 1
    if n < 0x80:
        length = _NO_REPLICA + bytes((n,))
    elif n < 0x4000:
        length = _NO_REPLICA + bytes(((n & 0x7F) | 0x80, n >> 7))
    else:
        out = bytearray(_NO_REPLICA)
        writeLength(out, size, True, INT32)
        length = bytes(out)
    head = pack(
        fixedSize + len(length) - 5 + size, correlationId, middle, partition, 0, highWatermark,
        lastStableOffset, logStartOffset,
    ) + length
    if isinstance(records, (bytes, bytearray)):
        return [head + records + b"\x00\x00\x00"]
    return [head, records, b"\x00\x00\x00"]
