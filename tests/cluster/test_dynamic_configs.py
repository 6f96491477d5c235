"""
Dynamic broker configs in a cluster, with three real broker processes, a
real ZooKeeper and confluent-kafka's AdminClient: the cluster default set
through one broker reaches every broker (what producers observe, not only
DescribeConfigs), a per-broker change applies on that broker only, both
survive a restart, ZooKeeper holds them in Kafka's layout, the controller
follows a dynamic unclean election default, a damaged znode
is skipped, and a password is never written there.
"""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import createPlaced, partitions
from tests.integration.helpers import rawIncremental

pytest.importorskip("kafka")
from confluent_kafka import KafkaError, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)

TOPIC = "dyn"


def setDefault(cluster, brokerId, **configs):
    """
    The cluster default, sent to C{brokerId} (as C{kafka-configs.sh
    --entity-default} sends it: the Python clients cannot name it).
    """
    assert rawIncremental(cluster.brokers[brokerId], configs) == (0, None)


def setBroker(admin, name, **configs):
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(key.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
        for key, value in configs.items()
    ])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)


def described(cluster, brokerId, key):
    resource = ConfigResource(ResourceType.BROKER, str(brokerId))
    admin = cluster.admin(brokerId)
    entry = admin.describe_configs([resource])[resource].result(timeout=30)[key]
    return entry.value, entry.source


def accepted(cluster, partition, size):
    """
    Whether the leader of C{partition} (on broker C{partition + 1})
    accepts a record of C{size} bytes.
    """
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                         "message.max.bytes": 10_000_000, "retries": 0})
    results = []
    producer.produce(TOPIC, b"x" * size, partition=partition, on_delivery=lambda e, m: results.append(e))
    assert producer.flush(30) == 0
    error = results[0]
    if error is None:
        return True
    assert error.code() == KafkaError.MSG_SIZE_TOO_LARGE, error
    return False


def sizes(cluster, size):
    return [accepted(cluster, p, size) for p in range(3)]


def test_cluster_default_and_per_broker_configs_through_one_broker(cluster):  # noqa: F811
    cluster.startAll()
    admin = cluster.admin(1)
    # Partition p on broker p + 1 only.
    createPlaced(cluster, TOPIC, {0: [1], 1: [2], 2: [3]})
    waitUntil(lambda: sizes(cluster, 5000) == [True] * 3, what="the topic serves everywhere")

    # The cluster default, sent to broker 1 only, reaches brokers 2 and 3.
    setDefault(cluster, 1, message_max_bytes="3000", log_retention_ms="3600000")
    waitUntil(lambda: sizes(cluster, 5000) == [False] * 3, what="the default applied on every broker")
    for i in (1, 2, 3):
        assert described(cluster, i, "message.max.bytes") == (
            "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert described(cluster, i, "log.retention.ms")[0] == "3600000"

    # Broker 3's own value, asked of a client that knows only broker 1 (it
    # routes a broker's resource to that broker, as Kafka's does).
    setBroker(admin, "3", message_max_bytes="1500")
    waitUntil(lambda: sizes(cluster, 2000) == [True, True, False], what="broker 3's value on broker 3 only")
    assert described(cluster, 3, "message.max.bytes") == ("1500", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert described(cluster, 2, "message.max.bytes") == (
        "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # Kafka's layout in ZooKeeper.
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        default = json.loads(zk.get("/config/brokers/<default>")[0])
        assert default == {"version": 1, "config": {"message.max.bytes": "3000",
                                                    "log.retention.ms": "3600000"}}
        assert json.loads(zk.get("/config/brokers/3")[0])["config"] == {"message.max.bytes": "1500"}
        paths = [json.loads(zk.get(f"/config/changes/{c}")[0])["entity_path"]
                 for c in zk.get_children("/config/changes")]
        assert {"brokers/<default>", "brokers/3"} <= set(paths)
    finally:
        zk.stop()
        zk.close()

    # Restarted, brokers 2 and 3 keep both layers.
    for i in (2, 3):
        cluster.brokers[i].stop()
        cluster.startBroker(i)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    waitUntil(lambda: sizes(cluster, 2000) == [True, True, False], what="the values after a restart")
    assert not any(sizes(cluster, 5000))
    assert described(cluster, 2, "message.max.bytes") == (
        "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)

    # Deleting the default brings the static value back everywhere but on
    # broker 3, which keeps its own.
    setDefault(cluster, 2, message_max_bytes=None)
    waitUntil(lambda: sizes(cluster, 5000) == [True, True, False], what="the default deleted")


def test_damaged_znode_is_skipped_and_passwords_refused(cluster):  # noqa: F811
    cluster.startAll()
    createPlaced(cluster, TOPIC, {0: [1], 1: [2], 2: [3]})
    waitUntil(lambda: sizes(cluster, 5000) == [True] * 3, what="the topic serves everywhere")
    setDefault(cluster, 1, message_max_bytes="3000")
    waitUntil(lambda: sizes(cluster, 5000) == [False] * 3, what="the default applied")

    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        zk.create("/config/brokers/2", b"{not json", makepath=True)
        # A damaged default: running brokers keep going, one restarted starts.
        zk.set("/config/brokers/<default>", b"\x00garbage")
        broker = cluster.brokers[3]
        broker.stop()
        cluster.startBroker(3)
        waitUntil(lambda: "Ignoring dynamic broker configs /config/brokers/<default>" in broker.output(),
                  what="the damaged znode logged")
        # It starts without the unreadable layer: the static value.
        waitUntil(lambda: accepted(cluster, 2, 5000), what="broker 3 without the damaged default")
        # Written again whole, it applies everywhere.
        zk.set("/config/brokers/<default>", json.dumps(
            {"version": 1, "config": {"message.max.bytes": "2500"}}).encode())
        zk.set("/config/brokers/2", json.dumps(
            {"version": 1, "config": {"message.max.bytes": "100000"}}).encode())
        waitUntil(lambda: sizes(cluster, 3000) == [False, True, False], what="the repaired znodes applied")
    finally:
        zk.stop()
        zk.close()

    # A password is never written to ZooKeeper in plain text: Kafka's
    # answer without password.encoder.secret.
    resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("listener.name.plaintext.ssl.key.password", "secret",
                    incremental_operation=AlterConfigOpType.SET)])
    admin = cluster.admin(1)
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    assert "Password encoder secret not configured" in str(e.value)


def test_controller_follows_the_dynamic_unclean_election_default(cluster):  # noqa: F811
    """
    The broker-level unclean.leader.election.enable as a dynamic cluster
    default (Kafka's controller reads its own dynamic config): a partition
    left without a live ISR member gets the live replica outside the ISR
    once the default is set, through any broker.
    """
    cluster.startAll()
    createPlaced(cluster, "w", {0: [1, 2]})
    cluster.brokers[2].kill()
    waitUntil(lambda: partitions(cluster.admin(1, 3), "w")[0][2] == (1,), what="ISR {1}")
    cluster.brokers[1].kill()
    three = cluster.admin(3)
    waitUntil(lambda: partitions(three, "w")[0][0] == -1, what="offline")
    cluster.startBroker(2)
    waitUntil(lambda: 2 in three.list_topics(timeout=10).brokers, what="broker 2 back")
    assert partitions(three, "w")[0][0] == -1
    setDefault(cluster, 2, unclean_leader_election_enable="true")
    waitUntil(lambda: partitions(three, "w")[0][0] == 2, what="w led by 2")
