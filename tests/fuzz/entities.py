"""
Random, well-formed instances of any C{kio} entity class: seeds for the
APIs no client library sends, and round-trip material for the bounds walk.
"""

from __future__ import annotations

import datetime
import random
import uuid
from dataclasses import fields

from kio.schema.errors import ErrorCode
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

_ALPHABET = "abcdefghijklmnopqrstuvwxyz-_.0123456789\u00e9"
_EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)


def _primitive(kafkaType: str, rng: random.Random):
    if kafkaType == "bool":
        return rng.random() < 0.5
    if kafkaType in ("int8",):
        return rng.randint(-128, 127)
    if kafkaType == "uint8":
        return rng.randint(0, 255)
    if kafkaType == "int16":
        return rng.choice((0, 1, -1, rng.randint(-(2**15), 2**15 - 1)))
    if kafkaType == "uint16":
        return rng.randint(0, 2**16 - 1)
    if kafkaType == "int32":
        return rng.choice((0, 1, -1, rng.randint(-(2**31), 2**31 - 1)))
    if kafkaType == "uint32":
        return rng.randint(0, 2**32 - 1)
    if kafkaType == "int64":
        return rng.choice((0, -1, rng.randint(-(2**63), 2**63 - 1)))
    if kafkaType == "uint64":
        return rng.randint(0, 2**64 - 1)
    if kafkaType == "float64":
        return rng.random() * 100
    if kafkaType == "uuid":
        return uuid.UUID(int=rng.getrandbits(128) or 1)
    if kafkaType == "error_code":
        return rng.choice((ErrorCode.none, ErrorCode.unknown_server_error))
    if kafkaType == "timedelta_i32":
        return datetime.timedelta(milliseconds=rng.randint(0, 2**31 - 1))
    if kafkaType == "timedelta_i64":
        return datetime.timedelta(milliseconds=rng.randint(0, 2**40))
    if kafkaType == "datetime_i64":
        return _EPOCH + datetime.timedelta(milliseconds=rng.randint(0, 2**36))
    if kafkaType == "string":
        return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 12)))
    if kafkaType in ("bytes", "records"):
        return rng.randbytes(rng.randint(0, 40))
    raise TypeError(kafkaType)


def randomEntity(cls: type, rng: random.Random, depth: int = 0, names: dict | None = None):
    """
    @param names: field name -> strings to pick from (most of the time)
        for string fields of that name, or their elements: e.g. existing
        topics, so that requests reach past "unknown topic".
    @return: an instance of C{cls} with every field set at random, arrays of
        0-3 elements, nullable fields sometimes null.
    """
    values = {}
    names = names or {}
    for field in fields(cls):
        choices = names.get(field.name)
        if choices and rng.random() < 0.8:
            kind = classify_field(field)
            if isinstance(kind, PrimitiveField) and get_schema_field_type(field) == "string":
                values[field.name] = rng.choice(choices)
                continue
            if isinstance(kind, PrimitiveTupleField) and get_schema_field_type(field) == "string":
                values[field.name] = tuple(rng.choice(choices) for _ in range(rng.randint(1, 2)))
                continue
        tagged = get_field_tag(field) is not None
        kind = classify_field(field)
        optional = is_optional(field)
        if optional and not tagged and rng.random() < 0.2:
            values[field.name] = None
            continue
        if isinstance(kind, PrimitiveField):
            kafkaType = get_schema_field_type(field)
            if kafkaType == "uuid" and optional and rng.random() < 0.3:
                values[field.name] = None
            else:
                values[field.name] = _primitive(kafkaType, rng)
        elif isinstance(kind, EntityField):
            values[field.name] = randomEntity(kind.type_, rng, depth + 1, names)
        elif isinstance(kind, PrimitiveTupleField):
            kafkaType = get_schema_field_type(field)
            values[field.name] = tuple(
                _primitive(kafkaType, rng) for _ in range(rng.randint(0, 3))
            )
        elif isinstance(kind, EntityTupleField):
            count = rng.randint(0, 3 if depth < 3 else 1)
            values[field.name] = tuple(
                randomEntity(kind.type_, rng, depth + 1, names) for _ in range(count)
            )
    return cls(**values)
