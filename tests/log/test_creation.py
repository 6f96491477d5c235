"""
Topic creation on disk is atomic, bounded, and does not exhaust descriptors
(issue 11: CreateTopics(num_partitions=30000) hit EMFILE half way, left
~20,000 directories behind and a 67 s restart).
"""

from __future__ import annotations

import errno
import os

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import manager as managerModule

from .batches import makeBatch
from .helpers import NOW, offsets, openFds, readAll


class Crash(BaseException):
    """
    The process dies here: nothing after it runs, no cleanup either.
    """


def recordCount(log) -> int:
    return sum(last - first + 1 for first, last in offsets(readAll(log, log.logStartOffset)))


def entries(disk):
    return sorted(n for n in os.listdir(disk.directory) if not n.startswith("."))


def partitionDirs(disk):
    return [n for n in entries(disk) if "-" in n and os.path.isdir(os.path.join(disk.directory, n))]


def failOnCall(monkeypatch, module, name, n, exception):
    """
    Make C{module.name} raise C{exception} on its C{n}th call (1-based).
    """
    real = getattr(module, name)
    calls = [0]

    def fake(*args, **kw):
        calls[0] += 1
        if calls[0] == n:
            raise exception
        return real(*args, **kw)

    monkeypatch.setattr(module, name, fake)
    return calls


def test_broker_partition_limit(harness):
    manager = harness.make({"max.broker.partitions": 5})
    manager.createTopic("a", 3)
    with pytest.raises(KafkaError) as e:
        manager.createTopic("b", 3)
    assert e.value.code == ErrorCode.policy_violation
    with pytest.raises(KafkaError):
        manager.createTopic("b", 3, validateOnly=True)
    with pytest.raises(KafkaError) as e:
        manager.createPartitions("a", 6)
    assert e.value.code == ErrorCode.policy_violation
    manager.createPartitions("a", 5)
    assert set(manager.topics()) == {"a"}


def test_failed_creation_leaves_nothing(disk, monkeypatch):
    # EMFILE (or ENOSPC...) at the 7th partition of 10.
    manager = disk.make()
    manager.createTopic("keep", 1)
    before = entries(disk)
    failOnCall(monkeypatch, os, "mkdir", 7, OSError(errno.EMFILE, "Too many open files"))
    with pytest.raises(KafkaError) as e:
        manager.createTopic("t", 10)
    assert e.value.code == ErrorCode.kafka_storage_error
    monkeypatch.undo()
    assert entries(disk) == before
    assert set(manager.topics()) == {"keep"}
    assert manager.getLog("t", 0) is None
    manager = disk.restart(manager, clean=False)
    assert set(manager.topics()) == {"keep"}
    # And the name is free for a creation that works.
    manager.createTopic("t", 10)
    assert manager.topics()["t"].numPartitions == 10


def test_creation_failing_at_commit_is_undone(disk, monkeypatch):
    manager = disk.make()
    failOnCall(monkeypatch, os, "rename", 3, OSError(errno.EIO, "Input/output error"))
    with pytest.raises(KafkaError):
        manager.createTopic("t", 5)
    monkeypatch.undo()
    assert partitionDirs(disk) == []
    manager = disk.restart(manager, clean=False)
    assert manager.topics() == {}


def test_crash_before_commit_is_undone_at_restart(disk, monkeypatch, capturedLog):
    manager = disk.make()
    failOnCall(monkeypatch, os, "rename", 1, Crash())
    with pytest.raises(Crash):
        manager.createTopic("t", 4)
    monkeypatch.undo()
    assert len(partitionDirs(disk)) == 4
    manager = disk.restart(manager, clean=False)
    assert manager.topics() == {}
    assert partitionDirs(disk) == []
    assert capturedLog.count("a partition whose creation did not finish") == 4


def test_crash_after_commit_is_completed_at_restart(disk, monkeypatch, capturedLog):
    manager = disk.make()
    # The first rename committed the creation; the second never happens.
    failOnCall(monkeypatch, os, "rename", 2, Crash())
    with pytest.raises(Crash):
        manager.createTopic("t", 4, {"retention.ms": "-1"})
    monkeypatch.undo()
    manager = disk.restart(manager, clean=False)
    info = manager.topics()["t"]
    assert info.numPartitions == 4 and info.configs == {"retention.ms": "-1"}
    assert sorted(partitionDirs(disk)) == [f"t-{p}" for p in range(4)]
    assert capturedLog.count("Completed the creation of t-") == 3
    log = manager.getLog("t", 3)
    log.append(makeBatch(2), NOW)
    assert recordCount(log) == 2


def test_create_partitions_is_atomic(disk, monkeypatch):
    manager = disk.make()
    info = manager.createTopic("t", 2)
    # A crash before the first rename undoes the growth, one after it
    # completes it.
    for crashAt, expected in ((1, 2), (2, 5)):
        failOnCall(monkeypatch, os, "rename", crashAt, Crash())
        with pytest.raises(Crash):
            manager.createPartitions("t", 5)
        monkeypatch.undo()
        manager = disk.restart(manager, clean=False)
        assert manager.topics()["t"].numPartitions == expected
        assert manager.topics()["t"].topicId == info.topicId
        assert sorted(partitionDirs(disk)) == [f"t-{p}" for p in range(expected)]


def test_many_partitions_bounded_descriptors(disk):
    # Every partition written and read: descriptors stay within the
    # budgets, not one per partition.
    manager = disk.make(maxOpenSegments=4, maxOpenActive=8)
    before = openFds()
    manager.createTopic("t", 200)
    assert openFds() - before <= 12
    for p in range(200):
        manager.getLog("t", p).append(makeBatch(1), NOW)
    for p in range(200):
        assert recordCount(manager.getLog("t", p)) == 1
    assert manager.cache.openActive <= 8
    assert openFds() - before <= 12
    manager = disk.restart(manager)
    before = openFds()
    for p in range(200):
        log = manager.getLog("t", p)
        log.append(makeBatch(1), NOW)
        assert recordCount(log) == 2
    assert openFds() - before <= 12


def test_long_topic_names(disk):
    # The staging and deletion names shorten the topic to fit 255 bytes.
    manager = disk.make()
    name = "x" * 249
    manager.createTopic(name, 12)
    manager = disk.restart(manager)
    assert manager.topics()[name].numPartitions == 12
    manager.deleteTopic(name)
    assert partitionDirs(disk) == []


def test_staging_directory_without_metadata_is_deleted(disk, capturedLog):
    manager = disk.make()
    manager.close()
    stray = os.path.join(disk.directory, managerModule._markedName("t", 0, "ab" * 16, "-creating"))
    os.mkdir(stray)
    manager = disk.make()
    assert not os.path.exists(stray)
    assert capturedLog.count("no readable topic metadata") == 1
