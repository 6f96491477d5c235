"""
The full record batch codec, L{kafkatwist.protocol.records}: round trips in
every codec, CRCs, partial batches, corruption, and cross-checks against
kafka-python's independent implementation in both directions.
"""

import gzip
import struct
import types
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c

from kafkatwist.protocol import records as R
from kafkatwist.protocol.records import (
    CorruptRecordError,
    CrcMismatchError,
    Record,
    RecordBatch,
    UnsupportedCompression,
    buildBatch,
    compress,
    controlRecord,
    decodeBatches,
    decompress,
)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
T0 = 1_700_000_000_000


def sampleRecords():
    """
    Records covering the encoding's corners: null and empty keys and
    values, headers with null values and non-ASCII keys, timestamps that go
    backwards, values long enough for multi-byte varints and several xerial
    snappy blocks.
    """
    return [
        Record(timestamp=T0, key=b"k0", value=b"v0"),
        Record(timestamp=T0 + 5, key=None, value=b"no key"),
        Record(timestamp=T0 - 1000, key=b"tombstone", value=None),
        Record(timestamp=T0 + 1, key=b"", value=b""),
        Record(timestamp=T0 + 2, key=None, value=None, headers=[("h", b"1")]),
        Record(
            timestamp=T0 + 3,
            key=b"hdrs",
            value=b"x",
            headers=[("a", b"A"), ("n\u00e9", None), ("", b""), ("a", b"again")],
        ),
        Record(timestamp=T0 + 10**9, key=b"big" * 100, value=bytes(range(256)) * 300),
        Record(timestamp=T0 + 7, key=b"k" * 63, value=b"v" * 64),
    ]


def assertSameRecords(decoded, expected, baseOffset=0):
    assert len(decoded) == len(expected)
    for i, (got, want) in enumerate(zip(decoded, expected)):
        assert got.offset == baseOffset + i
        assert got.timestamp == want.timestamp
        assert got.key == want.key
        assert got.value == want.value
        assert got.headers == want.headers


# -- round trips ---------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(codec):
    """
    Every field survives encode and decode, in every codec.
    """
    recs = sampleRecords()
    raw = buildBatch(
        recs,
        compression=codec,
        baseOffset=1000,
        producerId=77,
        producerEpoch=3,
        baseSequence=12,
        partitionLeaderEpoch=9,
        isTransactional=True,
    )
    [batch] = list(decodeBatches(raw))
    assert isinstance(batch, RecordBatch)
    assert batch.baseOffset == 1000
    assert batch.partitionLeaderEpoch == 9
    assert batch.compression == codec
    assert batch.attributes & 7 == CODEC_IDS[codec]
    assert batch.timestampType == 0
    assert batch.isTransactional
    assert not batch.isControl
    assert batch.lastOffsetDelta == len(recs) - 1
    assert batch.lastOffset == 1000 + len(recs) - 1
    assert batch.nextOffset == 1000 + len(recs)
    assert batch.baseTimestamp == T0
    assert batch.maxTimestamp == T0 + 10**9
    assert (batch.producerId, batch.producerEpoch, batch.baseSequence) == (77, 3, 12)
    assert batch.recordCount == len(recs)
    assert batch.sizeInBytes == len(raw)
    assert batch.magic == 2
    assertSameRecords(batch.records, recs, 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_many_small_records(codec):
    """
    Offset and timestamp deltas past one and two varint bytes.
    """
    recs = [
        Record(timestamp=T0 + i * 37, key=b"%d" % i, value=b"v" * (i % 50)) for i in range(20000)
    ]
    [batch] = decodeBatches(buildBatch(recs, codec))
    assertSameRecords(batch.records, recs)


def test_defaults():
    """
    A record without timestamp gets the time of building; defaults are a
    null key, null value, no headers, and no producer.
    """
    import time

    before = int(time.time() * 1000)
    raw = buildBatch([Record(value=b"x"), Record()])
    after = int(time.time() * 1000)
    [batch] = decodeBatches(raw)
    assert before <= batch.records[0].timestamp <= after
    assert batch.records[1].key is None and batch.records[1].value is None
    assert batch.records[1].headers == []
    assert (batch.producerId, batch.producerEpoch, batch.baseSequence) == (-1, -1, -1)
    assert batch.partitionLeaderEpoch == -1


def test_codec_by_id():
    [batch] = decodeBatches(buildBatch([Record(value=b"x")], compression=3))
    assert batch.compression == "lz4"
    with pytest.raises(UnsupportedCompression):
        buildBatch([Record(value=b"x")], compression="brotli")
    with pytest.raises(UnsupportedCompression):
        buildBatch([Record(value=b"x")], compression=5)


def test_empty_batch_refused():
    with pytest.raises(ValueError):
        buildBatch([])


def test_log_append_time():
    """
    With log-append time, every record reports the batch's maxTimestamp,
    as Kafka consumers do.
    """
    raw = buildBatch(
        [Record(timestamp=T0, value=b"a"), Record(timestamp=T0 + 1, value=b"b")],
        timestampType=1,
        maxTimestamp=T0 + 999,
    )
    [batch] = decodeBatches(raw)
    assert batch.timestampType == 1
    assert [r.timestamp for r in batch.records] == [T0 + 999, T0 + 999]


def test_record_offsets_with_gaps():
    """
    C{useRecordOffsets} keeps given offsets (as compaction leaves them).
    """
    recs = [Record(offset=o, timestamp=T0, value=b"%d" % o) for o in (100, 103, 110)]
    [batch] = decodeBatches(buildBatch(recs, baseOffset=100, useRecordOffsets=True))
    assert [r.offset for r in batch.records] == [100, 103, 110]
    assert batch.lastOffsetDelta == 10
    assert batch.nextOffset == 111
    with pytest.raises(ValueError):
        buildBatch(recs[::-1], baseOffset=100, useRecordOffsets=True)


def test_control_batch():
    raw = buildBatch(
        [controlRecord(commit=True, coordinatorEpoch=5, timestamp=T0)],
        producerId=1,
        producerEpoch=0,
        isTransactional=True,
        isControl=True,
    )
    [batch] = decodeBatches(raw)
    assert batch.isControl and batch.isTransactional
    [record] = batch.records
    assert struct.unpack(">hh", record.key) == (0, 1)
    assert struct.unpack(">hi", record.value) == (0, 5)


def test_headers_only():
    raw = buildBatch(sampleRecords(), "zstd")
    [batch] = decodeBatches(raw, decodeRecords=False)
    assert batch.records == []
    assert batch.recordCount == len(sampleRecords())


# -- several batches, partial batches --------------------------------------


def test_several_batches_and_trailing_partial():
    """
    Batches decode in sequence; a trailing partial batch -- cut anywhere --
    is skipped, as a consumer does with a fetch's size-limited tail.
    """
    first = buildBatch([Record(timestamp=T0, value=b"a")], baseOffset=0)
    second = buildBatch([Record(timestamp=T0, value=b"b" * 100)] * 3, "gzip", baseOffset=1)
    third = buildBatch([Record(timestamp=T0, value=b"c")], baseOffset=4)
    whole = first + second + third
    assert [b.baseOffset for b in decodeBatches(whole)] == [0, 1, 4]
    for cut in range(len(first) + len(second), len(whole)):
        assert [b.baseOffset for b in decodeBatches(whole[:cut])] == [0, 1]
    assert list(decodeBatches(b"")) == []
    assert list(decodeBatches(first[:11])) == []


def test_accepts_buffers():
    raw = buildBatch(sampleRecords())
    for buf in (bytearray(raw), memoryview(raw), memoryview(b"xx" + raw)[2:]):
        [batch] = decodeBatches(buf)
        assertSameRecords(batch.records, sampleRecords())


# -- CRC and corruption ----------------------------------------------------


def test_crc_value():
    """
    The CRC is CRC-32C over attributes to the end; the leader epoch and base
    offset are outside it.
    """
    raw = buildBatch(sampleRecords(), "lz4")
    (stored,) = struct.unpack_from(">I", raw, 17)
    assert stored == crc32c(raw[21:])
    [batch] = decodeBatches(raw)
    assert batch.crc == stored
    rewritten = bytearray(raw)
    struct.pack_into(">q", rewritten, 0, 5000)
    struct.pack_into(">i", rewritten, 12, 42)
    [batch] = decodeBatches(bytes(rewritten))
    assert batch.baseOffset == 5000 and batch.partitionLeaderEpoch == 42


def test_crc_mismatch():
    raw = bytearray(buildBatch([Record(timestamp=T0, key=b"k", value=b"hello world")]))
    raw[-3] ^= 0xFF  # inside the value
    with pytest.raises(CrcMismatchError) as info:
        list(decodeBatches(bytes(raw)))
    assert info.value.baseOffset == 0
    assert "CRC mismatch" in str(info.value)
    assert info.value.expected != info.value.actual
    # when not asked to check, the (structurally intact) batch decodes
    [batch] = decodeBatches(bytes(raw), checkCrc=False)
    assert batch.records[0].value != b"hello world"


def test_crc_mismatch_on_header_field():
    raw = bytearray(buildBatch([Record(timestamp=T0, value=b"x")]))
    struct.pack_into(">q", raw, 27, T0 + 1)  # baseTimestamp is covered
    with pytest.raises(CrcMismatchError):
        list(decodeBatches(bytes(raw)))


def test_other_magic_refused():
    raw = bytearray(buildBatch([Record(value=b"x")]))
    raw[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        list(decodeBatches(bytes(raw)))


def _rebuild(header: bytes, payload: bytes) -> bytes:
    out = bytearray(header[:61] + payload)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def test_corrupt_records():
    """
    Records that do not fill their declared lengths, or overrun the batch,
    raise a clear error rather than decoding garbage.
    """
    raw = buildBatch([Record(timestamp=T0, key=b"k", value=b"value")])
    header, payload = raw[:61], raw[61:]
    # a record length one too long
    assert payload[0] == len(payload[1:]) * 2
    bad = bytes([payload[0] + 2]) + payload[1:]
    with pytest.raises(CorruptRecordError):
        list(decodeBatches(_rebuild(header, bad)))
    # one too short: leftover bytes
    bad = bytes([payload[0] - 2]) + payload[1:]
    with pytest.raises(CorruptRecordError):
        list(decodeBatches(_rebuild(header, bad)))
    # trailing garbage after the declared record count
    with pytest.raises(CorruptRecordError, match="after the batch"):
        list(decodeBatches(_rebuild(header, payload + b"\x00")))
    # truncated payload
    with pytest.raises(CorruptRecordError):
        list(decodeBatches(_rebuild(header, payload[:-2])))
    # a batch length shorter than a header
    short = bytearray(raw)
    struct.pack_into(">i", short, 8, 20)
    with pytest.raises(CorruptRecordError):
        list(decodeBatches(bytes(short)))


def test_corrupt_compressed_payload():
    raw = buildBatch([Record(timestamp=T0, value=b"x" * 1000)], "zstd")
    header, payload = raw[:61], raw[61:]
    with pytest.raises(CorruptRecordError, match="zstd"):
        list(decodeBatches(_rebuild(header, payload[: len(payload) // 2] + b"\x00" * 8)))


# -- compression formats ---------------------------------------------------


def test_gzip_format():
    data = b"hello " * 1000
    out = compress("gzip", data)
    assert out[:2] == b"\x1f\x8b"
    assert gzip.decompress(out) == data
    # multi-member gzip and zlib-wrapped data decode too
    assert decompress("gzip", gzip.compress(b"a") + gzip.compress(b"b")) == b"ab"
    assert decompress("gzip", zlib.compress(data)) == data


def test_snappy_xerial_format():
    """
    Encoding is xerial-framed like the Java client (16-byte header, 32 KiB
    blocks); decoding takes xerial and raw snappy.
    """
    data = bytes(range(256)) * 1000  # 256000 bytes: 8 blocks
    out = compress("snappy", data)
    assert out[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    pos, blocks = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768] * 7 + [256000 - 7 * 32768]
    assert b"".join(blocks) == data
    assert decompress("snappy", out) == data
    assert decompress("snappy", bytes(cramjam.snappy.compress_raw(data))) == data


def test_snappy_both_framings_in_batches():
    """
    A batch whose payload is raw snappy (as librdkafka writes) decodes like
    a xerial-framed one.
    """
    recs = sampleRecords()
    xerial = buildBatch(recs, "snappy")
    plain = buildBatch(recs)
    rawPayload = bytes(cramjam.snappy.compress_raw(plain[61:]))
    header = bytearray(xerial[:61])
    rawBatch = _rebuild(bytes(header), rawPayload)
    for raw in (xerial, rawBatch):
        [batch] = decodeBatches(raw)
        assert batch.compression == "snappy"
        assertSameRecords(batch.records, recs)


def test_lz4_frame_flags():
    """
    LZ4 frames with independent 64 KiB blocks and no content size, which is
    what Kafka's Java LZ4 reader accepts.
    """
    out = compress("lz4", b"z" * 200000)
    assert out[:4] == b"\x04\x22\x4d\x18"  # frame magic
    flg, bd = out[4], out[5]
    assert flg >> 6 == 1  # version
    assert flg & 0x20  # block independence
    assert not flg & 0x08  # no content size
    assert (bd >> 4) & 7 == 4  # 64 KiB max block
    assert lz4.frame.decompress(out) == b"z" * 200000
    # frames with content size and linked blocks, as other writers may use
    other = lz4.frame.compress(b"q" * 1000, store_size=True, block_linked=True)
    assert decompress("lz4", other) == b"q" * 1000


def test_zstd_without_content_size():
    """
    A zstd frame without a content size (streaming writers) decodes.
    """
    data = b"streamed " * 5000
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    params = zstandard.get_frame_parameters(frame)
    assert params.content_size in (0, zstandard.CONTENTSIZE_UNKNOWN)
    assert decompress("zstd", frame) == data
    chunker = zstandard.ZstdCompressor().chunker(chunk_size=1024)
    streamed = b"".join(chunker.compress(data)) + b"".join(chunker.finish())
    assert decompress("zstd", streamed) == data


# -- cross-check with kafka-python -------------------------------------------


@pytest.fixture
def kafkaPython(monkeypatch):
    """
    kafka-python's record codec, with snappy provided by cramjam when
    python-snappy is missing (kafka-python's own xerial framing code is
    still what runs).
    """
    import kafka.codec
    from kafka.record import default_records

    if not kafka.codec.has_snappy():
        shim = types.SimpleNamespace(
            compress=lambda b: bytes(cramjam.snappy.compress_raw(bytes(b))),
            decompress=lambda b: bytes(cramjam.snappy.decompress_raw(bytes(b))),
        )
        monkeypatch.setattr(kafka.codec, "snappy", shim)
    return default_records


@pytest.mark.parametrize("codec", CODECS)
def test_decode_kafka_python_batches(kafkaPython, codec):
    """
    Batches written by kafka-python's builder decode with ours.
    """
    builder = kafkaPython.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODEC_IDS[codec],
        is_transactional=False,
        producer_id=123,
        producer_epoch=4,
        base_sequence=56,
        batch_size=1 << 30,
    )
    recs = sampleRecords()
    for i, r in enumerate(recs):
        assert builder.append(i, r.timestamp, r.key, r.value, r.headers) is not None
    raw = bytes(builder.build())
    [batch] = decodeBatches(raw)
    assert batch.compression == codec
    assert (batch.producerId, batch.producerEpoch, batch.baseSequence) == (123, 4, 56)
    assert batch.maxTimestamp == max(r.timestamp for r in recs)
    assertSameRecords(batch.records, recs)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_decodes_ours(kafkaPython, codec):
    """
    Batches we write parse with kafka-python's reader, CRC included.
    """
    recs = sampleRecords()
    raw = buildBatch(
        recs, codec, baseOffset=42, producerId=9, producerEpoch=1, baseSequence=0,
        isTransactional=True,
    )
    theirs = kafkaPython.DefaultRecordBatch(raw)
    assert theirs.validate_crc()
    assert theirs.base_offset == 42
    assert theirs.compression_type == CODEC_IDS[codec]
    assert theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 1, 0)
    assert theirs.next_offset == 42 + len(recs)
    got = list(theirs)
    assert len(got) == len(recs)
    for i, (g, r) in enumerate(zip(got, recs)):
        assert g.offset == 42 + i
        assert g.timestamp == r.timestamp
        assert g.key == r.key
        assert g.value == r.value
        assert list(g.headers) == r.headers


def test_kafka_python_snappy_framings(kafkaPython):
    """
    kafka-python's xerial and raw snappy encodings both decode; its decoder
    reads our xerial framing.
    """
    import kafka.codec

    data = b"snappy data " * 10000
    assert decompress("snappy", kafka.codec.snappy_encode(data, xerial_compatible=True)) == data
    assert decompress("snappy", kafka.codec.snappy_encode(data, xerial_compatible=False)) == data
    assert kafka.codec.snappy_decode(compress("snappy", data)) == data


def test_zigzag_helpers():
    """
    The varint writer against known encodings, the reader on long values.
    """
    cases = {0: b"\x00", -1: b"\x01", 1: b"\x02", 63: b"\x7e", -64: b"\x7f", 64: b"\x80\x01"}
    for value, encoded in cases.items():
        assert R.zigzagVarint(value) == encoded
    for value in (2**31 - 1, -(2**31), 2**63 - 1, -(2**63), 300, -300):
        raw = R.zigzagVarint(value)
        v, pos = R.readVarint(raw + b"tail", 0)
        assert pos == len(raw)
        assert (v >> 1) ^ -(v & 1) == value
    with pytest.raises(CorruptRecordError):
        R.readVarint(b"\x80\x80", 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_truncated_compressed_data(codec):
    """
    Half a compressed payload is an error, never a silently short result.
    """
    out = compress(codec, bytes(range(256)) * 500)
    with pytest.raises(CorruptRecordError):
        decompress(codec, out[: len(out) // 2])
