"""
The record-batch compression codecs (none, gzip, snappy, lz4, zstd), with
decompression bounded: a batch's payload is untrusted, and a few hundred
kilobytes of zstd can inflate to gigabytes.

Compression follows the Java client byte for byte where it matters for
interoperability: gzip streams, xerial-framed snappy (raw snappy is accepted
on decode, as librdkafka and the Java client both do), LZ4 frames with
independent 64 KiB blocks, and zstd frames (which need not carry their
content size).

Every decoder stops as soon as its output would pass the limit, so memory
is bounded by the limit and not by what the payload claims.  Pure functions,
no I/O.
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

__all__ = [
    "COMPRESSION_CODECS",
    "COMPRESSION_GZIP",
    "COMPRESSION_LZ4",
    "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY",
    "COMPRESSION_ZSTD",
    "CorruptRecordError",
    "DEFAULT_DECOMPRESSION_LIMIT",
    "DecompressionLimitExceeded",
    "UnsupportedCompression",
    "codecId",
    "compress",
    "decompress",
    "decompressionLimit",
]

#: batch attributes: compression type (Kafka's C{CompressionType} ids)
COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
#: ... by id and by name
COMPRESSION_CODECS: dict[int, str] = {
    COMPRESSION_NONE: "none",
    COMPRESSION_GZIP: "gzip",
    COMPRESSION_SNAPPY: "snappy",
    COMPRESSION_LZ4: "lz4",
    COMPRESSION_ZSTD: "zstd",
}
_CODEC_IDS = {name: codecId for codecId, name in COMPRESSION_CODECS.items()}

#: how many times C{message.max.bytes} (at least 1 MiB) a batch may inflate
#: to.  Producers close a batch on its estimated *compressed* size, so a
#: legitimate batch of repetitive data can be many times larger than the
#: limit once decompressed; 32 times covers the ratios real payloads reach
#: while stopping a bomb within tens of megabytes.
DECOMPRESSION_RATIO = 32
_MIN_UNIT = 1 << 20
#: the limit when the topic's C{message.max.bytes} is not at hand
DEFAULT_DECOMPRESSION_LIMIT = DECOMPRESSION_RATIO * _MIN_UNIT


class CorruptRecordError(ValueError):
    """
    The bytes are not a well-formed magic 2 record batch.
    """


class UnsupportedCompression(CorruptRecordError):
    """
    A compression codec id or name this module does not know.
    """


class DecompressionLimitExceeded(CorruptRecordError):
    """
    A payload inflates to more than the limit it was decoded with.
    """


def decompressionLimit(maxMessageBytes: int | None) -> int:
    """
    @return: how many bytes a batch may decompress to, for a topic whose
        C{message.max.bytes} is C{maxMessageBytes}.
    """
    return DECOMPRESSION_RATIO * max(maxMessageBytes or 0, _MIN_UNIT)


# Java's SnappyOutputStream (xerial): magic, version 1, compatible version 1.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
# SnappyOutputStream's default block size, which Kafka's SnappyFactory uses
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def codecId(compression: str | int) -> int:
    """
    @param compression: a codec name or id.
    @raise UnsupportedCompression: for anything else.
    """
    if isinstance(compression, int):
        if compression not in COMPRESSION_CODECS:
            raise UnsupportedCompression(f"compression type {compression}")
        return compression
    try:
        return _CODEC_IDS[compression.lower()]
    except KeyError:
        raise UnsupportedCompression(f"compression {compression!r}") from None


def compress(compression: str | int, data: bytes) -> bytes:
    """
    Compress a batch's record section the way the Java client does.

    @param compression: a codec name or id.
    """
    codec = codecId(compression)
    if codec == 0:
        return bytes(data)
    if codec == 1:
        # GZIPOutputStream: gzip container, deflate level 6 (the default)
        compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
        return compressor.compress(data) + compressor.flush()
    if codec == 2:
        return _snappyXerialEncode(data)
    if codec == 3:
        # Kafka's LZ4 reader needs independent blocks; 64 KiB blocks, no
        # content size and no content checksum is what KafkaLZ4BlockOutputStream
        # writes.
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    return zstandard.ZstdCompressor(level=3).compress(data)


def decompress(compression: str | int, data, limit: int = DEFAULT_DECOMPRESSION_LIMIT) -> bytes:
    """
    Undo L{compress}, and also accept what other clients write: raw snappy,
    zlib-wrapped or multi-member gzip, zstd frames without a content size,
    several frames in a row.

    @param limit: the most bytes the result may have.
    @raise DecompressionLimitExceeded: if it would have more.
    @raise CorruptRecordError: if the data does not decompress.
    """
    codec = codecId(compression)
    try:
        if codec == 0:
            out = bytes(data)
        elif codec == 1:
            out = _gunzip(data, limit)
        elif codec == 2:
            out = _snappyDecode(data, limit)
        elif codec == 3:
            out = _unlz4(data, limit)
        else:
            out = _unzstd(data, limit)
    except CorruptRecordError:
        raise
    except Exception as e:
        name = COMPRESSION_CODECS[codec]
        raise CorruptRecordError(f"cannot decompress {name} records: {e}") from e
    if len(out) > limit:
        _tooLarge(codec, limit)
    return out


def _tooLarge(codec: int, limit: int):
    raise DecompressionLimitExceeded(
        f"{COMPRESSION_CODECS[codec]} records decompress to more than {limit} bytes"
    )


def _joined(parts: list) -> bytes:
    # One frame is the common case: no second copy of up to the limit.
    if len(parts) == 1:
        return parts[0]
    return b"".join(parts)


def _gunzip(data, limit: int) -> bytes:
    # 47 = 32 + 15: accept both gzip and zlib headers.
    return _streams(data, limit, 1, lambda: zlib.decompressobj(47))


def _unlz4(data, limit: int) -> bytes:
    return _streams(data, limit, 3, lz4.frame.LZ4FrameDecompressor)


def _streams(data, limit: int, codec: int, decoder) -> bytes:
    """
    Decode a concatenation of gzip members or lz4 frames (a valid stream
    for both), each call asking for one byte more than the budget left: if
    it comes, the limit is passed.
    """
    out = []
    total = 0
    data = bytes(data)
    while data:
        d = decoder()
        chunk = d.decompress(data, limit - total + 1)
        total += len(chunk)
        if total > limit:
            _tooLarge(codec, limit)
        out.append(chunk)
        if not d.eof:
            raise CorruptRecordError(f"truncated {COMPRESSION_CODECS[codec]} stream")
        data = d.unused_data
    return _joined(out)


def _snappyXerialEncode(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _rawSnappy(block, budget: int) -> bytes:
    # A raw snappy block starts with its uncompressed length: refuse before
    # the decompressor allocates it.
    if cramjam.snappy.decompress_raw_len(block) > budget:
        _tooLarge(2, budget)
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappyDecode(data, limit: int) -> bytes:
    data = bytes(data)
    if not data.startswith(_XERIAL_MAGIC):
        return _rawSnappy(data, limit)
    # xerial framing: 16-byte header, then (int32 length, raw snappy block)*
    pos = len(_XERIAL_HEADER)
    end = len(data)
    out = []
    total = 0
    while pos < end:
        if pos + 4 > end:
            raise CorruptRecordError("truncated xerial snappy block length")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError("truncated xerial snappy block")
        try:
            block = _rawSnappy(data[pos : pos + size], limit - total)
        except DecompressionLimitExceeded:
            _tooLarge(2, limit)
        total += len(block)
        out.append(block)
        pos += size
    return _joined(out)


def _unzstd(data, limit: int) -> bytes:
    # Frames need not carry their content size (librdkafka and zstd-jni
    # streams omit it), and a decompression object has no output bound.  So:
    # first count the output in bounded reads, across frames, and stop past
    # the limit; then, knowing the total is small, decode again with
    # decompression objects, which tell a truncated frame (no eof) from the
    # end.  (A decompressor is not to be shared between threads: one each.)
    data = bytes(data)
    dctx = zstandard.ZstdDecompressor()
    total = 0
    with dctx.stream_reader(data, read_across_frames=True) as reader:
        while True:
            chunk = reader.read(1 << 17)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                _tooLarge(4, limit)
    out = []
    while data:
        d = dctx.decompressobj()
        out.append(d.decompress(data))
        if not d.eof:
            raise CorruptRecordError("truncated zstd frame")
        data = d.unused_data
    return _joined(out)
