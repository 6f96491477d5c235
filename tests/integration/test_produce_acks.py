"""
Produce's acks over the wire, with hand-built Produce v9 frames on a raw
socket: acks outside -1/0/1 are answered INVALID_REQUIRED_ACKS (offsets
-1) and nothing is appended; an acks=0 Produce that fails closes the
connection (Kafka's closeConnection), one that succeeds keeps it.
"""

from __future__ import annotations

import socket
import struct

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.records import Record, buildBatch
from tests.integration.helpers import logEnd

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact(raw: bytes) -> bytes:
    return uvarint(len(raw) + 1) + raw


def produceV9(correlationId: int, acks: int, topic: str, records: bytes, partition: int = 0) -> bytes:
    """A Produce v9 frame (size prefix included), byte by byte."""
    clientId = b"acks-test"
    header = struct.pack(">hhih", 0, 9, correlationId, len(clientId)) + clientId + b"\x00"
    body = (
        b"\x00"  # transactional_id: null
        + struct.pack(">hi", acks, 10_000)
        + uvarint(2) + compact(topic.encode())  # one topic
        + uvarint(2) + struct.pack(">i", partition) + compact(records) + b"\x00"  # one partition
        + b"\x00"  # the topic's tagged fields
        + b"\x00"  # the request's
    )
    return struct.pack(">i", len(header) + len(body)) + header + body


def readFrame(sock) -> bytes | None:
    """One response frame (without its size), or None once the broker closed."""
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            return None
        data += chunk
    (size,) = struct.unpack(">i", data)
    out = b""
    while len(out) < size:
        chunk = sock.recv(size - len(out))
        if not chunk:
            return None
        out += chunk
    return out


def partitionAnswer(frame: bytes, topic: str):
    """(correlation id, error, base offset, log append time, log start offset) of a v9 answer."""
    (correlationId,) = struct.unpack_from(">i", frame, 0)
    at = 4 + 1  # correlation id, header tagged fields
    assert frame[at] == 2  # one topic
    at += 1
    assert frame[at:at + 1 + len(topic)] == compact(topic.encode())
    at += 1 + len(topic)
    assert frame[at] == 2  # one partition
    at += 1 + 4  # its index
    error, base, appendTime, start = struct.unpack_from(">hqqq", frame, at)
    return correlationId, error, base, appendTime, start


@pytest.fixture
def client(broker):
    with KafkaWireClient(broker.bootstrap) as c:
        yield c


def connectTo(broker):
    host, port = broker.bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


@pytest.mark.parametrize("acks", (2, -2))
def test_invalid_acks_are_refused_with_invalid_required_acks(broker, client, acks):
    topic = f"invalid-acks{acks}"
    client.createTopics({topic: 1})
    records = bytes(buildBatch([Record(value=b"v" * 100)]))
    with connectTo(broker) as sock:
        sock.sendall(produceV9(11, acks, topic, records))
        answer = readFrame(sock)
    assert answer is not None
    assert partitionAnswer(answer, topic) == (11, ErrorCode.invalid_required_acks, -1, -1, -1)
    assert logEnd(client, topic) == 0


def test_acks_0_failing_closes_the_connection_and_succeeding_keeps_it(broker, client):
    topic = "acks0-close"
    client.createTopics({topic: 1})
    good = bytes(buildBatch([Record(value=b"v" * 100)]))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the CRC no longer matches
    with connectTo(broker) as sock:
        sock.sendall(produceV9(1, 0, topic, good))
        # Nothing answers acks=0; the next request on the connection is.
        sock.sendall(produceV9(2, 1, topic, good))
        answer = readFrame(sock)
        assert answer is not None
        assert partitionAnswer(answer, topic)[:3] == (2, ErrorCode.none, 1)
        sock.sendall(produceV9(3, 0, topic, bytes(bad)))
        assert readFrame(sock) is None  # closed, nothing answered
    with connectTo(broker) as sock:
        sock.sendall(produceV9(4, 0, topic, good, partition=7))  # no such partition
        assert readFrame(sock) is None
    assert logEnd(client, topic) == 2
