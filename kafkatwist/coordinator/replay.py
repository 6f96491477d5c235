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
    coordinatorLog, consumerGroups: ConsumerGroupRecords | None = None
) -> tuple[list[GroupSnapshot], dict[str, dict[TopicPartition, OffsetAndMetadata]]]:
    """
    Read everything back.

    @param coordinatorLog: an L{kafkatwist.interfaces.ICoordinatorLog}.
    @return: C{(groups, offsets)}: a C{list} of L{GroupSnapshot}, and a
        C{dict} group id -> C{dict} C{(topic, partition)} ->
        L{OffsetAndMetadata}.  A group may have offsets without a snapshot
        (simple consumers that never joined).
    @param consumerGroups: collects the KIP-848 groups' records, if given.
    """
    groups: dict[str, GroupSnapshot] = {}
    offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
    for partition in range(coordinatorLog.numPartitions):
        foreign = 0
        firstForeign = None
        offset = None
        try:
            for offset, key, value in coordinatorLog.replay(partition):
                try:
                    known = _apply(key, value, groups, offsets, consumerGroups)
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
