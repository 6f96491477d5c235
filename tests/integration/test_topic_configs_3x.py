"""
Topic configs Kafka 3.x still accepts, through real clients:
C{message.format.version} accepted and ignored (as Kafka 3.x with
inter.broker.protocol.version >= 3.0), C{message.downconversion.enable}
refusing old fetches, the producer timestamp limits, tiered storage keys
refused with Kafka's reason.
"""

from __future__ import annotations

import datetime
import time
import uuid

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def createTopic(broker, name, **configs):
    """
    @return: (error code, message) of confluent-kafka's create_topics.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name]
    try:
        future.result(timeout=15)
        return 0, None
    except KafkaException as e:
        return e.args[0].code(), e.args[0].str()


def describeTopic(broker, name):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource])[resource].result(timeout=15)


def produce(broker, topic, timestamp=None, n=3):
    """
    @return: the delivery errors' names (None for success).
    """
    from confluent_kafka import Producer

    out = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(n):
        kw = {"timestamp": timestamp} if timestamp is not None else {}
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: out.append(err), **kw)
    producer.flush(15)
    return [None if e is None else e.name() for e in out]


def fetch(broker, topic, version):
    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    fields = dict(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=100), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0,
        topics=(Topic(topic=topic, partitions=(Partition(partition=0, fetch_offset=0, partition_max_bytes=1 << 16),)),),
    )
    if version < 4:
        del fields["isolation_level"]
    entity = make(cls, **fields)
    with KafkaWireClient(broker.bootstrap) as client:
        _, response = decodeResponseFrame(1, version, client.sendRaw(encodeRequestFrame(1, version, 5, "t", entity)))
    [p] = response.responses[0].partitions
    return p.error_code, p.records


def test_message_format_version_is_accepted_and_ignored(broker):
    name = unique("mfv")
    assert createTopic(broker, name, **{"message.format.version": "0.10.2"}) == (0, None)
    assert describeTopic(broker, name)["message.format.version"].value == "0.10.2"
    assert produce(broker, name) == [None] * 3
    # Stored as format v2 all the same: a v4+ fetch reads a v2 batch.
    code, records = fetch(broker, name, 4)
    assert code == ErrorCode.none and bytes(records)[16] == 2
    code, message = createTopic(broker, unique("mfv"), **{"message.format.version": "banana"})
    assert code == 40 and "message.format.version" in message


def test_downconversion_disabled(broker):
    name = unique("nodown")
    assert createTopic(broker, name, **{"message.downconversion.enable": "false"}) == (0, None)
    assert produce(broker, name) == [None] * 3
    for version in (0, 2, 3):
        assert fetch(broker, name, version)[0] == ErrorCode.unsupported_version
    assert fetch(broker, name, 4)[0] == ErrorCode.none
    allowed = unique("down")
    assert createTopic(broker, allowed) == (0, None)
    assert produce(broker, allowed) == [None] * 3
    code, records = fetch(broker, allowed, 2)
    assert code == ErrorCode.none and len(bytes(records)) > 0


def test_timestamp_limits(broker):
    name = unique("ts")
    assert createTopic(broker, name, **{"message.timestamp.before.max.ms": "3600000",
                                        "message.timestamp.after.max.ms": "60000"}) == (0, None)
    now = int(time.time() * 1000)
    assert produce(broker, name, now) == [None] * 3
    assert produce(broker, name, now - 2 * 3600_000, n=1) == ["INVALID_TIMESTAMP"]
    assert produce(broker, name, now + 3600_000, n=1) == ["INVALID_TIMESTAMP"]
    # The deprecated key is both limits when they are unset.
    legacy = unique("tsdiff")
    assert createTopic(broker, legacy, **{"message.timestamp.difference.max.ms": "60000"}) == (0, None)
    assert produce(broker, legacy, now - 3600_000, n=1) == ["INVALID_TIMESTAMP"]
    assert produce(broker, legacy, now, n=1) == [None]


def test_other_3x_keys(broker):
    name = unique("keys")
    settings = {
        "preallocate": "true", "file.delete.delay.ms": "1000", "segment.jitter.ms": "100",
        "unclean.leader.election.enable": "false", "compression.gzip.level": "5",
        "local.retention.ms": "-2",
    }
    assert createTopic(broker, name, **settings) == (0, None)
    described = describeTopic(broker, name)
    assert {k: described[k].value for k in settings} == settings
    code, message = createTopic(broker, unique("tiered"), **{"remote.storage.enable": "true"})
    assert code == 40 and "Tiered Storage functionality is disabled in the broker" in message
    code, message = createTopic(broker, unique("gz"), **{"compression.gzip.level": "0"})
    assert code == 40 and "compression.gzip.level" in message
