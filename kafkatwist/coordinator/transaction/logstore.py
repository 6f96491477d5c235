"""
C{__transaction_state} as the transaction coordinator's
L{kafkatwist.interfaces.ICoordinatorLog}, and reading it back at start-up.

The topic is written and read exactly as C{__consumer_offsets} is (one
batch per append, no producer id, damaged batches skipped with a log line:
L{kafkatwist.coordinator.logstore.OffsetsTopicLog}); only its name and
configs differ.  Loading keeps the last value of each transactional id;
a record that does not read (an unknown value version among them: Kafka
fails the partition's load there) is skipped with one log line, so
start-up never fails on one bad record.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.coordinator.logstore import OffsetsTopicLog
from kafkatwist.coordinator.transaction.formats import (
    TRANSACTION_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC_CONFIGS,
    CorruptTxnRecord,
    TxnLogValue,
    decodeKey,
    decodeValue,
)

__all__ = ["TransactionStateLog", "loadTransactions"]

log = Logger()


class TransactionStateLog(OffsetsTopicLog):
    """
    Unlike C{__consumer_offsets}, the topic is created on its first write
    (as Kafka creates it on the first transactional FindCoordinator): a
    broker that never sees a transaction has none.

    @param segmentBytes: C{transaction.state.log.segment.bytes}.
    """

    topic = TRANSACTION_STATE_TOPIC
    topicConfigs = TRANSACTION_STATE_TOPIC_CONFIGS
    partitionsKey = "transaction.state.log.num.partitions"

    def __init__(self, logManager, numPartitions: int = 50, clock=None, segmentBytes=None):
        self._segmentBytes = segmentBytes
        self._wanted = numPartitions
        super().__init__(logManager, numPartitions, clock, segmentBytes)

    def _ensureTopic(self, numPartitions: int, segmentBytes: int | None) -> int:
        info = self._logManager.topics().get(self.topic)
        if info is None:
            return numPartitions
        return super()._ensureTopic(numPartitions, segmentBytes)

    def _log(self, partition: int):
        if self._logManager.getLog(self.topic, partition) is None:
            # The first write: create the topic (racing writers agree).
            super()._ensureTopic(self._wanted, self._segmentBytes)
        return super()._log(partition)

    def coordinatorEpoch(self, partition: int) -> int:
        """
        The epoch markers are stamped with: the partition's leader epoch
        (one broker: it never changes).
        """
        partitionLog = self._logManager.getLog(self.topic, partition)
        return getattr(partitionLog, "leaderEpoch", 0) or 0


def loadTransactions(coordinatorLog, partitions=None) -> list[tuple[str, int, TxnLogValue]]:
    """
    @return: C{(transactional id, partition, value)} for every id whose
        last record is not a tombstone.
    """
    found: dict[str, tuple[int, TxnLogValue]] = {}
    for partition in range(coordinatorLog.numPartitions) if partitions is None else partitions:
        offset = None
        try:
            for offset, key, value in coordinatorLog.replay(partition):
                try:
                    if key is None:
                        raise CorruptTxnRecord("record without a key")
                    version, transactionalId = decodeKey(key)
                    if transactionalId is None:
                        log.warn(
                            "{topic}-{partition} offset {offset}: skipping a record with key"
                            " version {version}",
                            topic=coordinatorLog.topic, partition=partition, offset=offset,
                            version=version,
                        )
                        continue
                    if value is None:
                        found.pop(transactionalId, None)
                    else:
                        found[transactionalId] = (partition, decodeValue(value))
                except CorruptTxnRecord as e:
                    log.warn(
                        "{topic}-{partition} offset {offset}: skipping unreadable record: {error}",
                        topic=coordinatorLog.topic, partition=partition, offset=offset, error=e,
                    )
        except Exception:
            log.failure(
                "{topic}-{partition}: loading stopped after offset {offset}",
                topic=coordinatorLog.topic, partition=partition, offset=offset,
            )
    return [(tid, partition, value) for tid, (partition, value) in found.items()]
