"""
The one record walker (L{kafkatwist.protocol.recordwalk}): malformed records
give the Kafka error, never another exception.
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.compaction import mapRecords, recordsOf
from kafkatwist.log.recordchecks import checkClientRecords
from kafkatwist.protocol import batch as B
from kafkatwist.protocol.recordwalk import walkRecords
from kafkatwist.protocol.records import (
    CorruptRecordError,
    Record,
    buildBatch,
    decodeBatches,
    zigzagVarint,
)
from tests.unit.helpers import rewrite

zz = zigzagVarint


def record(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return zz(len(body)) + body


def plain(key: bytes | None = b"k", value: bytes | None = b"v", offsetDelta: int = 0) -> bytes:
    """
    One well-formed record's fields (after its length), no headers.
    """
    return b"".join(
        (
            b"\x00",
            zz(5),
            zz(offsetDelta),
            zz(-1) if key is None else zz(len(key)) + key,
            zz(-1) if value is None else zz(len(value)) + value,
            zz(0),
        )
    )


def test_walk_yields_every_field():
    payload = buildBatch(
        [Record(key=b"key", value=b"value", timestamp=1000, headers=[("h", b"x")]),
         Record(key=None, value=None, timestamp=1007)]
    )[B.HEADER_SIZE :]
    first, second = walkRecords(payload, 2, 1)
    start, end, tsDelta, _, offsetDelta, keyAt, keySize, valueAt, valueSize, _, headers = first
    assert (start, tsDelta, offsetDelta, headers) == (0, 0, 0, 1)
    assert payload[keyAt : keyAt + keySize] == b"key"
    assert payload[valueAt : valueAt + valueSize] == b"value"
    assert second[0] == end and second[1] == len(payload)
    assert (second[2], second[4], second[6], second[8]) == (7, 1, -1, -1)


MALFORMED = {
    "length past the end": zz(40) + plain(),
    "negative length": zz(-3) + plain(),
    "length shorter than a record": zz(3) + b"\x00\x00\x00",
    "length varint overflow": b"\xff" * 11 + plain(),
    "truncated length varint": b"\xff\xff",
    "timestamp varint overflow": record(b"\x00", b"\xff" * 11, zz(0), zz(-1), zz(-1), zz(0)),
    "key past the record": record(b"\x00", zz(0), zz(0), zz(50), b"k", zz(-1), zz(0)),
    "negative key length": record(b"\x00", zz(0), zz(0), zz(-2), zz(-1), zz(0)),
    "value past the record": record(b"\x00", zz(0), zz(0), zz(-1), zz(9), b"v", zz(0)),
    "negative value length": record(b"\x00", zz(0), zz(0), zz(-1), zz(-7), zz(0)),
    "negative header count": record(b"\x00", zz(0), zz(0), zz(-1), zz(-1), zz(-1)),
    "header count past the record": record(b"\x00", zz(0), zz(0), zz(-1), zz(-1), zz(1000)),
    "null header key": record(b"\x00", zz(0), zz(0), zz(-1), zz(-1), zz(1), zz(-1), zz(-1)),
    "header value past the record": record(
        b"\x00", zz(0), zz(0), zz(-1), zz(-1), zz(1), zz(1), b"h", zz(30), b"x"
    ),
    "bytes left over in the record": record(plain(), b"\x00\x00"),
    "bytes after the last record": record(plain()) + b"\x00",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_records_raise_corrupt_record_only(name):
    payload = MALFORMED[name]
    with pytest.raises(CorruptRecordError):
        list(walkRecords(payload, 1))
    with pytest.raises(CorruptRecordError):
        recordsOf(memoryview(payload), 1, 0)
    with pytest.raises(CorruptRecordError):
        mapRecords(payload, 1, 0, 0, 0, {}, 10)


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_records_in_a_batch_get_the_kafka_error(name):
    # A consumer decoding the stored batch: CorruptRecordError, which the
    # broker answers as CORRUPT_MESSAGE.  A client appending it: refused
    # with INVALID_RECORD when its lengths do not add up (the append walk
    # reads lengths only), stored as sent otherwise.
    batch = rewrite(buildBatch([Record(value=b"v")]), payload=MALFORMED[name])
    with pytest.raises(CorruptRecordError):
        list(decodeBatches(batch))
    try:
        valid = B.validateRecordSet(bytearray(batch))
    except KafkaError as e:
        assert e.code == ErrorCode.invalid_record
        return
    # Stored as sent on most topics; a compacted topic reads every key, and
    # refuses the batch with CORRUPT_MESSAGE.
    compacted = SimpleNamespace(
        compacts=True, logAppendTime=False, messageTimestampBeforeMaxMs=2**63 - 1,
        messageTimestampAfterMaxMs=2**63 - 1, maxMessageBytes=1 << 20,
    )
    with pytest.raises(KafkaError) as refused:
        checkClientRecords(bytearray(batch), valid, "t-0", compacted, 0)
    assert refused.value.code == ErrorCode.corrupt_message


def test_offset_deltas_out_of_order_are_refused_when_asked():
    payload = record(plain(offsetDelta=1)) + record(plain(offsetDelta=1))
    assert len(list(walkRecords(payload, 2))) == 2
    with pytest.raises(CorruptRecordError):
        list(walkRecords(payload, 2, 1))
    with pytest.raises(CorruptRecordError):
        list(walkRecords(record(plain(offsetDelta=3)), 1, 2))


@pytest.mark.parametrize("seed", range(3))
def test_damaged_bytes_never_raise_anything_else(seed):
    rng = random.Random(seed)
    records = [
        Record(key=rng.choice([None, b"k" * rng.randrange(200)]), value=b"v" * rng.randrange(300),
               headers=[("h", b"x")] * rng.randrange(3), timestamp=1000 + i)
        for i in range(20)
    ]
    payload = buildBatch(records)[B.HEADER_SIZE :]
    for _ in range(400):
        damaged = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        if rng.random() < 0.2:
            del damaged[rng.randrange(len(damaged)) :]
        count = rng.choice([20, 20, 19, 21, 2**31 - 1])
        for data in (bytes(damaged), memoryview(damaged)):
            try:
                list(walkRecords(data, count, rng.choice([None, 19])))
            except CorruptRecordError:
                pass
        try:
            B._walkRecords(bytes(damaged), 0, len(damaged), count)
        except CorruptRecordError:
            pass
