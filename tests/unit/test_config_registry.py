"""
One source of truth for configuration keys (issue 12: key metadata lived
in five places -- config.Key, log/config.py with its own parsers,
service.brokerLogDefaults, admin_configs' tables, wiring._setting).  The
registry is kafkatwist.config.KEYS and TOPIC_KEYS; these tests hold the
places that derive from it to it.
"""

import pytest

from kafkatwist.config import KEYS, TOPIC_KEYS, BrokerConfig, ConfigType
from kafkatwist.coordinator.wiring import _setting
from kafkatwist.log.config import TOPIC_CONFIGS, BrokerLogDefaults
from kafkatwist.service import brokerLogDefaults


def test_topic_keys_name_broker_keys():
    for topicKey in TOPIC_KEYS.values():
        for synonym, factor in topicKey.synonyms:
            assert synonym in KEYS, synonym
            assert factor >= 1
        assert topicKey.doc
    assert set(TOPIC_CONFIGS) == set(TOPIC_KEYS)
    for name, definition in TOPIC_CONFIGS.items():
        assert definition.default == TOPIC_KEYS[name].default
        if not TOPIC_KEYS[name].synonyms:
            # A topic key without a broker counterpart (Kafka's replication
            # throttle lists) has its own validator.
            assert TOPIC_KEYS[name].ownParse is not None and definition.brokerKey is None
            continue
        assert definition.brokerKey == TOPIC_KEYS[name].synonyms[0][0]
        assert definition.configType == KEYS[definition.brokerKey].type


@pytest.mark.parametrize(
    "name, configType",
    [
        ("log.retention.ms", ConfigType.LONG),
        ("log.retention.minutes", ConfigType.INT),
        ("log.retention.hours", ConfigType.INT),
        ("log.cleanup.policy", ConfigType.LIST),
        ("auto.create.topics.enable", ConfigType.BOOLEAN),
        ("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE),
        ("ssl.key.password", ConfigType.PASSWORD),
        ("listeners", ConfigType.STRING),
        ("queued.max.request.bytes", ConfigType.LONG),
    ],
)
def test_kafka_types_follow_from_validators(name, configType):
    assert KEYS[name].type == configType


def test_synonym_precedence():
    # Kafka's order: ms, then minutes, then hours (the old table applied
    # the coarse keys in the wrong order, so hours beat minutes).
    defaults = BrokerLogDefaults({"log.retention.hours": 1, "log.retention.minutes": 5})
    assert defaults.values["retention.ms"] == 5 * 60_000
    config = BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "5"})
    assert config.retentionMs() == 5 * 60_000


def test_log_manager_sees_what_the_broker_config_says():
    config = BrokerConfig({
        "log.retention.hours": "2", "log.roll.ms": "1000", "log.cleanup.policy": "compact,delete",
        "message.max.bytes": "2000", "min.insync.replicas": "1", "compression.type": "zstd",
        "log.flush.interval.ms": "10",
    })
    defaults = BrokerLogDefaults(brokerLogDefaults(config))
    for name in TOPIC_KEYS:
        assert defaults.values[name] == config.topicDefault(name), name
    assert defaults.values["cleanup.policy"] == ("compact", "delete")
    assert BrokerLogDefaults().values == {name: k.default for name, k in TOPIC_KEYS.items()}


def test_coordinator_defaults_from_the_registry():
    assert _setting(None, "offsets.topic.num.partitions") == 50
    assert _setting(BrokerConfig({"group.min.session.timeout.ms": "10"}),
                    "group.min.session.timeout.ms") == 10
