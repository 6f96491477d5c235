"""
The hand-written Produce codec against kio's, every version it serves.
"""

import datetime

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.produce import ProduceHandler
from kafkatwist.protocol.apis import PRODUCE, requestType
from kafkatwist.protocol.codec import MalformedRequest, encodeBody
from kafkatwist.protocol.entities import nested
from kafkatwist.protocol.produce import decodeProduceRequest, encodeProduceResponse

VERSIONS = range(0, 13)


def kioRequest(version, topics, acks=1, transactionalId=None):
    cls = requestType(PRODUCE, version)
    Topic = nested(cls, "TopicProduceData")
    Partition = nested(cls, "PartitionProduceData")
    return cls(
        **({"transactional_id": transactionalId} if version >= 3 else {}),
        acks=acks,
        timeout=datetime.timedelta(milliseconds=1500),
        topic_data=tuple(
            Topic(name=name, partition_data=tuple(Partition(index=i, records=r) for i, r in parts))
            for name, parts in topics
        ),
    )


TOPICS = [
    ("orders", [(0, b"\x01" * 70), (3, b"\x02" * 200), (5, None)]),
    ("t\u00e9", [(1, b"")]),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_matches_kio(version):
    tid = "tx-1" if version >= 3 else None
    body = b"HEAD" + encodeBody(kioRequest(version, TOPICS, acks=-1, transactionalId=tid))
    request = decodeProduceRequest(version, body, 4)
    assert request.acks == -1
    assert request.timeout_ms == 1500
    assert request.transactional_id == tid
    got = [
        (t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
        for t in request.topic_data
    ]
    assert got == TOPICS


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_refuses_truncated(version):
    body = encodeBody(kioRequest(version, TOPICS))
    for cut in (3, len(body) // 2, len(body) - 30):
        with pytest.raises(MalformedRequest):
            decodeProduceRequest(version, body[:cut], 0)


RESULTS = [
    ("orders", [
        (0, ErrorCode(0), 42, -1, 0, None, ()),
        (3, ErrorCode(87), -1, -1, -1, "bad batch \u00e9", ((1, "no key \u00e9"), (4, None))),
    ]),
    ("other", [(1, ErrorCode(3), -1, 1700000000000, 7, None, ())]),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_matches_kio(version):
    results = RESULTS if version >= 8 else [
        (name, [p[:5] + (None, ()) for p in parts]) for name, parts in RESULTS
    ]
    expected = encodeBody(ProduceHandler._response(version, results))
    encoded = encodeProduceResponse(version, results)
    assert b"".join(encoded.chunks) == expected
    assert encoded.size == len(expected)


#: lengths past one varint byte (names, records of two and three bytes,
#: messages), which the flexible codec reads and writes apart
LONG_TOPICS = [("n" * 200, [(2, b"\x03" * 20000), (4, b"\x04" * 130)])]


@pytest.mark.parametrize("version", VERSIONS)
def test_long_lengths_match_kio(version):
    body = encodeBody(kioRequest(version, LONG_TOPICS))
    request = decodeProduceRequest(version, body, 0)
    got = [(t.name, [(p.index, bytes(p.records)) for p in t.partition_data]) for t in request.topic_data]
    assert got == LONG_TOPICS
    results = [("n" * 200, [(2, ErrorCode(0), 1, -1, 0, "m" * 300 if version >= 8 else None, ())])]
    expected = encodeBody(ProduceHandler._response(version, results))
    assert b"".join(encodeProduceResponse(version, results).chunks) == expected
