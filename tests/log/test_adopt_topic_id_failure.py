"""
A topic's new id (L{ILogManager.adoptTopicId}) whose metadata copies fail
to be written part way (ENOSPC, a failed directory): the topic keeps its
old id in memory, the cluster applier says so and tries again at its next
apply, which rewrites every copy.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
from types import SimpleNamespace

import pytest

from kafkatwist.cluster.applier import LocalApplier
from kafkatwist.log import manager as managerModule
from kafkatwist.log.manager import TOPIC_METADATA

OFFSETS = "__consumer_offsets"


def idsOnDisk(disk, partitions=3) -> list[str]:
    ids = []
    for p in range(partitions):
        with open(os.path.join(disk.directory, f"{OFFSETS}-{p}", TOPIC_METADATA)) as f:
            ids.append(json.load(f)["topicId"])
    return ids


def failSecondWrite(monkeypatch):
    """
    Make the second metadata copy written from now on fail with ENOSPC.
    """
    real = managerModule._writeMetadata
    calls = []

    def write(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(managerModule, "_writeMetadata", write)
    return lambda: monkeypatch.setattr(managerModule, "_writeMetadata", real)


def test_a_failed_write_keeps_the_old_id_and_a_later_call_rewrites_every_copy(disk, monkeypatch):
    manager = disk.make()
    old = manager.createTopic(OFFSETS, 3, {}).topicId
    new = uuid.uuid4()
    heal = failSecondWrite(monkeypatch)
    with pytest.raises(OSError):
        manager.adoptTopicId(OFFSETS, new)
    assert manager.topics()[OFFSETS].topicId == old
    assert manager.topicName(old) == OFFSETS and manager.topicName(new) is None
    heal()
    assert manager.adoptTopicId(OFFSETS, new).topicId == new
    assert idsOnDisk(disk) == [str(new)] * 3
    assert disk.restart(manager).topics()[OFFSETS].topicId == new


def test_the_applier_says_the_local_id_is_kept_and_tries_again(disk, monkeypatch, capturedLog):
    manager = disk.make()
    old = manager.createTopic(OFFSETS, 3, {}).topicId
    new = uuid.uuid4()
    image = SimpleNamespace(topics={OFFSETS: SimpleNamespace(topicId=new)}, deleting=frozenset())
    applier = SimpleNamespace(logManager=manager, _adoptedIds={})
    heal = failSecondWrite(monkeypatch)
    LocalApplier._adoptInternalIds(applier, image)
    [warning] = capturedLog.matching("keeps its local id")
    assert str(old) in warning
    assert manager.topics()[OFFSETS].topicId == old
    assert applier._adoptedIds == {}
    heal()
    LocalApplier._adoptInternalIds(applier, image)
    assert applier._adoptedIds == {OFFSETS: new}
    assert manager.topics()[OFFSETS].topicId == new
    assert idsOnDisk(disk) == [str(new)] * 3
