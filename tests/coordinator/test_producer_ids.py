"""
Producer ids a block at a time (ProducerIdManager): in a cluster the next
block is ZooKeeper's, and whoever asks while it is being reserved is
answered once it is -- nobody waits for ZooKeeper.
"""

from __future__ import annotations

from twisted.python.failure import Failure

from kafkatwist.coordinator.transaction.producerids import BLOCK_SIZE, ProducerIdManager
from kafkatwist.errors import ErrorCode, KafkaError


class Reservations:
    """
    A ZooKeeper that answers when the test says so.
    """

    def __init__(self) -> None:
        self.asked: list = []
        self.next = 0

    def reserveLater(self, size, onDone) -> None:
        self.asked.append((size, onDone))

    def answer(self, error=None) -> None:
        size, onDone = self.asked.pop(0)
        if error is not None:
            onDone(None, error)
            return
        start, self.next = self.next, self.next + size
        onDone(start, None)


def test_callers_wait_for_a_block_without_waiting():
    zk = Reservations()
    ids = ProducerIdManager(reserveBlock=lambda size: 1 / 0, reserveBlockLater=zk.reserveLater)
    got: list = []
    ids.nextIdLater(got.append)
    ids.nextIdLater(got.append)
    # Both wait for the one reservation under way; neither call blocked.
    assert got == [] and len(zk.asked) == 1 and zk.asked[0][0] == BLOCK_SIZE
    zk.answer()
    assert got == [0, 1]
    ids.nextIdLater(got.append)
    assert got == [0, 1, 2] and zk.asked == []


def test_a_failed_reservation_fails_its_callers_and_the_next_one_asks_again():
    zk = Reservations()
    ids = ProducerIdManager(reserveBlock=lambda size: 1 / 0, reserveBlockLater=zk.reserveLater)
    got: list = []
    ids.nextIdLater(got.append)
    zk.answer(KafkaError(ErrorCode.coordinator_not_available, "no block"))
    assert len(got) == 1 and isinstance(got[0], Failure)
    assert got[0].value.code == ErrorCode.coordinator_not_available
    ids.nextIdLater(got.append)
    zk.answer()
    assert got[1] == 0


def test_one_broker_reserves_on_disk_in_place(tmp_path):
    ids = ProducerIdManager(str(tmp_path))
    got: list = []
    ids.nextIdLater(got.append)
    ids.nextIdLater(got.append)
    assert got == [0, 1] and ids.nextId() == 2
