"""
The example drop-ins of C{plugins_examples/} in a real broker, started with
C{plugin.paths} pointing at that directory, driven by real clients:
confluent-kafka and kafka-python for Produce and Fetch, the project's wire
client for the new DescribeLogSizes API.

One broker serves the whole module; every test uses its own topics.
"""

import json
import re
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import PRODUCE
from kafkatwist.protocol.entities import ms, nested
from kafkatwist.protocol.records import Record, buildBatch
from kafkatwist.testing import Broker
from tests.unit.helpers import EXAMPLES, loadExample

pytestmark = pytest.mark.integration

log_sizes = loadExample("log_sizes")

ORDER_SCHEMA = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {"id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
}
GOOD = json.dumps({"id": "o-1", "amount": 10}).encode()
BAD = json.dumps({"id": "o-2", "amount": -3}).encode()


@pytest.fixture(scope="module")
def examplesBroker(tmp_path_factory):
    schemas = tmp_path_factory.mktemp("schemas")
    for topic in ("orders", "payments"):
        (schemas / f"{topic}.json").write_text(json.dumps(ORDER_SCHEMA))
    broker = Broker(str(tmp_path_factory.mktemp("examples")), {"plugin.paths": EXAMPLES})
    # The schema directory reaches the broker through its environment.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KAFKATWIST_SCHEMA_DIR", str(schemas))
        broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def client(examplesBroker):
    with KafkaWireClient(examplesBroker.bootstrap, clientId="examples-wire") as c:
        yield c


def waitForLog(broker, pattern, timeout=5.0):
    """
    @return: the broker log lines matching C{pattern}, once there is one.
    """
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in broker.output().splitlines() if re.search(pattern, l)]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def test_startup_log_names_each_provider_chain(examplesBroker):
    text = examplesBroker.output()
    assert re.search(
        r"ApiKey\s+0 produce\s+v0-12\s+example\.audit\.produce \[plugin\.paths, priority 200\]"
        r" -> example\.schema_validation \[plugin\.paths, priority 100\]"
        r" -> builtin\.produce \[builtin, priority 0\]",
        text,
    )
    assert re.search(
        r"ApiKey\s+1 fetch\s+v\d+-\d+\s+example\.audit\.fetch \[plugin\.paths, priority 200\]"
        r" -> builtin\.fetch_quota \[builtin, priority 1\] -> builtin\.fetch \[builtin, priority 0\]",
        text,
    )
    assert re.search(
        r"ApiKey 10000 describe_log_sizes\s+v0-0\s+"
        r"example\.log_sizes \[plugin\.paths, priority 100\]$",
        text,
        re.MULTILINE,
    )
    assert "Schema validation for Produce reads schemas from" in text


def test_schema_rejection_with_confluent_kafka(examplesBroker, client):
    """
    A value failing the schema is refused with INVALID_RECORD, not retried;
    the same value to a topic without a schema, and a valid value, are
    appended; the log holds only what was accepted.
    """
    import confluent_kafka

    client.createTopics({"orders": 2, "free": 1}, ignoreExisting=True)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": examplesBroker.bootstrap, "client.id": "schema-test"}
    )
    reports = []

    def report(err, msg):
        reports.append((msg.topic(), msg.value(), err))

    for topic, value in (("orders", GOOD), ("orders", BAD), ("free", BAD)):
        producer.produce(topic, value, partition=0, on_delivery=report)
        producer.flush(10)  # one record per request, so one bad one fails alone
    assert [(t, v, e and e.code()) for t, v, e in reports] == [
        ("orders", GOOD, None),
        ("orders", BAD, confluent_kafka.KafkaError.INVALID_RECORD),
        ("free", BAD, None),
    ]
    assert not reports[1][2].retriable()

    fetched = client.fetch("orders", 0, 0)
    assert [r.value for r in fetched.records] == [GOOD]
    assert [r.value for r in client.fetch("free", 0, 0).records] == [BAD]


def test_idempotent_producer_carries_on_after_a_rejection(examplesBroker, client):
    """
    A refused batch is never appended, so it leaves a gap in an idempotent
    producer's sequence numbers; librdkafka copes, and later records still
    go through.
    """
    import confluent_kafka

    client.createTopics({"payments": 1}, ignoreExisting=True)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": examplesBroker.bootstrap, "enable.idempotence": True}
    )
    errors = []
    for value in (GOOD, BAD, GOOD):
        producer.produce(
            "payments",
            value,
            partition=0,
            on_delivery=lambda err, msg: errors.append(err and err.code()),
        )
        producer.flush(10)
    assert errors == [None, confluent_kafka.KafkaError.INVALID_RECORD, None]
    assert [r.value for r in client.fetch("payments", 0, 0).records] == [GOOD, GOOD]


def test_schema_rejection_message_with_kafka_python(examplesBroker, client):
    """
    kafka-python reports the broker's per-record message.
    """
    import kafka
    from kafka.errors import InvalidRecordError

    client.createTopics({"orders": 2}, ignoreExisting=True)
    producer = kafka.KafkaProducer(
        bootstrap_servers=examplesBroker.bootstrap, client_id="schema-test-kp", retries=0
    )
    try:
        with pytest.raises(
            InvalidRecordError, match=r"record 0: \$\.amount: -3 is less than the minimum of 0"
        ):
            producer.send("orders", BAD, partition=1).get(10)
        assert producer.send("orders", GOOD, partition=1).get(10).offset >= 0
    finally:
        producer.close()


def test_record_errors_name_the_bad_records(client):
    """
    One Produce request with a partly bad batch for C{orders} and a batch
    for C{free}: C{orders} is refused as a whole with the bad records'
    indexes and messages, C{free} is appended.
    """
    client.createTopics({"orders": 2, "free": 1}, ignoreExisting=True)
    before = log_sizes.describeLogSizes(client, ["orders", "free"])
    bad = buildBatch([Record(value=GOOD), Record(value=BAD), Record(value=b"{oops")])
    ok = buildBatch([Record(value=BAD)])

    def build(version, cls):
        Topic = nested(cls, "TopicProduceData")
        Partition = nested(cls, "PartitionProduceData")
        return cls(
            transactional_id=None,
            acks=1,
            timeout=ms(5000),
            topic_data=(
                Topic(name="orders", partition_data=(Partition(index=0, records=bad),)),
                Topic(name="free", partition_data=(Partition(index=0, records=ok),)),
            ),
        )

    version, response = client.call(PRODUCE, build)
    assert version >= 8
    answers = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
    orders, free = answers[("orders", 0)], answers[("free", 0)]
    assert orders.error_code == ErrorCode.invalid_record
    assert orders.error_message.startswith("2 of 3 records fail the schema of topic orders")
    assert [
        (e.batch_index, e.batch_index_error_message.split(":")[0]) for e in orders.record_errors
    ] == [
        (1, "record 1"),
        (2, "record 2"),
    ]
    assert free.error_code == ErrorCode.none

    after = log_sizes.describeLogSizes(client, ["orders", "free"])
    assert after["orders"][0] == before["orders"][0]
    assert after["free"][0].logEndOffset == before["free"][0].logEndOffset + 1


def test_audit_events(examplesBroker, client):
    """
    Produce and Fetch from three clients appear in the broker log with who
    and what; a long poll (answered through a Deferred) is logged when it
    ends; consumers get the records unchanged.
    """
    import confluent_kafka
    import kafka

    topic = f"audited-{uuid.uuid4().hex[:8]}"
    client.createTopics({topic: 2})
    payload = buildBatch([Record(value=b"one"), Record(value=b"two")])
    client.produce(topic, 1, payload)

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": examplesBroker.bootstrap, "client.id": "audit-producer"}
    )
    for i in range(3):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=examplesBroker.bootstrap,
        client_id="audit-consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        got = [next(consumer).value for _ in range(3)]
    finally:
        consumer.close()
    assert got == [b"v0", b"v1", b"v2"]

    # Nothing to read at the end of partition 1: the fetch waits 300 ms in
    # the purgatory and is answered from the timer, through a Deferred.
    started = time.monotonic()
    assert client.fetchRaw(topic, 1, 2, maxWaitMs=300).records == b""
    assert time.monotonic() - started >= 0.25

    wire = waitForLog(
        examplesBroker, rf"audit: produce .*client_id=examples-wire .*topics={topic}\[1\]"
    )
    assert len(wire) == 1
    assert re.search(
        rf"audit: produce by User:ANONYMOUS client_id=examples-wire from 127\.0\.0\.1:\d+ "
        rf"via PLAINTEXT topics={topic}\[1\] bytes={topic}:{len(payload)} errors=- answered$",
        wire[0],
    ), wire[0]
    assert waitForLog(
        examplesBroker,
        rf"audit: produce by User:ANONYMOUS client_id=audit-producer .*"
        rf"topics={topic}\[0\] bytes={topic}:\d+ errors=- answered",
    )
    assert waitForLog(
        examplesBroker,
        rf"audit: fetch by User:ANONYMOUS client_id=audit-consumer from 127\.0\.0\.1:\d+ "
        rf"via PLAINTEXT topics={topic}\[0\] offsets={topic}-0@0 answered",
    )
    assert waitForLog(
        examplesBroker,
        rf"audit: fetch .*client_id=examples-wire .*topics={topic}\[1\] "
        rf"offsets={topic}-1@2 answered",
    )


def test_audit_records_schema_refusals(examplesBroker, client):
    client.createTopics({"orders": 2}, ignoreExisting=True)
    with pytest.raises(KafkaError) as e:
        client.produce("orders", 1, [Record(value=b"[]")])
    assert e.value.code == ErrorCode.invalid_record
    assert "is not of type" in e.value.message
    assert waitForLog(
        examplesBroker,
        r"audit: produce .*client_id=examples-wire .*topics=orders\[1\] "
        r".*errors=orders-1:INVALID_RECORD answered",
    )


def test_describe_log_sizes(client):
    topic = f"sizes-{uuid.uuid4().hex[:8]}"
    client.createTopics({topic: 2})
    first = buildBatch([Record(value=b"a" * 100), Record(value=b"b")])
    second = buildBatch([Record(value=b"c")])
    client.produce(topic, 0, first)
    client.produce(topic, 0, second)

    assert client.brokerApiVersions()[log_sizes.DESCRIBE_LOG_SIZES] == (0, 0)
    sizes = log_sizes.describeLogSizes(client, [topic])
    assert sizes == {
        topic: {
            0: log_sizes.LogSize(len(first) + len(second), 0, 3),
            1: log_sizes.LogSize(0, 0, 0),
        }
    }
    assert log_sizes.describeLogSizes(client, [(topic, [1])]) == {
        topic: {1: log_sizes.LogSize(0, 0, 0)}
    }
    assert log_sizes.describeLogSizes(client)[topic] == sizes[topic]
    with pytest.raises(KafkaError) as e:
        log_sizes.describeLogSizes(client, ["no-such-topic"])
    assert e.value.code == ErrorCode.unknown_topic_or_partition


def test_describe_log_sizes_needs_the_plugin(broker):
    """
    A broker without the drop-in does not advertise ApiKey 10000, and the
    client says so before sending anything.
    """
    with KafkaWireClient(broker.bootstrap) as plain:
        assert log_sizes.DESCRIBE_LOG_SIZES not in plain.brokerApiVersions()
        with pytest.raises(KafkaError) as e:
            log_sizes.describeLogSizes(plain)
    assert e.value.code == ErrorCode.unsupported_version
