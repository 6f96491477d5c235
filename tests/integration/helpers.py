"""
What several integration tests share: raw Produce frames, the three clients' produce and
consume, admin calls (quotas, dynamic configs), running twistd.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import subprocess
import textwrap
import time

from kafkatwist.protocol.apis import PRODUCE, requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.testing.broker import ROOT, TWISTD


def logEnd(client, topic, partition=0):
    end = client.listOffsets(topic, [partition])[partition]
    return end[0] if isinstance(end, tuple) else end


def produceFrame(topic, batch, correlationId=7, version=9):
    cls = requestType(PRODUCE, version)
    module = __import__(cls.__module__, fromlist=["*"])
    topicCls = getattr(cls, "TopicProduceData", None) or module.TopicProduceData
    partitionCls = getattr(cls, "PartitionProduceData", None) or module.PartitionProduceData
    request = cls(
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(topicCls(name=topic, partition_data=(partitionCls(index=0, records=batch),)),),
    )
    return encodeRequestFrame(PRODUCE, version, correlationId, "idempotence-test", request), version


def sendProduce(client, frame, version):
    response = client.sendRaw(frame)
    _, body = decodeResponseFrame(PRODUCE, version, response)
    (partition,) = body.responses[0].partition_responses
    return partition.error_code, int(partition.base_offset)


def legacyProduceFrame(topic, records, version):
    cls = requestType(0, version)
    request = make(
        cls,
        transactional_id=None,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            make(
                nested(cls, "TopicProduceData"),
                name=topic,
                partition_data=(make(nested(cls, "PartitionProduceData"), index=0, records=records),),
            ),
        ),
    )
    return encodeRequestFrame(0, version, 7, "old-versions", request), version


def record(i: int, nullHeaders: bool = True) -> tuple[bytes, bytes, list]:
    key = b"key-%07d" % i
    value = hashlib.sha256(key).digest() * 3 + b"%d" % i
    # kafka-python's producer refuses null header values; the others send them.
    headers = [("seq", b"%d" % i), ("codec", None if nullHeaders and i % 7 == 0 else b"h")]
    return key, value, headers


def digest(rows) -> str:
    h = hashlib.sha256()
    for key, value, headers in rows:
        h.update(repr((key, value, [(k, v) for k, v in (headers or [])])).encode())
    return h.hexdigest()


def confluentProduce(bootstrap, topic, n, compression):
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": compression,
            "linger.ms": 20,
            "batch.num.messages": 5000,
            "acks": "all",
        }
    )
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    for i in range(n):
        key, value, headers = record(i)
        while True:
            try:
                producer.produce(topic, key=key, value=value, headers=headers, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    assert not failures, failures[:3]


def confluentConsume(bootstrap, topic, n, partition=0, offset=0, timeout=60):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, offset)])
    rows = []
    offsets = []
    deadline = time.monotonic() + timeout
    while len(rows) < n and time.monotonic() < deadline:
        for message in consumer.consume(10000, 1.0):
            assert message.error() is None, message.error()
            rows.append((message.key(), message.value(), message.headers() or []))
            offsets.append(message.offset())
    consumer.close()
    return rows, offsets


def runTwistd(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run(
        [TWISTD, "-n", "--pidfile=", "kafkatwist", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )


def kpCall(broker, request, responseClass, version):
    from tests.rawclient import RawConnection

    connection = RawConnection(broker.port)
    try:
        request.with_header(correlation_id=1, client_id="kafka-configs")
        connection.send(request.encode(version=version, header=True, framed=True))
        return responseClass.decode(connection.readFrame(), version=version, header=True)
    finally:
        connection.close()


def alterQuotas(broker, changes, version=1, validateOnly=False):
    """
    @param changes: C{[(entity dict, {key: value or None to remove})]}.
    @return: C{[(error code, message)]} per entry.
    """
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse

    Entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        entries=[
            Entry(
                entity=[Entry.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()],
                ops=[
                    Entry.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                    for k, v in ops.items()
                ],
            )
            for entity, ops in changes
        ],
        validate_only=validateOnly,
    )
    response = kpCall(broker, request, AlterClientQuotasResponse, version)
    return [(e.error_code, e.error_message) for e in response.entries]


def describeQuotas(broker, components=(), strict=False, version=1):
    """
    @return: C{{((type, name), ...): {key: value}}}, or the error.
    """
    from kafka.protocol.admin.client_quotas import DescribeClientQuotasRequest, DescribeClientQuotasResponse

    Component = DescribeClientQuotasRequest.ComponentData
    request = DescribeClientQuotasRequest(
        components=[Component(entity_type=t, match_type=m, match=n) for t, m, n in components],
        strict=strict,
    )
    response = kpCall(broker, request, DescribeClientQuotasResponse, version)
    if response.error_code:
        return response.error_code, response.error_message
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
        for entry in response.entries
    }


NODE_ID = "1"


def confluentAdmin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def incremental(admin, name, **settings):
    """
    SET (or DELETE for C{None}) each setting on the BROKER resource C{name}
    (C{admin} is a confluent-kafka AdminClient, or for the cluster default,
    which none of the Python clients can name, the broker: the request Java's
    C{kafka-configs.sh --entity-default} sends).

    @return: (error code, message); (0, None) on success.
    """
    if name == "":
        return rawIncremental(admin, settings)
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [
        ConfigEntry(
            key.replace("_", "."), value,
            incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
        )
        for key, value in settings.items()
    ]
    resource = ConfigResource("broker", name, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([resource])[resource].result(timeout=15)
        return 0, None
    except KafkaException as e:
        return e.args[0].code(), e.args[0].str()


def rawIncremental(broker, settings):
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested
    from tests.rawclient import RawConnection

    Resource = nested(requestType(44, 1), "AlterConfigsResource")
    Config = nested(requestType(44, 1), "AlterableConfig")
    connection = RawConnection(broker.port)
    try:
        [response] = connection.request(
            44, 1,
            resources=(Resource(resource_type=4, resource_name="", configs=tuple(
                Config(name=key.replace("_", "."), config_operation=1 if value is None else 0, value=value)
                for key, value in settings.items())),),
            validate_only=False,
        ).responses
    finally:
        connection.close()
    return int(response.error_code), response.error_message


# Wraps the built-in Metadata handler and reports the request's principal
# as the cluster id, so a real client can show what handlers see.
PRINCIPAL_PLUGIN = textwrap.dedent(
    """
    import dataclasses
    from kafkatwist.plugins.handler import Handler, HandlerPlugin

    class PrincipalAsClusterId(Handler):
        apiKey = 3
        def __init__(self, broker, wrapped):
            super().__init__(broker, wrapped)
            self.minVersion, self.maxVersion = wrapped.minVersion, wrapped.maxVersion
        def handle(self, context, request):
            response = self.wrapped.handle(context, request)
            return dataclasses.replace(response, cluster_id=context.principal)

    principal = HandlerPlugin("test.principal", 3, PrincipalAsClusterId, priority=50)
    """
)


def confluentMetadata(bootstrap, **extra):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **extra})
    return admin.list_topics(timeout=15)


def dataDirectory(tmp_path) -> str:
    """
    A broker's data directory (its cluster id written) holding topic C{t}.
    """
    from kafkatwist.log import LogManager
    from kafkatwist.log.meta import loadOrCreateClusterId

    directory = str(tmp_path / "d")
    loadOrCreateClusterId([directory], 1, None)
    manager = LogManager([directory])
    manager.createTopic("t", 1)
    manager.close()
    return directory
