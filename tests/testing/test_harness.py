"""
L{kafkatwist.testing} as a user meets it: a broker with TLS and SASL from
Python, a cluster's kill / pause / restart / leader, and the pytest plugin
loaded by its entry point in a test file that imports nothing of ours.
"""

from __future__ import annotations

import importlib.metadata
import os

import pytest

from kafkatwist.testing import Broker, Cluster, waitUntil
from kafkatwist.testing.broker import TEST_DEFAULTS

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

pytestmark = [pytest.mark.integration]


def roundTrip(config: dict, topic: str) -> bytes:
    # (A group of one: a broker without TEST_DEFAULTS waits group.initial.rebalance.delay.ms.)
    producer = Producer({**config, "acks": "all"})
    errors = []
    producer.produce(topic, b"hello", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(30) == 0 and errors == [None]
    consumer = Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        message = waitUntil(lambda: consumer.poll(0.5), 60, "the record back")
        return message.value()
    finally:
        consumer.close()


def test_broker_with_tls_and_sasl(tmp_path):
    with Broker(overrides=TEST_DEFAULTS, tls=True, sasl={"alice": "alice-secret"}) as broker:
        assert broker.protocol == "SASL_SSL"
        assert roundTrip(broker.client_config(), "secure") == b"hello"
        assert roundTrip(broker.client_config(mechanism="SCRAM-SHA-512"), "secure2") == b"hello"
        directory = broker.directory
    # Nothing failed: its temporary directory is gone.
    assert not os.path.exists(directory)


def test_broker_restart_keeps_its_port_and_data(tmp_path):
    with Broker(str(tmp_path / "b"), TEST_DEFAULTS) as broker:
        bootstrap = broker.bootstrap_servers
        assert roundTrip({"bootstrap.servers": bootstrap}, "kept") == b"hello"
        broker.restart()
        assert broker.bootstrap_servers == bootstrap
        assert roundTrip({"bootstrap.servers": bootstrap}, "kept") == b"hello"
    # A directory of the caller's is never removed.
    assert os.path.exists(broker.logPath)


def test_broker_that_cannot_start_keeps_its_log(tmp_path, capfd):
    with pytest.raises(RuntimeError) as e:
        with Broker(overrides={"num.network.threads": "not a number"}):
            pass
    assert "num.network.threads" in str(e.value)
    assert "broker logs kept in" in capfd.readouterr().err


@pytest.mark.slow
def test_cluster_kill_pause_restart(zookeeper):
    with Cluster(brokers=3, zookeeper=zookeeper,
                 overrides={"zookeeper.session.timeout.ms": "3000"}) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, 3)])["t"].result(60)
        leader = cluster.waitLeader("t", 0)
        assert cluster.controller() in (1, 2, 3)
        cluster.kill(leader)
        assert cluster.alive() == sorted({1, 2, 3} - {leader})
        successor = cluster.waitLeader("t", 0, other=leader)
        assert successor != leader
        cluster.restart(leader)
        cluster.pause(successor)
        cluster.resume(successor)
        cluster.waitReady()
        assert roundTrip({"bootstrap.servers": cluster.bootstrap_servers}, "t") == b"hello"


@pytest.mark.slow
def test_secured_cluster(zookeeper):
    # Clients on SASL_SSL; the brokers replicate among themselves on PLAINTEXT.
    with Cluster(brokers=2, zookeeper=zookeeper, tls=True, sasl={"alice": "alice-secret"}) as cluster:
        broker = cluster.brokers[1]
        assert broker.protocol == "SASL_SSL" and cluster.brokers[2].pki is broker.pki
        config = {**broker.client_config(), "bootstrap.servers": cluster.bootstrap_servers}
        admin = AdminClient(config)
        admin.create_topics([NewTopic("s", 1, 2)])["s"].result(60)
        assert roundTrip(config, "s") == b"hello"


USER_TEST = '''
import pytest
from confluent_kafka import Consumer, Producer


def roundTrip(bootstrap, topic):
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    for _ in range(120):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            consumer.close()
            return message.value()
    raise AssertionError("nothing consumed")


def test_shared(kafkatwist_broker, kafkatwist_session_broker):
    assert kafkatwist_broker is kafkatwist_session_broker
    assert roundTrip(kafkatwist_broker.bootstrap_servers, "a") == b"hello"


@pytest.mark.kafkatwist(overrides={"num.partitions": "3"})
def test_fresh(kafkatwist_broker, kafkatwist_session_broker):
    assert kafkatwist_broker is not kafkatwist_session_broker
    assert kafkatwist_broker.overrides["num.partitions"] == "3"
    assert roundTrip(kafkatwist_broker.bootstrap_servers, "b") == b"hello"


def test_factory(kafkatwist_broker_factory):
    one, two = kafkatwist_broker_factory(), kafkatwist_broker_factory()
    assert one.bootstrap_servers != two.bootstrap_servers


def test_cluster(kafkatwist_cluster):
    assert len(kafkatwist_cluster.bootstrap_servers.split(",")) == 3
    kafkatwist_cluster.kill(2)


def test_cluster_healed(kafkatwist_cluster):
    assert kafkatwist_cluster.alive() == [1, 2, 3]
    assert roundTrip(kafkatwist_cluster.bootstrap_servers, "c") == b"hello"


def test_fails(kafkatwist_broker):
    assert False, "on purpose"
'''


@pytest.mark.slow
def test_plugin_in_a_users_test_file(pytester):
    pytester.makepyfile(test_user=USER_TEST)
    args = ["-p", "no:cacheprovider", "-q", "-p", "no:randomly"]
    if not any(e.name == "kafkatwist" for e in importlib.metadata.entry_points(group="pytest11")):
        args += ["-p", "kafkatwist.testing.plugin"]  # a .venv installed before the entry point
    result = pytester.runpytest_subprocess(*args, timeout=240)
    result.assert_outcomes(passed=5, failed=1)
    # The failure says where the broker's logs are.
    result.stdout.fnmatch_lines(["*- kafkatwist -*", "logs kept in *kafkatwist-broker*"])
