"""
Fetch from the closest replica (KIP-392) on three real brokers with a real
ZooKeeper, started as Kafka's test harness starts them (broker.rack
RACK<id>, RackAwareReplicaSelector): broker.rack in Metadata and
DescribeConfigs, the preferred read replica in Fetch v11+, a follower
serving a consumer up to its high watermark, and a rack-aware consumer
reading everything.
"""

from __future__ import annotations

import datetime

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import decodeBatches
from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType  # noqa: E402

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
COUNT = 200


@pytest.fixture
def cluster(zookeeper, tmp_path):
    c = ClusterUnderTest(zookeeper, tmp_path, "racks")
    yield c
    c.stop()


def fetch(bootstrap, topic, offset, rack, version=12):
    """
    One consumer Fetch of partition 0 (no session) sent to one broker.

    @return: the partition's answer.
    """
    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    partition = dict(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20,
    )
    fields = dict(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id=rack,
    )
    if version < 12:
        del partition["last_fetched_epoch"]
    if version < 11:
        del fields["rack_id"]
    request = make(
        cls, topics=(Topic(topic=topic, partitions=(Partition(**partition),)),), **fields
    )
    with KafkaWireClient(bootstrap) as client:
        frame = client.sendRaw(encodeRequestFrame(1, version, 7, "racks", request))
    _, response = decodeResponseFrame(1, version, frame)
    return response.responses[0].partitions[0]


def records(partition) -> int:
    return sum(len(b.records) for b in decodeBatches(bytes(partition.records or b"")))


def test_fetch_from_the_closest_replica(cluster):
    for i in (1, 2, 3):
        cluster.broker(i, **{"broker.rack": f"RACK{i}", "replica.selector.class": RACK_AWARE})
    cluster.start()
    admin = cluster.admin()
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")

    # broker.rack: Metadata and DescribeConfigs.
    with KafkaWireClient(cluster.bootstrap(1)) as client:
        brokers = client.metadata([]).brokers
    assert {b.nodeId: b.rack for b in brokers.values()} == {1: "RACK1", 2: "RACK2", 3: "RACK3"}
    for i in (1, 2, 3):
        [entries] = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(i))]).values()
        entries = entries.result(timeout=30)
        assert entries["broker.rack"].value == f"RACK{i}"
        assert entries["replica.selector.class"].value == RACK_AWARE

    topic = "fff"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for n in range(COUNT):
        producer.produce(topic, value=b"msg=%d" % n)
    assert producer.flush(30) == 0

    def isr():
        md = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        return md if len(md.isrs) == 3 else None

    md = waitUntil(isr, what="a full ISR")
    leader = md.leader
    follower = next(r for r in md.replicas if r != leader)

    # The leader points a consumer in another rack at that rack's replica,
    # and reads nothing for it.
    def preferred():
        answer = fetch(cluster.bootstrap(leader), topic, 0, f"RACK{follower}")
        return answer if answer.preferred_read_replica == follower else None

    answer = waitUntil(preferred, what="the follower preferred")
    assert answer.error_code == ErrorCode.none and records(answer) == 0
    # Its own rack, no rack, or a rack without a replica: the leader serves it.
    for rack in (f"RACK{leader}", "", "RACK9"):
        answer = fetch(cluster.bootstrap(leader), topic, 0, rack)
        assert answer.preferred_read_replica == -1 and records(answer) > 0
    # Fetch v10 has no client metadata: no preferred replica.
    answer = fetch(cluster.bootstrap(leader), topic, 0, None, version=10)
    assert records(answer) > 0

    # The follower serves a consumer up to its high watermark.
    def served():
        answer = fetch(cluster.bootstrap(follower), topic, 0, f"RACK{follower}")
        return answer if answer.high_watermark == COUNT else None

    answer = waitUntil(served, what="the follower's high watermark")
    assert answer.error_code == ErrorCode.none and records(answer) == COUNT
    assert answer.preferred_read_replica == -1
    assert fetch(cluster.bootstrap(follower), topic, 0, None, version=10).error_code == (
        ErrorCode.not_leader_or_follower
    )

    # A rack-aware consumer reads everything, in order.
    consumer = Consumer({
        "bootstrap.servers": cluster.bootstrap(), "group.id": "fff", "auto.offset.reset": "earliest",
        "client.rack": f"RACK{follower}", "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    seen = []
    try:
        def consumed():
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
            return len(seen) >= COUNT

        waitUntil(consumed, what="every message")
    finally:
        consumer.close()
    assert seen == [b"msg=%d" % n for n in range(COUNT)]


def test_rack_aware_topic_creation(cluster):
    racks = {1: "a", 2: "a", 3: "b"}
    for i, rack in racks.items():
        cluster.broker(i, **{"broker.rack": rack})
    cluster.start()
    admin = cluster.admin()
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    admin.create_topics([NewTopic("placed", 6, 2)])["placed"].result(timeout=30)
    md = admin.list_topics("placed", timeout=10).topics["placed"]
    for p in md.partitions.values():
        assert sorted(racks[r] for r in p.replicas) == ["a", "b"]
