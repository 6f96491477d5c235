"""
The hand-written Fetch request decoder against kio's, every version the
broker serves; what it does with damaged frames; and the response encoder
against the encoder it replaced, byte for byte.
"""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from kafkatwist.protocol.codec import MalformedRequest, decodeRequest, encodeBody
from tests.unit.fetchreference import kioRequest
from kafkatwist.protocol.fetch import (
    MAX_VERSION,
    PartitionData,
    decodeFetchRequest,
    encodeFetchResponse,
    fetchRequestFrom,
)
from kafkatwist.protocol.header import INT16, INT32, writeLength, writeString

VERSIONS = range(0, MAX_VERSION + 1)
ID_A = uuid.UUID("5f8a6c3e-0d4b-4e2a-9c1f-2a7b3c4d5e6f")
ID_B = uuid.UUID(int=0x1234)


def shapes(version):
    """
    The requests compared: a consumer's one partition, several topics and
    partitions, a session's incremental fetch with forgotten topics, a
    follower's fetch, long names and many partitions.
    """
    byId = version >= 13
    a = ID_A if byId else "orders"
    b = ID_B if byId else "t\u00e9"
    yield kioRequest(version, [(a, [(0, 5, 42, 4, -1, 1048576)])])
    yield kioRequest(
        version,
        [(a, [(0, 5, 42, 4, 3, 1048576), (3, -1, 0, -1, 0, 100)]), (b, [(1, 2, 7, 1, 0, 65536)]),
         (a, [(7, 0, 1 << 40, 0, 1 << 39, 0x7FFFFFFF)])],
        forgotten=[(b, [0, 2]), (a, [])], sessionId=77, sessionEpoch=3, rack="rack-1",
        clusterId="cluster-x", isolation=1,
    )
    yield kioRequest(version, [], forgotten=[(a, [5])], sessionId=9, sessionEpoch=12)
    yield kioRequest(version, [(a, [(2, 8, 100, 8, 50, 1048576)])], replica=(3, 1234567890123))
    if byId:
        yield kioRequest(version, [(None, [(0, -1, 0, -1, -1, 10)])])
    long = "n" * 200
    yield kioRequest(
        version, [(ID_B if byId else long, [(i, -1, i * 10, -1, -1, 1000) for i in range(150)])],
        rack="r" * 300, clusterId="c" * 130, maxWaitMs=0,
    )


def decoded(request):
    return {
        name: getattr(request, name)
        for name in (
            "replica_id", "replica_epoch", "cluster_id", "max_wait_ms", "min_bytes", "max_bytes",
            "isolation_level", "session_id", "session_epoch", "entries", "extras", "runs",
            "forgotten", "rack_id",
        )
    }


@pytest.mark.parametrize("version", VERSIONS)
def test_decode_matches_kio(version):
    for entity in shapes(version):
        body = b"HEAD" + encodeBody(entity)
        ours = decodeFetchRequest(version, body, 4)
        theirs = decodeRequest(1, version, body, 4)
        assert decoded(ours) == decoded(fetchRequestFrom(version, theirs))
        # What code reading it as kio's entity sees.
        assert ours.max_wait == theirs.max_wait
        assert [
            (getattr(t, "topic", None), getattr(t, "topic_id", None),
             [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in t.partitions])
            for t in ours.topics
        ] == [
            (getattr(t, "topic", None), getattr(t, "topic_id", None),
             [(p.partition, p.fetch_offset, p.partition_max_bytes) for p in t.partitions])
            for t in theirs.topics
        ]


def test_entries_of_a_follower_v15():
    entity = kioRequest(15, [(ID_A, [(2, 8, 100, 8, 50, 1048576)])], replica=(3, 99))
    request = decodeFetchRequest(15, encodeBody(entity), 0)
    assert (request.replica_id, request.replica_epoch) == (3, 99)
    assert request.replica_state.replica_id == 3
    assert request.entries == [(ID_A, 2, 100, 1048576, 8)]
    assert request.extras == [(8, 50)]


def test_unknown_tags_skipped():
    # v16 with a tag the broker does not know (and a tag 1 of v12, which
    # has no ReplicaState): both skipped, as kio does.
    for version in (12, 16):
        body = bytearray(encodeBody(kioRequest(version, [(ID_A if version >= 13 else "t", [(0, -1, 5, -1, -1, 10)])])))
        assert body[-1] == 0
        other = 1 if version < 15 else 9
        body[-1:] = bytes([2, 7, 3, 1, 2, 3, other, 1, 0])
        request = decodeFetchRequest(version, bytes(body), 0)
        assert request.replica_id == -1 and request.entries[0][2] == 5
        assert request.cluster_id is None


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_refused(version):
    for entity in shapes(version):
        body = encodeBody(entity)
        for cut in range(len(body)):
            with pytest.raises(MalformedRequest):
                decodeFetchRequest(version, body[:cut], 0)


def huge(version):
    """
    Requests whose counts or lengths claim far more than the frame holds.
    """
    flexible = version >= 12
    head = struct.pack(">i", -1) if version < 15 else b""
    head += struct.pack(">ii", 500, 1)
    if version >= 3:
        head += struct.pack(">i", 1 << 20)
    if version >= 4:
        head += b"\x00"
    if version >= 7:
        head += struct.pack(">ii", 0, -1)
    big = 0x7FFFFFF0
    out = bytearray(head)
    writeLength(out, big, flexible, INT32)  # topics
    yield bytes(out) + b"\x00" * 40
    out = bytearray(head)
    writeLength(out, 1, flexible, INT32)
    if version >= 13:
        out += ID_A.bytes
    else:
        writeLength(out, 30000, flexible, INT16)  # a name longer than the frame
        yield bytes(out) + b"x" * 40
        out = bytearray(head)
        writeLength(out, 1, flexible, INT32)
        writeString(out, "t", flexible)
    writeLength(out, big, flexible, INT32)  # partitions
    yield bytes(out) + b"\x00" * 40
    if version >= 7:
        out = bytearray(head)
        writeLength(out, 0, flexible, INT32)
        writeLength(out, big, flexible, INT32)  # forgotten topics
        yield bytes(out) + b"\x00" * 40
        out = bytearray(head)
        writeLength(out, 0, flexible, INT32)
        writeLength(out, 1, flexible, INT32)
        if version >= 13:
            out += ID_A.bytes
        else:
            writeString(out, "t", flexible)
        writeLength(out, big, flexible, INT32)  # forgotten partitions
        yield bytes(out) + b"\x00" * 40
    if flexible:
        body = bytearray(encodeBody(kioRequest(version, [])))
        body[-1:] = b"\xff\xff\xff\xff\x0f"  # 2^32-1 tagged fields
        yield bytes(body)
        body[-5:] = bytes([1, 0, 0x7F])  # a tagged field of 127 bytes in 0
        yield bytes(body)
        body = bytearray(encodeBody(kioRequest(version, [])))
        body[-1:] = b"\x01\x00\x05\x00"  # cluster_id: length -1 ... 
        yield bytes(body)
    # negative counts and lengths
    out = bytearray(head)
    if flexible:
        out += b"\xff\xff\xff\xff\x0f"
    else:
        out += struct.pack(">i", -5)
    yield bytes(out) + b"\x00" * 40


@pytest.mark.parametrize("version", VERSIONS)
def test_huge_counts_and_lengths_refused(version):
    for body in huge(version):
        with pytest.raises(MalformedRequest):
            decodeFetchRequest(version, body, 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_random_damage_never_another_exception(version):
    rng = random.Random(version)
    bodies = [encodeBody(entity) for entity in shapes(version)]
    for _ in range(1500):
        body = bytearray(rng.choice(bodies))
        for _ in range(rng.randint(1, 4)):
            kind = rng.random()
            i = rng.randrange(len(body))
            if kind < 0.5:
                body[i] = rng.randrange(256)
            elif kind < 0.7:
                body[i : i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x80\x80\x80"])
            elif kind < 0.85:
                del body[i : i + rng.randint(1, 8)]
            else:
                body[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
            if not body:
                body = bytearray(b"\x00")
        try:
            request = decodeFetchRequest(version, bytes(body), 0)
        except MalformedRequest:
            continue
        # What decodes is whole: every entry's fields are ints, the keys
        # names or ids.
        for key, partition, offset, maxBytes, epoch in request.entries:
            assert isinstance(key, (str, uuid.UUID)) or key is None
            assert all(isinstance(x, int) for x in (partition, offset, maxBytes, epoch))


def test_versions_outside_the_range_refused():
    for version in (-1, MAX_VERSION + 1, 200):
        with pytest.raises(MalformedRequest):
            decodeFetchRequest(version, b"\x00" * 64, 0)


# -- the response ------------------------------------------------------------


def _reference():
    """
    The encoder this one replaced (kafkatwist 2500b21), as it was.
    """
    from tests.unit import fetchreference

    return fetchreference.encodeFetchResponse


class Region:
    """
    A file region stand-in.
    """

    def __init__(self, length):
        self.length = length


def responseShapes(version):
    byId = version >= 13
    a = ID_A if byId else "orders"
    b = None if byId else "t\u00e9"
    region = Region(300)
    big = Region(200_000)
    yield [(a, [PartitionData(0, 0, 10, 10, 2, region)])], 0, 0
    yield [(a, [PartitionData(0, 0, 10, 10, 2, b"RECORDS")])], 0, 0
    yield [(a, [PartitionData(0, 0, 10, 10, 2, b"x" * 200)])], 0, 123
    yield [(a, [PartitionData(0, 0, 10, 10, 2, big)])], 0, 5
    yield [(a, [PartitionData(0, 0, 10, 10, 2, b""), PartitionData(1, 1, -1, -1, -1)])], 0, 0
    yield [(a, [PartitionData(0, 0, 10, 8, 2, region, ((7, 3), (9, 4)), -1)]),
           (b, [PartitionData(4, 0, 10, 8, 2, b"", ())])], 0, 99
    yield [(a, [PartitionData(0, 0, 10, 10, 2, b"", None, 2)])], 0, 0
    yield [], 18, 0
    yield [(a, [PartitionData(i, 0, i, i, 0, Region(i)) for i in range(140)])], 0, 1
    if not byId:
        yield [("n" * 200, [PartitionData(0, 0, 1, 1, 0)])], 0, 0


@pytest.mark.parametrize("version", range(4, MAX_VERSION + 1))
def test_encode_byte_identical_to_the_old_encoder(version):
    old = _reference()
    for topics, errorCode, sessionId in responseShapes(version):
        for throttle in (0, 250):
            new = encodeFetchResponse(version, topics, errorCode, sessionId, throttle)
            ref = old(version, topics, errorCode, sessionId, throttle)
            assert new.chunks == ref.chunks
            assert new.size == ref.size
