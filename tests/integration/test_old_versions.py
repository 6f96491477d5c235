"""
Kafka 3.x's old versions through a real broker process, over the wire:
Produce v0-2 in message formats v0/v1 (stored as record batches), Fetch
v0-3 (down-converted), ListOffsets v0, OffsetCommit v0-1 / OffsetFetch v0,
CreateTopics v0-1; and old real clients (afkak, kafka-python pinned to old
broker versions, kcat without ApiVersions) producing and consuming.
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import time

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.legacy_records import compressInner, encodeMessage
from kafkatwist.util import debian
from tests.integration.helpers import sendProduce
from tests.integration.helpers import legacyProduceFrame

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

E = ErrorCode
T0 = 1_700_000_000_000


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


def call(client, apiKey, version, **fields):
    """
    One request of C{version} through the project's client, raw.
    """
    entity = make(requestType(apiKey, version), **fields)
    frame = encodeRequestFrame(apiKey, version, 11, "old-versions", entity)
    _, response = decodeResponseFrame(apiKey, version, client.sendRaw(frame))
    return response


def confluentRead(bootstrap, topic, n, timeout=30.0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.offset(), m.timestamp(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


# -- Produce v0-2 --------------------------------------------------------------


@pytest.mark.parametrize("version,magic", [(0, 0), (1, 0), (2, 1)])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_produce_old_formats(broker, client, version, magic, codec):
    topic = f"produce-v{version}-c{codec}"
    client.createTopics({topic: 1})
    messages = [(b"k%d" % i if i % 2 else None, b"value-%d" % i) for i in range(5)]
    entries = [encodeMessage(0, magic, 0, T0 + i, k, v) for i, (k, v) in enumerate(messages)]
    for round_ in range(2):
        if codec:
            inner = b"".join(
                encodeMessage(i if magic else 0, magic, 0, T0 + i, k, v) for i, (k, v) in enumerate(messages)
            )
            records = encodeMessage(0, magic, codec, T0 + 4, None, compressInner(codec, magic, inner))
        else:
            records = b"".join(entries)
        frame, _ = legacyProduceFrame(topic, records, version=version)
        assert sendProduce(client, frame, version) == (E.none, 5 * round_)
    got = confluentRead(broker.bootstrap, topic, 10)
    assert [(o, k, v) for o, _, k, v in got] == [
        (o, k, v) for o, (k, v) in enumerate(messages * 2)
    ]
    # v0 messages have no time: Kafka stores -1 (confluent: not available).
    expected = [T0 + i if magic else -1 for i in range(5)] * 2
    assert [ts[1] if ts[0] else -1 for _, ts, _, _ in got] == expected


def test_produce_v2_log_append_time(broker, client):
    topic = "produce-v2-append-time"
    client.createTopics({topic: (1, {"message.timestamp.type": "LogAppendTime"})})
    frame, _ = legacyProduceFrame(topic, encodeMessage(0, 1, 0, T0, None, b"v"), version=2)
    response = decodeResponseFrame(0, 2, client.sendRaw(frame))[1]
    [p] = response.responses[0].partition_responses
    assert p.error_code == E.none and p.log_append_time is not None
    # A producer may not claim LogAppendTime.
    frame, _ = legacyProduceFrame(topic, encodeMessage(0, 1, 8, T0, None, b"v"), version=2)
    assert sendProduce(client, frame, 2)[0] == E.invalid_timestamp


# -- ListOffsets v0, OffsetCommit v0-1, OffsetFetch v0 ---------------------------


def test_list_offsets_v0_for_lag_monitors(broker, client):
    topic = "list-v0"
    client.createTopics({topic: 2})
    frame, _ = legacyProduceFrame(topic, b"".join(encodeMessage(0, 0, 0, -1, None, b"x") for _ in range(3)), 0)
    assert sendProduce(client, frame, 0) == (E.none, 0)
    cls = requestType(2, 0)
    Topic, Partition = nested(cls, "ListOffsetsTopic"), nested(cls, "ListOffsetsPartition")
    response = call(
        client, 2, 0, replica_id=-1,
        topics=(
            Topic(name=topic, partitions=(
                Partition(partition_index=0, timestamp=-1, max_num_offsets=1),
                Partition(partition_index=1, timestamp=-2, max_num_offsets=1),
                Partition(partition_index=0, timestamp=-3, max_num_offsets=1),
            )),
            Topic(name="no-such-topic", partitions=(Partition(partition_index=0, timestamp=-1, max_num_offsets=1),)),
        ),
    )
    answers = [(p.error_code, list(p.old_style_offsets)) for t in response.topics for p in t.partitions]
    assert answers == [(E.none, [3]), (E.none, [0]), (E.unsupported_version, []), (E.unknown_topic_or_partition, [])]


def commitV1(client, group, topic, offsets, generation=-1, member=""):
    cls = requestType(8, 1)
    Topic, Partition = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
    response = call(
        client, 8, 1, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        topics=(Topic(name=topic, partitions=tuple(
            Partition(partition_index=p, committed_offset=o, commit_timestamp=-1, committed_metadata="meta")
            for p, o in offsets.items()
        )),),
    )
    return {p.partition_index: p.error_code for t in response.topics for p in t.partitions}


def test_sarama_style_offset_commit_v1(broker, client):
    """
    The issue's silent loss: a client that negotiated recent versions still
    commits with OffsetCommit v1.  The commit is stored, and a modern
    client of the group sees it.
    """
    from kafka import KafkaConsumer, TopicPartition

    topic = "sarama-v1"
    client.createTopics({topic: 2})
    call(client, 18, 3, client_software_name="sarama", client_software_version="1.31.1")
    assert commitV1(client, "sarama-group", topic, {0: 42, 1: 7}) == {0: E.none, 1: E.none}
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id="sarama-group", enable_auto_commit=False)
    try:
        assert consumer.committed(TopicPartition(topic, 0)) == 42
        assert consumer.committed(TopicPartition(topic, 1)) == 7
    finally:
        consumer.close()
    # OffsetFetch v0 and OffsetCommit v0 (ZooKeeper offsets in Kafka): an
    # error in every partition, the connection kept, the group untouched.
    cls = requestType(8, 0)
    Topic, Partition = nested(cls, "OffsetCommitRequestTopic"), nested(cls, "OffsetCommitRequestPartition")
    response = call(client, 8, 0, group_id="sarama-group", topics=(
        Topic(name=topic, partitions=(Partition(partition_index=0, committed_offset=1, committed_metadata=None),)),
    ))
    assert response.topics[0].partitions[0].error_code == E.unsupported_version
    Fetch = nested(requestType(9, 0), "OffsetFetchRequestTopic")
    response = call(client, 9, 0, group_id="sarama-group", topics=(Fetch(name=topic, partition_indexes=(0,)),))
    assert response.topics[0].partitions[0].error_code == E.unsupported_version
    response = call(client, 9, 1, group_id="sarama-group", topics=(Fetch(name=topic, partition_indexes=(0,)),))
    assert response.topics[0].partitions[0].committed_offset == 42


# -- Fetch v0-3 ----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_old_versions_read_what_modern_producers_wrote(broker, client, version):
    from confluent_kafka import Producer

    from kafkatwist.protocol.legacy_records import readMessageSet

    topic = f"fetch-v{version}"
    client.createTopics({topic: 1})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4", "linger.ms": 5})
    for i in range(100):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp=T0 + i, headers=[("h", b"x")])
    producer.flush(20)
    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    offset, got = 0, []
    while offset < 100:
        response = call(
            client, 1, version, replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1,
            max_bytes=1 << 20,
            topics=(Topic(topic=topic, partitions=(Partition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 16),)),),
        )
        [p] = response.responses[0].partitions
        assert (p.error_code, p.high_watermark) == (E.none, 100)
        from kafkatwist.protocol.legacy_records import decompressWrapper

        for m in readMessageSet(p.records, 0 if version <= 1 else 1):
            inner = decompressWrapper(m, 1 << 24) if m.codec else [m]
            base = m.offset - inner[-1].offset if m.codec and m.magic == 1 else 0
            for i in inner:
                if base + i.offset >= offset:
                    got.append((base + i.offset, i.timestamp, i.key, i.value))
        offset = got[-1][0] + 1
    assert got == [(i, T0 + i if version >= 2 else -1, b"k%d" % i, b"v%d" % i) for i in range(100)]


# -- real old clients ------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
def test_afkak(broker, client, codec):
    """
    afkak: Produce v0 (message format v0), Fetch v0, ListOffsets v0,
    GroupCoordinator v0, OffsetCommit/OffsetFetch v1.
    """
    import json
    import sys

    pytest.importorskip("afkak")
    topic = f"afkak-{codec}"
    client.createTopics({topic: 1})
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.afkak_client", broker.bootstrap, topic, codec, "30"],
        capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["received"] == [[i, "key", f"msg-{i}"] for i in range(30)]
    # afkak commits the offset of the last message it processed.
    assert answer["committed"] == 29
    assert answer["latest"][0] == 30


@pytest.mark.parametrize(
    "apiVersion,codec",
    [((0, 8, 2), "gzip"), ((0, 9), "snappy"), ((0, 9), None), ((0, 10), "lz4"), ((0, 10), "gzip")],
)
def test_kafka_python_pinned_to_old_brokers(broker, client, apiVersion, codec):
    """
    kafka-python pinned to 0.8.2 (Produce/Fetch v0, OffsetCommit v1, no
    group membership), 0.9 (Produce/Fetch v1: format v0, classic groups v0)
    and 0.10 (Produce/Fetch v2: format v1 with timestamps).
    """
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "kp-" + "-".join(map(str, apiVersion)) + f"-{codec}"
    client.createTopics({topic: 1})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=apiVersion, compression_type=codec)
    withTime = apiVersion >= (0, 10)
    futures = [
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, timestamp_ms=T0 + i if withTime else None)
        for i in range(50)
    ]
    producer.flush()
    assert [f.get(10).offset for f in futures] == list(range(50))
    producer.close()
    tp = TopicPartition(topic, 0)
    options = dict(
        bootstrap_servers=broker.bootstrap, api_version=apiVersion, group_id=f"g-{topic}",
        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000,
    )
    if apiVersion >= (0, 9):
        consumer = KafkaConsumer(topic, **options)
    else:
        consumer = KafkaConsumer(**options)
        consumer.assign([tp])
    try:
        got = []
        for m in consumer:
            got.append((m.offset, m.timestamp, m.key, m.value))
            if len(got) == 50:
                break
        assert got == [(i, T0 + i if withTime else None, b"k%d" % i, b"v%d" % i) for i in range(50)]
        consumer.commit()
        assert consumer.committed(tp) == 50
        assert consumer.end_offsets([tp]) == {tp: 50}
    finally:
        consumer.close()


def _kcatPath() -> str | None:
    return shutil.which("kcat") or shutil.which("kafkacat")


@pytest.fixture(scope="module")
def kcat() -> str:
    """
    Debian's kcat (librdkafka's command-line client), installed on first use.
    """
    try:
        debian.ensurePackage("kcat", lambda: _kcatPath() is not None)
    except debian.PackageUnavailable as e:
        pytest.skip(str(e))
    path = _kcatPath()
    assert path is not None
    return path


@pytest.mark.parametrize("fallback,codec", [("0.8.0", "snappy"), ("0.8.2", "lz4"), ("0.9.0", "gzip"), ("0.10.0", "lz4")])
def test_kcat_without_api_versions(broker, client, kcat, fallback, codec):
    """
    librdkafka told not to ask ApiVersions uses its table for the broker
    version: Produce/Fetch v0-2, message formats v0/v1, LZ4 with magic 0's
    broken frame checksum (0.8.x), ListOffsets v0.
    """
    topic = f"kcat-{fallback}-{codec}"
    client.createTopics({topic: 1})
    options = ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]
    data = "".join(f"k{i}:v{i}\n" for i in range(100))
    produced = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", codec, *options],
        input=data, capture_output=True, text=True, timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%o %k %s\\n", *options],
        capture_output=True, text=True, timeout=60,
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{i} k{i} v{i}" for i in range(100)]


NODE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "node")


@pytest.fixture(scope="module")
def kafkaNode():
    """
    kafka-node, installed from npm into tests/node on first use.
    """
    try:
        debian.ensurePackage("npm", lambda: bool(shutil.which("node") and shutil.which("npm")))
    except debian.PackageUnavailable as e:
        pytest.skip(str(e))
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "kafka-node")):
        installed = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"],
            cwd=NODE_DIR, capture_output=True, text=True, timeout=300,
        )
        if installed.returncode != 0:
            pytest.skip(f"npm install kafka-node failed: {installed.stderr[-500:]}")
    return os.path.join(NODE_DIR, "kafka_node_client.js")


@pytest.mark.parametrize("attributes", [0, 1])
def test_kafka_node(broker, client, kafkaNode, attributes):
    """
    kafka-node 5 takes the broker's highest versions capped at its own:
    Produce v2 (format v1), Fetch v2, ListOffsets v0, OffsetFetch v1.
    """
    import json

    topic = f"kafka-node-{attributes}"
    client.createTopics({topic: 1})
    result = subprocess.run(
        ["node", kafkaNode, broker.bootstrap, topic, str(attributes), "25"],
        capture_output=True, text=True, timeout=90,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer = json.loads(result.stdout.splitlines()[-1])
    assert answer["baseOffset"] == 0 and answer["latest"] == 25
    assert answer["received"] == [[i, f"k{i}", f"v{i}"] for i in range(25)]
    assert answer["committed"] == 25
