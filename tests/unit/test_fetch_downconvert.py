"""
Fetch v0-3 through the fetch handler: message format v0 (Fetch v0-1) or v1
(v2-3) converted from the stored batches, Kafka's size rules for each
version, the response layouts of FetchResponse.json v0-3, long polls.
"""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.serial import entity_reader
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.codec import decodeRequest
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.legacy_records import readMessageSet
from kafkatwist.protocol.records import Record, buildBatch
from tests.unit.fakes import handleLikeThePool
from tests.unit.fetchhelpers import Context, fetchServices

E = ErrorCode
T0 = 1_700_000_000_000


def request(version, partitions, maxBytes=1 << 20, maxWaitMs=0, minBytes=1):
    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    byTopic = {}
    for topic, partition, offset, partitionMax in partitions:
        byTopic.setdefault(topic, []).append(
            make(Partition, partition=partition, fetch_offset=offset, partition_max_bytes=partitionMax)
        )
    return make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=maxWaitMs), min_bytes=minBytes,
        max_bytes=maxBytes,
        topics=tuple(make(Topic, topic=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
    )


def fetch(broker, version, partitions, clock=None, **kw):
    clock = clock or Clock()
    context = Context(clock)
    context.apiVersion = version
    answers = []
    result = handleLikeThePool(FetchHandler(broker), context, request(version, partitions, **kw))
    if isinstance(result, Deferred):
        result.addCallback(answers.append)
    else:
        answers.append(result)
    return answers, clock


def decoded(version, answer):
    body = b"".join(bytes(c) for c in answer.chunks)
    response, end = entity_reader(responseType(1, version))(body, 0)
    assert end == len(body)
    return {
        (t.topic, p.partition_index): (p.error_code, p.high_watermark, p.records or b"")
        for t in response.responses
        for p in t.partitions
    }


@pytest.fixture
def broker():
    broker = fetchServices()
    broker.logManager.createTopic("t", 2, {})
    return broker


def append(broker, records, partition=0, **kw):
    broker.logManager.getLog("t", partition).append(buildBatch(records, **kw), T0)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_formats_by_version(broker, version):
    append(broker, [Record(timestamp=T0 + i, key=b"k", value=b"v%d" % i) for i in range(3)])
    append(broker, [Record(timestamp=T0 + 9, value=b"z")], compression="gzip")
    [answer], _ = fetch(broker, version, [("t", 0, 1, 1 << 20), ("t", 1, 0, 1 << 20)])
    result = decoded(version, answer)
    assert result[("t", 1)] == (E.none, 0, b"")
    error, highWatermark, data = result[("t", 0)]
    assert (error, highWatermark) == (E.none, 4)
    magic = 0 if version <= 1 else 1
    messages = readMessageSet(data, magic)
    # Record 0 is before the fetch offset: left out.
    assert [(m.offset, m.value) for m in messages[:2]] == [(1, b"v1"), (2, b"v2")]
    assert [m.timestamp for m in messages[:2]] == ([T0 + 1, T0 + 2] if magic else [-1, -1])
    wrapper = messages[2]
    assert (wrapper.offset, wrapper.codec) == (3, 1)


def test_errors(broker):
    [answer], _ = fetch(broker, 0, [("nope", 0, 0, 100), ("t", 0, 5, 100)])
    result = decoded(0, answer)
    assert result[("nope", 0)][0] == E.unknown_topic_or_partition
    assert result[("t", 0)][0] == E.offset_out_of_range


@pytest.mark.parametrize("version", [0, 1, 2])
def test_hard_limit_cuts_on_message_boundaries(broker, version):
    append(broker, [Record(value=b"x" * 100) for _ in range(10)])
    [answer], _ = fetch(broker, version, [("t", 0, 0, 500)])
    _, _, data = decoded(version, answer)[("t", 0)]
    assert len(data) <= 500
    messages = readMessageSet(data, 0 if version <= 1 else 1)
    assert [m.offset for m in messages] == list(range(len(messages))) and len(messages) >= 3


@pytest.mark.parametrize("version", [0, 1, 2])
def test_first_message_larger_than_the_limit_is_cut_short(broker, version):
    """
    Whichever partition it is in: the client sees a partial message and
    reports its fetch size too small, instead of polling forever.
    """
    append(broker, [Record(value=b"small")], partition=0)
    append(broker, [Record(value=b"x" * 1000)], partition=1)
    [answer], _ = fetch(broker, version, [("t", 0, 0, 300), ("t", 1, 0, 300)])
    result = decoded(version, answer)
    assert len(readMessageSet(result[("t", 0)][2], 0 if version <= 1 else 1)) == 1
    cut = result[("t", 1)][2]
    assert len(cut) == 300
    (size,) = struct.unpack_from(">i", cut, 8)
    assert size > 300


def test_v3_response_limit_and_first_message_whole(broker):
    append(broker, [Record(value=b"x" * 1000)], partition=0)
    append(broker, [Record(value=b"y" * 10)], partition=1)
    [answer], _ = fetch(broker, 3, [("t", 0, 0, 100), ("t", 1, 0, 100)], maxBytes=50)
    result = decoded(3, answer)
    [m] = readMessageSet(result[("t", 0)][2], 1)
    assert m.value == b"x" * 1000
    # The response's limit is spent: nothing from partition 1.
    assert result[("t", 1)][2] == b""


def test_zstd_first_batch(broker):
    append(broker, [Record(value=b"z")], compression="zstd")
    append(broker, [Record(value=b"plain")])
    [answer], _ = fetch(broker, 2, [("t", 0, 0, 1 << 20)])
    assert decoded(2, answer)[("t", 0)] == (E.unsupported_compression_type, 2, b"")
    [answer], _ = fetch(broker, 2, [("t", 0, 1, 1 << 20)])
    assert [m.value for m in readMessageSet(decoded(2, answer)[("t", 0)][2], 1)] == [b"plain"]


def test_long_poll_is_answered_down_converted(broker):
    answers, clock = fetch(broker, 1, [("t", 0, 0, 1 << 20)], maxWaitMs=500)
    assert answers == []
    append(broker, [Record(value=b"late")])
    broker.fetchPurgatory.checkAndComplete(("t", 0))
    [answer] = answers
    assert [m.value for m in readMessageSet(decoded(1, answer)[("t", 0)][2], 0)] == [b"late"]
    # An expiry with nothing new is answered from offsets alone.
    answers, clock = fetch(broker, 0, [("t", 0, 1, 1 << 20)], maxWaitMs=500)
    clock.advance(0.6)
    [answer] = answers
    assert decoded(0, answer)[("t", 0)] == (E.none, 1, b"")


def test_request_layouts():
    """
    FetchRequest.json v0-2: replica, max wait, min bytes, topics; v3 adds
    max_bytes after min bytes.
    """
    topics = struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iiqi", 1, 0, 42, 1000)
    v0 = struct.pack(">iii", -1, 500, 1) + topics
    r = decodeRequest(1, 0, v0, 0)
    assert (r.min_bytes, r.max_bytes, r.isolation_level) == (1, 0x7FFFFFFF, 0)
    assert r.max_wait == datetime.timedelta(milliseconds=500)
    [p] = r.topics[0].partitions
    assert (p.partition, p.fetch_offset, p.partition_max_bytes) == (0, 42, 1000)
    v3 = struct.pack(">iiii", -1, 500, 1, 4096) + topics
    assert decodeRequest(1, 3, v3, 0).max_bytes == 4096
