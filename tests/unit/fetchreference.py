"""
The Fetch response encoder of kafkatwist 2500b21, kept as it was: the
reference L{tests.unit.test_fetch_codec} compares the hand-tuned one with;
and L{kioRequest}, a Fetch request built as kio's entity.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass
from typing import Any

from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import EncodedResponse, chunkLength
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.header import INT32, writeLength, writeString

_PARTITION_HEAD = struct.Struct(">ihqq")
_I64 = struct.Struct(">q")
_ABORTED = struct.Struct(">qq")
_I16_I32 = struct.Struct(">hi")
_ZERO_ID = bytes(16)

MIN_VERSION = 4
MAX_VERSION = 16
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13


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
    flexible = version >= FLEXIBLE_FROM
    chunks: list = []
    out = bytearray(INT32.pack(throttleMs))
    if version >= 7:
        out += _I16_I32.pack(errorCode, sessionId)
    writeLength(out, len(topics), flexible, INT32)
    for topic, partitions in topics:
        if version >= TOPIC_IDS_FROM:
            # kio reads the zero UUID as None: a request naming it gets
            # UNKNOWN_TOPIC_ID under the id it sent.
            out += _ZERO_ID if topic is None else topic.bytes
        else:
            writeString(out, topic, flexible)
        writeLength(out, len(partitions), flexible, INT32)
        for p in partitions:
            out += _PARTITION_HEAD.pack(p.partition, p.errorCode, p.highWatermark, p.lastStableOffset)
            if version >= 5:
                out += _I64.pack(p.logStartOffset)
            aborted = p.abortedTransactions
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                writeLength(out, len(aborted), flexible, INT32)
                for producerId, firstOffset in aborted:
                    out += _ABORTED.pack(producerId, firstOffset)
                    if flexible:
                        out += b"\x00"
            if version >= 11:
                out += INT32.pack(p.preferredReadReplica)
            records = p.records
            size = p.size
            writeLength(out, size, flexible, INT32)
            if size:
                if isinstance(records, (bytes, bytearray)):
                    out += records
                else:
                    chunks.append(bytes(out))
                    chunks.append(records)
                    out = bytearray()
            if flexible:
                out += b"\x00"
        if flexible:
            out += b"\x00"
    if flexible:
        out += b"\x00"
    chunks.append(bytes(out))
    return EncodedResponse(chunks)


def kioRequest(version, topics, forgotten=(), replica=(-1, -1), sessionId=0, sessionEpoch=-1,
               rack="", clusterId=None, isolation=0, maxWaitMs=500):
    """
    @param topics: C{(key, [(partition, epoch, offset, last fetched epoch,
        log start, max bytes)])}, the key a name below v13, an id from v13.
    """
    cls = requestType(1, version)
    Topic = nested(cls, "FetchTopic")
    Partition = nested(cls, "FetchPartition")
    byId = version >= 13
    fields = {"max_wait": datetime.timedelta(milliseconds=maxWaitMs), "min_bytes": 1}
    if version >= 15:
        State = nested(cls, "ReplicaState")
        fields["replica_state"] = make(State, replica_id=replica[0], replica_epoch=replica[1])
    else:
        fields["replica_id"] = replica[0]
    if version >= 3:
        fields["max_bytes"] = 52428800
    if version >= 4:
        fields["isolation_level"] = isolation
    if version >= 7:
        Forgotten = nested(cls, "ForgottenTopic")
        fields.update(session_id=sessionId, session_epoch=sessionEpoch)
        fields["forgotten_topics_data"] = tuple(
            make(Forgotten, **({"topic_id": key} if byId else {"topic": key}), partitions=tuple(ps))
            for key, ps in forgotten
        )
    if version >= 11:
        fields["rack_id"] = rack
    if version >= 12:
        fields["cluster_id"] = clusterId

    def partition(index, epoch, offset, lastFetched, start, maxBytes):
        values = {"partition": index, "fetch_offset": offset, "partition_max_bytes": maxBytes}
        if version >= 9:
            values["current_leader_epoch"] = epoch
        if version >= 12:
            values["last_fetched_epoch"] = lastFetched
        if version >= 5:
            values["log_start_offset"] = start
        return make(Partition, **values)

    fields["topics"] = tuple(
        make(Topic, **({"topic_id": key} if byId else {"topic": key}),
             partitions=tuple(partition(*p) for p in parts))
        for key, parts in topics
    )
    return make(cls, **fields)
