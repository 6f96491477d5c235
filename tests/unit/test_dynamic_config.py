"""
Dynamic broker configs through the admin handlers: Kafka's precedence and
sources, the refusals in Kafka's words, validate_only, topics inheriting a
changed default, and the stored layers read back at start-up.
"""

from __future__ import annotations

import json
import os

import pytest

from kafkatwist.config import BrokerConfig, ConfigSource
from kafkatwist.config.dynamic import DYNAMIC_CONFIG_FILE, DynamicBrokerConfig
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import admin_configs
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.entities import nested
from tests.unit.adminhelpers import (
    APPEND,
    DELETE,
    SET,
    SUBTRACT,
    alter,
    call,
    createTopic,
    describe,
    makeBroker,
)

BROKER, NODE = 4, "1"


def configs(broker, name=NODE, synonyms=True):
    [result] = describe(broker, [(BROKER, name, None)], synonyms=synonyms)
    assert result.error_code == ErrorCode.none, result.error_message
    return {c.name: c for c in result.configs}


def ok(results):
    assert [(r.error_code, r.error_message) for r in results] == [(ErrorCode.none, None)] * len(results)


@pytest.fixture
def broker(tmp_path):
    return makeBroker(str(tmp_path / DYNAMIC_CONFIG_FILE), **{"log.retention.hours": "24"})


def test_precedence_and_sources(broker):
    createTopic(broker, "t")
    ok(alter(broker, [(BROKER, "", [("log.retention.ms", SET, "5000")])]))
    described = configs(broker)["log.retention.ms"]
    assert (described.value, described.config_source) == (
        "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert not described.read_only
    assert broker.logManager.getLog("t", 0).config.retentionMs == 5000

    ok(alter(broker, [(BROKER, NODE, [("log.retention.ms", SET, "7000")])]))
    described = configs(broker)["log.retention.ms"]
    assert (described.value, described.config_source) == ("7000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in described.synonyms] == [
        ("log.retention.ms", "7000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    # The topic inherits at once, and says where from.
    assert broker.logManager.getLog("t", 0).config.retentionMs == 7000
    [topic] = describe(broker, [(2, "t", ["retention.ms"])], synonyms=True)
    [entry] = topic.configs
    assert (entry.value, entry.config_source) == ("7000", ConfigSource.DYNAMIC_BROKER_CONFIG)

    # The cluster default resource lists the dynamic defaults only.
    default = configs(broker, "")
    assert set(default) == {"log.retention.ms"}
    assert default["log.retention.ms"].config_source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert [s.source for s in default["log.retention.ms"].synonyms] == [
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, ConfigSource.STATIC_BROKER_CONFIG,
        ConfigSource.DEFAULT_CONFIG]

    # Deleting the per-broker value falls back to the default, then to static.
    ok(alter(broker, [(BROKER, NODE, [("log.retention.ms", DELETE, None)])]))
    assert broker.logManager.getLog("t", 0).config.retentionMs == 5000
    ok(alter(broker, [(BROKER, "", [("log.retention.ms", DELETE, None)])]))
    assert broker.logManager.getLog("t", 0).config.retentionMs == 24 * 3600 * 1000
    assert configs(broker)["log.retention.ms"].config_source == ConfigSource.DEFAULT_CONFIG


def test_topic_override_still_wins(broker):
    createTopic(broker, "t", configs={"max.message.bytes": "2000"})
    createTopic(broker, "u")
    ok(alter(broker, [(BROKER, "", [("message.max.bytes", SET, "1000")])]))
    assert broker.logManager.getLog("t", 0).config.maxMessageBytes == 2000
    assert broker.logManager.getLog("u", 0).config.maxMessageBytes == 1000


def test_list_operations(broker):
    createTopic(broker, "t")
    ok(alter(broker, [(BROKER, NODE, [("log.cleanup.policy", APPEND, "compact")])]))
    assert broker.logManager.getLog("t", 0).config.cleanupPolicy == ("delete", "compact")
    ok(alter(broker, [(BROKER, NODE, [("log.cleanup.policy", SUBTRACT, "delete")])]))
    assert broker.logManager.getLog("t", 0).config.cleanupPolicy == ("compact",)
    [result] = alter(broker, [(BROKER, NODE, [("log.retention.ms", APPEND, "1")])])
    assert result.error_code == ErrorCode.invalid_config


def test_validate_only_changes_nothing(broker, tmp_path):
    createTopic(broker, "t")
    ok(alter(broker, [(BROKER, NODE, [("log.segment.bytes", SET, "100000")])], validateOnly=True))
    assert broker.logManager.getLog("t", 0).config.segmentBytes == 1073741824
    assert broker.dynamicConfig.perBroker == {}
    assert not os.path.exists(tmp_path / DYNAMIC_CONFIG_FILE)


@pytest.mark.parametrize(
    "name, changes, words",
    [
        (NODE, [("log.dirs", SET, "/x"), ("listeners", SET, "PLAINTEXT://:1")],
         "Cannot update these configs dynamically: Set(listeners, log.dirs)"),
        (NODE, [("socket.request.max.bytes", SET, "2")],
         "Cannot update these configs dynamically: Set(socket.request.max.bytes)"),
        (NODE, [("no.such.key", SET, "2")], "Cannot update these configs dynamically: Set(no.such.key)"),
        (NODE, [("ssl.keystore.location", SET, "/x.pem")],
         "These security configs can be dynamically updated only per-listener using the listener "
         "prefix: Set(ssl.keystore.location)"),
        ("", [("listener.name.plaintext.ssl.keystore.location", SET, "/x.pem")],
         "Cannot update these configs at default cluster level, broker id must be specified: "
         "Set(listener.name.plaintext.ssl.keystore.location)"),
        (NODE, [("log.retention.ms", SET, "soon")], "log.retention.ms"),
        (NODE, [("num.io.threads", SET, "5")], "should not be greater than double the current value 2"),
        (NODE, [("listener.name.other.ssl.keystore.location", SET, "/x.pem")], "there is no listener OTHER"),
    ],
)
def test_refusals(tmp_path, name, changes, words):
    from kafkatwist.server.reconfigure import HandlerThreads

    broker = makeBroker(str(tmp_path / DYNAMIC_CONFIG_FILE))
    pool = type("Pool", (), {"numThreads": 2})()
    broker.dynamicConfig.addReconfigurable(HandlerThreads(type("Server", (), {"handlerPool": pool})()))
    [result] = alter(broker, [(BROKER, name, changes)])
    assert result.error_code == ErrorCode.invalid_request
    assert words in result.error_message
    assert broker.dynamicConfig.perBroker == broker.dynamicConfig.clusterDefault == {}


def test_legacy_alter_configs_replaces_the_layer(broker):
    ok(alter(broker, [(BROKER, NODE, [("log.retention.ms", SET, "1000"),
                                      ("log.segment.bytes", SET, "100000")])]))
    Resource = nested(requestType(33, 1), "AlterConfigsResource")
    Config = nested(requestType(33, 1), "AlterableConfig")
    [result] = call(
        admin_configs.AlterConfigsHandler, broker, 1,
        resources=(Resource(resource_type=BROKER, resource_name=NODE,
                            configs=(Config(name="log.retention.ms", value="2000"),)),),
        validate_only=False,
    ).responses
    assert result.error_code == ErrorCode.none
    assert broker.dynamicConfig.perBroker == {"log.retention.ms": "2000"}


def test_stored_and_applied_at_start(broker, tmp_path):
    path = str(tmp_path / DYNAMIC_CONFIG_FILE)
    ok(alter(broker, [(BROKER, "", [("log.retention.ms", SET, "5000")]),
                      (BROKER, NODE, [("message.max.bytes", SET, "4096")])]))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    restarted = makeBroker(path, **{"log.retention.hours": "24"})
    createTopic(restarted, "t")
    config = restarted.logManager.getLog("t", 0).config
    assert (config.retentionMs, config.maxMessageBytes) == (5000, 4096)
    assert restarted.dynamicConfig.current["message.max.bytes"] == 4096
    assert configs(restarted)["message.max.bytes"].config_source == ConfigSource.DYNAMIC_BROKER_CONFIG


def test_a_damaged_stored_record_is_skipped(tmp_path):
    path = tmp_path / DYNAMIC_CONFIG_FILE
    lines = [
        {"kind": "dynamic-broker-configs", "version": 1},
        {"scope": "broker", "name": "log.dir", "value": "/elsewhere"},
        {"scope": "broker", "name": "log.retention.ms", "value": "not a number"},
        {"scope": "default", "name": "log.segment.bytes", "value": "100000"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n{broken\n")
    dynamic = DynamicBrokerConfig(BrokerConfig({}), str(path))
    dynamic.load()
    assert dynamic.perBroker == {}
    assert dynamic.clusterDefault == {"log.segment.bytes": "100000"}
    assert dynamic.current["log.segment.bytes"] == 100000


def test_connection_limits(tmp_path):
    from types import SimpleNamespace

    from kafkatwist.network.acceptor import ConnectionQuotas
    from kafkatwist.server.reconfigure import ConnectionLimits

    broker = makeBroker(str(tmp_path / DYNAMIC_CONFIG_FILE))
    quotas = ConnectionQuotas(100, 100)
    broker.dynamicConfig.addReconfigurable(ConnectionLimits(SimpleNamespace(quotas=quotas)))
    ok(alter(broker, [(BROKER, "", [("max.connections.per.ip", SET, "1"),
                                    ("max.connections.per.ip.overrides", SET, "127.0.0.2:2,[::1]:3")])]))
    assert (quotas.maxPerIp, quotas.overrides) == (1, {"127.0.0.2": 2, "::1": 3})
    assert quotas.tryAcquire("127.0.0.1") is None
    assert "max.connections.per.ip=1" in quotas.tryAcquire("127.0.0.1")
    assert quotas.tryAcquire("127.0.0.2") is None and quotas.tryAcquire("127.0.0.2") is None
    assert "127.0.0.2:2" in quotas.tryAcquire("127.0.0.2")
    [result] = alter(broker, [(BROKER, "", [("max.connections.per.ip.overrides", SET, "nonsense")])])
    assert result.error_code == ErrorCode.invalid_request and "host:count" in result.error_message

    # KIP-612: broker-wide and per listener, both cluster-wide keys.
    ok(alter(broker, [(BROKER, "", [("max.connection.creation.rate", SET, "50")])]))
    assert (quotas.maxRate, quotas.listenerRates) == (50, {"PLAINTEXT": 50})
    ok(alter(broker, [(BROKER, "", [("listener.name.plaintext.max.connection.creation.rate", SET, "7")])]))
    assert (quotas.maxRate, quotas.listenerRates) == (50, {"PLAINTEXT": 7})
    [result] = alter(broker, [(BROKER, NODE, [("listener.name.plaintext.max.connection.creation.rate", SET, "0")])])
    assert result.error_code == ErrorCode.invalid_request
    assert "Invalid max.connection.creation.rate 0" in result.error_message
    [result] = alter(broker, [(BROKER, NODE, [("listener.name.other.max.connection.creation.rate", SET, "5")])])
    assert "there is no listener OTHER" in result.error_message


class _Recorder:
    """
    A reconfigurable recording what it applied, refusing C{message.max.bytes}
    below C{floor}.
    """

    keys = frozenset(("message.max.bytes", "unclean.leader.election.enable"))

    def __init__(self, floor=0):
        self.floor = floor
        self.applied = []

    def concerns(self, changed):
        return bool(self.keys & changed)

    def validate(self, old, new):
        from kafkatwist.config import ConfigError

        if new["message.max.bytes"] < self.floor:
            raise ConfigError("message.max.bytes", "too small")

    def reconfigure(self, old, new):
        self.applied.append((new["message.max.bytes"], new["unclean.leader.election.enable"]))


def clustered(stored=({}, {})):
    """
    A cluster broker's dynamic config (ZooKeeper is C{writes}); handed-off
    applications wait in C{queue}.
    """
    dynamic = DynamicBrokerConfig(BrokerConfig({"node.id": "1"}), None)
    writes, queue = [], []
    dynamic.remote = lambda perBroker, layer, onDone: (writes.append((perBroker, layer)), onDone(None))
    dynamic.handOff = queue.append
    dynamic.loadLayers(*stored, where="ZooKeeper")
    return dynamic, writes, queue


def test_cluster_layers_start_from_zookeeper_and_follow_it():
    dynamic, writes, queue = clustered(({"message.max.bytes": "3000", "log.dir": "/x"},
                                        {"message.max.bytes": "nonsense"}))
    # The static key and the value that does not parse are skipped.
    assert dynamic.clusterDefault == {"message.max.bytes": "3000"}
    assert dynamic.perBroker == {}
    assert dynamic.current["message.max.bytes"] == 3000
    recorder = _Recorder(floor=1000)
    dynamic.addReconfigurable(recorder)

    # Changes read by the owner are applied off its thread, the latest only.
    dynamic.storedChanged({"message.max.bytes": "4000"}, {})
    dynamic.storedChanged({"message.max.bytes": "5000"}, {"unclean.leader.election.enable": "true"})
    assert recorder.applied == [] and len(queue) == 2
    queue.pop(0)()
    queue.pop(0)()
    assert recorder.applied == [(5000, True)]
    assert (dynamic.clusterDefault, dynamic.perBroker) == (
        {"message.max.bytes": "5000"}, {"unclean.leader.election.enable": "true"})
    assert configs_of(dynamic)["message.max.bytes"] == ("5000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert configs_of(dynamic)["unclean.leader.election.enable"][1] == ConfigSource.DYNAMIC_BROKER_CONFIG

    # The same layers again (this broker's own write, read back): nothing.
    dynamic.storedChanged({"message.max.bytes": "5000"}, {"unclean.leader.election.enable": "true"})
    queue.pop(0)()
    assert len(recorder.applied) == 1

    # A value a reconfigurable refuses is not applied (one log line).
    dynamic.storedChanged({"message.max.bytes": "10"}, {"unclean.leader.election.enable": "true"})
    queue.pop(0)()
    assert dynamic.current["message.max.bytes"] == 5000 and len(recorder.applied) == 1

    # An alter writes ZooKeeper, then applies here at once.
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "6000"})
    assert writes == [(False, {"message.max.bytes": "6000"})]
    assert recorder.applied[-1] == (6000, True)


def configs_of(dynamic):
    return {name: (layer[name], source) for layer, source in reversed(dynamic.layers()) for name in layer}


def test_cluster_passwords_are_never_written_to_zookeeper():
    from kafkatwist.errors import KafkaError

    dynamic, writes, queue = clustered(({}, {"listener.name.plaintext.ssl.key.password": "plain"}))
    # One stored by someone else (Kafka's is encrypted): skipped.
    assert dynamic.perBroker == {}
    with pytest.raises(KafkaError) as e:
        dynamic.alter(True, lambda layer: {**layer, "listener.name.plaintext.ssl.key.password": "secret"})
    assert e.value.code == ErrorCode.invalid_request
    assert e.value.message == (
        "Invalid config value for resource ConfigResource(type=BROKER, name='1'): "
        "Password encoder secret not configured"
    )
    assert writes == []
    # validate_only does not write: Kafka validates it as any other value.
    dynamic.alter(True, lambda layer: {**layer, "listener.name.plaintext.ssl.key.password": "secret"},
                  validateOnly=True)


def test_unclean_election_follows_the_dynamic_config():
    from kafkatwist.cluster.wiring import UncleanElection

    class Cluster:
        unclean = None

        def setUncleanElection(self, enabled):
            self.unclean = enabled

    cluster = Cluster()
    dynamic, writes, queue = clustered()
    dynamic.addReconfigurable(UncleanElection(cluster))
    dynamic.alter(False, lambda layer: {**layer, "unclean.leader.election.enable": "true"})
    assert cluster.unclean is True
    dynamic.storedChanged({}, {})
    queue.pop(0)()
    assert cluster.unclean is False


def test_broker_config_znodes_in_kafkas_layout():
    from kafkatwist.cluster import zkdata as Z

    assert Z.brokerConfigPath(Z.DEFAULT_BROKER_ENTITY) == "/config/brokers/<default>"
    assert Z.brokerConfigPath("3") == "/config/brokers/3"
    assert json.loads(Z.encodeConfigChange("brokers", "<default>")) == {
        "version": 2, "entity_path": "brokers/<default>"}
    data = Z.encodeTopicConfig({"message.max.bytes": "3000"})
    assert json.loads(data) == {"version": 1, "config": {"message.max.bytes": "3000"}}
    assert Z.decodeEntityConfig("x", data) == {"message.max.bytes": "3000"}
    # Another tool's number or boolean reads as Kafka's text; damage is an error.
    assert Z.decodeEntityConfig("x", b'{"config":{"a":true,"b":5}}') == {"a": "true", "b": "5"}
    for damaged in (b'{"config":{"a":null}}', b'{"config":[1]}', b"\x00", b""):
        with pytest.raises(Z.ZkDataError):
            Z.decodeEntityConfig("x", damaged)
