"""
OffsetCommit v0-1 and OffsetFetch v0 (Kafka 3.x serves them, Kafka 4
dropped them): v1 is a group commit like v2+, with a per-partition commit
timestamp; v0 (ZooKeeper offsets in Kafka) is answered UNSUPPORTED_VERSION
per partition as Kafka without ZooKeeper does, never a closed connection.
Requests and responses go through the codec, and the bytes of the v0/v1
layouts are checked against Kafka's message JSON by hand.
"""

from __future__ import annotations

import struct

import pytest

from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.codec import decodeRequest, encodeBody
from kafkatwist.protocol.entities import make, nested

from tests.coordinator.grouphelpers import GroupBroker, commit, fetchV7, joinAndSync, offsetsOf

E = ErrorCode


@pytest.fixture
def broker():
    return GroupBroker()


def test_v1_commit_is_a_group_commit(broker):
    assert commit(broker, 1, [("t1", 0, 10, "m"), ("nope", 0, 1, "")]) == {
        ("t1", 0): E.none,
        ("nope", 0): E.unknown_topic_or_partition,
    }
    assert offsetsOf(fetchV7(broker).topics) == {("t1", 0): (10, "m", E.none)}


def test_v1_commit_checks_generation_and_member(broker):
    member, gen = joinAndSync(broker)
    assert commit(broker, 1, [("t1", 0, 1, "")], member=member, generation=gen) == {("t1", 0): E.none}
    assert commit(broker, 1, [("t1", 0, 2, "")], member=member, generation=gen + 1) == {
        ("t1", 0): E.illegal_generation
    }
    assert commit(broker, 1, [("t1", 0, 2, "")], member="x", generation=gen) == {
        ("t1", 0): E.unknown_member_id
    }
    assert offsetsOf(fetchV7(broker).topics) == {("t1", 0): (1, "", E.none)}


def test_v1_commit_timestamp(broker):
    """
    -1 is "now"; any other value is stored as the commit time (the base of
    offsets.retention.minutes), as Kafka's OffsetAndMetadata.fromRequest.
    """
    cls = requestType(8, 1)
    Topic = nested(cls, "OffsetCommitRequestTopic")
    Partition = nested(cls, "OffsetCommitRequestPartition")
    broker.call(
        8, 1, group_id="g", generation_id_or_member_epoch=-1, member_id="",
        topics=(Topic(name="t1", partitions=(
            Partition(partition_index=0, committed_offset=5, commit_timestamp=-1, committed_metadata=None),
            Partition(partition_index=1, committed_offset=6, commit_timestamp=1234, committed_metadata="x"),
        )),),
    )
    stored = loadGroups(broker.groupCoordinator.log)[1]["g"]
    now = int(broker.fakeClock.seconds() * 1000)
    assert stored[("t1", 0)].commitTimestampMs == now
    assert stored[("t1", 1)].commitTimestampMs == 1234
    assert stored[("t1", 0)].expireTimestampMs is None


def test_v0_commit_and_fetch_are_refused_per_partition(broker):
    commit(broker, 2, [("t1", 0, 10, "m")])
    assert commit(broker, 0, [("t1", 0, 99, ""), ("t1", 1, 99, "")]) == {
        ("t1", 0): E.unsupported_version,
        ("t1", 1): E.unsupported_version,
    }
    # The group's offsets are untouched.
    assert offsetsOf(fetchV7(broker).topics) == {("t1", 0): (10, "m", E.none)}
    Topic = nested(requestType(9, 0), "OffsetFetchRequestTopic")
    r = broker.call(9, 0, group_id="g", topics=(make(Topic, name="t1", partition_indexes=(0, 1)),))
    assert offsetsOf(r.topics) == {
        ("t1", 0): (-1, "", E.unsupported_version),
        ("t1", 1): (-1, "", E.unsupported_version),
    }


def _string(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def test_v0_v1_request_bytes():
    """
    The layouts of OffsetCommitRequest.json: v0 group, topics[name,
    partitions[index, offset, metadata]]; v1 adds generation and member
    after the group and a commit timestamp after the offset.
    """
    v0 = (
        _string("g")
        + struct.pack(">i", 1) + _string("t")
        + struct.pack(">i", 1) + struct.pack(">iq", 2, 77) + _string("md")
    )
    request = decodeRequest(8, 0, v0, 0)
    assert request.group_id == "g"
    [topic] = request.topics
    [p] = topic.partitions
    assert (topic.name, p.partition_index, p.committed_offset, p.committed_metadata) == ("t", 2, 77, "md")
    assert encodeBody(request) == v0

    v1 = (
        _string("g") + struct.pack(">i", 4) + _string("member")
        + struct.pack(">i", 1) + _string("t")
        + struct.pack(">i", 1) + struct.pack(">iqq", 2, 77, -1) + struct.pack(">h", -1)
    )
    request = decodeRequest(8, 1, v1, 0)
    assert (request.generation_id_or_member_epoch, request.member_id) == (4, "member")
    [p] = request.topics[0].partitions
    assert (p.commit_timestamp, p.committed_metadata) == (-1, None)
    assert encodeBody(request) == v1


def test_v0_v1_response_bytes():
    for version in (0, 1):
        cls = responseType(8, version)
        Topic = nested(cls, "OffsetCommitResponseTopic")
        Partition = nested(cls, "OffsetCommitResponsePartition")
        body = encodeBody(cls(topics=(Topic(name="t", partitions=(Partition(partition_index=3, error_code=E.unsupported_version),)),)))
        assert body == struct.pack(">i", 1) + _string("t") + struct.pack(">iih", 1, 3, 35)


def test_offset_fetch_v0_bytes():
    body = _string("g") + struct.pack(">i", 1) + _string("t") + struct.pack(">iii", 2, 0, 1)
    request = decodeRequest(9, 0, body, 0)
    assert [(t.name, t.partition_indexes) for t in request.topics] == [("t", (0, 1))]
