"""
Entity classes in C{kio}'s conventions, built from a compact description of
a Kafka message (its JSON, transcribed): for the versions Kafka 3.x serves
and Kafka 4 dropped, which C{kio} (generated from Kafka 4's JSON) does not
have.  The classes are frozen, slotted, keyword-only dataclasses with
C{kafka_type} field metadata and the C{__type__}/C{__version__}/...
class attributes, so C{kio}'s reader and writer and the bounds walk
(L{kafkatwist.protocol.bounds}) handle them exactly like generated ones.

A field is C{(name, type)}, or C{(name, type, NULLABLE)} for a nullable
array; the type is one of Kafka's primitive names (C{"int32"},
C{"string"}...), with a trailing C{"?"} when nullable, or C{[type]} for an
array of primitives, or C{("StructName", [fields])} for a struct and
C{[("StructName", [fields])]} for an array of structs.  A struct may carry a
third item, a C{dict} of plain class attributes (see L{request}).  Nested
struct classes are attached to the top-level class under their names, where
L{kafkatwist.protocol.entities.nested} finds them.

Only non-flexible layouts are described here: every version Kafka 4 dropped
predates KIP-482.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import (
    Records,
    TZAware,
    i8,
    i16,
    i32,
    i32Timedelta,
    i64,
    i64Timedelta,
)

__all__ = ["NULLABLE", "request", "response"]

#: third item of a field whose array may be null
NULLABLE = "nullable"

_PYTHON_TYPES: dict[str, Any] = {
    "bool": bool,
    "int8": i8,
    "int16": i16,
    "int32": i32,
    "int64": i64,
    "error_code": ErrorCode,
    "timedelta_i32": i32Timedelta,
    "timedelta_i64": i64Timedelta,
    "datetime_i64": TZAware,
    "string": str,
    "bytes": bytes,
    "records": Records,
}


def request(name: str, apiKey: int, version: int, fields: list, **classAttributes) -> type:
    """
    @param classAttributes: plain class attributes of the top-level class
        (not read from the wire): what later versions carry and a handler
        reads, given here its meaning for this version.
    """
    return _build(name, apiKey, version, EntityType.request, fields, classAttributes)


def response(name: str, apiKey: int, version: int, fields: list) -> type:
    return _build(name, apiKey, version, EntityType.response, fields, {})


def _build(name, apiKey, version, entityType, fields, classAttributes) -> type:
    header = RequestHeader if entityType == EntityType.request else ResponseHeader
    nestedTypes: dict[str, type] = {}

    def struct(structName: str, spec: list, kind, attributes) -> type:
        dataFields = []
        for fieldName, fieldType, *nullable in spec:
            pythonType, dataField = _field(fieldName, fieldType)
            if nullable == [NULLABLE]:
                assert isinstance(fieldType, list), f"{fieldName}: only arrays take NULLABLE"
                pythonType = pythonType | None
            dataFields.append((fieldName, pythonType, dataField))
        namespace = {
            "__type__": kind,
            "__version__": i16(version),
            "__flexible__": False,
            "__api_key__": i16(apiKey),
            "__header_schema__": header,
        }
        namespace.update(attributes)
        cls = dataclasses.make_dataclass(
            structName,
            dataFields,
            namespace=namespace,
            frozen=True,
            slots=True,
            kw_only=True,
        )
        cls.__module__ = __name__
        return cls

    def _field(fieldName, fieldType):
        if isinstance(fieldType, list):
            (element,) = fieldType
            if isinstance(element, tuple):
                inner = nestedStruct(element)
                return tuple[inner, ...], dataclasses.field()
            kafkaType, nullable = _primitive(element)
            assert not nullable, f"{fieldName}: array elements are never nullable here"
            return (
                tuple[_PYTHON_TYPES[kafkaType], ...],
                dataclasses.field(metadata={"kafka_type": kafkaType}),
            )
        if isinstance(fieldType, tuple):
            return nestedStruct(fieldType), dataclasses.field()
        kafkaType, nullable = _primitive(fieldType)
        pythonType = _PYTHON_TYPES[kafkaType]
        if nullable:
            pythonType = pythonType | None
        return pythonType, dataclasses.field(metadata={"kafka_type": kafkaType})

    def nestedStruct(spec) -> type:
        structName, structFields, *attributes = spec
        cls = struct(structName, structFields, EntityType.nested, attributes[0] if attributes else {})
        nestedTypes[structName] = cls
        return cls

    top = struct(name, fields, entityType, classAttributes)
    for structName, cls in nestedTypes.items():
        setattr(top, structName, cls)
    return top


def _primitive(spec: str) -> tuple[str, bool]:
    nullable = spec.endswith("?")
    kafkaType = spec.rstrip("?")
    if kafkaType not in _PYTHON_TYPES:
        raise TypeError(f"unknown Kafka type {kafkaType!r}")
    return kafkaType, nullable
