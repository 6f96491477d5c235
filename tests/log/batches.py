"""
Build magic-2 record batches for tests: uncompressed, correct CRC-32C.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from kafkatwist.protocol.batch import HEADER

__all__ = ["makeBatch", "records", "varint"]


def varint(value: int) -> bytes:
    """
    Zigzag varint, as Kafka records encode lengths and deltas.
    """
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _record(offsetDelta: int, timestampDelta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(timestampDelta)
    body += varint(offsetDelta)
    for field in (key, value):
        if field is None:
            body += varint(-1)
        else:
            body += varint(len(field)) + field
    body += varint(0)  # headers
    return varint(len(body)) + bytes(body)


def makeBatch(
    count: int = 1,
    *,
    values: list[bytes] | None = None,
    valueSize: int = 10,
    baseTimestamp: int = 1000,
    timestampStep: int = 1,
    baseOffset: int = 0,
    producerId: int = -1,
    producerEpoch: int = -1,
    baseSequence: int = -1,
    attributes: int = 0,
    magic: int = 2,
    key: bytes | None = None,
) -> bytes:
    """
    A batch of C{count} records (or one per C{values}), timestamps
    C{baseTimestamp}, C{+timestampStep}, ..., all with C{key}.
    """
    if values is None:
        values = [bytes([65 + i % 26]) * valueSize for i in range(count)]
    count = len(values)
    body = b"".join(_record(i, i * timestampStep, key, v) for i, v in enumerate(values))
    maxTimestamp = baseTimestamp + (count - 1) * timestampStep
    header = bytearray(
        HEADER.pack(
            baseOffset,
            HEADER.size - 12 + len(body),
            -1,
            magic,
            0,
            attributes,
            count - 1,
            baseTimestamp,
            maxTimestamp,
            producerId,
            producerEpoch,
            baseSequence,
            count,
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def records(data) -> bytes:
    """
    The bytes of a read result (region or bytes), closing a region.
    """
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    try:
        return data.read()
    finally:
        data.close()
