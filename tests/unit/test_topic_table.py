"""
The log manager's topic table is published whole after each change and
read without the lock a topic operation holds across its disk work: a
Metadata request answered on a Processor's thread never waits behind a
topic creation (of a thousand partitions, say), and every change is seen.
"""

from __future__ import annotations

import threading

from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.log.manager import LogManager
from tests.unit.adminhelpers import createTopic, makeBroker
from tests.unit.adminhelpers import metadata


def _whileLocked(logManager, work):
    """
    C{work()} on another thread while this one holds the log manager's
    lock (as a slow createTopic holds it): its result, or C{None} if it
    waited for the lock.
    """
    done = []
    with logManager._lock:
        worker = threading.Thread(target=lambda: done.append(work()), daemon=True)
        worker.start()
        worker.join(30)
        finished = not worker.is_alive()
    worker.join(30)
    return done[0] if finished else None


def test_metadata_on_the_processor_thread_does_not_wait_for_a_topic_operation():
    from kafkatwist.plugins.metadata import MetadataHandler

    broker = makeBroker()
    handler = MetadataHandler(broker)
    createTopic(broker, "t", partitions=2)
    answer = _whileLocked(broker.logManager, lambda: metadata(broker, handler, ["t"]))
    assert answer == {"t": (ErrorCode.none, 2)}
    # The cached answer too, and a request for every topic.
    assert _whileLocked(broker.logManager, lambda: metadata(broker, handler, ["t"])) == answer
    assert _whileLocked(broker.logManager, lambda: metadata(broker, handler, None)) == answer


def test_topic_id_lookups_do_not_wait_for_a_topic_operation():
    logManager = MemoryLogManager()
    topicId = logManager.createTopic("t", 1, {}).topicId
    assert _whileLocked(logManager, lambda: logManager.topicName(topicId)) == "t"


def test_every_change_of_a_topic_is_published():
    logManager = MemoryLogManager()
    info = logManager.createTopic("t", 1, {"retention.ms": "1000"})
    assert logManager.topics() == {"t": info}
    assert logManager.topicName(info.topicId) == "t"
    logManager.createPartitions("t", 3)
    assert logManager.topics()["t"].numPartitions == 3
    logManager.alterTopicConfigs("t", [("retention.ms", "SET", "2000")])
    assert logManager.topics()["t"].configs == {"retention.ms": "2000"}
    # What validateOnly would make is not published.
    logManager.createTopic("v", 1, {}, validateOnly=True)
    logManager.createPartitions("t", 5, validateOnly=True)
    assert set(logManager.topics()) == {"t"} and logManager.topics()["t"].numPartitions == 3
    # A caller's copy is its own.
    logManager.topics().clear()
    assert set(logManager.topics()) == {"t"}
    logManager.deleteTopic("t")
    assert logManager.topics() == {}
    assert logManager.topicName(info.topicId) is None
    again = logManager.createTopic("t", 2, {})
    assert logManager.topics() == {"t": again}
    assert logManager.topicName(again.topicId) == "t"
    assert logManager.topicName(info.topicId) is None


def test_the_topics_loaded_at_start_are_published(tmp_path):
    logManager = LogManager([str(tmp_path)])
    info = logManager.createTopic("t", 2, {"cleanup.policy": "compact"})
    logManager.close()
    reopened = LogManager([str(tmp_path)])
    try:
        assert reopened.topics() == {"t": info}
        assert reopened.topicName(info.topicId) == "t"
    finally:
        reopened.close()
