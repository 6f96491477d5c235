"""
Offsets on the driver: which partitions a subscription covers, where
reading starts and ends for each, how a stream's micro-batch is sized, and
how offset ranges become Spark input partitions.

Offsets travel through Spark as JSON, C{{"topic": {"partition": offset}}},
the format of Spark's Kafka source (so checkpoints read the same).  The
engine compares offsets as JSON text, so they are always written in one
canonical order: topics by name, partitions by number.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkatwist.client import EARLIEST as LIST_EARLIEST
from kafkatwist.client import LATEST as LIST_LATEST
from kafkatwist.client import KafkaWireClient

from kafkatwist_spark.options import (
    ConfigurationError,
    EARLIEST,
    LATEST,
    OffsetSpec,
    OptionError,
    SourceConfig,
    Subscription,
    TopicPartition,
)

__all__ = [
    "DataLossError",
    "OffsetRange",
    "OffsetReader",
    "fromJson",
    "rateLimit",
    "splitRanges",
    "toJson",
    "UnknownTopicOrPartitionError",
]


class DataLossError(RuntimeError):
    """
    Records the query should have read are gone (aged out by retention, or
    the topic was deleted or recreated), and C{failOnDataLoss} is true.
    """


class UnknownTopicOrPartitionError(LookupError, ConfigurationError):
    """
    A batch query subscribed to a topic that does not exist (Spark's Kafka
    source fails with Kafka's C{UnknownTopicOrPartitionException}).
    """

    def __init__(self, topics) -> None:
        self.topics = tuple(topics)
        super().__init__(
            "UnknownTopicOrPartitionException: This server does not host this topic-partition: "
            + ", ".join(repr(t) for t in self.topics)
            + " (option 'subscribe'; a topic must exist before a batch query reads it)"
        )


def dataLossMessage(what: str) -> str:
    return (
        f"{what}. Some data may have been lost because it is not available in Kafka any more: "
        f"either it was aged out by retention, or the topic was deleted before all of it was "
        f"processed. If you want the query to continue in such cases, set the source option "
        f"'failOnDataLoss' to 'false'."
    )


@dataclass(frozen=True, order=True)
class OffsetRange:
    """
    The records C{fromOffset <= offset < untilOffset} of one partition.
    """

    topic: str
    partition: int
    fromOffset: int
    untilOffset: int

    @property
    def size(self) -> int:
        return max(0, self.untilOffset - self.fromOffset)


def toJson(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """
    The canonical offset dict: C{{topic: {"partition": offset}}}, topics
    and partitions in order.
    """
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def fromJson(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    """
    Read an offset dict (as L{toJson} writes and Spark hands back).

    @raise ValueError: if it is not one.
    """
    result: dict[TopicPartition, int] = {}
    if not isinstance(offsets, Mapping):
        raise ValueError(f"not a Kafka offset object: {offsets!r}")
    for topic, partitions in offsets.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"not a Kafka offset object: {offsets!r}")
        for partition, offset in partitions.items():
            result[(topic, int(partition))] = int(offset)
    return result


def rateLimit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], limit: int
) -> dict[TopicPartition, int]:
    """
    End offsets that admit at most C{limit} offsets in all, shared between
    partitions in proportion to how far behind each is.

    Spark's own source rounds each share down, so a trigger can read fewer
    than C{limit} offsets and a backlog take more triggers than it needs;
    here the remainder goes to the partitions with the largest fractional
    shares (ties to the first partitions), so each trigger reads exactly
    C{min(limit, backlog)} and a backlog of C{B} takes C{ceil(B / limit)}.
    """
    lags = {tp: max(0, latest[tp] - start.get(tp, latest[tp])) for tp in latest}
    total = sum(lags.values())
    if total <= limit:
        return dict(latest)
    shares = {}
    remainders = []
    for tp in sorted(lags):
        exact = limit * lags[tp] / total
        shares[tp] = math.floor(exact)
        remainders.append((-(exact - shares[tp]), tp))
    left = limit - sum(shares.values())
    for _, tp in sorted(remainders)[:left]:
        shares[tp] += 1
    return {
        tp: start.get(tp, latest[tp]) + min(shares[tp], lags[tp]) if lags[tp] else latest[tp]
        for tp in latest
    }


def splitRanges(
    ranges: Iterable[OffsetRange],
    minPartitions: int | None,
    maxRecordsPerPartition: int | None,
) -> list[OffsetRange]:
    """
    Cut offset ranges into more, smaller ones: first so that none holds more
    than C{maxRecordsPerPartition} offsets, then, if there are still fewer
    than C{minPartitions}, each in proportion to its size (as Spark's
    C{KafkaOffsetRangeCalculator} does), so large partitions get more tasks.
    Empty ranges are dropped: they would only cost a task.
    """
    pieces = [r for r in ranges if r.size > 0]
    if maxRecordsPerPartition:
        cut = []
        for r in pieces:
            parts = math.ceil(r.size / maxRecordsPerPartition)
            cut.extend(_split(r, parts))
        pieces = cut
    if minPartitions and len(pieces) < minPartitions:
        total = sum(r.size for r in pieces)
        cut = []
        for r in pieces:
            # half up, like the Math.round of Spark's KafkaOffsetRangeCalculator
            parts = max(1, math.floor(r.size / total * minPartitions + 0.5))
            cut.extend(_split(r, parts))
        pieces = cut
    return pieces


def _split(r: OffsetRange, parts: int) -> list[OffsetRange]:
    parts = max(1, min(parts, r.size))
    bounds = [r.fromOffset + r.size * i // parts for i in range(parts + 1)]
    return [
        OffsetRange(r.topic, r.partition, bounds[i], bounds[i + 1])
        for i in range(parts)
        if bounds[i + 1] > bounds[i]
    ]


class OffsetReader:
    """
    The driver's view of the cluster for one query: partitions of the
    subscription and their offsets, through one wire client.
    """

    def __init__(self, config: SourceConfig, client: KafkaWireClient) -> None:
        self.config = config
        self.client = client
        self._pattern = (
            re.compile(config.subscription.pattern)
            if config.subscription.kind == "subscribePattern"
            else None
        )

    # -- partitions ------------------------------------------------------

    def partitions(self) -> list[TopicPartition]:
        """
        The partitions the subscription covers now.  Topics named in
        C{subscribe} that do not exist yet are skipped (a stream picks them
        up once they are created), as are internal topics for a pattern; a
        batch query fails on them (L{UnknownTopicOrPartitionError}).

        @raise OptionError: for an C{assign} that names a partition that
            does not exist.
        """
        subscription: Subscription = self.config.subscription
        if subscription.kind == "subscribePattern":
            meta = self.client.metadata(None)
            topics = [
                t
                for name, t in meta.topics.items()
                if not t.isInternal
                and not name.startswith("__")
                and self._pattern.fullmatch(name)
                and t.error == ErrorCode.none
            ]
            return sorted((t.name, p) for t in topics for p in t.partitions)
        if subscription.kind == "subscribe":
            meta = self.client.metadata(subscription.topics)
            found = []
            unknown = []
            for name in subscription.topics:
                topic = meta.topics.get(name)
                if topic is None or topic.error == ErrorCode.unknown_topic_or_partition:
                    unknown.append(name)
                    continue
                if topic.error != ErrorCode.none:
                    continue
                found.extend((name, p) for p in topic.partitions)
            if unknown and not self.config.streaming:
                raise UnknownTopicOrPartitionError(unknown)
            return sorted(found)
        topics = sorted({t for t, _ in subscription.assigned})
        meta = self.client.metadata(topics)
        missing = [
            (t, p)
            for t, p in subscription.assigned
            if t not in meta.topics
            or meta.topics[t].error != ErrorCode.none
            or p not in meta.topics[t].partitions
        ]
        if missing:
            raise OptionError(
                "assign",
                "option 'assign' names partitions that do not exist: "
                + ", ".join(f"{t}-{p}" for t, p in missing),
            )
        return list(subscription.assigned)

    # -- offsets ---------------------------------------------------------

    def _list(self, partitions: Iterable[TopicPartition], timestamp) -> dict:
        """
        ListOffsets for C{partitions}: C{timestamp} is one value for all, or
        a {partition: timestamp} map.

        @return: {partition: offset}; -1 where no record is at or after a
            timestamp.
        """
        byTopic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            byTopic.setdefault(topic, []).append(partition)
        result: dict[TopicPartition, int] = {}
        for topic, numbers in sorted(byTopic.items()):
            if isinstance(timestamp, Mapping):
                groups: dict[int, list[int]] = {}
                for p in numbers:
                    groups.setdefault(timestamp[(topic, p)], []).append(p)
            else:
                groups = {timestamp: numbers}
            for ts, group in groups.items():
                listed = self.client.listOffsets(
                    topic, group, ts, isolationLevel=1 if self.config.readCommitted else 0
                )
                for p, (offset, _) in listed.items():
                    result[(topic, p)] = offset
        return result

    def earliest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(partitions, LIST_EARLIEST)

    def latest(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list(partitions, LIST_LATEST)

    def resolve(
        self, spec: OffsetSpec, partitions: list[TopicPartition], starting: bool
    ) -> dict[TopicPartition, int]:
        """
        Concrete offsets for C{spec} on C{partitions}.

        @raise OptionError: if the spec names partitions outside the
            subscription or leaves some out (Spark requires them all), or a
            starting timestamp matches no record and the strategy is
            C{error}.
        """
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "offsets":
            given = spec.offsetMap()
            self._checkCovers(spec, given, partitions)
            result = {tp: offset for tp, offset in given.items() if offset >= 0}
            earliest = [tp for tp, offset in given.items() if offset == EARLIEST]
            latest = [tp for tp, offset in given.items() if offset == LATEST]
            result.update(self.earliest(earliest))
            result.update(self.latest(latest))
            return result
        if spec.kind == "timestamps":
            timestamps = spec.timestampMap()
            self._checkCovers(spec, timestamps, partitions)
        else:
            timestamps = {tp: spec.timestamp for tp in partitions}
        found = self._list(partitions, timestamps)
        unmatched = [tp for tp, offset in found.items() if offset < 0]
        if unmatched:
            if starting and self.config.startingByTimestampStrategy == "error":
                raise OptionError(
                    spec.option,
                    f"option '{spec.option}' matches no record in "
                    + ", ".join(f"{t}-{p} (timestamp {timestamps[(t, p)]})" for t, p in unmatched)
                    + ": no record there is that recent. Set "
                    "'startingOffsetsByTimestampStrategy' to 'latest' to start from the latest "
                    "offset in such partitions instead",
                )
            # An ending timestamp past every record ends at the latest offset.
            found.update(self.latest(unmatched))
        return found

    def _checkCovers(self, spec: OffsetSpec, given: Mapping, partitions: list[TopicPartition]):
        extra = sorted(set(given) - set(partitions))
        missing = sorted(set(partitions) - set(given))
        if extra:
            raise OptionError(
                spec.option,
                f"option '{spec.option}' names partitions outside the subscription "
                f"({self.config.subscription.describe()}) or that do not exist: "
                + ", ".join(f"{t}-{p}" for t, p in extra),
            )
        if missing:
            raise OptionError(
                spec.option,
                f"option '{spec.option}' must give every partition of the subscription "
                f"(use -2 for earliest, -1 for latest); it leaves out "
                + ", ".join(f"{t}-{p}" for t, p in missing),
            )

    # -- batch planning ----------------------------------------------------

    def batchRanges(self) -> list[OffsetRange]:
        """
        The offset ranges of a batch query, one per partition (empty ones
        included; see L{splitRanges}).

        @raise DataLossError: if a starting offset is before the earliest
            available and C{failOnDataLoss} (otherwise reading starts at the
            earliest).
        @raise OptionError: if a starting offset is after its ending one.
        """
        config = self.config
        partitions = self.partitions()
        if not partitions:
            return []
        start = self.resolve(config.starting, partitions, starting=True)
        end = self.resolve(config.ending, partitions, starting=False)
        earliest = self.earliest(partitions)
        ranges = []
        for tp in partitions:
            fromOffset, untilOffset = start[tp], end[tp]
            if fromOffset > untilOffset:
                raise OptionError(
                    config.starting.option,
                    f"the starting offset {fromOffset} of {tp[0]}-{tp[1]} (from "
                    f"'{config.starting.option}') is after its ending offset {untilOffset} (from "
                    f"'{config.ending.option}')",
                )
            if fromOffset < earliest[tp]:
                if config.failOnDataLoss:
                    raise DataLossError(
                        dataLossMessage(
                            f"Offset {fromOffset} of {tp[0]}-{tp[1]} is before the earliest "
                            f"available offset {earliest[tp]}"
                        )
                    )
                fromOffset = min(earliest[tp], untilOffset)
            ranges.append(OffsetRange(tp[0], tp[1], fromOffset, untilOffset))
        return ranges

