"""
ListOffsets v0 (Kafka's C{legacyFetchOffsetsBefore}): segment base offsets
newest first, the log end offset first for "latest", what old lag monitors
read.
"""

from __future__ import annotations

import struct

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.list_offsets import ListOffsetsHandler, legacyOffsets
from kafkatwist.protocol.apis import responseType
from kafkatwist.protocol.codec import decodeRequest, encodeBody
from kafkatwist.protocol.records import Record, buildBatch

from tests.unit.adminhelpers import call, makeBroker, req

E = ErrorCode
NOW = 1_700_000_000_000


def listV0(broker, timestamp, maxNum=10, topic="t", partition=0, replicaId=-1):
    response = call(
        ListOffsetsHandler, broker, 0, replica_id=replicaId,
        topics=(req(2, 0, "ListOffsetsTopic", name=topic, partitions=(
            req(2, 0, "ListOffsetsPartition", partition_index=partition, timestamp=timestamp,
                max_num_offsets=maxNum),
        )),),
    )
    [p] = response.topics[0].partitions
    return p.error_code, list(p.old_style_offsets)


@pytest.fixture
def broker():
    broker = makeBroker()
    broker.logManager.createTopic("t", 1)
    return broker


def appendSegments(log, count):
    for i in range(count):
        log.append(buildBatch([Record(value=b"v%d" % i), Record(value=b"w")]), NOW)
        log.roll(NOW)


def test_empty_log(broker):
    assert listV0(broker, -1) == (E.none, [0])
    assert listV0(broker, -2) == (E.none, [0])


def test_latest_and_earliest(broker):
    log = broker.logManager.getLog("t", 0)
    appendSegments(log, 3)
    log.append(buildBatch([Record(value=b"x")]), NOW)
    # Segments at 0, 2, 4, 6 (active, non-empty), end offset 7.
    assert listV0(broker, -1) == (E.none, [7, 6, 4, 2, 0])
    assert listV0(broker, -1, maxNum=1) == (E.none, [7])
    assert listV0(broker, -2) == (E.none, [0])
    assert listV0(broker, -2, maxNum=5) == (E.none, [0])


def test_by_time_uses_segment_times(broker):
    log = broker.logManager.getLog("t", 0)
    appendSegments(log, 2)
    segments = log.segments
    times = [s.lastModifiedMs() for s in segments]
    # Before every segment: nothing.
    assert listV0(broker, min(times) - 1) == (E.none, [])
    # A time after the last segment's: every base offset, newest first.
    assert listV0(broker, max(times)) == (E.none, sorted((s.baseOffset for s in segments), reverse=True))


def test_consumer_never_sees_past_high_watermark(broker):
    log = broker.logManager.getLog("t", 0)
    appendSegments(log, 2)

    class Lagging:
        def __getattr__(self, name):
            return getattr(log, name)

        highWatermark = 3

    assert legacyOffsets(Lagging(), -1, 10, NOW / 1000, fromConsumer=True) == (3, 2, 0)
    assert legacyOffsets(Lagging(), -1, 10, NOW / 1000, fromConsumer=False) == (4, 2, 0)


def test_errors(broker):
    assert listV0(broker, -3) == (E.unsupported_version, [])
    assert listV0(broker, -1, topic="nope") == (E.unknown_topic_or_partition, [])
    assert listV0(broker, -1, partition=5) == (E.unknown_topic_or_partition, [])


def test_wire_layout():
    """
    ListOffsetsRequest.json v0: replica_id, topics[name, partitions[index,
    timestamp, max_num_offsets]]; the response: topics[name,
    partitions[index, error_code, old_style_offsets[int64]]], no throttle.
    """
    body = (
        struct.pack(">ii", -1, 1) + struct.pack(">h", 1) + b"t"
        + struct.pack(">iiqi", 1, 0, -1, 3)
    )
    request = decodeRequest(2, 0, body, 0)
    [p] = request.topics[0].partitions
    assert (p.partition_index, p.timestamp, p.max_num_offsets) == (0, -1, 3)
    cls = responseType(2, 0)
    Topic = cls.ListOffsetsTopicResponse
    Partition = cls.ListOffsetsPartitionResponse
    response = cls(topics=(Topic(name="t", partitions=(
        Partition(partition_index=0, error_code=E.none, old_style_offsets=(7, 0)),
    )),))
    assert encodeBody(response) == (
        struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
        + struct.pack(">iihiqq", 1, 0, 0, 2, 7, 0)
    )
