"""
Kafka property names, parsing and validation.
"""

import pytest

from kafkatwist.config import BrokerConfig, ConfigError, loadConfig, parseProperties


def test_defaults():
    config = BrokerConfig({})
    assert [str(l) for l in config.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.logDirs == ["./data"]
    assert config.nodeId == 1
    assert config["queued.max.requests"] == 500


def test_properties_syntax():
    text = "# c\n! c\na=1\nb : 2\nc 3\nd=x\\\n  y\ne=\\u0041\\tB\n"
    assert parseProperties(text) == {"a": "1", "b": "2", "c": "3", "d": "xy", "e": "A\tB"}


def test_overrides_win_over_file(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("node.id=3\nnum.io.threads=4\n")
    config = loadConfig(str(path), [("node.id", "5")])
    assert config.nodeId == 5
    assert config["num.io.threads"] == 4


def test_listeners_and_advertised():
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://0.0.0.0:9092,SSL://[::1]:9093",
            "ssl.keystore.location": __file__,
        }
    )
    assert [(l.name, l.host, l.port, l.securityProtocol) for l in config.listeners] == [
        ("PLAINTEXT", "0.0.0.0", 9092, "PLAINTEXT"),
        ("SSL", "::1", 9093, "SSL"),
    ]
    # An unspecified address cannot be dialled: advertise loopback.
    assert config.advertisedListeners[0].host == "127.0.0.1"


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"num.io.threads": "x"}, "num.io.threads"),
        ({"num.network.threads": "0"}, "num.network.threads"),
        ({"listeners": "FOO://h:1"}, "listeners"),
        ({"listeners": "PLAINTEXT://h:99999"}, "listeners"),
        ({"advertised.listeners": "SSL://h:1"}, "advertised.listeners"),
        ({"ssl.client.auth": "maybe"}, "ssl.client.auth"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"listeners": "SSL://h:1"}, "ssl.keystore.location"),
        ({"ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location"),
        ({"metrics.http.listener": "nope"}, "metrics.http.listener"),
        ({"metrics.http.listener": "https://127.0.0.1:8443"}, "metrics.http.listener"),  # no keystore
        ({"metrics.http.listener": "ftp://127.0.0.1:8443"}, "metrics.http.listener"),
        ({"request.threads.cpu.affinity": "fast"}, "request.threads.cpu.affinity"),
        ({"request.threads.cpu.affinity": "3-1"}, "request.threads.cpu.affinity"),
        ({"request.threads.cpu.affinity": "100000"}, "request.threads.cpu.affinity"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as e:
        BrokerConfig(raw)
    assert e.value.key == key
    assert str(e.value).startswith(f"Invalid value for {key}:")


def test_unknown_key_warns():
    warnings = []
    BrokerConfig({"no.such.key": "1", "process.roles": "broker"}, warn=warnings.append)
    assert warnings == ["Unknown configuration key 'no.such.key' ignored"]


def test_unknown_key_names_the_key_it_is_close_to():
    warnings = []
    BrokerConfig({"num.io.thread": "2"}, warn=warnings.append)
    assert warnings == ["Unknown configuration key 'num.io.thread' ignored; did you mean 'num.io.threads'?"]


@pytest.mark.parametrize(
    "version", ["0.10.0.0", "0.10.0", "0.10.0-IV1", "0.8.2.2", "0.11.0.3", "2.8.1", "2.8", "1.0.2",
                "3.0-IV1", "3.9", "3.9-IV0", "4.0-IV1"],
)
def test_message_format_version_read_as_kafka_reads_it(version):
    """
    Kafka keeps the first three parts of a 0.x version and two otherwise
    (librdkafka's 0092 alters a topic to 0.10.0.0).
    """
    from kafkatwist.log import MemoryLogManager

    manager = MemoryLogManager()
    manager.createTopic("t", 1)
    manager.alterTopicConfigs("t", [("message.format.version", "SET", version)])
    assert manager.describeTopicConfig("t")["message.format.version"].value == version
    assert BrokerConfig({"log.message.format.version": version})["log.message.format.version"] == version


@pytest.mark.parametrize("version", ["banana", "0.7", "0.12.0", "4.0", "4.1-IV0", "3.0-IV9", "0.10", ""])
def test_message_format_version_refused_as_kafka_refuses_it(version):
    from kafkatwist.errors import ErrorCode, KafkaError
    from kafkatwist.log import MemoryLogManager

    manager = MemoryLogManager()
    manager.createTopic("t", 1)
    with pytest.raises(KafkaError) as e:
        manager.alterTopicConfigs("t", [("message.format.version", "SET", version)])
    assert e.value.code == ErrorCode.invalid_config
