"""
The consumer protocol subscription parser.
"""

from __future__ import annotations

import struct

import pytest

from kafkatwist.coordinator import encodeSubscription, parseSubscription


def test_v0_round_trip():
    s = parseSubscription(encodeSubscription(["a", "b\u00e9"], b"ud"))
    assert (s.version, s.topics, s.userData) == (0, ("a", "b\u00e9"), b"ud")
    assert s.ownedPartitions == () and s.generationId == -1 and s.rackId is None


def test_null_user_data():
    assert parseSubscription(encodeSubscription(["a"])).userData is None


def test_v3_round_trip():
    data = encodeSubscription(["a"], None, 3, [("a", [0, 2])], 7, "rack-1")
    s = parseSubscription(data)
    assert s.ownedPartitions == (("a", (0, 2)),)
    assert (s.generationId, s.rackId) == (7, "rack-1")


def test_newer_version_reads_known_prefix():
    data = encodeSubscription(["a"], b"", 3, [], 1, None)
    data = struct.pack(">h", 9) + data[2:] + b"future fields"
    s = parseSubscription(data)
    assert s.version == 9 and s.topics == ("a",)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x05\x00", b"\xff\xff"])
def test_malformed(data):
    with pytest.raises(ValueError):
        parseSubscription(data)
