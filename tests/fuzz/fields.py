"""
Where the fragile fields of a well-formed request body are: every length
and count (legacy int16/int32, compact varint), every nullable-struct
marker, every tagged-field section, the fixed-size runs between them and
the record sets.  The fuzzer mutates exactly there.

Walks the same programs as L{kafkatwist.protocol.bounds} (so it knows the
layouts the broker's pre-pass knows), over a body that pass accepts.
"""

from __future__ import annotations

from typing import NamedTuple

from kafkatwist.protocol.bounds import BYTES, SKIP, STRING, STRUCT, program
from kafkatwist.protocol.header import INT16, INT32, readLength, readUnsignedVarint

# kinds
LENGTH = "length"  # a string, bytes or array length/count
MARKER = "marker"  # int8 null marker of a nullable struct
TAGS = "tags"  # tagged-field count of a flexible struct
FIXED = "fixed"  # a run of fixed-size fields
RECORDS = "records"  # a record set (its bytes)


class Field(NamedTuple):
    kind: str
    position: int
    #: bytes the field itself takes (the varint, int16 or int32; for FIXED
    #: and RECORDS the run's length)
    size: int
    #: compact (varint) rather than legacy encoding
    flexible: bool = False
    #: int16 rather than int32 when legacy
    short: bool = False
    nullable: bool = False
    name: str = ""
    #: for LENGTH: the value read (-1 null)
    value: int = 0


def locate(entityType: type, buf: bytes, offset: int) -> list[Field]:
    """
    @return: the fields of the body of C{entityType} at C{offset}, in order.
    """
    out: list[Field] = []
    _walk(program(entityType), buf, offset, out)
    return out


def _walk(prog, buf, pos: int, out: list) -> int:
    ops, tagged, _, fixed = prog
    if fixed is not None:
        if fixed:
            out.append(Field(FIXED, pos, fixed))
        return pos + fixed
    for op in ops:
        pos = _step(op, buf, pos, out)
    if tagged is not None:
        count, after = readUnsignedVarint(buf, pos)
        out.append(Field(TAGS, pos, after - pos, True, value=count))
        pos = after
        for _ in range(count):
            tag, pos = readUnsignedVarint(buf, pos)
            size, pos = readUnsignedVarint(buf, pos)
            pos += size
    return pos


def _length(op, buf, pos: int, short: bool, out: list) -> tuple[int, int]:
    flexible = op[1]
    n, after = readLength(buf, pos, flexible, INT16 if short else INT32)
    out.append(
        Field(LENGTH, pos, after - pos, flexible, short and not flexible, op[2], op[3], n)
    )
    return n, after


def _step(op, buf, pos: int, out: list) -> int:
    code = op[0]
    if code == SKIP:
        out.append(Field(FIXED, pos, op[1]))
        return pos + op[1]
    if code == STRING or code == BYTES:
        n, pos = _length(op, buf, pos, code == STRING, out)
        if n > 0:
            if op[3] == "records":
                out.append(Field(RECORDS, pos, n, name=op[3]))
            pos += n
        return pos
    if code == STRUCT:
        if op[2]:
            out.append(Field(MARKER, pos, 1, nullable=True, name=op[3]))
            if buf[pos] == 0xFF:
                return pos + 1
            pos += 1
        return _walk(op[1], buf, pos, out)
    n, pos = _length(op, buf, pos, False, out)
    if n <= 0:
        return pos
    if op[6] is not None:
        if op[6]:
            out.append(Field(FIXED, pos, n * op[6]))
        return pos + n * op[6]
    for _ in range(n):
        for element in op[4]:
            pos = _step(element, buf, pos, out)
    return pos
