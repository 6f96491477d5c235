"""
The Kafka broker metrics an operator's dashboards and alerts read, scraped
from a real single broker: the request handler pool's idle ratio
(RequestHandlerAvgIdlePercent), the ReplicaManager's partition gauges and
the controller's (a broker without ZooKeeper is a cluster of one, its own
controller).  The cluster's own meanings are in
tests/cluster/test_metrics_cluster.py.
"""

import re

import pytest

from kafkatwist.testing import waitUntil
from tests.integration.helpers import confluentProduce
from tests.integration.test_metrics import assertStrictlyParsable, scrape, value

pytestmark = pytest.mark.integration


def plain(text, name):
    """
    The value of an unlabelled sample.
    """
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[1])
    raise AssertionError(f"{name} not in scrape")


def test_handler_idle_and_partition_gauges(brokerFactory):
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0", "num.io.threads": "2"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("gauged", num_partitions=3, replication_factor=1)])["gauged"].result(30)
    confluentProduce(b.bootstrap, "gauged", 100, "none")
    text = scrape(port)
    assertStrictlyParsable(text)

    # The handler pool: a share of time, and a counter of idle seconds
    # (summed over its threads) that grows while the handlers wait.
    ratio = plain(text, "kafka_server_request_handler_avg_idle_ratio")
    assert 0 < ratio <= 1
    assert plain(text, "kafka_server_request_handler_threads") == 2
    seconds = plain(text, "kafka_server_request_handler_idle_seconds_total")
    assert seconds > 0
    waitUntil(lambda: plain(scrape(port), "kafka_server_request_handler_idle_seconds_total") > seconds,
              what="the idle handlers' seconds growing")

    # One broker leads every partition (gauged's three and the internal
    # topics' the broker made), alone in its ISR: none is under-replicated,
    # and each is at its effective min ISR (min.insync.replicas 1,
    # replication factor 1), as Kafka counts a single broker's.
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["gauged"].partitions) == 3
    partitions = sum(len(t.partitions) for t in topics.values())
    assert plain(text, "kafka_server_replicamanager_partitioncount") == partitions
    assert plain(text, "kafka_server_replicamanager_leadercount") == partitions
    assert plain(text, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert plain(text, "kafka_server_replicamanager_underminisrpartitioncount") == 0
    assert plain(text, "kafka_server_replicamanager_atminisrpartitioncount") == partitions
    for counter in ("isrshrinks", "isrexpands", "failedisrupdates"):
        assert plain(text, f"kafka_server_replicamanager_{counter}_total") == 0

    assert plain(text, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert plain(text, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert plain(text, "kafka_controller_kafkacontroller_globaltopiccount") == len(topics)
    assert plain(text, "kafka_controller_kafkacontroller_globalpartitioncount") == partitions
    assert plain(text, "kafka_controller_kafkacontroller_preferredreplicaimbalancecount") == 0
    assert value(text, "kafka_server_messages_in_total", topic="gauged") == 100


def undocumented(text) -> list[str]:
    """
    The families of a scrape without their row in docs/operations.md's
    table (by name, or a C{prefix_*} row).
    """
    import fnmatch
    import os

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "docs", "operations.md")) as f:
        rows = [line.split("|")[1] for line in f if line.startswith("| `")]
    documented = re.findall(r"`([a-z_*]+)`", "".join(rows))
    families = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert len(families) > 40
    return [name for name in families if not any(fnmatch.fnmatch(name, d) for d in documented)]


def test_every_family_is_documented(brokerFactory):
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    assert not undocumented(scrape(port))


def test_failed_produce_requests_per_topic(brokerFactory):
    """
    Kafka's FailedProduceRequestsPerSec: an append refused for breaking the
    topic's rules (a timestamp out of message.timestamp.difference.max.ms)
    counts, by librdkafka (the one-partition fast path) and by kafka-python
    (the general path); a record too large for max.message.bytes is one of
    the known answers and does not; nor does an append that succeeds.
    """
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    configs = {"message.timestamp.difference.max.ms": "60000", "max.message.bytes": "2000"}
    admin.create_topics([NewTopic("strict", 1, 1, config=configs)])["strict"].result(30)

    def send(value, timestamp=0):
        producer = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0, "retries": 0})
        delivered = []
        producer.produce("strict", value, timestamp=timestamp,
                         on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(30)
        return delivered[0]

    assert send(b"ok") is None
    for _ in range(2):
        err = send(b"old", timestamp=1000)
        assert err is not None and err.name() == "INVALID_TIMESTAMP", err
    assert send(b"x" * 5000).name() == "MSG_SIZE_TOO_LARGE"

    from kafka import KafkaProducer

    # (Produce v7: the general path, decode and handle)
    plain = KafkaProducer(bootstrap_servers=b.bootstrap, retries=0, api_version=(2, 1))
    try:
        with pytest.raises(Exception, match="InvalidTimestamp"):
            plain.send("strict", b"old", timestamp_ms=1000).get(30)
    finally:
        plain.close()

    text = scrape(port)
    assert value(text, "kafka_server_failed_produce_requests_total", topic="strict") == 3
    assert value(text, "kafka_network_request_errors_total", request="produce", error="INVALID_TIMESTAMP") == 3
