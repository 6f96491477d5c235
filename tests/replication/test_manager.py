"""
The replica manager's decisions, with a task.Clock, in-memory and on-disk
logs, a recording IAlterIsr and fake fetchers.
"""

from __future__ import annotations

import os

import pytest
from twisted.internet import task
from zope.interface.verify import verifyObject

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import IReplicaManager
from kafkatwist.log import LogManager, MemoryLogManager
from kafkatwist.log.checkpoint import readCheckpoint
from kafkatwist.replication.delayed import DelayedProduce, Waiting
from kafkatwist.replication.fetcher import truncationOffset
from kafkatwist.replication.manager import REPLICATION_OFFSET, ReplicaManager
from tests.log.batches import makeBatch

NOW = 1_700_000_000_000

CONFIG = {
    "replica.lag.time.max.ms": 10_000,
    "num.replica.fetchers": 1,
    "replica.high.watermark.checkpoint.interval.ms": 5000,
}


class RecordingAlterIsr:
    def __init__(self, answer=True):
        self.calls = []
        self.answer = answer

    def alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                 brokerEpochs=None):
        self.calls.append((topic, partition, leaderEpoch, tuple(newIsr), partitionEpoch))
        if self.answer:
            onDone(partitionEpoch + 1, None)
        else:
            self.pending = onDone


class FakeFetcher:
    made = []

    def __init__(self, brokerId, sourceId, index, directory, config, onFenced=None):
        self.sourceId = sourceId
        self.partitions = {}
        self.started = self.stopped = False
        FakeFetcher.made.append(self)

    def addPartition(self, key, log, epoch):
        self.partitions[key] = epoch

    def removePartition(self, key):
        self.partitions.pop(key, None)

    def partitionCount(self):
        return len(self.partitions)

    def start(self):
        self.started = True

    def stop(self, timeout=5.0):
        self.stopped = True


class Harness:
    def __init__(self, logManager):
        self.clock = task.Clock()
        self.now = [NOW]
        self.woken = []
        self.alter = RecordingAlterIsr()
        self.logManager = logManager
        logManager.createTopic("t", 1, {})
        self.log = logManager.getLog("t", 0)
        FakeFetcher.made = []
        self.manager = ReplicaManager(
            1, logManager, CONFIG, self.clock, wake=self.woken.append, alterIsr=self.alter,
            fetcherFactory=FakeFetcher, nowMs=lambda: self.now[0],
        )

    def run(self):
        self.clock.advance(0)

    def advance(self, ms):
        self.now[0] += ms
        self.clock.advance(ms / 1000)

    def append(self, count=1):
        return self.log.append(makeBatch(count), self.now[0])

    def follow(self, replica, offset):
        self.manager.recordFollowerFetch(replica, [(("t", 0), offset, self.log.logEndOffset, None)])


@pytest.fixture
def h():
    return Harness(MemoryLogManager())


def test_interface(h):
    assert verifyObject(IReplicaManager, h.manager)


def test_single_broker_logs_are_untouched(h):
    h.manager.start()
    h.append(3)
    h.advance(60_000)
    assert h.log.isLeader and h.log.highWatermark == 3 and h.log.isrSize is None
    assert h.manager.leaderEpochs() == {}


def test_leader_high_watermark_follows_the_isr(h):
    h.append(2)
    h.manager.becomeLeader("t", 0, 4, [1, 2, 3], [1, 2, 3], 7)
    assert h.manager.leaderEpochs() == {}  # not before the manager's thread ran it
    h.run()
    assert h.manager.leaderEpochs() == {("t", 0): ("leader", 4)}
    assert h.log.leaderEpoch == 4 and h.log.isLeader and h.log.isrSize == 3
    assert h.log.epochs.entries == ((0, 0), (4, 2))
    # No checkpoint: the high watermark starts at the log start.
    assert h.log.highWatermark == 0
    h.append(3)
    h.follow(2, 5)
    assert h.log.highWatermark == 0  # broker 3 has not fetched yet
    h.follow(3, 4)
    assert h.log.highWatermark == 4
    h.follow(3, 5)
    assert h.log.highWatermark == 5
    assert ("t", 0) in h.woken
    # Never backwards within the epoch.
    h.follow(3, 1)
    assert h.log.highWatermark == 5


def test_isr_shrinks_after_the_lag_and_expands_when_caught_up(h):
    h.manager.start()
    h.manager.becomeLeader("t", 0, 1, [1, 2, 3], [1, 2, 3], 0)
    h.run()
    h.append(2)
    h.follow(2, 2)
    h.advance(6_000)
    h.follow(2, 2)
    h.advance(6_000)
    # Broker 3 never fetched: out after replica.lag.time.max.ms.
    assert h.alter.calls == [("t", 0, 1, (1, 2), 0)]
    h.run()
    assert h.log.isrSize == 2 and h.log.highWatermark == 2
    h.append(1)
    # At the high watermark (2) within the epoch: back in, on the new
    # partition epoch the shrink returned.
    h.follow(3, 2)
    assert h.alter.calls[1] == ("t", 0, 1, (1, 2, 3), 1)
    h.run()
    assert h.log.isrSize == 3


def test_expansion_needs_the_high_watermark(h):
    h.manager.becomeLeader("t", 0, 1, [1, 2], [1, 2, 3], 0)
    h.run()
    h.append(4)
    h.follow(2, 4)
    assert h.log.highWatermark == 4
    h.follow(3, 3)
    assert h.alter.calls == []
    h.follow(3, 4)
    assert h.alter.calls == [("t", 0, 1, (1, 2, 3), 0)]
    h.run()
    assert h.log.isrSize == 3


def test_refused_isr_change_is_left_for_the_controller(h):
    h.alter.answer = False
    h.manager.start()
    h.manager.becomeLeader("t", 0, 1, [1, 2], [1, 2], 0)
    h.run()
    h.advance(11_000)
    assert len(h.alter.calls) == 1
    h.alter.pending(None, ErrorCode.invalid_update_version)
    h.run()
    assert h.log.isrSize == 2


def test_alone_in_the_isr_the_high_watermark_is_the_log_end(h):
    h.manager.becomeLeader("t", 0, 1, [1], [1, 2], 0)
    h.run()
    h.append(3)
    assert h.log.highWatermark == 3


@pytest.fixture(params=["memory", "disk"])
def both(request, tmp_path):
    """
    The harness over the in-memory log and over the on-disk one.
    """
    manager = MemoryLogManager() if request.param == "memory" else LogManager([str(tmp_path)], {})
    yield Harness(manager)
    if request.param == "disk":
        manager.close()


class Info:
    def __init__(self, lastOffset):
        self.lastOffset = lastOffset


def expansionInFlight(h):
    """
    Broker 1 leads alone with 3 records; broker 2, caught up, is being added
    to the ISR, the write not answered yet.
    """
    h.alter.answer = False
    h.manager.becomeLeader("t", 0, 1, [1], [1, 2], 0)
    h.run()
    h.append(3)
    h.follow(2, 3)


def test_an_expansion_pins_the_high_watermark_before_it_is_asked_for(both):
    """
    A leader alone in its ISR answers acks=-1 at once.  Once a follower's
    way into the ISR is asked for, appends wait for it: the controller may
    elect it as soon as the ISR write lands, so nothing it lacks may be
    acknowledged, and what consumers read never moves back.
    """
    h = both
    h.alter.answer = False  # the ISR write is on its way
    h.manager.becomeLeader("t", 0, 1, [1], [1, 2], 0)
    h.run()
    h.append(3)
    assert not h.log.replicated() and h.log.highWatermark == 3
    h.follow(2, 3)
    assert h.alter.calls[-1][3] == (1, 2)
    h.append(5)
    waiting = h.manager.waitingFor("t", 0, h.log, Info(7))
    assert waiting is not None and waiting.requiredOffset == 8
    assert h.log.highWatermark == 3
    h.follow(2, 3)
    assert h.log.highWatermark == 3
    h.alter.pending(1, None)
    h.run()
    assert h.log.inSyncReplicas == frozenset({1, 2}) and h.log.highWatermark == 3
    h.follow(2, 8)
    assert h.log.highWatermark == 8


def test_an_append_between_the_check_and_the_pin_keeps_the_follower_out(both):
    h = both
    h.manager.becomeLeader("t", 0, 1, [1], [1, 2], 0)
    h.run()
    h.append(3)
    pin = h.log.pinHighWatermark

    def appendFirst():
        h.append(2)  # a handler thread's append wins the race for the log's lock
        return pin()

    h.log.pinHighWatermark = appendFirst
    h.woken.clear()
    h.follow(2, 3)
    assert h.alter.calls == []
    # Following the log end again, and an acks=-1 append that saw the pin is woken.
    assert not h.log.replicated() and h.log.highWatermark == 5
    assert ("t", 0) in h.woken


def test_a_larger_isr_never_moves_the_high_watermark_back(both):
    h = both
    h.manager.becomeLeader("t", 0, 1, [1], [1, 2], 0)
    h.run()
    h.append(8)
    assert h.log.highWatermark == 8
    h.follow(2, 3)
    # The same epoch, a newer ISR written by someone else, with broker 2 in it.
    h.manager.becomeLeader("t", 0, 1, [1, 2], [1, 2], 1)
    h.run()
    assert h.log.highWatermark == 8 and h.log.replicated()
    h.follow(2, 8)
    h.append(1)
    h.follow(2, 9)
    assert h.log.highWatermark == 9


def test_follower_and_stale_epochs(h):
    h.append(2)
    h.manager.becomeFollower("t", 0, 2, 5, [1, 2], 3)
    h.run()
    assert not h.log.isLeader and h.log.leaderEpoch == 5
    [fetcher] = FakeFetcher.made
    assert fetcher.sourceId == 2 and fetcher.partitions == {("t", 0): 5} and fetcher.started
    # An older epoch is ignored.
    h.manager.becomeLeader("t", 0, 4, [1], [1, 2], 2)
    h.run()
    assert not h.log.isLeader
    h.manager.becomeLeader("t", 0, 6, [1], [1, 2], 4)
    h.run()
    assert h.log.isLeader and fetcher.partitions == {} and fetcher.stopped
    h.manager.stopReplica("t", 0, False)
    h.run()
    assert not h.log.isLeader and h.manager.leaderEpochs() == {}


def test_high_watermark_checkpoint(tmp_path):
    logManager = LogManager([str(tmp_path)], {})
    try:
        h = Harness(logManager)
        h.manager.start()
        h.manager.becomeLeader("t", 0, 1, [1, 2], [1, 2], 0)
        h.run()
        h.append(5)
        h.follow(2, 3)
        h.advance(5_000)
        path = os.path.join(str(tmp_path), REPLICATION_OFFSET)
        assert readCheckpoint(path) == {("t", 0): 3}
        # Read back by a new manager when the partition gets its role.
        again = ReplicaManager(1, logManager, CONFIG, h.clock, fetcherFactory=FakeFetcher)
        h.log.setHighWatermark(None)
        again.becomeFollower("t", 0, 2, 2, [1, 2], 1)
        h.run()
        assert h.log.highWatermark == 3
        again.stop()
    finally:
        logManager.close()


def test_truncation_offsets():
    logManager = MemoryLogManager()
    logManager.createTopic("t", 1, {})
    log = logManager.getLog("t", 0)
    for epoch in (1, 1, 3, 3):
        log.leaderEpoch = epoch
        log.append(makeBatch(1), NOW)
    assert log.epochs.entries == ((1, 0), (3, 2))
    # The leader knows epoch 3 and says it ended at 3.
    assert truncationOffset(log, 3, 3) == (3, True)
    # The leader's epoch 3 ended later than ours: nothing to drop.
    assert truncationOffset(log, 3, 10) == (4, True)
    # The leader never had epoch 3: it answers its epoch 2, which we never
    # had either; we drop to our end of epoch 1 (2) and ask again.
    assert truncationOffset(log, 2, 2) == (2, False)
    assert truncationOffset(log, -1, 1) == (1, True)
    log.setHighWatermark(1)
    assert truncationOffset(log, -1, -1) == (1, True)


def test_delayed_produce_answers():
    logManager = MemoryLogManager()
    logManager.createTopic("t", 1, {"min.insync.replicas": "2"})
    log = logManager.getLog("t", 0)
    log.append(makeBatch(2), NOW)
    log.setHighWatermark(0)
    log.inSyncReplicas = frozenset(range(2))
    answers = []

    class Pending:
        def complete(self, result):
            answers.append(result)

    clock = task.Clock()
    op = DelayedProduce(clock, [Waiting("t", 0, log, 2, 0)], lambda errors: errors, Pending())
    assert not op.tryComplete()
    log.setHighWatermark(2)
    assert op.tryComplete()
    assert answers == [{("t", 0): ErrorCode.none}]
    # After the ISR fell below min.insync.replicas.
    log.inSyncReplicas = frozenset(range(1))
    op = DelayedProduce(clock, [Waiting("t", 0, log, 2, 0)], lambda errors: errors, Pending())
    assert op.tryComplete()
    assert answers[-1] == {("t", 0): ErrorCode.not_enough_replicas_after_append}
    # No longer the leader.
    log.isLeader = False
    op = DelayedProduce(clock, [Waiting("t", 0, log, 5, 0)], lambda errors: errors, Pending())
    assert op.tryComplete()
    assert answers[-1] == {("t", 0): ErrorCode.not_leader_or_follower}
    # Timed out.
    log.isLeader = True
    op = DelayedProduce(clock, [Waiting("t", 0, log, 5, 0)], lambda errors: errors, Pending())
    assert not op.tryComplete()
    op._expire()
    assert answers[-1] == {("t", 0): ErrorCode.request_timed_out}


def test_coordinator_appends_wait_for_the_isr():
    from kafkatwist.config import BrokerConfig
    from kafkatwist.util.purgatory import Purgatory

    logManager = MemoryLogManager()
    logManager.createTopic("__consumer_offsets", 1, {})
    log = logManager.getLog("__consumer_offsets", 0)
    clock = task.Clock()
    purgatory = Purgatory("Produce")
    replicaManager = ReplicaManager(1, logManager, BrokerConfig({}), clock, producePurgatory=purgatory)
    waiter = replicaManager.replicationWaiter(5000)
    done = []
    # Not replicated (a single broker): at once.
    info = log.append(makeBatch(2), NOW, isFromClient=False)
    waiter("__consumer_offsets", 0, info.lastOffset + 1, done.append)
    assert done == [ErrorCode.none]
    # Replicated: once the high watermark passes it.
    log.setHighWatermark(2)
    log.inSyncReplicas = frozenset(range(2))
    info = log.append(makeBatch(1), NOW, isFromClient=False)
    waiter("__consumer_offsets", 0, info.lastOffset + 1, done.append)
    assert done == [ErrorCode.none]
    log.setHighWatermark(3)
    purgatory.checkAndComplete(("__consumer_offsets", 0))
    assert done == [ErrorCode.none, ErrorCode.none]
    # Or times out.
    info = log.append(makeBatch(1), NOW, isFromClient=False)
    waiter("__consumer_offsets", 0, info.lastOffset + 1, done.append)
    clock.advance(5)
    assert done[-1] == ErrorCode.request_timed_out


def test_an_isr_change_of_unknown_outcome_stays_pending_and_is_asked_again(both):
    """
    ZooKeeper's connection lost during the ISR write: it may have landed.
    The leader keeps counting the follower (an acks=-1 append waits for
    it) and asks again, as Kafka's AlterPartition manager does.
    """
    h = both
    expansionInFlight(h)
    assert len(h.alter.calls) == 1
    h.alter.pending(None, KafkaError(ErrorCode.request_timed_out, "ZooKeeper: ConnectionLoss"))
    h.run()
    h.append(2)
    assert h.manager.waitingFor("t", 0, h.log, Info(4)) is not None
    assert h.log.highWatermark == 3
    h.advance(500)
    assert h.alter.calls[-1] == h.alter.calls[0] and len(h.alter.calls) == 2
    h.alter.pending(1, None)
    h.run()
    assert h.log.inSyncReplicas == frozenset({1, 2})
    h.follow(2, 5)
    assert h.log.highWatermark == 5


def test_a_refused_expansion_lets_the_high_watermark_follow_the_log_end_again(both):
    h = both
    expansionInFlight(h)
    h.append(2)
    h.alter.pending(None, ErrorCode.invalid_update_version)
    h.run()
    assert not h.log.replicated() and h.log.highWatermark == 5


def test_unknown_outcomes_in_a_row_are_asked_again_with_a_growing_wait(both):
    h = both
    expansionInFlight(h)
    timedOut = KafkaError(ErrorCode.request_timed_out, "ZooKeeper: ConnectionLoss")
    h.alter.pending(None, timedOut)
    h.run()
    h.advance(500)
    assert len(h.alter.calls) == 2
    h.alter.pending(None, timedOut)
    h.run()
    h.advance(500)
    assert len(h.alter.calls) == 2  # 1 s now
    h.advance(500)
    assert len(h.alter.calls) == 3
    h.alter.pending(1, None)
    h.run()
    assert h.log.inSyncReplicas == frozenset({1, 2}) and h.manager._isrRetries == {}
