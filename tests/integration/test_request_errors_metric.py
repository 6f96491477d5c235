"""
Kafka's C{ErrorsPerSec} request metric, scraped from the broker's Prometheus
endpoint (C{kafka_network_request_errors_total}): every response's error
counts (each place it carries an error code, NONE too), and those of an
acks=0 Produce that fails, whose connection is closed without an answer, as
Kafka's C{requestChannel.closeConnection(request, errorCounts)} marks them.
"""

from __future__ import annotations

import re

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.protocol.records import Record, buildBatch
from tests.integration.test_metrics import assertStrictlyParsable, scrape
from tests.integration.test_produce_acks import compact, connectTo, readFrame, uvarint

import struct

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def produceV9(correlationId, acks, topic, partitions):
    """A Produce v9 frame of one topic and several partitions: [(index, records)]."""
    clientId = b"errors-test"
    header = struct.pack(">hhih", 0, 9, correlationId, len(clientId)) + clientId + b"\x00"
    body = (
        b"\x00" + struct.pack(">hi", acks, 10_000)
        + uvarint(2) + compact(topic.encode())
        + uvarint(len(partitions) + 1)
        + b"".join(struct.pack(">i", index) + compact(records) + b"\x00" for index, records in partitions)
        + b"\x00" + b"\x00"
    )
    return struct.pack(">i", len(header) + len(body)) + header + body


def errors(text):
    found = {}
    for line in text.splitlines():
        m = re.match(r'kafka_network_request_errors_total\{request="([^"]+)",api_key="\d+",error="([^"]+)"\} (\S+)', line)
        if m:
            found[(m.group(1), m.group(2))] = float(m.group(3))
    return found


def test_a_closed_acks_0_produce_counts_its_errors(brokerFactory):
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    topic = "closed-errors"
    with KafkaWireClient(b.bootstrap) as client:
        client.createTopics({topic: 2})
    good = bytes(buildBatch([Record(value=b"v" * 100)]))
    bad = bytearray(good)
    bad[-1] ^= 0xFF  # the CRC no longer matches
    before = errors(scrape(port))
    assert not [k for k in before if k[0] == "produce"]

    with connectTo(b) as sock:
        # the small-request path (one partition)
        sock.sendall(produceV9(1, 0, topic, [(0, bytes(bad))]))
        assert readFrame(sock) is None  # closed, nothing answered
    with connectTo(b) as sock:
        # the general path: one partition appended, one corrupt, one unknown
        sock.sendall(produceV9(2, 0, topic, [(0, good), (1, bytes(bad)), (7, good)]))
        assert readFrame(sock) is None
    with connectTo(b) as sock:
        sock.sendall(produceV9(3, 0, topic, [(1, good)]))  # succeeds, no answer: not counted
        sock.sendall(produceV9(4, 1, topic, [(1, good)]))  # answered: its NONE counted
        assert readFrame(sock) is not None

    text = scrape(port)
    assertStrictlyParsable(text)
    assert {k: v for k, v in errors(text).items() if k[0] == "produce"} == {
        ("produce", "CORRUPT_MESSAGE"): 2,
        ("produce", "UNKNOWN_TOPIC_OR_PARTITION"): 1,
        ("produce", "NONE"): 2,
    }


def test_every_answer_counts_its_errors(brokerFactory):
    """
    Kafka counts the errors of every response it sends: a Produce answered
    from its frame and one answered by the general path, a Fetch of each
    path, a Metadata answer naming an unknown topic, ApiVersions.
    """
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    topic = "answered-errors"
    with KafkaWireClient(b.bootstrap) as client:
        client.createTopics({topic: 2})
    good = bytes(buildBatch([Record(value=b"v" * 100)]))
    before = errors(scrape(port))

    with connectTo(b) as sock:
        sock.sendall(produceV9(1, 1, topic, [(0, good)]))  # the small-request path
        assert readFrame(sock) is not None
        sock.sendall(produceV9(2, 1, topic, [(0, good), (1, good), (9, good)]))  # the general path
        assert readFrame(sock) is not None
    with KafkaWireClient(b.bootstrap) as client:
        client.fetchRaw(topic, 0, 0)
        client.fetchRaw(topic, 1, 0)
        client.metadata(["no-such-topic"])

    after = errors(scrape(port))
    grown = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
    assert grown[("produce", "NONE")] == 3
    assert grown[("produce", "UNKNOWN_TOPIC_OR_PARTITION")] == 1
    assert grown[("fetch", "NONE")] >= 2
    assert grown[("api_versions", "NONE")] >= 1
    assert grown[("metadata", "UNKNOWN_TOPIC_OR_PARTITION")] >= 1
