"""
Record batches for the sink, encoded from columns.

L{kafkatwist.protocol.records.buildBatch} takes L{Record} objects and
encodes any batch a test can think of.  The sink only ever writes one
shape -- every record stamped with the same time, offsets 0..n-1, no
producer id (or, for the exactly-once sink, a transactional one) -- so this encoder takes the key, value and header columns as
they come out of Arrow and spends its per-record time on little more than
joining bytes: varints of small lengths come from a table, the timestamp
delta is always 0.  Its output is checked against the reference decoder by
the tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from crc32c import crc32c

from kafkatwist.protocol.batch import (
    ATTRIBUTES_AT as _CRC_START,
    HEADER as _HEADER,
    LOG_OVERHEAD as _LOG_OVERHEAD,
    TRANSACTIONAL_BIT as _TRANSACTIONAL,
)
from kafkatwist.protocol.records import (
    BATCH_HEADER_SIZE,
    COMPRESSION_CODECS,
    compress,
    zigzagVarint,
)

__all__ = ["encodeBatch"]

_CRC = struct.Struct(">I")
_CODEC_IDS = {name: codecId for codecId, name in COMPRESSION_CODECS.items()}


#: zigzag varints of 0 .. 2^14-1: every length and offset delta of ordinary
#: records is in here
_TABLE = [zigzagVarint(i) for i in range(1 << 14)]
_TABLE_SIZE = len(_TABLE)
_NULL = zigzagVarint(-1)
# record attributes (always 0) and timestamp delta (always 0)
_ATTRIBUTES_AND_DELTA = b"\x00\x00"
_NO_HEADERS = _TABLE[0]


def _varint(n: int) -> bytes:
    return _TABLE[n] if n < _TABLE_SIZE else zigzagVarint(n)


def _headerBytes(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    out = [_varint(len(headers))]
    for key, value in headers:
        raw = key.encode("utf-8")
        out.append(_varint(len(raw)))
        out.append(raw)
        if value is None:
            out.append(_NULL)
        else:
            out.append(_varint(len(value)))
            out.append(value)
    return b"".join(out)


def encodeBatch(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    timestamp: int,
    compression: str = "none",
    producer: tuple[int, int, int] | None = None,
    transactional: bool = True,
) -> bytes:
    """
    One magic 2 record batch of C{len(values)} records (at least one), all
    with create time C{timestamp} (ms), as a producer would send it.

    @param headers: per record, its (key, value) headers or C{None}; or
        C{None} if no record has any.
    @param producer: C{(producerId, epoch, baseSequence)} for an
        idempotent batch, else C{None}.
    @param transactional: with C{producer}, mark the batch transactional
        (the exactly-once sink); else it is only idempotent (the
        at-least-once sink with acks=all).
    """
    n = len(values)
    if n == 0:
        raise ValueError("a record batch needs at least one record")
    parts: list[bytes] = []
    append = parts.append
    table, tableSize, join = _TABLE, _TABLE_SIZE, b"".join
    for i in range(n):
        key = keys[i]
        value = values[i]
        recordHeaders = headers[i] if headers is not None else None
        body = join(
            (
                _ATTRIBUTES_AND_DELTA,
                table[i] if i < tableSize else zigzagVarint(i),
                _NULL if key is None else _varint(len(key)),
                b"" if key is None else key,
                _NULL if value is None else _varint(len(value)),
                b"" if value is None else value,
                _headerBytes(recordHeaders) if recordHeaders else _NO_HEADERS,
            )
        )
        size = len(body)
        append(table[size] if size < tableSize else zigzagVarint(size))
        append(body)
    payload = join(parts)
    codec = _CODEC_IDS[compression]
    if codec:
        payload = compress(codec, payload)
    producerId, epoch, sequence = producer if producer is not None else (-1, -1, -1)
    header = bytearray(
        _HEADER.pack(
            0,  # base offset: the broker assigns offsets
            BATCH_HEADER_SIZE - _LOG_OVERHEAD + len(payload),
            -1,  # partition leader epoch
            2,  # magic
            0,  # CRC, below
            # attributes: compression, create time, transactional
            codec | (_TRANSACTIONAL if producer is not None and transactional else 0),
            n - 1,  # last offset delta
            timestamp,
            timestamp,
            producerId,  # -1: not idempotent
            epoch,
            sequence,
            n,
        )
    )
    crc = crc32c(payload, crc32c(memoryview(header)[_CRC_START:]))
    _CRC.pack_into(header, _CRC_START - 4, crc)
    return bytes(header) + payload
