"""
A Fetch response read by hand (L{readFetchPartition}), the records a view
of the frame, against the general decoder (the bounds walk and kio) on the
same frames: every version v4-v17, several topics and partitions, aborted
transactions, null records, the tagged fields of v12+ (diverging epoch,
current leader, snapshot id, node endpoints); and frames cut short.
"""

import struct
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.client import KafkaWireClient
from kafkatwist.client.fetchresponse import MalformedFetchResponse, readFetchPartition
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import FETCH, knownVersions, responseType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeResponseFrame
from kafkatwist.protocol.entities import has, make, ms, nested
from kafkatwist.protocol.records import Record, buildBatch

VERSIONS = [v for v in knownVersions(FETCH) if 4 <= v <= 17]
IDS = [uuid.UUID(int=0x1234 + i) for i in range(3)]
NAMES = ["alpha", "beta", "gamma"]


def batch(n, base=0):
    return buildBatch([Record(value=b"v%d" % i, key=None if i % 2 else b"k") for i in range(n)])


def frameFor(version, tagged):
    """
    A response of three topics, the middle one of three partitions: records,
    null records with an error, aborted transactions; with C{tagged}, every
    tagged field the version has is set.
    """
    cls = responseType(FETCH, version)
    topicCls = nested(cls, "FetchableTopicResponse")
    partitionCls = nested(cls, "PartitionData")
    abortedCls = nested(cls, "AbortedTransaction")
    extra = {}
    if tagged and version >= 12:
        extra = dict(
            diverging_epoch=make(nested(cls, "EpochEndOffset"), epoch=3, end_offset=77),
            current_leader=make(nested(cls, "LeaderIdAndEpoch"), leader_id=2, leader_epoch=5),
            snapshot_id=make(nested(cls, "SnapshotId"), end_offset=9, epoch=1),
        )

    def partition(index, records, aborted, error=0):
        return make(
            partitionCls,
            partition_index=index,
            error_code=ErrorCode(error),
            high_watermark=1000 + index,
            last_stable_offset=900 + index,
            log_start_offset=10 + index,
            aborted_transactions=aborted,
            preferred_read_replica=-1,
            records=records,
            **extra,
        )

    aborted = tuple(make(abortedCls, producer_id=7 + i, first_offset=40 + i) for i in range(2))
    topics = []
    for t in range(3):
        partitions = (
            partition(0, batch(3), None),
            partition(1, None, (), error=ErrorCode.offset_out_of_range.value),
            partition(2, batch(5) + batch(2), aborted),
        )
        topics.append(make(topicCls, topic=NAMES[t], topic_id=IDS[t], partitions=partitions))
    values = dict(
        throttle_time=ms(0), error_code=ErrorCode.none, session_id=0, responses=tuple(topics)
    )
    if has(cls, "node_endpoints"):
        values["node_endpoints"] = (
            (make(nested(cls, "NodeEndpoint"), node_id=2, host="h", port=9, rack=None),)
            if tagged else ()
        )
    chunks = encodeResponseFrame(FETCH, version, 42, make(cls, **values))
    return memoryview(b"".join(chunks)[4:]).toreadonly()


def kioAnswer(version, frame, topic, partition):
    _, entity = decodeResponseFrame(FETCH, version, frame)
    for t in entity.responses:
        key = t.topic_id if version >= 13 else t.topic
        if key != topic:
            continue
        for p in t.partitions:
            if p.partition_index == partition:
                return (
                    int(p.error_code), int(p.high_watermark), int(p.last_stable_offset),
                    int(getattr(p, "log_start_offset", -1)),
                    tuple((int(a.producer_id), int(a.first_offset))
                          for a in (p.aborted_transactions or ())),
                    None if p.records is None else bytes(p.records),
                )
    return None


@pytest.mark.parametrize("tagged", [False, True], ids=["plain", "tagged"])
@pytest.mark.parametrize("version", VERSIONS)
def test_every_partition_as_kio_reads_it(version, tagged):
    frame = frameFor(version, tagged)
    for t in range(3):
        for partition in (0, 1, 2, 3):
            key = IDS[t] if version >= 13 else NAMES[t]
            error, answer = readFetchPartition(
                frame, version, None if version >= 13 else NAMES[t],
                IDS[t] if version >= 13 else None, partition,
            )
            assert error == 0
            expected = kioAnswer(version, frame, key, partition)
            if expected is None:
                assert answer is None
                continue
            records = answer.records
            if records is not None:
                # a view of the frame, not a copy
                assert isinstance(records, memoryview) and records.obj is frame.obj
                records = bytes(records)
            got = (answer.error, answer.highWatermark, answer.lastStableOffset,
                   answer.logStartOffset, answer.abortedTransactions, records)
            assert got == expected


def test_top_level_error_without_topics():
    version = 16
    cls = responseType(FETCH, version)
    entity = make(cls, throttle_time=ms(0), error_code=ErrorCode.fetch_session_id_not_found,
                  session_id=0, responses=(), node_endpoints=())
    frame = memoryview(b"".join(encodeResponseFrame(FETCH, version, 1, entity))[4:])
    error, answer = readFetchPartition(frame, version, None, IDS[0], 0)
    assert (error, answer) == (ErrorCode.fetch_session_id_not_found.value, None)


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_frames_cut_short_raise(version):
    """
    A frame cut anywhere before the partition's records end raises
    MalformedFetchResponse (never IndexError or struct.error, never a
    records view running past the frame).
    """
    frame = frameFor(version, tagged=True)
    topic, topicId = (None, IDS[2]) if version >= 13 else (NAMES[2], None)
    _, whole = readFetchPartition(frame, version, topic, topicId, 2)
    end = (whole.records.obj is frame.obj) and (
        bytes(frame).rindex(bytes(whole.records)) + len(whole.records)
    )
    for cut in range(0, end, 7):
        with pytest.raises(MalformedFetchResponse):
            readFetchPartition(frame[:cut], version, topic, topicId, 2)


def test_lengths_past_the_frame_raise():
    version = 12
    frame = bytearray(frameFor(version, tagged=False))
    # the first topic's name length (compact: n + 1), after the correlation
    # id, the header's tagged fields, throttle, error, session, topic count
    at = 4 + 1 + 4 + 6 + 1
    assert frame[at] == len("alpha") + 1
    frame[at] = 0x7F
    with pytest.raises(MalformedFetchResponse):
        readFetchPartition(memoryview(frame), version, "alpha", None, 0)
    frame = bytearray(frameFor(4, tagged=False))
    # v4: a negative records length other than null
    _, answer = readFetchPartition(memoryview(frame), 4, "alpha", None, 0)
    start = bytes(frame).index(bytes(answer.records))
    struct.pack_into(">i", frame, start - 4, -5)
    with pytest.raises(MalformedFetchResponse):
        readFetchPartition(memoryview(frame), 4, "alpha", None, 0)


def test_view_fetch_against_a_broker(cluster, broker):
    """
    fetchRaw(view=True) answers as fetchRaw does, the records a view; the
    size-limited fetch's cut trailing batch too.
    """
    with KafkaWireClient(broker.address, timeout=5.0) as c:
        c.produce("t", 1, [Record(value=b"a" * 100)] * 20)
        c.produce("t", 1, [Record(value=b"b" * 100, key=b"k")] * 30)
        for offset, maxBytes in ((0, 1 << 20), (20, 1 << 20), (49, 1 << 20), (50, 1 << 20),
                                 (0, 500)):
            plain = c.fetchRaw("t", 1, offset, maxBytes=maxBytes)
            viewed = c.fetchRaw("t", 1, offset, maxBytes=maxBytes, view=True)
            assert isinstance(viewed.records, memoryview)
            assert bytes(viewed.records) == plain.records
            assert (viewed.highWatermark, viewed.logStartOffset, viewed.error,
                    viewed.lastStableOffset, viewed.abortedTransactions) == (
                plain.highWatermark, plain.logStartOffset, plain.error,
                plain.lastStableOffset, plain.abortedTransactions)
        assert bytes(c.fetchRaw("t", 0, 0, view=True).records) == b""


def test_an_error_code_the_client_does_not_know_is_unknown_server_error(cluster, broker, monkeypatch):
    """
    A newer broker's error code (Kafka's Errors.forCode: UNKNOWN_SERVER_ERROR)
    is a Kafka error of the call, never a ValueError out of it.
    """
    import kafkatwist.client.client as clientModule
    from kafkatwist.client.connection import responseError

    assert responseError(32000) == ErrorCode.unknown_server_error
    assert responseError(ErrorCode.offset_out_of_range.value) == ErrorCode.offset_out_of_range
    read = clientModule.readFetchPartition

    def newerBroker(*args):
        _, answer = read(*args)
        return 32001, answer

    with KafkaWireClient(broker.address, timeout=5.0) as c:
        c.produce("t", 1, [Record(value=b"a")])
        monkeypatch.setattr(clientModule, "readFetchPartition", newerBroker)
        with pytest.raises(KafkaError) as e:
            c.fetchRaw("t", 1, 0, view=True)
        assert e.value.code == ErrorCode.unknown_server_error
