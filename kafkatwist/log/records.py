"""
The small value types the log hands to its callers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["AppendInfo", "ReadInfo", "TopicInfo"]


class AppendInfo(NamedTuple):
    """
    The outcome of one L{IPartitionLog.append} (a named tuple: immutable,
    and made by the append path without a Python call).

    @ivar firstOffset: offset given to the first record.
    @ivar lastOffset: offset given to the last record.
    @ivar logAppendTime: the broker time stamped on the batches for
        LogAppendTime topics, else -1.
    @ivar logStartOffset: the log start offset after the append.
    @ivar maxTimestamp: the largest batch max timestamp appended.
    @ivar offsetOfMaxTimestamp: where that timestamp is.
    @ivar numRecords: records appended.
    @ivar validBytes: bytes appended.
    @ivar duplicate: the append was a retry of a batch an idempotent
        producer already wrote: nothing was appended, and the offsets are
        those of the original append.
    """

    firstOffset: int
    lastOffset: int
    logAppendTime: int
    logStartOffset: int
    maxTimestamp: int = -1
    offsetOfMaxTimestamp: int = -1
    numRecords: int = 0
    validBytes: int = 0
    duplicate: bool = False


class ReadInfo(NamedTuple):
    """
    The outcome of one L{IPartitionLog.read} (a named tuple: immutable,
    and cheap to make on every Fetch).

    @ivar records: an L{IFileRegion} (on-disk log, to be closed once sent) or
        C{bytes} (in-memory log, or nothing to read: C{b""}).
    @ivar abortedTransactions: for a read_committed read, C{(producerId,
        firstOffset)} of the aborted transactions the records overlap;
        C{None} for a read_uncommitted one.
    """

    records: Any
    highWatermark: int
    logStartOffset: int
    lastStableOffset: int
    abortedTransactions: tuple | None = None


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """
    What the log manager knows of a topic.

    @ivar configs: the explicitly set topic overrides (key -> string value);
        see L{kafkatwist.log.config.describeTopicConfig} for the effective
        configuration.
    """

    name: str
    topicId: uuid.UUID
    numPartitions: int
    configs: dict[str, str] = field(default_factory=dict)
