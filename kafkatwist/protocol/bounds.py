"""
A pre-pass over a message body, driven by its schema, that checks every
untrusted length against the bytes actually present before any decoder sees
the body.

Why a separate pass: C{kio}'s reader is native code that reserves room for
an array as soon as it has read the count (C{Vec::with_capacity}); a count
of 2^35 makes the allocation fail and Rust aborts the whole process, which
no Python C{try} can catch.  So nothing reaches it unless this walk accepted
the body: every array count, string and bytes length (compact varint and
legacy int16/int32 forms) fits in the bytes left, an array's count times the
smallest encoding of its element fits too (which bounds the pre-allocation
by the frame size before the elements are even walked), every varint is at
most 5 bytes, and a field that is not nullable is not null.  The walk then
steps over each element, so a count that fits but lies is caught at the
element that is missing.

The walk mirrors C{kio}'s reading of its schemas exactly: arrays read with
C{kio}'s nullable array readers, a nullable struct carries an int8 marker,
tagged primitives are read as non-nullable, an unknown tag is refused.  It
does not build values, so it costs a fraction of decoding (measured in
C{tests/unit/test_bounds.py}); a struct whose fields are all fixed-size is
one bounds check, an array of them one multiplication.

Schemas are compiled once per entity class into nested tuples of small
integer opcodes, interpreted by L{_walk}.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from kafkatwist.protocol.header import (
    INT16,
    INT32,
    MalformedHeader,
    readLength,
    readUnsignedVarint,
)

__all__ = ["BoundsError", "checkBody", "program"]



class BoundsError(ValueError):
    """
    A length, count or null in the body is one the schema cannot hold.
    """


#: sizes of the fixed-width Kafka types
_FIXED = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}

# Opcodes (public for tools that walk programs, e.g. the fuzzer).  Every op
# is a tuple whose first item is one of these.
SKIP = 0  # (SKIP, n)
STRING = 1  # (STRING, flexible, nullable, name): int16 or compact length
BYTES = 2  # (BYTES, flexible, nullable, name): int32 or compact length
STRUCT = 3  # (STRUCT, program, nullable, name)
ARRAY = 4  # (ARRAY, flexible, nullable, name, element ops, element min size, element fixed size or None)

# A compiled entity: (ops, tagged {tag: ops} or None if not flexible, min size,
# fixed size or None).


def _fieldOps(field, flexible: bool, tagged: bool) -> list:
    """
    The ops for one dataclass field, as C{kio}'s schema compiler classifies it.
    """
    kind = classify_field(field)
    name = field.name
    if isinstance(kind, PrimitiveField):
        kafkaType = get_schema_field_type(field)
        nullable = is_optional(field) and not tagged
        return [_primitive(kafkaType, flexible, nullable, name)]
    if isinstance(kind, EntityField):
        return [(STRUCT, program(kind.type_), is_optional(field), name)]
    if isinstance(kind, PrimitiveTupleField):
        element = [_primitive(get_schema_field_type(field), flexible, False, name)]
    elif isinstance(kind, EntityTupleField):
        element = [(STRUCT, program(kind.type_), False, name)]
    else:  # pragma: no cover - classify_field knows only those four
        raise TypeError(f"cannot classify field {name}")
    element = _coalesce(element)
    return [
        (
            ARRAY,
            flexible,
            is_optional(field),
            name,
            tuple(element),
            max(1, _minSize(element)),
            _fixedSize(element),
        )
    ]


def _primitive(kafkaType: str, flexible: bool, nullable: bool, name: str):
    size = _FIXED.get(kafkaType)
    if size is not None:
        return (SKIP, size)
    if kafkaType == "string":
        return (STRING, flexible, nullable, name)
    if kafkaType in ("bytes", "records"):
        return (BYTES, flexible, nullable, name)
    raise TypeError(f"unknown kafka_type {kafkaType!r} of field {name}")


def _opMinSize(op) -> int:
    code = op[0]
    if code == SKIP:
        return op[1]
    if code == STRING:
        return 1 if op[1] else 2
    if code == BYTES:
        return 1 if op[1] else 4
    if code == STRUCT:
        return 1 if op[2] else op[1][2]
    return 1 if op[1] else 4


def _minSize(ops) -> int:
    return sum(_opMinSize(op) for op in ops)


def _fixedSize(ops) -> int | None:
    """
    @return: the size of C{ops} if it never varies, else C{None}.
    """
    total = 0
    for op in ops:
        if op[0] == SKIP:
            total += op[1]
        elif op[0] == STRUCT and not op[2] and op[1][3] is not None:
            total += op[1][3]
        else:
            return None
    return total


def _coalesce(ops) -> list:
    """
    Merge runs of fixed-size ops (fixed-size structs included) into one skip.
    """
    out: list = []
    for op in ops:
        if op[0] == STRUCT and not op[2] and op[1][3] is not None:
            op = (SKIP, op[1][3])
        if op[0] == SKIP and out and out[-1][0] == SKIP:
            out[-1] = (SKIP, out[-1][1] + op[1])
        else:
            out.append(op)
    return out


@cache
def program(entityType: type) -> tuple:
    """
    @return: the walk program of C{entityType}: C{(ops, tagged ops by tag
        or None, minimum size, fixed size or None)}.
    """
    flexible = bool(entityType.__flexible__)  # type: ignore[attr-defined]
    ops: list = []
    tagged: dict[int, tuple] = {}
    for field in fields(entityType):
        tag = get_field_tag(field)
        if tag is None:
            ops.extend(_fieldOps(field, flexible, False))
        else:
            tagged[int(tag)] = tuple(_fieldOps(field, flexible, True))
    ops = _coalesce(ops)
    minSize = _minSize(ops) + (1 if flexible else 0)
    fixed = None if flexible else _fixedSize(ops)
    return (tuple(ops), tagged if flexible else None, minSize, fixed)


def checkBody(entityType: type, buf, offset: int, end: int | None = None) -> int:
    """
    Walk the body of C{entityType} at C{offset} in C{buf}.

    @param buf: anything indexable by position yielding ints, and accepted
        by C{struct.unpack_from} (C{bytes}, C{bytearray}, a C{memoryview} of
        format C{B}).
    @return: the offset after the body.
    @raise BoundsError: if the body does not fit the schema.
    """
    if end is None:
        end = len(buf)
    try:
        return _walk(program(entityType), buf, offset, end)
    except MalformedHeader as e:
        raise BoundsError(str(e)) from None
    except struct.error as e:
        raise BoundsError(f"body runs past the end of the frame ({e})") from None
    except IndexError:
        raise BoundsError("body runs past the end of the frame") from None


def _walk(program, buf, pos: int, end: int) -> int:
    ops, tagged, _, fixed = program
    if fixed is not None:
        pos += fixed
        if pos > end:
            raise BoundsError("struct runs past the end of the frame")
        return pos
    for op in ops:
        if op[0] == SKIP:
            pos += op[1]
        else:
            pos = _step(op, buf, pos, end)
    if tagged is not None:
        # Nearly every struct carries no tagged field: one zero byte.
        if pos < end and buf[pos] == 0:
            return pos + 1
        return _tags(tagged, buf, pos, end)
    if pos > end:
        raise BoundsError("struct runs past the end of the frame")
    return pos


def _step(op, buf, pos: int, end: int) -> int:
    code = op[0]
    if code == SKIP:
        pos += op[1]
        if pos > end:
            raise BoundsError("field runs past the end of the frame")
        return pos
    if code == STRING or code == BYTES:
        n, pos = readLength(buf, pos, op[1], INT16 if code == STRING else INT32)
        if n < 0:
            if n == -1 and op[2]:
                return pos
            raise BoundsError(f"{op[3]}: length {n}" + (" (null)" if n == -1 else ""))
        pos += n
        if pos > end:
            raise BoundsError(f"{op[3]}: length {n} runs past the end of the frame")
        return pos
    if code == STRUCT:
        if op[2]:
            if pos >= end:
                raise BoundsError(f"{op[3]}: truncated")
            marker = buf[pos]
            pos += 1
            if marker == 0xFF:  # int8 -1: null
                return pos
        return _walk(op[1], buf, pos, end)
    # ARRAY
    n, pos = readLength(buf, pos, op[1], INT32)
    if n < 0:
        if n == -1 and op[2]:
            return pos
        raise BoundsError(
            f"{op[3]}: null where an array is required" if n == -1 else f"{op[3]}: count {n}"
        )
    if n * op[5] > end - pos:
        raise BoundsError(f"{op[3]}: {n} elements cannot fit in {end - pos} bytes")
    fixed = op[6]
    if fixed is not None:
        return pos + n * fixed
    element = op[4]
    if len(element) == 1:
        single = element[0]
        if single[0] == STRUCT and not single[2]:
            program = single[1]
            ops, tagged = program[0], program[1]
            if tagged is not None and len(ops) == 1 and ops[0][0] == SKIP:
                # Fixed fields then tagged fields (Fetch partitions, offset
                # commits...): the hot loop of large requests, inlined.
                skip = ops[0][1]
                for _ in range(n):
                    pos += skip
                    if pos >= end:
                        raise BoundsError(f"{op[3]}: element runs past the end of the frame")
                    if buf[pos] == 0:
                        pos += 1
                    else:
                        pos = _tags(tagged, buf, pos, end)
                return pos
            for _ in range(n):
                pos = _walk(program, buf, pos, end)
            return pos
        for _ in range(n):
            pos = _step(single, buf, pos, end)
        return pos
    for _ in range(n):
        for e in element:
            pos = _step(e, buf, pos, end)
    return pos


def _tags(tagged: dict, buf, pos: int, end: int) -> int:
    count, pos = readUnsignedVarint(buf, pos)
    if count * 2 > end - pos:
        raise BoundsError(f"{count} tagged fields cannot fit in {end - pos} bytes")
    for _ in range(count):
        tag, pos = readUnsignedVarint(buf, pos)
        size, pos = readUnsignedVarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise BoundsError(f"tagged field {tag} runs past the end of the frame")
        ops = tagged.get(tag)
        if ops is None:
            # kio refuses unknown tags; say so here, clearly.
            raise BoundsError(f"unknown tagged field {tag}")
        for op in ops:
            pos = _step(op, buf, pos, stop)
        if pos != stop:
            raise BoundsError(f"tagged field {tag} is {size} bytes, its value {size - (stop - pos)}")
    return pos
