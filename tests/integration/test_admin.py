"""
Topic and config admin through the clients' own admin APIs against a real
C{twistd -n kafkatwist}: confluent-kafka's C{AdminClient} (librdkafka) and
kafka-python's C{KafkaAdminClient}, including Kafka's error codes for bad
input.
"""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NODE_ID = "1"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def confluentAdmin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


@pytest.fixture(scope="module")
def pythonAdmin(broker):
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
    yield admin
    admin.close()


def results(futures, timeout=15):
    """
    @return: key -> result, or key -> the librdkafka error name.
    """
    from confluent_kafka import KafkaException

    out = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=timeout)
        except KafkaException as e:
            out[key] = e.args[0].name()
    return out


def errorOf(futures, timeout=15):
    """
    @return: key -> (code, message) of each failed future.
    """
    from confluent_kafka import KafkaException

    out = {}
    for key, future in futures.items():
        try:
            future.result(timeout=timeout)
            out[key] = (0, None)
        except KafkaException as e:
            out[key] = (e.args[0].code(), e.args[0].str())
    return out


def produceConfluent(bootstrap, topic, count, partition=0):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(15) == 0


# -- confluent-kafka -----------------------------------------------------------


def test_confluent_create_describe_delete(broker, confluentAdmin):
    from confluent_kafka.admin import ConfigResource, ConfigSource, NewTopic

    name = unique("orders")
    created = results(
        confluentAdmin.create_topics(
            [
                NewTopic(
                    name,
                    num_partitions=3,
                    replication_factor=1,
                    config={
                        "retention.ms": "3600000",
                        "segment.bytes": "1048576",
                        "cleanup.policy": "compact,delete",
                        "message.timestamp.type": "LogAppendTime",
                        "max.message.bytes": "200000",
                    },
                )
            ]
        )
    )
    assert created == {name: None}
    metadata = confluentAdmin.list_topics(timeout=10)
    assert len(metadata.topics[name].partitions) == 3

    [configs] = results(confluentAdmin.describe_configs([ConfigResource("topic", name)])).values()
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    assert configs["max.message.bytes"].value == "200000"
    assert configs["retention.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert not configs["retention.ms"].is_read_only

    assert results(confluentAdmin.delete_topics([name])) == {name: None}
    assert name not in confluentAdmin.list_topics(timeout=10).topics
    assert results(confluentAdmin.delete_topics([name])) == {name: "UNKNOWN_TOPIC_OR_PART"}


def test_confluent_create_errors(broker, confluentAdmin):
    from confluent_kafka.admin import NewTopic

    existing = unique("exists")
    assert results(confluentAdmin.create_topics([NewTopic(existing, 1, 1)])) == {existing: None}
    bad = {
        existing: NewTopic(existing, 1, 1),
        "bad name!": NewTopic("bad name!", 1, 1),
        "badconfig": NewTopic(unique("badconfig"), 1, 1, config={"retention.ms": "soon"}),
        "unknownconfig": NewTopic(unique("unknownconfig"), 1, 1, config={"no.such": "1"}),
        "zero": NewTopic(unique("zero"), num_partitions=0, replication_factor=1),
        "rf3": NewTopic(unique("rf3"), num_partitions=1, replication_factor=3),
    }
    futures = confluentAdmin.create_topics(list(bad.values()))
    errors = errorOf(futures)
    byLabel = {label: errors[topic.topic] for label, topic in bad.items()}
    # Kafka's codes: 36, 17, 40, 40, 37, 38
    assert byLabel[existing][0] == 36  # TOPIC_ALREADY_EXISTS
    assert byLabel["bad name!"][0] == 17  # INVALID_TOPIC_EXCEPTION
    assert byLabel["badconfig"][0] == 40  # INVALID_CONFIG
    assert "retention.ms" in byLabel["badconfig"][1]
    assert byLabel["unknownconfig"][0] == 40
    assert byLabel["zero"][0] == 37  # INVALID_PARTITIONS
    assert byLabel["rf3"][0] == 38  # INVALID_REPLICATION_FACTOR
    topics = confluentAdmin.list_topics(timeout=10).topics
    assert not any(t.topic in topics for label, t in bad.items() if label != existing)


def test_confluent_validate_only(broker, confluentAdmin):
    from confluent_kafka.admin import NewTopic

    name = unique("dry")
    assert results(
        confluentAdmin.create_topics([NewTopic(name, 2, 1)], validate_only=True)
    ) == {name: None}
    assert name not in confluentAdmin.list_topics(timeout=10).topics


def test_confluent_create_partitions(broker, confluentAdmin):
    from confluent_kafka.admin import NewPartitions, NewTopic

    name = unique("grow")
    results(confluentAdmin.create_topics([NewTopic(name, 1, 1)]))
    assert results(confluentAdmin.create_partitions([NewPartitions(name, 4)])) == {name: None}
    assert len(confluentAdmin.list_topics(name, timeout=10).topics[name].partitions) == 4
    assert errorOf(confluentAdmin.create_partitions([NewPartitions(name, 2)]))[name][0] == 37
    missing = unique("missing")
    assert errorOf(confluentAdmin.create_partitions([NewPartitions(missing, 2)]))[missing][0] == 3


def test_confluent_describe_broker_configs(broker, confluentAdmin):
    from confluent_kafka.admin import ConfigResource, ConfigSource

    # librdkafka always asks for synonyms (DescribeConfigs v1+).
    resource = ConfigResource("broker", NODE_ID)
    [configs] = results(confluentAdmin.describe_configs([resource])).values()
    assert len(configs) > 30
    # The test broker sets these on its command line.
    assert configs["log.dir"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.dir"].is_read_only
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    hours = configs["log.retention.hours"]
    assert hours.value == "168"
    assert [(s.name, s.source) for s in hours.synonyms.values()] == [
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG.value)
    ]


def test_confluent_incremental_alter_configs(broker, confluentAdmin):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )

    name = unique("alter")
    results(confluentAdmin.create_topics([NewTopic(name, 1, 1)]))

    def alter(resourceType, resourceName, *entries):
        resource = ConfigResource(resourceType, resourceName, incremental_configs=list(entries))
        return errorOf(confluentAdmin.incremental_alter_configs([resource]))[resource]

    assert alter(
        "topic", name,
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ) == (0, None)
    [configs] = results(confluentAdmin.describe_configs([ConfigResource("topic", name)])).values()
    assert configs["retention.ms"].value == "1000"
    assert configs["cleanup.policy"].value == "delete,compact"

    assert alter(
        "topic", name,
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT),
    ) == (0, None)
    [configs] = results(confluentAdmin.describe_configs([ConfigResource("topic", name)])).values()
    assert configs["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert configs["cleanup.policy"].value == "compact"

    code, message = alter(
        "topic", name, ConfigEntry("retention.ms", "x", incremental_operation=AlterConfigOpType.SET)
    )
    assert code == 40  # INVALID_CONFIG
    code, message = alter(
        "broker", NODE_ID,
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET),
    )
    assert code == 42  # INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(log.dirs)" in message


def test_confluent_describe_cluster(broker, confluentAdmin):
    cluster = confluentAdmin.describe_cluster(request_timeout=10).result(timeout=15)
    assert cluster.cluster_id == confluentAdmin.list_topics(timeout=10).cluster_id
    assert cluster.controller.id == int(NODE_ID)
    [node] = cluster.nodes
    assert (node.id, node.host, node.port) == (int(NODE_ID), "127.0.0.1", broker.port)


def test_confluent_delete_records(broker, confluentAdmin):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic

    name = unique("records")
    results(confluentAdmin.create_topics([NewTopic(name, 1, 1)]))
    produceConfluent(broker.bootstrap, name, 10)
    deleted = results(confluentAdmin.delete_records([TopicPartition(name, 0, 4)]))
    [(partition, outcome)] = deleted.items()
    assert outcome.low_watermark == 4
    # -1: up to the high watermark
    [outcome] = results(confluentAdmin.delete_records([TopicPartition(name, 0, -1)])).values()
    assert outcome.low_watermark == 10
    [outcome] = results(confluentAdmin.delete_records([TopicPartition(name, 0, 11)])).values()
    assert outcome == "OFFSET_OUT_OF_RANGE"
    # The consumer's view: earliest moved.
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g")})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (10, 10)


def test_delete_topic_disabled(brokerFactory):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = brokerFactory({"delete.topic.enable": "false"}).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    results(admin.create_topics([NewTopic("keep", 1, 1)]))
    assert errorOf(admin.delete_topics(["keep"]))["keep"][0] == 73  # TOPIC_DELETION_DISABLED
    assert "keep" in admin.list_topics(timeout=10).topics


# -- kafka-python --------------------------------------------------------------


def test_kafka_python_topics(broker, pythonAdmin):
    name = unique("kp")
    response = pythonAdmin.create_topics(
        {name: {"num_partitions": 2, "replication_factor": 1, "configs": {"retention.ms": "60000"}}}
    )
    [topic] = response["topics"]
    assert topic["error_code"] == 0
    # kafka-python negotiates CreateTopics v7: the result carries the topic.
    assert topic["num_partitions"] == 2
    assert topic["configs"]["retention.ms"]["value"] == "60000"
    assert name in pythonAdmin.list_topics()

    response = pythonAdmin.create_partitions({name: 5})
    assert [r.error_code for r in response.results] == [0]
    [described] = pythonAdmin.describe_topics([name])
    assert len(described["partitions"]) == 5

    response = pythonAdmin.delete_topics([name])
    assert [t["error_code"] for t in response["topics"]] == [0]
    assert name not in pythonAdmin.list_topics()


def test_kafka_python_errors(broker, pythonAdmin):
    existing = unique("kpx")
    pythonAdmin.create_topics([existing])
    cases = {
        existing: ({"num_partitions": 1, "replication_factor": 1}, 36),
        "bad/name": ({"num_partitions": 1, "replication_factor": 1}, 17),
        unique("kpcfg"): ({"num_partitions": 1, "replication_factor": 1,
                          "configs": {"cleanup.policy": "shred"}}, 40),
        unique("kpzero"): ({"num_partitions": 0, "replication_factor": 1}, 37),
        unique("kprf"): ({"num_partitions": 1, "replication_factor": 3}, 38),
    }
    response = pythonAdmin.create_topics(
        {name: spec for name, (spec, code) in cases.items()}, raise_errors=False
    )
    codes = {t["name"]: t["error_code"] for t in response["topics"]}
    assert codes == {name: code for name, (spec, code) in cases.items()}
    messages = {t["name"]: t["error_message"] for t in response["topics"]}
    assert "already exists" in messages[existing]

    response = pythonAdmin.delete_topics([unique("nope")], raise_errors=False)
    assert [t["error_code"] for t in response["topics"]] == [3]
    response = pythonAdmin.create_partitions({existing: 1}, raise_errors=False)
    assert [r.error_code for r in response.results] == [37]


def test_kafka_python_configs(broker, pythonAdmin):
    from kafka.admin import ConfigResource, ConfigResourceType

    name = unique("kpconf")
    pythonAdmin.create_topics({name: {"num_partitions": 1, "replication_factor": 1,
                                      "configs": {"segment.bytes": "1048576"}}})
    described = pythonAdmin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name)], config_filter="all"
    )
    configs = described["topic"][name]
    assert configs["segment.bytes"]["value"] == "1048576"
    assert configs["segment.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["retention.ms"]["config_source"] == "DEFAULT_CONFIG"
    # Only the override counts as "modified".
    modified = pythonAdmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    assert set(modified["topic"][name]) == {"segment.bytes"}

    described = pythonAdmin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, NODE_ID)], config_filter="all"
    )
    assert described["broker"][NODE_ID]["log.dir"]["config_source"] == "STATIC_BROKER_CONFIG"

    # alter_configs goes through IncrementalAlterConfigs on this broker.
    pythonAdmin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "1234"})]
    )
    modified = pythonAdmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    assert modified["topic"][name]["retention.ms"]["value"] == "1234"


def test_kafka_python_delete_records(broker, pythonAdmin):
    from kafka.structs import TopicPartition

    name = unique("kprec")
    pythonAdmin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}})
    produceConfluent(broker.bootstrap, name, 6)
    result = pythonAdmin.delete_records({TopicPartition(name, 0): 3})
    assert result[TopicPartition(name, 0)]["low_watermark"] == 3


# -- aiokafka ------------------------------------------------------------------


def test_aiokafka_admin(broker):
    """
    aiokafka 0.14 negotiates older versions (CreateTopics v3, DescribeConfigs
    v2) and alters configs with the legacy AlterConfigs, which replaces a
    topic's overrides.
    """
    import asyncio

    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    name = unique("aio")

    async def main():
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics(
                [NewTopic(name, 2, 1, topic_configs={"retention.ms": "5000",
                                                      "segment.bytes": "1048576"})]
            )
            again = await admin.create_topics([NewTopic(name, 1, 1)])
            altered = await admin.alter_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name, configs={"retention.ms": "7000"})]
            )
            [described] = await admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, name)]
            )
            deleted = await admin.delete_topics([name])
            return created, again, altered, described, deleted
        finally:
            await admin.close()

    created, again, altered, described, deleted = asyncio.run(main())
    assert [e[1] for e in created.topic_errors] == [0]
    assert [e[1] for e in again.topic_errors] == [36]
    assert [r[0] for r in altered[0].resources] == [0]
    [resource] = described.resources
    entries = {e[0]: e for e in resource[4]}
    assert entries["retention.ms"][1] == "7000"
    # AlterConfigs replaced the overrides: segment.bytes is back to default.
    assert entries["segment.bytes"][1] == str(1024**3)
    assert [e[1] for e in deleted.topic_error_codes] == [0]
