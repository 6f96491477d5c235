"""
The hand-written schemas of the versions below kio's floors
(L{kafkatwist.protocol.legacy_apis}) go through the same untrusted-length
walk as kio's (L{kafkatwist.protocol.bounds}) before kio's native reader:
every truncation and every lying count is a MalformedRequest, never a
crash or an allocation the frame cannot back.
"""

from __future__ import annotations

import random
import struct

import pytest

from kafkatwist.protocol.apis import knownVersions, requestType, responseType
from kafkatwist.protocol.bounds import program
from kafkatwist.protocol.codec import MalformedRequest, decodeRequest, encodeBody
from kafkatwist.protocol.legacy_apis import LEGACY_SCHEMAS
from tests.fuzz.entities import randomEntity

CASES = [(key, version) for key, versions in sorted(LEGACY_SCHEMAS.items()) for version in versions]


@pytest.mark.parametrize("apiKey,version", CASES)
def test_known_and_walkable(apiKey, version):
    assert version in knownVersions(apiKey)
    for cls in (requestType(apiKey, version), responseType(apiKey, version)):
        assert not cls.__flexible__
        program(cls)


@pytest.mark.parametrize("apiKey,version", CASES)
def test_truncations_and_lying_counts(apiKey, version):
    rng = random.Random(apiKey * 100 + version)
    cls = requestType(apiKey, version)
    for _ in range(5):
        body = encodeBody(randomEntity(cls, rng))
        assert type(decodeRequest(apiKey, version, body, 0)) is cls
        for cut in range(len(body)):
            try:
                decodeRequest(apiKey, version, body[:cut], 0)
            except MalformedRequest:
                pass
        # Every int32 in the body set to a huge count, one at a time.
        for at in range(0, len(body) - 3):
            forged = bytearray(body)
            struct.pack_into(">i", forged, at, 2**31 - 1)
            try:
                decodeRequest(apiKey, version, bytes(forged), 0)
            except MalformedRequest:
                pass
