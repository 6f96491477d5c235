"""
The sink's batch encoder, read back by the reference decoder.
"""

import random

import pytest

pytest.importorskip("pyspark")

from kafkatwist.protocol.records import decodeBatches  # noqa: E402
from kafkatwist_spark.encoding import encodeBatch  # noqa: E402


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip(codec):
    rng = random.Random(codec)
    n = 20_000  # offset deltas past the varint table
    keys = [None if i % 7 == 0 else rng.randbytes(rng.choice([0, 3, 20])) for i in range(n)]
    values = [
        None if i % 11 == 0 else rng.randbytes(17_000 if i % 1000 == 1 else rng.choice([0, 90]))
        for i in range(n)
    ]
    headers = [[("h", b"1"), ("é", None)] if i % 5 == 0 else None for i in range(n)]
    raw = encodeBatch(keys, values, headers, 1_700_000_000_123, codec)
    (batch,) = list(decodeBatches(raw))
    assert (batch.compression, batch.recordCount, batch.lastOffsetDelta) == (codec, n, n - 1)
    assert (batch.producerId, batch.baseSequence, batch.timestampType) == (-1, -1, 0)
    assert [r.offset for r in batch.records] == list(range(n))
    assert {r.timestamp for r in batch.records} == {1_700_000_000_123}
    assert [r.key for r in batch.records] == keys
    assert [r.value for r in batch.records] == values
    assert [r.headers or None for r in batch.records] == headers


def test_no_headers():
    raw = encodeBatch([b"k"], [b"v"], None, 5)
    (batch,) = list(decodeBatches(raw))
    assert [(r.key, r.value, r.headers) for r in batch.records] == [(b"k", b"v", [])]


def test_empty():
    with pytest.raises(ValueError):
        encodeBatch([], [], None, 0)
