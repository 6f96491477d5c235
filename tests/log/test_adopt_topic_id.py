"""
A topic takes another id with its data kept (L{ILogManager.adoptTopicId}):
how a broker's internal topic, created with an id of its own, takes the id
the cluster's controller gave it.  The metadata copies are rewritten in a
newer epoch, so a crash between two copies leaves the new id to win.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.manager import TOPIC_METADATA, _checksum

from .batches import makeBatch


def test_the_id_changes_and_the_data_stays(harness):
    manager = harness.make()
    old = manager.createTopic("__consumer_offsets", 3, {"retention.ms": "1000000"}).topicId
    for p in range(3):
        manager.getLog("__consumer_offsets", p).append(makeBatch(p + 1), 0)
    new = uuid.uuid4()
    info = manager.adoptTopicId("__consumer_offsets", new)
    assert (info.topicId, info.numPartitions, info.configs) == (new, 3, {"retention.ms": "1000000"})
    assert manager.topics()["__consumer_offsets"].topicId == new
    assert manager.topicName(new) == "__consumer_offsets" and manager.topicName(old) is None
    assert [manager.getLog("__consumer_offsets", p).logEndOffset for p in range(3)] == [1, 2, 3]
    # the same id again: nothing to do
    assert manager.adoptTopicId("__consumer_offsets", new).topicId == new


def test_an_id_another_topic_has_or_an_unknown_topic_is_refused(harness):
    manager = harness.make()
    other = manager.createTopic("t", 1, {}).topicId
    mine = manager.createTopic("__consumer_offsets", 1, {}).topicId
    with pytest.raises(KafkaError) as e:
        manager.adoptTopicId("__consumer_offsets", other)
    assert e.value.code == ErrorCode.inconsistent_topic_id
    assert manager.topics()["__consumer_offsets"].topicId == mine
    with pytest.raises(KafkaError) as e:
        manager.adoptTopicId("nope", uuid.uuid4())
    assert e.value.code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize("clean", (True, False))
def test_the_new_id_survives_a_restart(disk, clean):
    manager = disk.make()
    manager.createTopic("__consumer_offsets", 2, {})
    manager.getLog("__consumer_offsets", 1).append(makeBatch(4), 0)
    manager.getLog("__consumer_offsets", 1).flush()
    new = uuid.uuid4()
    manager.adoptTopicId("__consumer_offsets", new)
    manager = disk.restart(manager, clean=clean)
    assert manager.topics()["__consumer_offsets"].topicId == new
    assert manager.getLog("__consumer_offsets", 1).logEndOffset == 4


def test_a_crash_between_two_copies_leaves_the_new_id(disk):
    manager = disk.make()
    old = manager.createTopic("__consumer_offsets", 3, {}).topicId
    manager.getLog("__consumer_offsets", 0).append(makeBatch(2), 0)
    manager.getLog("__consumer_offsets", 0).flush()
    new = uuid.uuid4()
    manager.adoptTopicId("__consumer_offsets", new)
    manager.abandon()
    # as if the broker died after the first copy was rewritten
    for p in (1, 2):
        path = os.path.join(disk.directory, f"__consumer_offsets-{p}", TOPIC_METADATA)
        with open(path) as f:
            meta = json.load(f)
        del meta["crc"]
        meta["topicId"], meta["epoch"] = str(old), meta["epoch"] - 1
        meta["crc"] = _checksum(meta)
        with open(path, "w") as f:
            json.dump(meta, f, sort_keys=True)
    manager = disk.make(disk.defaults, **disk.kw)
    assert manager.topics()["__consumer_offsets"].topicId == new
    assert manager.getLog("__consumer_offsets", 0).logEndOffset == 2
    for p in range(3):
        with open(os.path.join(disk.directory, f"__consumer_offsets-{p}", TOPIC_METADATA)) as f:
            assert json.load(f)["topicId"] == str(new)
