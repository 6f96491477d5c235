"""
Kafka's broker-config catalogue (kafkatwist.config.catalogue): every key
Kafka 3.9 defines is known with Kafka's type, default and update mode; the
keys kafkatwist does not use are stored, described and dynamically updated
as Kafka does (librdkafka's 0081 alters sasl.kerberos.min.time.before.relogin
on a broker).
"""

from __future__ import annotations

import pytest

from kafkatwist.config import DYNAMIC_HERE, KEYS, RESTART_ONLY, BrokerConfig, ConfigError, ConfigSource, ConfigType
from kafkatwist.config.catalogue import BROKER_CONFIGS
from kafkatwist.config.dynamic import DYNAMIC_CONFIG_FILE
from kafkatwist.errors import ErrorCode
from tests.unit.adminhelpers import DELETE, SET, alter, describe, makeBroker

BROKER, NODE = 4, "1"


def test_every_kafka_key_is_known_as_kafka_defines_it():
    assert len(BROKER_CONFIGS) == 314
    for name, (kind, default, mode, _) in BROKER_CONFIGS.items():
        key = KEYS[name]
        assert key.type == ConfigType[kind.upper()], name
        expected = "read-only" if name in RESTART_ONLY else "cluster-wide" if name in DYNAMIC_HERE else mode
        assert key.update == expected, name
        if not key.used:
            assert key.default == default, name
            assert key.sensitive == (kind == "password"), name
    assert KEYS["sasl.kerberos.min.time.before.relogin"].update == "per-broker"
    assert KEYS["background.threads"].update == "cluster-wide"
    assert KEYS["broker.rack"].used and not KEYS["zookeeper.ssl.protocol"].used


def test_unused_keys_checked_as_kafka_checks_them():
    config = BrokerConfig({})
    assert config["sasl.kerberos.min.time.before.relogin"] == "60000"
    assert BrokerConfig({"background.threads": "4"})["background.threads"] == "4"
    for name, raw in [
        ("background.threads", "0"),  # [1,...]
        ("sasl.kerberos.min.time.before.relogin", "soon"),
        ("sasl.kerberos.ticket.renew.jitter", "x"),
        ("zookeeper.ssl.client.enable", "maybe"),
        ("security.inter.broker.protocol", "CARRIER_PIGEON"),
    ]:
        with pytest.raises(ConfigError) as e:
            BrokerConfig({name: raw})
        assert e.value.key == name


def configs(broker, name=NODE):
    [result] = describe(broker, [(BROKER, name, None)], synonyms=True, documentation=True)
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: c for c in result.configs}


def test_unused_keys_updated_dynamically_as_in_kafka(tmp_path):
    broker = makeBroker(str(tmp_path / DYNAMIC_CONFIG_FILE))
    described = configs(broker)["sasl.kerberos.min.time.before.relogin"]
    assert (described.value, described.config_source, described.read_only) == (
        "60000", ConfigSource.DEFAULT_CONFIG, False)
    assert "no effect" in described.documentation
    [result] = alter(broker, [(BROKER, NODE, [("sasl.kerberos.min.time.before.relogin", SET, "58000")])])
    assert (result.error_code, result.error_message) == (ErrorCode.none, None)
    described = configs(broker)["sasl.kerberos.min.time.before.relogin"]
    assert (described.value, described.config_source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert broker.dynamicConfig.perBroker == {"sasl.kerberos.min.time.before.relogin": "58000"}
    # Per-broker keys are refused at the cluster level, as Kafka refuses them.
    [result] = alter(broker, [(BROKER, "", [("sasl.kerberos.min.time.before.relogin", SET, "1")])])
    assert result.error_code != ErrorCode.none
    # A cluster-wide key at the cluster level; a read-only one refused.
    [result] = alter(broker, [(BROKER, "", [("background.threads", SET, "4")])])
    assert result.error_code == ErrorCode.none, result.error_message
    assert configs(broker)["background.threads"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    [result] = alter(broker, [(BROKER, NODE, [("control.plane.listener.name", SET, "X")])])
    assert "Cannot update these configs dynamically: Set(control.plane.listener.name)" in result.error_message
    [result] = alter(broker, [(BROKER, NODE, [("background.threads", SET, "0")])])
    assert result.error_code == ErrorCode.invalid_request  # Kafka's answer to a bad value
    [result] = alter(broker, [(BROKER, NODE, [("sasl.kerberos.min.time.before.relogin", DELETE, None)])])
    assert result.error_code == ErrorCode.none
    assert configs(broker)["sasl.kerberos.min.time.before.relogin"].value == "60000"
