"""
The answer to a request whose handler failed (Kafka's
C{AbstractRequest.getErrorResponse}): the response schema filled from the
request, with an error code at every level that has one -- each topic,
partition or resource the request named gets UNKNOWN_SERVER_ERROR, so a
client fails those and keeps its connection.

Built from the schemas alone: each response array is filled from the
request array of the same name, or, where the names differ (Produce's
C{topic_data} -> C{responses}), from the only array at that level;
identifying fields (names, partition indexes, ids) are copied, everything
else is its default or zero.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid

from kio.schema.errors import ErrorCode

from kafkatwist.protocol.schematypes import arrayElement, entityOf, hints, isEntity, nullable

#: what Kafka's UnknownServerException says
UNKNOWN_SERVER_ERROR_MESSAGE = "The server experienced an unexpected error when processing the request."

#: request field names a response field may be copied from, besides its own
_ALIASES = {
    "partition_index": ("partition", "index"),
    "index": ("partition_index", "partition"),
    "name": ("topic",),
    "topic": ("name",),
}

_ZERO = {
    "bool": False,
    "bytes": b"",
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "string": "",
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
    "uuid": uuid.UUID(int=0),
}


class NoErrorResponse(ValueError):
    """
    This request has no error response (Produce with acks=0: Kafka closes
    the connection instead), or its schema cannot be filled.
    """


def _sourceFields(source) -> dict:
    if source is None:
        return {}
    if isinstance(source, dict):
        return source
    if dataclasses.is_dataclass(source):
        return {f.name: getattr(source, f.name) for f in dataclasses.fields(source)}
    # A hand-written request type (Fetch's) names the fields it offers
    # under kio's names, some of them built on demand: its slots are its
    # own flat layout, not the request's shape.
    cls = type(source)
    names = getattr(cls, "kafkaFields", None) or getattr(cls, "__slots__", None) or vars(source)
    return {name: getattr(source, name, None) for name in names}


def _arrays(fields: dict) -> dict:
    return {name: value for name, value in fields.items() if isinstance(value, (tuple, list))}


def build(cls, source, code: ErrorCode, message: str | None):
    """
    @param cls: a response entity class (or one of its nested entities).
    @param source: the matching part of the request, or C{None}.
    @return: an instance of C{cls}.
    """
    types = hints(cls)
    fields = _sourceFields(source)
    sourceArrays = _arrays(fields)
    targetArrays = [
        f.name for f in dataclasses.fields(cls) if isEntity(arrayElement(types[f.name]))
    ]
    # Where the names differ (Produce's topic_data -> responses, Fetch's
    # topics -> responses), the first response array answers the first
    # request array; later ones (node_endpoints) have no source.
    unmatchedSources = [name for name in sourceArrays if name not in targetArrays]
    unmatchedTargets = [name for name in targetArrays if name not in sourceArrays]
    if unmatchedSources and unmatchedTargets:
        sourceArrays = dict(sourceArrays, **{unmatchedTargets[0]: sourceArrays[unmatchedSources[0]]})
    values: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        t = types[field.name]
        kind = field.metadata.get("kafka_type")
        element = arrayElement(t)
        if kind == "error_code":
            values[field.name] = code
        elif field.name == "error_message" and kind == "string":
            values[field.name] = message
        elif field.name == "throttle_time":
            values[field.name] = datetime.timedelta(0)
        elif isEntity(element):
            items = sourceArrays.get(field.name)
            values[field.name] = tuple(
                build(element, _asSource(item, element), code, message) for item in (items or ())
            )
        elif (entity := entityOf(t)) is not None:
            if field.default is not dataclasses.MISSING:
                values[field.name] = field.default
            else:
                values[field.name] = build(entity, fields.get(field.name), code, message)
        else:
            copied = _copy(field.name, fields, element is not None) if _identifies(field.name) else _MISSING
            if copied is not _MISSING:
                values[field.name] = copied
            elif field.default is not dataclasses.MISSING:
                values[field.name] = field.default
            elif field.default_factory is not dataclasses.MISSING:
                values[field.name] = field.default_factory()
            elif element is not None:
                values[field.name] = ()
            elif kind in ("int32", "int64") and field.name.endswith(_UNKNOWN_AS_MINUS_ONE) \
                    and field.name not in _ZERO_NAMES:
                # Kafka's error responses: offsets and watermarks unknown
                values[field.name] = -1
            elif nullable(t):
                values[field.name] = None
            elif kind in _ZERO:
                values[field.name] = _ZERO[kind]
            else:
                raise NoErrorResponse(f"no value for {cls.__name__}.{field.name} ({kind})")
    return cls(**values)


_MISSING = object()

#: numbers Kafka's error responses leave unknown (-1); a Fetch session id
#: of 0 is "no session"
_UNKNOWN_AS_MINUS_ONE = ("offset", "watermark", "epoch", "_id")
_ZERO_NAMES = frozenset(("session_id",))

#: fields that say what an answer is about (copied from the request);
#: everything else in a response is the broker's to fill
_IDENTIFYING = frozenset((
    "name", "topic", "topic_id", "topic_name", "partition", "partition_index", "index",
    "resource_type", "resource_name", "group_id", "transactional_id", "key", "key_type",
))


def _identifies(name: str) -> bool:
    return name in _IDENTIFYING


def _copy(name: str, fields: dict, array: bool):
    for candidate in (name, *_ALIASES.get(name, ())):
        value = fields.get(candidate, _MISSING)
        if value is _MISSING or value is None:
            continue
        if isinstance(value, (tuple, list)) != array:
            continue
        if array:
            if any(dataclasses.is_dataclass(v) or hasattr(v, "__slots__") for v in value):
                continue
            return tuple(value)
        if isinstance(value, (memoryview, bytearray)):
            continue
        return value
    return _MISSING


def _asSource(item, element):
    # A request array of bare names (DeleteTopics v0-5's topic_names)
    # answered by entities that carry the name.
    if isinstance(item, str):
        return {"name": item}
    return item


def errorResponse(responseCls, request, code: ErrorCode = ErrorCode.unknown_server_error,
                  message: str | None = UNKNOWN_SERVER_ERROR_MESSAGE):
    """
    @param responseCls: the response schema for the request's ApiKey and
        version.
    @param request: the decoded request.
    @return: the response entity.
    @raise NoErrorResponse: if there is none to send.
    """
    if getattr(request, "acks", None) == 0:
        raise NoErrorResponse("Produce with acks=0 has no response")
    try:
        return build(responseCls, request, ErrorCode(code), message)
    except NoErrorResponse:
        raise
    except Exception as e:  # a schema this does not understand
        raise NoErrorResponse(f"{type(e).__name__}: {e}") from e
