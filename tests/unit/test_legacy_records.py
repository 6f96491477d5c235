"""
Message formats v0/v1: reading and checking them (with Kafka's error codes,
in Kafka's order), converting them to a record batch at produce, and record
batches back to them at fetch.  Cross-checked against bytes written by hand
from Kafka's layout and against kafka-python's independent implementation
of the old formats.
"""

from __future__ import annotations

import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.stored import decodeStoredBatches
from kafkatwist.protocol.batch import validateRecordSet
from kafkatwist.protocol.convert import downConvert, legacyMagic, upConvert
from kafkatwist.protocol.legacy_records import (
    compressInner,
    encodeMessage,
    fixLz4HeaderChecksum,
    readMessageSet,
    xxh32,
)
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches

E = ErrorCode
T0 = 1_700_000_000_000
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}


def handV0(offset, key, value, attributes=0):
    """
    A v0 log entry written from Kafka's layout, without the module.
    """
    body = struct.pack(">bb", 0, attributes)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def handV1(offset, timestamp, key, value, attributes=0):
    body = struct.pack(">bbq", 1, attributes, timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def kafkaPython(magic, codec, messages):
    builder = LegacyRecordBatchBuilder(magic, CODECS[codec], 1 << 20)
    for offset, timestamp, key, value in messages:
        assert builder.append(offset, timestamp, key, value) is not None
    return bytes(builder.build())


def converted(records, logAppendTime=False):
    batch = upConvert(records, maxMessageBytes=1 << 20, logAppendTime=logAppendTime)
    # What the log will take: a sound batch.
    validateRecordSet(bytearray(batch))
    [decoded] = decodeBatches(batch)
    return decoded


def refused(records, code, logAppendTime=False, maxMessageBytes=1 << 20):
    with pytest.raises(KafkaError) as e:
        upConvert(records, maxMessageBytes=maxMessageBytes, logAppendTime=logAppendTime)
    assert e.value.code == code, e.value
    return e.value


# -- the layouts -------------------------------------------------------------


def test_encode_matches_kafkas_layout():
    assert encodeMessage(7, 0, 0, -1, b"k", b"value") == handV0(7, b"k", b"value")
    assert encodeMessage(7, 1, 0, T0, None, b"value") == handV1(7, T0, None, b"value")
    assert encodeMessage(3, 1, 8, T0, b"", None) == handV1(3, T0, b"", None, attributes=8)


def test_read_hand_written_sets():
    data = handV0(0, b"a", b"1") + handV0(0, None, b"2") + handV0(0, b"c", None)
    messages = readMessageSet(data, 0)
    assert [(m.key, m.value, m.timestamp) for m in messages] == [
        (b"a", b"1", -1), (None, b"2", -1), (b"c", None, -1),
    ]
    [m] = readMessageSet(handV1(5, T0, b"k", b"v"), 1)
    assert (m.offset, m.timestamp, m.key, m.value) == (5, T0, b"k", b"v")


def test_lz4_broken_checksum():
    """
    Magic 0 LZ4 frames carry the descriptor checksum computed over the LZ4
    magic too (kafka-python's lz4_encode_old_kafka: xxh32(data[0:6])).
    """
    inner = handV0(0, None, b"x" * 100)
    frame = compressInner(3, 0, inner)
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF
    assert frame[6] != (xxh32(frame[4:6]) >> 8) & 0xFF
    fixed = fixLz4HeaderChecksum(frame)
    assert fixed[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    # Magic 1 frames are standard.
    frame1 = compressInner(3, 1, inner)
    assert frame1[6] == (xxh32(frame1[4:6]) >> 8) & 0xFF


# -- up: produce ---------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_up_convert_kafka_python_sets(magic, codec):
    messages = [(i, T0 + i, b"k%d" % i if i % 3 else None, b"v" * i if i % 5 else None) for i in range(20)]
    data = kafkaPython(magic, codec, messages)
    assert legacyMagic(data) == magic
    batch = converted(data)
    assert batch.compression == codec
    assert (batch.producerId, batch.baseSequence, batch.baseOffset) == (-1, -1, 0)
    assert [(r.offset, r.key, r.value) for r in batch.records] == [
        (i, k, v) for i, (_, _, k, v) in enumerate(messages)
    ]
    expected = [T0 + i if magic else -1 for i in range(20)]
    assert [r.timestamp for r in batch.records] == expected
    assert batch.maxTimestamp == max(expected)


def test_up_convert_lz4_magic_0():
    inner = b"".join(handV0(0, None, b"m%d" % i) for i in range(3))
    wrapper = handV0(2, None, compressInner(3, 0, inner), attributes=3)
    batch = converted(wrapper)
    assert [r.value for r in batch.records] == [b"m0", b"m1", b"m2"]


def test_up_convert_ignores_client_offsets():
    # v1 inner offsets need not be 0..n-1 (KAFKA-9669); v0 ones are anything.
    inner = handV1(7, T0, None, b"a") + handV1(3, T0, None, b"b")
    wrapper = handV1(100, T0, None, compressInner(1, 1, inner), attributes=1)
    assert [(r.offset, r.value) for r in converted(wrapper).records] == [(0, b"a"), (1, b"b")]


def test_magic_is_checked_before_the_batch_length():
    """
    A small v0 message is shorter than a v2 batch header: it is read as the
    old format it is, not refused as a damaged batch.
    """
    tiny = handV0(0, None, b"")
    assert len(tiny) < 61
    assert converted(tiny).records[0].value == b""
    with pytest.raises(KafkaError) as e:
        validateRecordSet(bytearray(tiny))
    assert e.value.code == E.unsupported_for_message_format


def test_errors_in_kafkas_order():
    good = handV0(0, None, b"v")
    refused(good + b"\x00" * 5, E.corrupt_message)  # trailing bytes
    refused(good + struct.pack(">qi", 0, 13) + b"\x00" * 13, E.corrupt_message)  # size < 14
    refused(good + good[:-1], E.corrupt_message)  # truncated entry
    bad = bytearray(good)
    bad[-1] ^= 1
    refused(bytes(bad), E.corrupt_message)  # CRC
    unknown = bytearray(good)
    unknown[16] = 3
    refused(good + bytes(unknown), E.corrupt_message)  # unknown magic
    refused(good + handV1(0, T0, None, b"v"), E.invalid_record)  # mixed formats
    refused(handV0(0, None, b"v" * 100), E.message_too_large, maxMessageBytes=50)


def test_compressed_wrapper_rules():
    inner = handV0(0, None, b"a")
    wrapper = handV0(0, None, compressInner(1, 0, inner), attributes=1)
    e = refused(wrapper + wrapper, E.invalid_record)
    assert "more than one" in e.message
    refused(handV0(0, None, None, attributes=1), E.invalid_record)  # null value
    refused(handV0(0, None, b"not gzip", attributes=1), E.corrupt_message)
    nested = handV0(0, None, compressInner(1, 0, wrapper), attributes=1)
    refused(nested, E.invalid_record)
    mixed = handV0(0, None, compressInner(1, 0, handV1(0, T0, None, b"x")), attributes=1)
    refused(mixed, E.invalid_record)
    refused(handV0(0, None, compressInner(1, 0, b""), attributes=1), E.invalid_record)
    badInner = bytearray(inner)
    badInner[-1] ^= 1
    refused(handV0(0, None, compressInner(1, 0, bytes(badInner)), attributes=1), E.corrupt_message)
    refused(handV0(0, None, b"zstd", attributes=4), E.invalid_record)


def test_log_append_time_claims():
    # LogValidator.validateTimestamp: refused unless the message has a time
    # and the topic keeps create times.
    claims = handV1(0, T0, None, b"v", attributes=8)
    assert converted(claims).records[0].timestamp == T0
    refused(claims, E.invalid_timestamp, logAppendTime=True)
    refused(handV1(0, -1, None, b"v", attributes=8), E.invalid_timestamp)
    refused(handV1(0, -5, None, b"v"), E.invalid_timestamp)


# -- down: fetch -----------------------------------------------------------------


def stored(*batches):
    data = bytearray()
    for batch in batches:
        data += batch
    return bytes(data)


def down(data, magic, fetchOffset=0):
    entries = list(downConvert(data, magic, fetchOffset, lambda d: decodeStoredBatches(d, maxDecompressedBytes=1 << 26)))
    return b"".join(entries)


def readLegacy(data):
    """
    kafka-python's reader of v0/v1 sets: (offset, timestamp, type, key, value).
    """
    out = []
    for batch in MemoryRecords(data):
        for r in batch:
            out.append((r.offset, r.timestamp, r.timestamp_type, r.key, r.value))
    return out


def records(base, n, start=0):
    return [Record(offset=base + i, timestamp=T0 + i, key=b"k%d" % i, value=b"v%d" % (start + i)) for i in range(n)]


@pytest.mark.parametrize("magic", [0, 1])
def test_down_convert_uncompressed_drops_records_before_the_fetch_offset(magic):
    data = buildBatch(records(10, 5), baseOffset=10, useRecordOffsets=True)
    got = readLegacy(down(data, magic, fetchOffset=12))
    assert [(o, k, v) for o, _, _, k, v in got] == [(12, b"k2", b"v2"), (13, b"k3", b"v3"), (14, b"k4", b"v4")]
    if magic:
        assert [t for _, t, _, _, _ in got] == [T0 + 2, T0 + 3, T0 + 4]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4"])
def test_down_convert_compressed_keeps_the_whole_batch(magic, codec):
    # Offsets with a gap, as compaction leaves them.
    recs = [Record(offset=20, timestamp=T0, value=b"a"), Record(offset=23, timestamp=T0 + 5, value=b"b")]
    data = buildBatch(recs, compression=codec, baseOffset=20, useRecordOffsets=True)
    out = down(data, magic, fetchOffset=23)
    [wrapper] = readMessageSet(out, magic)
    assert wrapper.offset == 23 and wrapper.codec == {"gzip": 1, "snappy": 2, "lz4": 3}[codec]
    if magic:
        assert wrapper.timestamp == T0 + 5
    if not (codec == "lz4" and magic == 0):  # kafka-python needs xxhash for it
        assert [(o, v) for o, _, _, _, v in readLegacy(out)] == [(20, b"a"), (23, b"b")]
    # Our own reader, which is what a produce of it would go through.
    batch = converted(out)
    assert [r.value for r in batch.records] == [b"a", b"b"]


def test_down_convert_log_append_time():
    data = buildBatch(records(0, 2), timestampType=1, maxTimestamp=T0 + 99)
    got = readLegacy(down(data, 1))
    assert [(t, tt) for _, t, tt, _, _ in got] == [(T0 + 99, 1), (T0 + 99, 1)]
    compressed = buildBatch(records(0, 2), compression="gzip", timestampType=1, maxTimestamp=T0 + 99)
    got = readLegacy(down(compressed, 1))
    assert [(t, tt) for _, t, tt, _, _ in got] == [(T0 + 99, 1), (T0 + 99, 1)]


def test_down_convert_drops_control_batches_and_headers():
    from kafkatwist.protocol.records import controlRecord

    data = stored(
        buildBatch([Record(value=b"x", headers=[("h", b"1")])], baseOffset=0, producerId=5, producerEpoch=0,
                   baseSequence=0, isTransactional=True),
        buildBatch([controlRecord(True)], baseOffset=1, producerId=5, producerEpoch=0, isTransactional=True,
                   isControl=True),
        buildBatch([Record(value=b"y")], baseOffset=2),
    )
    assert [(o, v) for o, _, _, _, v in readLegacy(down(data, 1))] == [(0, b"x"), (2, b"y")]


def test_down_convert_zstd():
    data = stored(buildBatch([Record(value=b"a")], baseOffset=0), buildBatch([Record(value=b"b")], compression="zstd", baseOffset=1))
    entries = downConvert(data, 1, 0, lambda d: decodeStoredBatches(d, maxDecompressedBytes=1 << 26))
    assert readLegacy(next(entries))[0][4] == b"a"
    with pytest.raises(KafkaError) as e:
        next(entries)
    assert e.value.code == E.unsupported_compression_type


def test_mutated_sets_only_raise_kafka_errors():
    """
    Untrusted bytes: whatever a mutated message set holds, conversion either
    succeeds or raises a KafkaError (which the broker answers per
    partition); lengths are never trusted past the bytes present.
    """
    import random

    rng = random.Random(16)
    seeds = []
    for magic in (0, 1):
        inner = b"".join(encodeMessage(i, magic, 0, T0 + i, b"k", b"v" * i) for i in range(4))
        seeds.append(inner)
        for codec in (1, 2, 3):
            seeds.append(encodeMessage(3, magic, codec, T0, None, compressInner(codec, magic, inner)))
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(4000):
        data = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            kind = rng.randrange(4)
            at = rng.randrange(len(data))
            if kind == 0:
                data[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del data[at:]
                if len(data) <= 16:
                    data = bytearray(rng.choice(seeds))
            elif kind == 2 and at + 4 <= len(data):
                struct.pack_into(">i", data, at, rng.choice([-2, -1, 0, 13, 14, 2**31 - 1, rng.randrange(1 << 16)]))
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        if legacyMagic(data) is None:
            continue
        try:
            upConvert(bytes(data), maxMessageBytes=1 << 20, logAppendTime=False)
            outcomes["ok"] += 1
        except KafkaError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 1000 and outcomes["ok"] > 10, outcomes
