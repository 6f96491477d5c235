"""
Tests for L{kafkatwist.protocol.batch}.
"""

import struct

import pytest
from crc32c import crc32c

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol import batch as B

from .batches import makeBatch


def corrupt(data: bytes, at: int, fmt: str | None = None, value=None) -> bytes:
    buf = bytearray(data)
    if fmt is None:
        buf[at] ^= 0xFF
    else:
        struct.pack_into(fmt, buf, at, value)
    return bytes(buf)


def recrc(data: bytes) -> bytes:
    buf = bytearray(data)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


def code(data) -> ErrorCode:
    with pytest.raises(KafkaError) as e:
        B.validateRecordSet(data)
    return e.value.code


def test_header_size():
    assert B.HEADER_SIZE == 61


def test_iter_batch_headers():
    data = makeBatch(3) + makeBatch(2, baseTimestamp=5)
    found = list(B.iterBatchHeaders(data))
    assert [(b.position, b.header.recordsCount) for b in found] == [
        (0, 3),
        (found[0].header.size, 2),
    ]
    assert found[1].header.baseTimestamp == 5
    # A truncated tail is left out.
    assert len(list(B.iterBatchHeaders(data[:-1]))) == 1


def test_validate_ok():
    data = makeBatch(5) + makeBatch(1)
    batches = B.validateRecordSet(data)
    assert [b.header.recordsCount for b in batches] == [5, 1]


def test_crc_mismatch():
    data = makeBatch(3)
    assert code(corrupt(data, len(data) - 2)) == ErrorCode.corrupt_message


def test_magic():
    assert code(recrc(makeBatch(1, magic=1))) == ErrorCode.unsupported_for_message_format
    assert code(recrc(makeBatch(1, magic=3))) == ErrorCode.corrupt_message


def test_lengths():
    data = makeBatch(2)
    assert code(data + b"\x00\x01") == ErrorCode.corrupt_message
    assert code(data[:-1]) == ErrorCode.corrupt_message
    assert code(data[:30]) == ErrorCode.corrupt_message
    assert code(corrupt(data, 8, ">i", 10)) == ErrorCode.corrupt_message
    assert code(corrupt(data, 8, ">i", len(data))) == ErrorCode.corrupt_message
    assert code(b"") == ErrorCode.invalid_record


def test_counts():
    data = makeBatch(3)
    assert code(recrc(corrupt(data, 57, ">i", 2))) == ErrorCode.invalid_record
    assert code(recrc(corrupt(data, 57, ">i", 0))) == ErrorCode.invalid_record
    assert code(recrc(corrupt(data, 23, ">i", 5))) == ErrorCode.invalid_record


def test_codec():
    assert code(makeBatch(1, attributes=5)) == ErrorCode.corrupt_message
    # The payload is decompressed at append: claiming zstd is not enough.
    assert code(makeBatch(1, attributes=4)) == ErrorCode.corrupt_message
    from kafkatwist.protocol.records import Record, buildBatch

    for codec in ("gzip", "snappy", "lz4", "zstd"):
        B.validateRecordSet(buildBatch([Record(value=b"v" * 100)] * 3, compression=codec))


def test_too_large():
    data = makeBatch(10, valueSize=100)
    with pytest.raises(KafkaError) as e:
        B.validateRecordSet(data, maxBatchBytes=len(data) - 1)
    assert e.value.code == ErrorCode.message_too_large
    B.validateRecordSet(data, maxBatchBytes=len(data))


def test_control():
    data = makeBatch(1, attributes=0x30)
    assert code(data) == ErrorCode.invalid_record
    assert B.validateRecordSet(data, allowControl=True)


def test_attributes():
    attributes = 0x3B
    assert B.compressionCodec(attributes) == 3
    assert B.timestampType(attributes) == B.TIMESTAMP_LOG_APPEND_TIME
    assert B.isTransactional(attributes)
    assert B.isControl(attributes)
    assert B.timestampType(0) == B.TIMESTAMP_CREATE_TIME
    assert not B.isTransactional(0) and not B.isControl(0)


def test_producer_fields():
    header = B.readHeader(makeBatch(2, producerId=42, producerEpoch=3, baseSequence=7))
    assert (header.producerId, header.producerEpoch, header.baseSequence) == (42, 3, 7)


def test_assign_offsets():
    data = bytearray(makeBatch(3) + makeBatch(2))
    assigned = B.assignOffsets(data, B.validateRecordSet(data), 100, leaderEpoch=7)
    assert [(a.baseOffset, a.lastOffset) for a in assigned] == [(100, 102), (103, 104)]
    headers = [b.header for b in B.validateRecordSet(data)]
    assert [h.baseOffset for h in headers] == [100, 103]
    assert [h.partitionLeaderEpoch for h in headers] == [7, 7]


def test_log_append_time():
    data = bytearray(makeBatch(3, baseTimestamp=10))
    B.assignOffsets(data, B.validateRecordSet(data), 0, logAppendTime=99999)
    (batch,) = B.validateRecordSet(data)  # CRC still valid
    assert batch.header.maxTimestamp == 99999
    assert B.timestampType(batch.header.attributes) == B.TIMESTAMP_LOG_APPEND_TIME
    assert batch.header.baseTimestamp == 10
