"""
Topic management and topic configs, over both log managers.
"""

from __future__ import annotations

import uuid

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import ILogManager
from kafkatwist.log import ConfigSource, TopicInfo
from kafkatwist.log.config import BrokerLogDefaults, validateTopicConfigs

from .batches import makeBatch


def code(f, *args, **kw) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        f(*args, **kw)
    return e.value.code


def test_provides(harness):
    assert ILogManager.providedBy(harness.make())


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a" * 250, "a b", "topic/x", "é", "a:b", "x*"],
)
def test_invalid_topic_names(harness, name):
    manager = harness.make()
    assert code(manager.createTopic, name, 1, {}) == ErrorCode.invalid_topic_exception


@pytest.mark.parametrize("name", ["a", "a" * 249, "A-b_c.9", "...a", "__consumer_offsets"])
def test_valid_topic_names(harness, name):
    manager = harness.make()
    assert manager.createTopic(name, 1, {}).name == name
    assert manager.getLog(name, 0) is not None


def test_create_topic(harness):
    manager = harness.make({"num.partitions": 3})
    info = manager.createTopic("t", 2, {"retention.ms": 1000})
    assert isinstance(info, TopicInfo) and isinstance(info.topicId, uuid.UUID)
    assert (info.name, info.numPartitions, info.configs) == ("t", 2, {"retention.ms": "1000"})
    assert manager.topics() == {"t": info}
    assert manager.getLog("t", 2) is None and manager.getLog("nope", 0) is None
    assert manager.createTopic("d", -1, {}).numPartitions == 3
    assert code(manager.createTopic, "t", 1, {}) == ErrorCode.topic_already_exists
    assert code(manager.createTopic, "u", 0, {}) == ErrorCode.invalid_partitions
    assert code(manager.createTopic, "u", -5, {}) == ErrorCode.invalid_partitions
    assert code(manager.createTopic, "u", 1, {"retention.ms": "soon"}) == ErrorCode.invalid_config
    assert code(manager.createTopic, "u", 1, {"no.such.key": "1"}) == ErrorCode.invalid_config
    assert "u" not in manager.topics()


def test_colliding_names(harness):
    manager = harness.make()
    manager.createTopic("a.b", 1, {})
    assert code(manager.createTopic, "a_b", 1, {}) == ErrorCode.invalid_topic_exception


def test_validate_only(harness):
    manager = harness.make()
    assert manager.createTopic("t", 2, {}, validateOnly=True).numPartitions == 2
    assert manager.topics() == {}


def test_delete_topic(harness):
    manager = harness.make()
    manager.createTopic("t", 2, {})
    log = manager.getLog("t", 0)
    log.append(makeBatch(1), 0)
    manager.deleteTopic("t")
    assert manager.topics() == {} and manager.getLog("t", 0) is None
    assert code(log.append, makeBatch(1), 0) == ErrorCode.unknown_topic_or_partition
    assert code(manager.deleteTopic, "t") == ErrorCode.unknown_topic_or_partition
    manager.createTopic("t", 1, {})
    assert manager.getLog("t", 0).logEndOffset == 0


def test_topic_name_by_id(harness):
    # What Fetch v13+ looks topics up by: never an old id of a name.
    manager = harness.make()
    first = manager.createTopic("t", 1, {}).topicId
    other = manager.createTopic("o", 1, {}).topicId
    assert (manager.topicName(first), manager.topicName(other)) == ("t", "o")
    assert manager.topicName(uuid.uuid4()) is None and manager.topicName(None) is None
    manager.deleteTopic("t")
    assert manager.topicName(first) is None
    second = manager.createTopic("t", 1, {}).topicId
    assert (manager.topicName(first), manager.topicName(second)) == (None, "t")
    assert manager.topicName(other) == "o"


def test_create_partitions(harness):
    manager = harness.make()
    info = manager.createTopic("t", 2, {"segment.bytes": "1000"})
    assert code(manager.createPartitions, "t", 2) == ErrorCode.invalid_partitions
    assert code(manager.createPartitions, "t", 1) == ErrorCode.invalid_partitions
    assert code(manager.createPartitions, "x", 5) == ErrorCode.unknown_topic_or_partition
    after = manager.createPartitions("t", 5)
    assert (after.numPartitions, after.topicId) == (5, info.topicId)
    assert manager.getLog("t", 4).config.segmentBytes == 1000
    assert manager.topics()["t"].numPartitions == 5


def test_alter_topic_configs(harness):
    manager = harness.make({"log.retention.ms": 777})
    manager.createTopic("t", 2, {"retention.ms": "1000"})
    info = manager.alterTopicConfigs(
        "t",
        [
            ("retention.ms", "DELETE", None),
            ("segment.bytes", "SET", "5000"),
            ("cleanup.policy", "APPEND", "compact"),
        ],
    )
    assert info.configs == {"segment.bytes": "5000", "cleanup.policy": "delete,compact"}
    assert manager.getLog("t", 1).config.segmentBytes == 5000
    assert manager.getLog("t", 1).config.retentionMs == 777
    manager.alterTopicConfigs("t", [("cleanup.policy", 3, "delete")])  # SUBTRACT by wire number
    assert manager.topics()["t"].configs["cleanup.policy"] == "compact"
    assert (
        code(manager.alterTopicConfigs, "t", [("segment.bytes", "SET", "13")])
        == ErrorCode.invalid_config
    )
    assert (
        code(manager.alterTopicConfigs, "t", [("retention.ms", "APPEND", "1")])
        == ErrorCode.invalid_request
    )
    assert code(manager.alterTopicConfigs, "x", []) == ErrorCode.unknown_topic_or_partition
    assert manager.topics()["t"].configs == {"segment.bytes": "5000", "cleanup.policy": "compact"}


def test_alter_survives_restart(harness):
    manager = harness.make()
    manager.createTopic("t", 1, {})
    manager.alterTopicConfigs("t", [("retention.bytes", "SET", "12345")])
    manager = harness.restart(manager)
    assert manager.topics()["t"].configs == {"retention.bytes": "12345"}
    assert manager.getLog("t", 0).config.retentionBytes == 12345


def test_describe_topic_config(harness):
    manager = harness.make({"log.segment.bytes": 100000, "log.retention.hours": 1})
    manager.createTopic("t", 1, {"flush.messages": "1"})
    entries = manager.describeTopicConfig("t")
    assert entries["flush.messages"].value == "1"
    assert entries["flush.messages"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == (
        "100000",
        ConfigSource.STATIC_BROKER_CONFIG,
    )
    assert entries["retention.ms"].value == "3600000"
    assert entries["max.message.bytes"].value == "1048588"
    assert entries["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG
    assert entries["cleanup.policy"].value == "delete"
    assert code(manager.describeTopicConfig, "x") == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize(
    "key, value",
    [
        ("segment.bytes", "13"),
        ("segment.bytes", "2147483648"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("retention.bytes", "x"),
        ("cleanup.policy", "forever"),
        ("cleanup.policy", ""),
        ("message.timestamp.type", "BrokerTime"),
        ("max.message.bytes", "-1"),
        ("flush.messages", "0"),
        ("flush.ms", "-1"),
        ("min.insync.replicas", "0"),
        ("compression.type", "brotli"),
        ("index.interval.bytes", "1.5"),
        ("segment.index.bytes", "3"),
        ("unknown.key", "1"),
        ("retention.ms", True),
    ],
)
def test_invalid_configs(key, value):
    with pytest.raises(KafkaError) as e:
        validateTopicConfigs({key: value})
    assert e.value.code == ErrorCode.invalid_config
    assert e.value.message.startswith(f"{key}: ")


def test_valid_configs():
    assert validateTopicConfigs(
        {
            "segment.bytes": 14,
            "retention.ms": "-1",
            "cleanup.policy": "compact,delete",
            "message.timestamp.type": "LogAppendTime",
            "compression.type": "zstd",
            "flush.messages": "1",
        }
    ) == {
        "segment.bytes": "14",
        "retention.ms": "-1",
        "cleanup.policy": "compact,delete",
        "message.timestamp.type": "LogAppendTime",
        "compression.type": "zstd",
        "flush.messages": "1",
    }


def test_broker_defaults_validated():
    with pytest.raises(KafkaError) as e:
        BrokerLogDefaults({"log.segment.bytes": 5})
    assert e.value.code == ErrorCode.invalid_config
    defaults = BrokerLogDefaults({"log.roll.hours": 2, "unrelated.key": "x"})
    assert defaults.values["segment.ms"] == 7200000
