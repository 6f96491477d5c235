"""
The admin handlers called directly: CreateTopics, DeleteTopics,
CreatePartitions, DeleteRecords, DescribeConfigs, IncrementalAlterConfigs,
AlterConfigs and DescribeCluster over an in-memory log and a small fake
broker.

Every request goes through the wire codec first and every response is
encoded and decoded again, so a value a version cannot carry fails here
rather than in a client.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.log.config import ConfigSource
from kafkatwist.plugins import admin, admin_configs
from kafkatwist.protocol.apis import knownVersions, requestType, responseType
from kafkatwist.protocol.entities import nested
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
from tests.log.batches import makeBatch
from tests.unit.adminhelpers import (
    APPEND,
    DELETE,
    NODE,
    SET,
    SUBTRACT,
    ZERO,
    alter,
    call,
    createTopic,
    describe,
    makeBroker,
    metadata,
    req,
)


@pytest.fixture
def broker():
    return makeBroker()


# -- versions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "handlerClass",
    [
        admin.CreateTopicsHandler,
        admin.DeleteTopicsHandler,
        admin.CreatePartitionsHandler,
        admin.DeleteRecordsHandler,
        admin.DescribeClusterHandler,
        admin_configs.DescribeConfigsHandler,
        admin_configs.IncrementalAlterConfigsHandler,
        admin_configs.AlterConfigsHandler,
    ],
)
def test_versions_have_schemas(handlerClass):
    """
    Every advertised version can be parsed and answered.
    """
    known = knownVersions(handlerClass.apiKey)
    assert handlerClass.minVersion in known and handlerClass.maxVersion in known
    for version in range(handlerClass.minVersion, handlerClass.maxVersion + 1):
        requestType(handlerClass.apiKey, version)
        responseType(handlerClass.apiKey, version)


def test_plugins_discovered():
    """
    The built-in plugin modules register every admin API at priority 0.
    """
    registry = HandlerRegistry(discoverPlugins())
    for key in (19, 20, 21, 32, 33, 37, 44, 60):
        [(plugin, origin)] = registry.chains[key]
        assert (origin, plugin.priority) == ("builtin", 0)


def test_client_version_ranges_overlap():
    """
    librdkafka 2.x, kafka-python 3.x and aiokafka 0.14 each find a common
    version (their ranges from the clients' sources).
    """
    clients = {
        19: [(0, 4), (2, 7), (0, 3)],
        20: [(0, 1), (0, 6), (0, 3)],
        21: [(0, 1), (0, 2), (0, 1)],
        32: [(0, 1), (0, 4), (0, 2)],
        37: [(0, 0), (0, 3), (0, 1)],
        44: [(0, 1), (0, 1)],
        60: [(0, 1), (0, 2)],
    }
    handlers = {h.apiKey: h for h in (
        admin.CreateTopicsHandler, admin.DeleteTopicsHandler, admin.DeleteRecordsHandler,
        admin_configs.DescribeConfigsHandler, admin.CreatePartitionsHandler,
        admin_configs.IncrementalAlterConfigsHandler, admin.DescribeClusterHandler)}
    for key, ranges in clients.items():
        handler = handlers[key]
        for low, high in ranges:
            assert max(low, handler.minVersion) <= min(high, handler.maxVersion), (key, low, high)


# -- CreateTopics --------------------------------------------------------------------


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topic(broker, version):
    result = createTopic(broker, "orders", partitions=3, version=version,
                         configs={"retention.ms": "60000"})
    assert result.error_code == ErrorCode.none
    assert result.name == "orders"
    info = broker.logManager.topics()["orders"]
    assert info.numPartitions == 3
    assert info.configs == {"retention.ms": "60000"}
    if version >= 5:
        assert result.num_partitions == 3
        assert result.replication_factor == 1
        configs = {c.name: c for c in result.configs}
        assert configs["retention.ms"].value == "60000"
        assert configs["retention.ms"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG
        assert not configs["segment.bytes"].read_only
    if version >= 7:
        assert result.topic_id == info.topicId


def test_create_topic_defaults(broker):
    """
    -1 partitions and replication factor mean the broker's defaults.
    """
    broker = makeBroker(**{"num.partitions": 4})
    result = createTopic(broker, "t", partitions=-1, rf=-1)
    assert result.error_code == ErrorCode.none
    assert (result.num_partitions, result.replication_factor) == (4, 1)


def test_create_topic_validate_only(broker):
    result = createTopic(broker, "t", partitions=2, validateOnly=True,
                         configs={"cleanup.policy": "compact"})
    assert result.error_code == ErrorCode.none
    assert result.num_partitions == 2
    configs = {c.name: c for c in result.configs}
    assert configs["cleanup.policy"].value == "compact"
    assert configs["cleanup.policy"].config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert broker.logManager.topics() == {}


@pytest.mark.parametrize(
    "kwargs, code, words",
    [
        (dict(name="bad name!"), ErrorCode.invalid_topic_exception, "illegal"),
        (dict(name=""), ErrorCode.invalid_topic_exception, "empty"),
        (dict(name="x" * 250), ErrorCode.invalid_topic_exception, "249"),
        (dict(name=".."), ErrorCode.invalid_topic_exception, ".."),
        (dict(partitions=0), ErrorCode.invalid_partitions, "non-positive"),
        (dict(partitions=-2), ErrorCode.invalid_partitions, "non-positive"),
        (dict(rf=3), ErrorCode.invalid_replication_factor, "only 1 broker(s)"),
        (dict(rf=0), ErrorCode.invalid_replication_factor, "larger than 0"),
        (dict(configs={"retention.ms": "soon"}), ErrorCode.invalid_config, "retention.ms"),
        (dict(configs={"cleanup.policy": "shred"}), ErrorCode.invalid_config, "cleanup.policy"),
        (dict(configs={"message.timestamp.type": "Now"}), ErrorCode.invalid_config, "Now"),
        (dict(configs={"segment.bytes": "1"}), ErrorCode.invalid_config, "segment.bytes"),
        (dict(configs={"no.such.key": "1"}), ErrorCode.invalid_config,
         "Unknown topic config name: no.such.key"),
        (dict(configs={"retention.ms": None}), ErrorCode.invalid_config, "Null value"),
        (dict(name="__cluster_metadata"), ErrorCode.topic_authorization_failed, "metadata"),
    ],
)
def test_create_topic_errors(broker, kwargs, code, words):
    kwargs.setdefault("name", "t")
    for version in (2, 5, 7):
        result = createTopic(broker, version=version, **kwargs)
        assert result.error_code == code, version
        assert words in result.error_message
        if version >= 5:
            assert result.num_partitions == -1
            assert result.configs is None
        if version >= 7:
            # kio reads the all-zero UUID back as None
            assert result.topic_id in (None, ZERO)
    assert broker.logManager.topics() == {}


def test_create_topic_error_order(broker):
    """
    Kafka checks the name, then existence, then configs, then partitions.
    """
    createTopic(broker, "t")
    result = createTopic(broker, "t", partitions=0, configs={"retention.ms": "x"})
    assert result.error_code == ErrorCode.topic_already_exists
    assert "'t' already exists" in result.error_message
    result = createTopic(broker, "u", partitions=0, configs={"retention.ms": "x"})
    assert result.error_code == ErrorCode.invalid_config


def test_create_topic_collision(broker):
    """
    '.' and '_' collide (Kafka's metric names would clash).
    """
    createTopic(broker, "a.b")
    result = createTopic(broker, "a_b")
    assert result.error_code == ErrorCode.invalid_topic_exception
    assert "collides" in result.error_message


def test_create_topics_duplicate_and_mixed(broker):
    """
    Results are per topic: a good topic is created beside bad ones; a name
    given twice is answered once with INVALID_REQUEST.
    """
    def topic(name, partitions=1):
        return req(19, 5, "CreatableTopic", name=name, num_partitions=partitions,
                   replication_factor=1, assignments=(), configs=())

    response = call(admin.CreateTopicsHandler, broker, 5,
                    topics=(topic("good"), topic("dup"), topic("dup"), topic("zero", 0)))
    results = {r.name: r for r in response.topics}
    assert len(response.topics) == 3
    assert results["good"].error_code == ErrorCode.none
    assert results["dup"].error_code == ErrorCode.invalid_request
    assert results["dup"].error_message == "Duplicate topic name."
    assert results["zero"].error_code == ErrorCode.invalid_partitions
    assert set(broker.logManager.topics()) == {"good"}


def test_create_topic_manual_assignment(broker):
    def assignment(index, brokers):
        return req(19, 7, "CreatableReplicaAssignment", partition_index=index,
                   broker_ids=tuple(brokers))

    result = createTopic(broker, "m", partitions=-1, rf=-1,
                         assignments=[assignment(0, [NODE]), assignment(1, [NODE])])
    assert result.error_code == ErrorCode.none
    assert result.num_partitions == 2
    for assignments, rf, partitions, code in [
        ([assignment(0, [NODE])], 1, -1, ErrorCode.invalid_request),
        ([assignment(0, [NODE])], -1, 1, ErrorCode.invalid_request),
        ([assignment(0, [2])], -1, -1, ErrorCode.invalid_replica_assignment),
        ([assignment(0, [NODE, NODE])], -1, -1, ErrorCode.invalid_replica_assignment),
        ([assignment(0, [])], -1, -1, ErrorCode.invalid_replica_assignment),
        ([assignment(0, [NODE]), assignment(0, [NODE])], -1, -1,
         ErrorCode.invalid_replica_assignment),
        ([assignment(1, [NODE])], -1, -1, ErrorCode.invalid_replica_assignment),
    ]:
        result = createTopic(broker, "n", partitions=partitions, rf=rf, assignments=assignments)
        assert result.error_code == code, (assignments, result.error_message)
    assert "n" not in broker.logManager.topics()


def test_create_topic_deleted_before_described(broker, monkeypatch):
    """
    A topic deleted between its creation and the describe of its configs is
    still reported created; topic_config_error_code says why configs are
    missing.
    """
    from kafkatwist.errors import KafkaError

    def gone(broker, name):
        raise KafkaError(ErrorCode.unknown_topic_or_partition, name)

    monkeypatch.setattr(admin, "describeTopic", gone)
    result = createTopic(broker, "t")
    assert result.error_code == ErrorCode.none
    assert result.topic_config_error_code == ErrorCode.unknown_topic_or_partition
    assert result.configs is None
    assert result.num_partitions == 1


def test_create_topic_static_broker_source():
    """
    A broker-level setting shows as STATIC_BROKER_CONFIG on the new topic,
    an unset one as DEFAULT_CONFIG (the log manager alone cannot tell them
    apart: the daemon passes it every log.* value).
    """
    broker = makeBroker(**{"log.retention.hours": "1"})
    result = createTopic(broker, "t")
    configs = {c.name: c for c in result.configs}
    assert configs["retention.ms"].value == str(3600 * 1000)
    assert configs["retention.ms"].config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert configs["segment.bytes"].config_source == ConfigSource.DEFAULT_CONFIG


# -- DeleteTopics --------------------------------------------------------------------


def deleteByName(broker, names, version=5):
    return call(admin.DeleteTopicsHandler, broker, version, topic_names=tuple(names),
                timeout=__import__("datetime").timedelta(seconds=5)).responses


def deleteById(broker, states, version=6):
    import datetime

    topics = tuple(
        req(20, version, "DeleteTopicState", name=name, topic_id=topicId or ZERO)
        for name, topicId in states
    )
    return call(admin.DeleteTopicsHandler, broker, version, topics=topics,
                timeout=datetime.timedelta(seconds=5)).responses


@pytest.mark.parametrize("version", range(1, 6))
def test_delete_topic_by_name(broker, version):
    createTopic(broker, "t", partitions=2)
    [result] = deleteByName(broker, ["t"], version)
    assert (result.name, result.error_code) == ("t", ErrorCode.none)
    assert broker.logManager.topics() == {}
    assert broker.fetchPurgatory.checked == [("t", 0), ("t", 1)]
    [result] = deleteByName(broker, ["t"], version)
    assert result.error_code == ErrorCode.unknown_topic_or_partition


def test_delete_topic_by_id(broker):
    createTopic(broker, "t")
    topicId = broker.logManager.topics()["t"].topicId
    [result] = deleteById(broker, [(None, topicId)])
    assert (result.name, result.topic_id, result.error_code) == ("t", topicId, ErrorCode.none)
    [result] = deleteById(broker, [(None, topicId)])
    assert result.error_code == ErrorCode.unknown_topic_id
    assert result.name is None


def test_delete_topic_v6_by_name(broker):
    createTopic(broker, "t")
    topicId = broker.logManager.topics()["t"].topicId
    [result] = deleteById(broker, [("t", None)])
    assert (result.name, result.topic_id, result.error_code) == ("t", topicId, ErrorCode.none)


def test_delete_topics_bad_requests(broker):
    createTopic(broker, "a")
    createTopic(broker, "b")
    createTopic(broker, "c")
    idA = broker.logManager.topics()["a"].topicId
    idB = broker.logManager.topics()["b"].topicId
    results = deleteById(
        broker,
        [(None, None), ("a", idA), ("b", None), ("b", None), (None, idA), (None, idA),
         ("c", None), (None, idB)],
    )
    messages = [(r.name, r.error_code, r.error_message) for r in results]
    invalid = ErrorCode.invalid_request
    assert (None, invalid, "Neither topic name nor id were specified.") in messages
    assert ("a", invalid, "You may not specify both topic name and topic id.") in messages
    assert ("b", ErrorCode.invalid_request, "Duplicate topic name.") in messages
    assert (None, ErrorCode.invalid_request, "Duplicate topic id.") in messages
    assert ("c", ErrorCode.none, None) in messages
    # "b" by id while also named (twice): refused, not deleted.
    assert set(broker.logManager.topics()) == {"a", "b"}


def test_internal_topic_refused(broker):
    """
    Kafka's controller would delete or grow __consumer_offsets; here the
    group store depends on it, so both are refused with a clear message.
    """
    broker.logManager.createTopic("__consumer_offsets", 2, {})
    [result] = deleteByName(broker, ["__consumer_offsets"])
    assert result.error_code == ErrorCode.invalid_request
    assert "internal topic" in result.error_message
    result = grow(broker, "__consumer_offsets", 4)
    assert result.error_code == ErrorCode.invalid_request
    assert "internal topic" in result.error_message
    assert broker.logManager.topics()["__consumer_offsets"].numPartitions == 2
    # Absent, it is just unknown.
    [result] = deleteByName(broker, ["__transaction_state"])
    assert result.error_code == ErrorCode.unknown_topic_or_partition


@pytest.mark.parametrize(
    "version, code",
    [
        (1, ErrorCode.invalid_request),
        (2, ErrorCode.invalid_request),
        (3, ErrorCode.topic_deletion_disabled),
        (6, ErrorCode.topic_deletion_disabled),
    ],
)
def test_delete_topic_disabled(version, code):
    broker = makeBroker(**{"delete.topic.enable": "false"})
    createTopic(broker, "t")
    if version < 6:
        [result] = deleteByName(broker, ["t"], version)
    else:
        [result] = deleteById(broker, [("t", None)], version)
    assert result.error_code == code
    assert "t" in broker.logManager.topics()


# -- CreatePartitions ----------------------------------------------------------------


def grow(broker, name, count, version=3, assignments=None, validateOnly=False):
    import datetime

    topic = req(37, version, "CreatePartitionsTopic", name=name, count=count,
                assignments=None if assignments is None else tuple(
                    req(37, version, "CreatePartitionsAssignment", broker_ids=tuple(b))
                    for b in assignments))
    [result] = call(admin.CreatePartitionsHandler, broker, version, topics=(topic,),
                    timeout=datetime.timedelta(seconds=5), validate_only=validateOnly).results
    return result


@pytest.mark.parametrize("version", range(0, 4))
def test_create_partitions(broker, version):
    createTopic(broker, "t", partitions=1)
    result = grow(broker, "t", 3, version)
    assert result.error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].numPartitions == 3
    assert broker.logManager.getLog("t", 2) is not None


def test_create_partitions_errors(broker):
    createTopic(broker, "t", partitions=2)
    result = grow(broker, "t", 2)
    assert (result.error_code, result.error_message) == (
        ErrorCode.invalid_partitions, "Topic already has 2 partition(s).")
    result = grow(broker, "t", 1)
    assert result.error_code == ErrorCode.invalid_partitions
    assert "would not be an increase" in result.error_message
    assert grow(broker, "nope", 3).error_code == ErrorCode.unknown_topic_or_partition
    badAssignment = ErrorCode.invalid_replica_assignment
    assert grow(broker, "t", 4, assignments=[[NODE]]).error_code == badAssignment
    assert grow(broker, "t", 3, assignments=[[7]]).error_code == badAssignment
    assert grow(broker, "t", 3, validateOnly=True).error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].numPartitions == 2
    assert grow(broker, "t", 3, assignments=[[NODE]]).error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].numPartitions == 3


# -- DeleteRecords -------------------------------------------------------------------


def deleteRecords(broker, topic, offsets, version=2):
    import datetime

    request = req(21, version, "DeleteRecordsTopic", name=topic, partitions=tuple(
        req(21, version, "DeleteRecordsPartition", partition_index=p, offset=o)
        for p, o in offsets.items()))
    [result] = call(admin.DeleteRecordsHandler, broker, version, topics=(request,),
                    timeout=datetime.timedelta(seconds=5)).topics
    return {p.partition_index: (p.error_code, p.low_watermark) for p in result.partitions}


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_records(broker, version):
    createTopic(broker, "t", partitions=2)
    log = broker.logManager.getLog("t", 0)
    for _ in range(5):
        log.append(makeBatch(2), 1000)
    assert log.highWatermark == 10
    assert deleteRecords(broker, "t", {0: 4}, version) == {0: (ErrorCode.none, 4)}
    assert log.logStartOffset == 4
    # Below the start: nothing moves.
    assert deleteRecords(broker, "t", {0: 1}, version) == {0: (ErrorCode.none, 4)}
    assert deleteRecords(broker, "t", {0: 11}, version) == {0: (ErrorCode.offset_out_of_range, -1)}
    assert deleteRecords(broker, "t", {0: -1, 1: -1, 5: 0}, version) == {
        0: (ErrorCode.none, 10),
        1: (ErrorCode.none, 0),
        5: (ErrorCode.unknown_topic_or_partition, -1),
    }
    assert log.logStartOffset == 10


def test_delete_records_refused(broker):
    assert deleteRecords(broker, "nope", {0: 0}) == {0: (ErrorCode.unknown_topic_or_partition, -1)}
    broker.logManager.createTopic("__consumer_offsets", 1, {})
    assert deleteRecords(broker, "__consumer_offsets", {0: 0}) == {
        0: (ErrorCode.invalid_topic_exception, -1)}
    createTopic(broker, "compacted", configs={"cleanup.policy": "compact"})
    assert deleteRecords(broker, "compacted", {0: 0}) == {0: (ErrorCode.policy_violation, -1)}
    createTopic(broker, "t")
    assert deleteRecords(broker, "t", {0: -2}) == {0: (ErrorCode.offset_out_of_range, -1)}


# -- DescribeConfigs -----------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 5))
def test_describe_topic_configs(broker, version):
    createTopic(broker, "t", configs={"retention.ms": "5000", "cleanup.policy": "compact,delete"})
    [result] = describe(broker, [(2, "t", None)], version, synonyms=True, documentation=True)
    assert result.error_code == ErrorCode.none
    configs = {c.name: c for c in result.configs}
    assert set(configs) >= {"retention.ms", "segment.bytes", "cleanup.policy",
                            "message.timestamp.type", "max.message.bytes"}
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert retention.synonyms[0].name == "retention.ms"
    assert retention.synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG) in [
        (s.name, s.value, s.source) for s in retention.synonyms]
    assert configs["cleanup.policy"].value == "compact,delete"
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source) == (str(1024**3), ConfigSource.DEFAULT_CONFIG)
    assert [(s.name, s.source) for s in segment.synonyms] == [
        ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG)]
    assert not segment.read_only and not segment.is_sensitive
    if version >= 3:
        assert retention.config_type == 5  # LONG
        assert segment.config_type == 3  # INT
        assert configs["cleanup.policy"].config_type == 7  # LIST
        assert "segment" in segment.documentation.lower()


def test_describe_without_synonyms_and_filtered(broker):
    createTopic(broker, "t")
    [result] = describe(broker, [(2, "t", ("retention.ms", "no.such"))], documentation=False)
    assert [c.name for c in result.configs] == ["retention.ms"]
    assert result.configs[0].synonyms == ()
    assert result.configs[0].documentation is None
    # An empty key list means all keys, as in Kafka.
    [result] = describe(broker, [(2, "t", ())])
    assert len(result.configs) > 5


def test_describe_topic_errors(broker):
    results = describe(broker, [(2, "nope", None), (2, "bad name", None), (8, "1", None),
                                (32, "group", None)])
    assert [r.error_code for r in results] == [
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
    ]
    assert all(r.configs == () for r in results)
    assert [r.resource_name for r in results] == ["nope", "bad name", "1", "group"]


def test_describe_broker_configs():
    broker = makeBroker(**{"log.retention.hours": "24", "ssl.key.password": "hunter2-not-shown",
                           "num.partitions": "3"})
    [result] = describe(broker, [(4, str(NODE), None)], synonyms=True, documentation=True)
    assert result.error_code == ErrorCode.none
    configs = {c.name: c for c in result.configs}
    hours = configs["log.retention.hours"]
    assert (hours.value, hours.config_source) == ("24", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in hours.synonyms] == [
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    assert not hours.read_only and hours.config_type == 3
    assert configs["log.dir"].read_only
    assert configs["num.partitions"].value == "3"
    segment = configs["log.segment.bytes"]
    assert (segment.value, segment.config_source) == ("1073741824", ConfigSource.DEFAULT_CONFIG)
    password = configs["ssl.key.password"]
    assert password.value is None and password.is_sensitive
    assert all(s.value is None for s in password.synonyms)
    assert password.config_type == 9
    assert configs["auto.create.topics.enable"].config_type == 1
    assert configs["auto.create.topics.enable"].documentation
    assert "hunter2-not-shown" not in repr(result)


def test_describe_broker_names(broker):
    results = describe(broker, [(4, "", None), (4, "7", None), (4, "x", None)])
    # Empty name: the cluster-wide dynamic defaults, of which there are none.
    assert (results[0].error_code, results[0].configs) == (ErrorCode.none, ())
    assert results[1].error_code == ErrorCode.invalid_request
    assert "expected 1 or empty string" in results[1].error_message
    assert results[2].error_code == ErrorCode.invalid_request


# -- IncrementalAlterConfigs / AlterConfigs -----------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_incremental_alter(broker, version):
    createTopic(broker, "t")
    [result] = alter(broker, [(2, "t", [("retention.ms", SET, "1000"),
                                        ("cleanup.policy", APPEND, "compact")])], version)
    assert result.error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].configs == {
        "retention.ms": "1000", "cleanup.policy": "delete,compact"}
    assert broker.logManager.getLog("t", 0).config.retentionMs == 1000
    [result] = alter(broker, [(2, "t", [("retention.ms", DELETE, None),
                                        ("cleanup.policy", SUBTRACT, "delete")])], version)
    assert result.error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].configs == {"cleanup.policy": "compact"}
    [result] = alter(broker, [(2, "t", [("retention.ms", SET, "5")])], version, validateOnly=True)
    assert result.error_code == ErrorCode.none
    assert "retention.ms" not in broker.logManager.topics()["t"].configs


def test_incremental_alter_errors(broker):
    createTopic(broker, "t")
    cases = [
        ((2, "t", [("retention.ms", SET, "abc")]), ErrorCode.invalid_config, "retention.ms"),
        ((2, "t", [("no.such", SET, "1")]), ErrorCode.invalid_config, "Unknown topic config name"),
        ((2, "t", [("retention.ms", APPEND, "1")]), ErrorCode.invalid_config,
         "Can't APPEND to key retention.ms because its type is not LIST."),
        ((2, "t", [("retention.ms", SET, None)]), ErrorCode.invalid_request, "Null value"),
        ((2, "t", [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)]),
         ErrorCode.invalid_request, "duplicate config keys"),
        ((2, "t", [("retention.ms", 9, "1")]), ErrorCode.invalid_request, "Unknown operation"),
        ((2, "nope", [("retention.ms", SET, "1")]), ErrorCode.unknown_topic_or_partition, ""),
        ((2, "", [("retention.ms", SET, "1")]), ErrorCode.invalid_request, "Default topic"),
        ((4, "1", [("log.dir", SET, "1")]), ErrorCode.invalid_request,
         "Cannot update these configs dynamically: Set(log.dir)"),
        ((4, "", [("num.partitions", SET, "2")]), ErrorCode.invalid_request,
         "Cannot update these configs dynamically: Set(num.partitions)"),
        ((4, "2", [("num.partitions", SET, "2")]), ErrorCode.invalid_request,
         "Unexpected broker id"),
        ((8, "1", [("root", SET, "DEBUG")]), ErrorCode.invalid_request, "BROKER_LOGGER"),
    ]
    for resource, code, words in cases:
        [result] = alter(broker, [resource])
        assert result.error_code == code, (resource, result.error_message)
        assert words in result.error_message
        assert (result.resource_type, result.resource_name) == resource[:2]
    assert broker.logManager.topics()["t"].configs == {}


def test_incremental_alter_per_resource(broker):
    """
    One bad resource does not stop the others.
    """
    createTopic(broker, "a")
    results = alter(broker, [(2, "a", [("retention.ms", SET, "7")]),
                             (4, "1", [("num.partitions", SET, "2")])])
    assert [r.error_code for r in results] == [ErrorCode.none, ErrorCode.invalid_request]
    assert broker.logManager.topics()["a"].configs == {"retention.ms": "7"}


@pytest.mark.parametrize("version", range(0, 3))
def test_legacy_alter_configs_replaces(broker, version):
    createTopic(broker, "t", configs={"retention.ms": "1000", "segment.bytes": "100000"})
    Resource = nested(requestType(33, version), "AlterConfigsResource")
    Config = nested(requestType(33, version), "AlterableConfig")
    [result] = call(
        admin_configs.AlterConfigsHandler, broker, version,
        resources=(Resource(resource_type=2, resource_name="t",
                            configs=(Config(name="retention.ms", value="2000"),)),),
        validate_only=False,
    ).responses
    assert result.error_code == ErrorCode.none
    assert broker.logManager.topics()["t"].configs == {"retention.ms": "2000"}


# -- DescribeCluster -----------------------------------------------------------------


@pytest.mark.parametrize("version", range(0, 3))
def test_describe_cluster(broker, version):
    values = dict(include_cluster_authorized_operations=True, endpoint_type=1,
                  include_fenced_brokers=False)
    response = call(admin.DescribeClusterHandler, broker, version, **values)
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == "test-cluster"
    assert response.controller_id == NODE
    [b] = response.brokers
    assert (b.broker_id, b.host, b.port) == (NODE, "127.0.0.1", 9092)
    assert response.cluster_authorized_operations > 0


def test_describe_cluster_controllers(broker):
    response = call(admin.DescribeClusterHandler, broker, 1,
                    include_cluster_authorized_operations=False, endpoint_type=2)
    assert response.error_code == ErrorCode.unsupported_endpoint_type
    assert response.brokers == ()


# -- partition bounds (issue 11: CreateTopics(num_partitions=30000)) ----------------


def test_create_topics_partitions_per_request(broker):
    # The failing input: one topic of 30,000 partitions.  Kafka's answer,
    # before anything is created.
    result = createTopic(broker, "big", partitions=30000)
    assert result.error_code == ErrorCode.policy_violation
    assert result.error_message.startswith("Excessively large number of partitions per request.")
    assert broker.logManager.topics() == {}


def test_create_topics_partitions_per_request_sum(broker):
    # Kafka adds up every topic of the request (-1 counts num.partitions)
    # and refuses them all.
    small = makeBroker(**{"max.partitions.per.request": 10, "num.partitions": 4})
    topics = tuple(
        req(19, 7, "CreatableTopic", name=name, num_partitions=n, replication_factor=1,
            assignments=(), configs=())
        for name, n in (("a", 3), ("b", -1), ("c", 4))
    )
    response = call(admin.CreateTopicsHandler, small, 7, topics=topics, validate_only=False)
    assert [t.error_code for t in response.topics] == [ErrorCode.policy_violation] * 3
    assert small.logManager.topics() == {}
    assert createTopic(small, "a", partitions=10).error_code == ErrorCode.none


def test_create_partitions_per_request():
    small = makeBroker(**{"max.partitions.per.request": 10})
    createTopic(small, "t", partitions=2)
    result = grow(small, "t", 13)
    assert result.error_code == ErrorCode.policy_violation
    assert small.logManager.topics()["t"].numPartitions == 2
    assert grow(small, "t", 12).error_code == ErrorCode.none


def test_broker_partition_limit():
    small = makeBroker(**{"max.broker.partitions": 5})
    assert createTopic(small, "a", partitions=3).error_code == ErrorCode.none
    result = createTopic(small, "b", partitions=3)
    assert result.error_code == ErrorCode.policy_violation
    assert "max.broker.partitions=5" in result.error_message
    assert createTopic(small, "b", partitions=3, validateOnly=True).error_code == (
        ErrorCode.policy_violation
    )
    assert grow(small, "a", 6).error_code == ErrorCode.policy_violation
    assert grow(small, "a", 5).error_code == ErrorCode.none
    assert set(small.logManager.topics()) == {"a"}


# -- Metadata, answered from its cache ---------------------------------------------


def test_metadata_answers_follow_topic_changes():
    """
    A standalone broker's Metadata answers are encoded once and kept: each
    creation, growth and deletion of a topic is seen by the next answer.
    """
    from kafkatwist.plugins.metadata import MetadataHandler

    broker = makeBroker()
    handler = MetadataHandler(broker)
    unknown = ErrorCode.unknown_topic_or_partition
    for _ in range(2):
        assert metadata(broker, handler, ["t"]) == {"t": (unknown, 0)}
        assert metadata(broker, handler, None) == {}
    createTopic(broker, "t", partitions=1)
    for _ in range(2):
        assert metadata(broker, handler, ["t"]) == {"t": (ErrorCode.none, 1)}
        assert metadata(broker, handler, None) == {"t": (ErrorCode.none, 1)}
    assert grow(broker, "t", 3).error_code == ErrorCode.none
    assert metadata(broker, handler, ["t"]) == {"t": (ErrorCode.none, 3)}
    assert metadata(broker, handler, None) == {"t": (ErrorCode.none, 3)}
    deleteByName(broker, ["t"])
    assert metadata(broker, handler, ["t"]) == {"t": (unknown, 0)}
    assert metadata(broker, handler, None) == {}
