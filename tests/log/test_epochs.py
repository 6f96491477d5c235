"""
Leader epochs in the log: the stamp, the leader-epoch-checkpoint file,
follower appends that keep the leader's offsets, and truncation.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.epochs import (
    LEADER_EPOCH_CHECKPOINT,
    LeaderEpochCache,
    readEpochCheckpoint,
)
from kafkatwist.protocol.batch import iterBatchHeaders

from .batches import makeBatch, records
from .helpers import NOW, newLog

# -- the cache ----------------------------------------------------------------


def test_assignAndEndOffsets():
    cache = LeaderEpochCache(None)
    assert cache.endOffsetFor(0, 10) == (-1, -1)
    assert cache.assign(1, 0)
    assert not cache.assign(1, 5)  # same epoch, later start: nothing new
    assert cache.assign(3, 10)
    assert cache.assign(4, 20)
    assert cache.entries == ((1, 0), (3, 10), (4, 20))
    assert cache.endOffsetFor(4, 25) == (4, 25)  # the latest: the log end
    assert cache.endOffsetFor(3, 25) == (3, 20)
    assert cache.endOffsetFor(2, 25) == (1, 10)  # unknown epoch: the one below
    assert cache.endOffsetFor(0, 25) == (0, 0)  # older than all: first start
    assert cache.endOffsetFor(5, 25) == (-1, -1)  # newer than all
    assert cache.endOffsetFor(-1, 25) == (-1, -1)


def test_assignDropsContradictedEntries():
    cache = LeaderEpochCache(None, [(1, 0), (3, 10), (4, 20)])
    cache.assign(2, 15)
    assert cache.entries == ((1, 0), (2, 15))


def test_truncation():
    cache = LeaderEpochCache(None, [(1, 0), (3, 10), (4, 20)])
    cache.truncateFromEnd(20)
    assert cache.entries == ((1, 0), (3, 10))
    cache.truncateFromStart(12)
    assert cache.entries == ((3, 12),)
    cache.truncateFromStart(5)
    assert cache.entries == ((3, 12),)


def test_fileFormat(tmp_path):
    path = str(tmp_path / LEADER_EPOCH_CHECKPOINT)
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    cache.assign(2, 7)
    with open(path) as f:
        assert f.read() == "0\n2\n0 0\n2 7\n"
    assert readEpochCheckpoint(path) == [(0, 0), (2, 7)]
    assert not os.path.exists(path + ".tmp")


@pytest.mark.parametrize(
    "content", [b"", b"1\n1\n0 0\n", b"0\n2\n0 0\n", b"0\n1\nx y\n", b"0\n2\n3 5\n1 9\n"]
)
def test_malformedFileIgnored(tmp_path, content):
    path = tmp_path / LEADER_EPOCH_CHECKPOINT
    path.write_bytes(content)
    assert readEpochCheckpoint(str(path)) == []


# -- in the log ---------------------------------------------------------------


def epochsOf(log):
    found, offset = [], log.logStartOffset
    while offset < log.logEndOffset:
        data = records(log.read(offset, 1 << 30, toLogEnd=True).records)
        for _, h in iterBatchHeaders(data):
            found.append((h.baseOffset, h.partitionLeaderEpoch))
            offset = h.lastOffset + 1
    return found


def test_leaderAppendsStampAndRecordEpoch(harness):
    manager, log = newLog(harness)
    log.append(makeBatch(2), NOW)
    log.leaderEpoch = 3
    log.append(makeBatch(1), NOW)
    log.append(makeBatch(1), NOW)
    assert epochsOf(log) == [(0, 0), (2, 3), (3, 3)]
    assert log.epochs.entries == ((0, 0), (3, 2))
    if harness.onDisk:
        assert readEpochCheckpoint(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT)) == [
            (0, 0), (3, 2)
        ]
        manager = harness.restart(manager)
        assert manager.getLog("t", 0).epochs.entries == ((0, 0), (3, 2))


def test_followerAppendKeepsOffsetsAndEpochs(harness):
    manager, leader = newLog(harness)
    manager.createTopic("u", 1, {})
    leader.leaderEpoch = 5
    for n in (1, 3, 2):
        leader.append(makeBatch(n), NOW)
    data = records(leader.read(0, 1 << 20, toLogEnd=True).records)
    follower = manager.getLog("u", 0)
    follower.isLeader = False
    info = follower.appendAsFollower(data, NOW)
    assert (info.firstOffset, info.lastOffset) == (0, 5)
    assert records(follower.read(0, 1 << 20, toLogEnd=True).records) == data
    assert follower.epochs.entries == ((5, 0),)
    with pytest.raises(KafkaError) as e:
        follower.appendAsFollower(data, NOW)
    assert e.value.code == ErrorCode.offset_out_of_range
    # A client may not append to a follower.
    with pytest.raises(KafkaError) as e:
        follower.append(makeBatch(1), NOW)
    assert e.value.code == ErrorCode.not_leader_or_follower


def test_followerAppendChecksCrc(harness):
    _, log = newLog(harness)
    batch = bytearray(makeBatch(2))
    batch[-1] ^= 0xFF
    with pytest.raises(KafkaError) as e:
        log.appendAsFollower(bytes(batch), NOW)
    assert e.value.code == ErrorCode.corrupt_message
    assert log.logEndOffset == 0


def test_followerAppendDropsPartialTail(harness):
    _, log = newLog(harness)
    whole = makeBatch(2)
    info = log.appendAsFollower(whole + makeBatch(3)[:30], NOW)
    assert info.lastOffset == 1
    assert log.logEndOffset == 2


def test_truncateTo(harness):
    manager, log = newLog(harness, {"segment.bytes": "200"})
    for epoch in (0, 0, 1, 1, 2, 2):
        log.leaderEpoch = epoch
        log.append(makeBatch(2, valueSize=30), NOW)
    assert len(log.segments) > 2
    assert log.epochs.entries == ((0, 0), (1, 4), (2, 8))
    # Mid-batch: the batch holding offset 5 goes whole.
    assert log.truncateTo(5)
    assert log.logEndOffset == 4
    assert log.epochs.entries == ((0, 0),)
    assert [o for o, _ in epochsOf(log)] == [0, 2]
    assert not log.truncateTo(10)
    log.leaderEpoch = 7
    log.append(makeBatch(1), NOW)
    assert epochsOf(log)[-1] == (4, 7)
    assert log.epochs.entries == ((0, 0), (7, 4))
    assert log.read(4, 1000).records
    if harness.onDisk:
        manager = harness.restart(manager)
        log = manager.getLog("t", 0)
        assert log.logEndOffset == 5
        assert log.epochs.entries == ((0, 0), (7, 4))
        manager = harness.restart(manager, clean=False)
        assert manager.getLog("t", 0).logEndOffset == 5


def test_truncateRestoresProducerState(harness):
    _, log = newLog(harness)
    log.append(makeBatch(1, producerId=9, producerEpoch=0, baseSequence=0), NOW)
    log.append(makeBatch(1, producerId=9, producerEpoch=0, baseSequence=1), NOW)
    log.truncateTo(1)
    # Sequence 1 is expected again, not refused as a duplicate.
    info = log.append(makeBatch(1, producerId=9, producerEpoch=0, baseSequence=1), NOW)
    assert not info.duplicate and info.firstOffset == 1


def test_truncateFullyAndStartAt(harness):
    manager, log = newLog(harness)
    for _ in range(3):
        log.append(makeBatch(2), NOW)
    log.truncateFullyAndStartAt(40)
    assert (log.logStartOffset, log.logEndOffset) == (40, 40)
    assert log.epochs.entries == ()
    assert log.append(makeBatch(1), NOW).firstOffset == 40
    if harness.onDisk:
        manager = harness.restart(manager)
        log = manager.getLog("t", 0)
        assert (log.logStartOffset, log.logEndOffset) == (40, 41)


def test_highWatermarkLimitsConsumerReads(harness):
    _, log = newLog(harness)
    for _ in range(3):
        log.append(makeBatch(2), NOW)
    assert log.highWatermark == 6
    log.setHighWatermark(2)
    info = log.read(0, 1 << 20)
    assert info.highWatermark == 2
    assert [h.baseOffset for _, h in iterBatchHeaders(records(info.records))] == [0]
    assert records(log.read(2, 1 << 20).records) == b""
    assert log.lastStableOffset == 2
    follower = log.read(2, 1 << 20, toLogEnd=True)
    assert [h.baseOffset for _, h in iterBatchHeaders(records(follower.records))] == [2, 4]
    log.setHighWatermark(None)
    assert log.highWatermark == 6


def test_logWithoutCheckpointIsSeededFromItsFirstBatch(disk):
    manager, log = newLog(disk)
    for _ in range(3):
        log.append(makeBatch(2), NOW)
    os.unlink(os.path.join(log.directory, LEADER_EPOCH_CHECKPOINT))
    manager = disk.restart(manager)
    log = manager.getLog("t", 0)
    assert log.epochs.entries == ((0, 0),)
    assert log.epochs.endOffsetFor(0, log.logEndOffset) == (0, 6)
