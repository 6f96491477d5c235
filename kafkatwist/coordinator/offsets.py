"""
Committed offsets and their expiry (Kafka's C{OffsetAndMetadata} and
C{GroupMetadata.removeExpiredOffsets}).

Offsets are kept per group, keyed by C{(topic, partition)}.  Which of a
group's offsets may expire depends on the group (see
L{kafkatwist.coordinator.group.GroupMetadata.expiredOffsets}); this module
holds the value type and the pure selection rule.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kafkatwist.errors import ErrorCode

__all__ = ["OffsetAndMetadata", "TopicPartition", "acceptCommits", "selectExpired"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class OffsetAndMetadata:
    """
    One committed offset.  Plain and immutable so that it serialises as an
    C{__consumer_offsets} OffsetCommit value (v3: offset, leaderEpoch,
    metadata, commitTimestamp; v1 adds expireTimestamp).

    @ivar offset: the committed offset.
    @ivar leaderEpoch: the leader epoch the client saw, -1 if unknown.
    @ivar metadata: the client's metadata string, returned verbatim by
        OffsetFetch (C{""} when the client sent null).
    @ivar commitTimestampMs: when the commit was accepted; -1 means "fill in
        at commit time".
    @ivar expireTimestampMs: an explicit expiry (OffsetCommit v2-v4
        retention time), or C{None} to follow C{offsets.retention.minutes}.
    """

    offset: int
    leaderEpoch: int = -1
    metadata: str = ""
    commitTimestampMs: int = -1
    expireTimestampMs: int | None = None


def acceptCommits(
    offsets: Mapping[TopicPartition, OffsetAndMetadata], metadataMaxBytes: int, nowMs: int
) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetAndMetadata]]:
    """
    What a commit, plain or transactional, may store (Kafka's
    C{OffsetMetadataManager.validateOffsetMetadataLength} and its commit
    timestamp): an offset whose metadata (null read as C{""}) is longer than
    C{metadataMaxBytes} in UTF-8 is refused with OFFSET_METADATA_TOO_LARGE;
    the others are kept, a commit timestamp of -1 filled in with C{nowMs}.

    @return: the refused partitions with their error, the kept offsets.
    """
    refused: dict[TopicPartition, ErrorCode] = {}
    kept: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, om in offsets.items():
        metadata = om.metadata or ""
        if len(metadata.encode("utf-8")) > metadataMaxBytes:
            refused[tp] = ErrorCode.offset_metadata_too_large
            continue
        kept[tp] = OffsetAndMetadata(
            offset=om.offset,
            leaderEpoch=om.leaderEpoch,
            metadata=metadata,
            commitTimestampMs=nowMs if om.commitTimestampMs < 0 else om.commitTimestampMs,
            expireTimestampMs=om.expireTimestampMs,
        )
    return refused, kept


def selectExpired(
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
    nowMs: int,
    retentionMs: int,
    baseTimestamp: Callable[[OffsetAndMetadata], int],
    keepTopics: Iterable[str] = (),
) -> list[TopicPartition]:
    """
    Kafka's C{getExpiredOffsets}: the partitions whose offset has expired.

    @param baseTimestamp: when the retention period of an offset started
        (its commit time, or when its group became empty).
    @param keepTopics: topics never expired here (a stable group's
        subscription).
    @return: expired C{(topic, partition)} keys.
    """
    keep = set(keepTopics)
    expired = []
    for tp, om in offsets.items():
        if tp[0] in keep:
            continue
        if om.expireTimestampMs is not None:
            # An explicit expiry chosen by an old client wins over retention.
            if nowMs >= om.expireTimestampMs:
                expired.append(tp)
        elif nowMs - baseTimestamp(om) >= retentionMs:
            expired.append(tp)
    return expired
