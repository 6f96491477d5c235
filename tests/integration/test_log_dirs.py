"""
DescribeLogDirs (35): kafka-python's admin client and raw requests of every
version Kafka 3.9 serves.
"""

from __future__ import annotations

import os

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import DESCRIBE_LOG_DIRS, requestType
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "log-dirs"


@pytest.fixture(scope="module")
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        c.createTopics({TOPIC: 3})
        c.produce(TOPIC, 1, [Record(value=b"x" * 1000) for _ in range(5)])
        yield c


def dataDir(broker):
    return os.path.abspath(broker.overrides["log.dir"])


def describe(client, version, topics):
    cls = requestType(DESCRIBE_LOG_DIRS, version)
    Topic = nested(cls, "DescribableLogDirTopic")
    request = make(
        cls,
        topics=None if topics is None else tuple(
            make(Topic, topic=t, partitions=tuple(ps)) for t, ps in topics
        ),
    )
    return client.send(DESCRIBE_LOG_DIRS, request)


@pytest.mark.parametrize("version", range(5))
def test_every_version(broker, client, version):
    response = describe(client, version, [(TOPIC, [0, 1, 7]), ("no-such-topic", [0])])
    if version >= 3:
        assert response.error_code == ErrorCode.none
    [result] = response.results
    assert (result.error_code, result.log_dir) == (ErrorCode.none, dataDir(broker))
    # Unknown topics and partitions are left out, without an error, as Kafka.
    [topic] = result.topics
    assert topic.name == TOPIC
    sizes = {p.partition_index: p.partition_size for p in topic.partitions}
    assert sorted(sizes) == [0, 1]
    assert sizes[0] == 0 and sizes[1] > 5000
    assert all(p.offset_lag == 0 and p.is_future_key is False for p in topic.partitions)
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0


def test_null_topics_is_every_partition(broker, client):
    [result] = describe(client, 4, None).results
    names = {t.name: sorted(p.partition_index for p in t.partitions) for t in result.topics}
    assert names[TOPIC] == [0, 1, 2]
    # A topic none of whose partitions were asked for is left out.
    [result] = describe(client, 4, [(TOPIC, [])]).results
    assert result.topics == ()


def test_kafka_python_admin(broker, client):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [answer] = admin.describe_log_dirs()
    finally:
        admin.close()
    [logDir] = answer["log_dirs"]
    assert logDir["log_dir"] == dataDir(broker) and logDir["error_code"] == 0
    [topic] = [t for t in logDir["topics"] if t["name"] == TOPIC]
    sizes = {p["partition_index"]: p["partition_size"] for p in topic["partitions"]}
    assert sorted(sizes) == [0, 1, 2] and sizes[1] > 5000
