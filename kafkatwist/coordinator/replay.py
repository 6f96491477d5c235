"""
Loading groups and committed offsets from C{__consumer_offsets} at
start-up (Kafka's C{GroupMetadataManager.loadGroupsAndOffsets}).

Every partition is replayed from its start: the last record per key wins
and tombstones delete.  Loading never stops start-up: a record that cannot
be read is skipped with one log line naming topic, partition and offset
(the log itself skips unreadable batches the same way), and the records of
other coordinators (KIP-848 groups, share groups: key versions this
coordinator does not know) are counted and skipped with one line per
partition.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.coordinator.consumer_group_records import ConsumerGroupRecords
from kafkatwist.coordinator.formats import (
    CorruptGroupRecord,
    decodeGroupValue,
    decodeKey,
    decodeOffsetValue,
)
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.store import GroupSnapshot

__all__ = ["loadGroups"]

log = Logger()


def loadGroups(
    coordinatorLog,
    consumerGroups: ConsumerGroupRecords | None = None,
    pendingTxn: dict | None = None,
    partitions=None,
) -> tuple[list[GroupSnapshot], dict[str, dict[TopicPartition, OffsetAndMetadata]]]:
    """
    Read everything back.

    Transactional offset commits (when the log gives them:
    C{replayEvents}) become committed offsets where their transaction's
    marker says COMMIT, unless a commit of the partition written after them
    is already there (Kafka's rule); an ABORT drops them; those of a
    transaction still open go to C{pendingTxn}.

    @param coordinatorLog: an L{kafkatwist.interfaces.ICoordinatorLog}.
    @param pendingTxn: filled with the offsets of open transactions:
        producer id -> group id -> C{(topic, partition)} ->
        C{(OffsetAndMetadata, record offset, superseded)}.
    @return: C{(groups, offsets)}: a C{list} of L{GroupSnapshot}, and a
        C{dict} group id -> C{dict} C{(topic, partition)} ->
        L{OffsetAndMetadata}.  A group may have offsets without a snapshot
        (simple consumers that never joined).
    @param consumerGroups: collects the KIP-848 groups' records, if given.
    @param partitions: the partitions to read (default: all).
    """
    groups: dict[str, GroupSnapshot] = {}
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    events = getattr(coordinatorLog, "replayEvents", None)
    for partition in range(coordinatorLog.numPartitions) if partitions is None else partitions:
        foreign = 0
        firstForeign = None
        offset = None
        txns = _Transactions(offsets)
        try:
            if events is None:
                replayed = ((o, k, v, -1, None) for o, k, v in coordinatorLog.replay(partition))
            else:
                replayed = events(partition)
            for offset, key, value, producerId, marker in replayed:
                try:
                    if producerId >= 0:
                        txns.event(offset, key, value, producerId, marker)
                        continue
                    known = _apply(key, value, groups, offsets, consumerGroups)
                    txns.plain(offset, key, value)
                except CorruptGroupRecord as e:
                    log.warn(
                        "{topic}-{partition} offset {offset}: skipping unreadable record: {error}",
                        topic=coordinatorLog.topic, partition=partition, offset=offset, error=e,
                    )
                    continue
                if not known:
                    foreign += 1
                    if firstForeign is None:
                        firstForeign = offset
        except Exception:
            # The log promises not to raise for damaged data; should it
            # anyway, start-up goes on with what was read.
            log.failure(
                "{topic}-{partition}: loading stopped after offset {offset}",
                topic=coordinatorLog.topic, partition=partition, offset=offset,
            )
        if pendingTxn is not None:
            txns.leftOpen(pendingTxn)
        if foreign:
            log.info(
                "{topic}-{partition}: skipped {count} records of other coordinators' types"
                " (the first at offset {offset})",
                topic=coordinatorLog.topic, partition=partition, count=foreign, offset=firstForeign,
            )
    return list(groups.values()), {g: offs for g, offs in offsets.items() if offs}


def _apply(
    key: bytes | None, value: bytes | None, groups: dict, offsets: dict, consumerGroups=None
) -> bool:
    """
    Apply one record.

    @return: C{False} for a record type of another coordinator.
    @raise CorruptGroupRecord: if the record cannot be read.
    """
    if key is None:
        raise CorruptGroupRecord("record without a key")
    parsed = decodeKey(key)
    if parsed[0] == "offset":
        _, groupId, tp = parsed
        if value is None:
            groupOffsets = offsets.get(groupId)
            if groupOffsets is not None:
                groupOffsets.pop(tp, None)
        else:
            offsets.setdefault(groupId, {})[tp] = decodeOffsetValue(value)
        return True
    if parsed[0] == "group":
        groupId = parsed[1]
        if value is None:
            groups.pop(groupId, None)
        else:
            groups[groupId] = decodeGroupValue(groupId, value)
        return True
    if consumerGroups is not None:
        return consumerGroups.apply(parsed[1], key, value)
    return False


class _Transactions:
    """
    One partition's transactional offset commits while it is replayed.
    """

    def __init__(self, offsets: dict) -> None:
        self._offsets = offsets
        # (group, tp) -> record offset of the committed value
        self._committedAt: dict = {}
        # producer id -> group -> tp -> (offset, record offset)
        self._pending: dict[int, dict[str, dict]] = {}

    def plain(self, offset: int, key, value) -> None:
        parsed = decodeKey(key)
        if parsed[0] != "offset":
            return
        _, groupId, tp = parsed
        if value is None:
            self._committedAt.pop((groupId, tp), None)
            for groups in self._pending.values():
                groups.get(groupId, {}).pop(tp, None)
        else:
            self._committedAt[(groupId, tp)] = offset

    def event(self, offset: int, key, value, producerId: int, marker) -> None:
        if marker is not None:
            groups = self._pending.pop(producerId, {})
            if not marker:
                return
            for groupId, tps in groups.items():
                for tp, (om, recordOffset) in tps.items():
                    if self._committedAt.get((groupId, tp), -1) < recordOffset:
                        self._offsets.setdefault(groupId, {})[tp] = om
                        self._committedAt[(groupId, tp)] = recordOffset
            return
        if key is None:
            raise CorruptGroupRecord("record without a key")
        parsed = decodeKey(key)
        if parsed[0] != "offset" or value is None:
            return
        _, groupId, tp = parsed
        self._pending.setdefault(producerId, {}).setdefault(groupId, {})[tp] = (
            decodeOffsetValue(value), offset,
        )

    def leftOpen(self, pendingTxn: dict) -> None:
        for producerId, groups in self._pending.items():
            for groupId, tps in groups.items():
                for tp, (om, recordOffset) in tps.items():
                    superseded = self._committedAt.get((groupId, tp), -1) > recordOffset
                    pendingTxn.setdefault(producerId, {}).setdefault(groupId, {})[tp] = (
                        om, recordOffset, superseded,
                    )
