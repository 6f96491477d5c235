"""
The varints of records (zigzag, up to 64 bits): one definition for the
record codec and the append-time record walk.  Protocol lengths and counts
(unsigned, at most 5 bytes) are in L{kafkatwist.protocol.header}.
"""

from __future__ import annotations

from kafkatwist.protocol.compression import CorruptRecordError

__all__ = ["readVarint", "zigzagVarint"]

_ONE_BYTE = [bytes((i,)) for i in range(128)]


def zigzagVarint(value: int) -> bytes:
    """
    The zigzag varint encoding of a signed 64-bit C{value}.
    """
    z = (value << 1) ^ (value >> 63)
    if z < 0x80:
        return _ONE_BYTE[z]
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def readVarint(buf, pos: int) -> tuple[int, int]:
    """
    Read an unsigned varint (callers unzigzag).  Hot loops inline the
    one-byte case and only call this for longer ones.

    @return: (raw value, position after it).
    @raise CorruptRecordError: if it is truncated or longer than 10 bytes.
    """
    value = 0
    shift = 0
    try:
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
    except IndexError:
        raise CorruptRecordError("truncated varint") from None
