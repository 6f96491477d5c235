"""
The log cleaner's configuration: topic keys, their broker synonyms, and the
broker's own C{log.cleaner.*} settings.
"""

from __future__ import annotations

import pytest

from kafkatwist.config import BrokerConfig, ConfigError
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import MemoryLogManager
from kafkatwist.log.config import ConfigSource

from tests.log.batches import makeBatch


def test_topic_keys_defaults():
    manager = MemoryLogManager()
    manager.createTopic("t", 1, {"cleanup.policy": "compact"})
    entries = manager.describeTopicConfig("t")
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert entries["delete.retention.ms"].value == "86400000"
    assert entries["min.compaction.lag.ms"].value == "0"
    assert entries["max.compaction.lag.ms"].value == str(2**63 - 1)
    config = manager.getLog("t", 0).config
    assert config.compacts and not config.deletes
    assert config.minCleanableDirtyRatio == 0.5


def test_broker_synonyms():
    manager = MemoryLogManager(
        {"log.cleaner.min.cleanable.ratio": "0.1", "log.cleaner.delete.retention.ms": 5}
    )
    manager.createTopic("t", 1, {"cleanup.policy": "compact,delete"})
    entries = manager.describeTopicConfig("t")
    assert entries["min.cleanable.dirty.ratio"].value == "0.1"
    assert entries["min.cleanable.dirty.ratio"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["min.cleanable.dirty.ratio"].brokerKey == "log.cleaner.min.cleanable.ratio"
    config = manager.getLog("t", 0).config
    assert config.deleteRetentionMs == 5 and config.compacts and config.deletes


@pytest.mark.parametrize(
    "configs",
    [
        {"min.cleanable.dirty.ratio": "1.5"},
        {"min.cleanable.dirty.ratio": "x"},
        {"delete.retention.ms": "-1"},
        {"max.compaction.lag.ms": "0"},
        {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    ],
)
def test_invalid_topic_configs(configs):
    manager = MemoryLogManager()
    with pytest.raises(KafkaError) as e:
        manager.createTopic("t", 1, configs)
    assert e.value.code == ErrorCode.invalid_config
    assert "t" not in manager.topics()


def test_alter_checked_across_keys():
    manager = MemoryLogManager()
    manager.createTopic("t", 1, {"max.compaction.lag.ms": "100"})
    with pytest.raises(KafkaError) as e:
        manager.alterTopicConfigs("t", [("min.compaction.lag.ms", "SET", "200")])
    assert e.value.code == ErrorCode.invalid_config
    assert "min.compaction.lag.ms" not in manager.topics()["t"].configs


def test_max_compaction_lag_rolls_active_segment():
    """
    The cleaner never touches the active segment, so a compacted log rolls
    once its first batch is C{max.compaction.lag.ms} old (Kafka's rule).
    """
    manager = MemoryLogManager()
    manager.createTopic("c", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": "1000"})
    manager.createTopic("d", 1, {"max.compaction.lag.ms": "1000"})
    for name in ("c", "d"):
        log = manager.getLog(name, 0)
        log.append(makeBatch(baseTimestamp=10_000, key=b"k"), 10_000)
        log.append(makeBatch(baseTimestamp=11_001, key=b"k"), 11_001)
    assert len(manager.getLog("c", 0).segments) == 2
    assert len(manager.getLog("d", 0).segments) == 1


def test_broker_cleaner_keys():
    warnings = []
    config = BrokerConfig(
        {
            "log.cleaner.threads": "2",
            "log.cleaner.dedupe.buffer.size": "1048576",
            "log.cleaner.io.max.bytes.per.second": "1e6",
            "log.cleaner.min.cleanable.ratio": "0.25",
            "log.cleaner.backoff.ms": "10",
            "offsets.topic.segment.bytes": "65536",
        },
        warn=warnings.append,
    )
    assert warnings == []
    assert config["log.cleaner.threads"] == 2
    assert config["log.cleaner.io.max.bytes.per.second"] == 1e6
    assert config["log.cleaner.min.cleanable.ratio"] == 0.25
    assert config["log.cleaner.enable"] is True
    assert config["log.cleaner.io.buffer.load.factor"] == 0.9
    assert config["offsets.topic.segment.bytes"] == 65536
    with pytest.raises(ConfigError) as e:
        BrokerConfig({"log.cleaner.min.cleanable.ratio": "2"})
    assert e.value.key == "log.cleaner.min.cleanable.ratio"
    with pytest.raises(ConfigError):
        BrokerConfig({"log.cleaner.threads": "-1"})
