"""
Producer-id blocks reserved in ZooKeeper's C{/latest_producer_id_block} (Kafka's
ZooKeeper-mode C{ProducerIdManager}), so no two brokers hand out the same id.

A part of L{ClusterService<kafkatwist.cluster.service.ClusterService>}, which
combines the parts; they share its state (see its C{__init__}).
"""

from __future__ import annotations

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
)

from kafkatwist.cluster import zkdata as Z
from kafkatwist.errors import ErrorCode, KafkaError

class ProducerIdBlocks:
    def reserveProducerIdBlock(self, size: int) -> int:
        """
        Reserve the next C{size} producer ids cluster-wide (Kafka's
        C{/latest_producer_id_block}, written conditionally on its version).

        @return: the first id of the block.
        @raise KafkaError: ZooKeeper did not answer.
        """
        return self.owner.call(self._reserveProducerIdBlock, size)

    def reserveProducerIdBlockLater(self, size: int, onDone) -> None:
        """
        L{reserveProducerIdBlock} without waiting: C{onDone(start, None)}
        or C{onDone(None, error)} on the owner thread.
        """
        self.owner.submit(self._reserveProducerIdBlockFor, size, onDone)

    def _reserveProducerIdBlockFor(self, size: int, onDone) -> None:
        try:
            start = self._reserveProducerIdBlock(size)
        except Exception as e:  # handed to the caller (ZooKeeper, a lost session)
            onDone(None, e)
            return
        onDone(start, None)

    def _reserveProducerIdBlock(self, size: int) -> int:
        for _ in range(100):
            try:
                data, stat = self.zk.get(Z.PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(Z.PRODUCER_ID_BLOCK, Z.encodeProducerIdBlock(self.brokerId, 0, size))
                    return 0
                except NodeExistsError:
                    continue
            start = Z.decodeProducerIdBlockEnd(data) + 1
            try:
                self.zk.set(Z.PRODUCER_ID_BLOCK, Z.encodeProducerIdBlock(self.brokerId, start, size),
                            version=stat.version)
                return start
            except BadVersionError:
                continue  # another broker took that block
        raise KafkaError(ErrorCode.coordinator_not_available, "no producer id block could be reserved")
