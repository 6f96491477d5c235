"""
Whole messages: decode a request body, encode a response (broker side), and
the mirror image for the project's own client.  Schemas come from C{kio}
(Kafka's JSON message definitions, generated; its reader is native code).
"""

import io
import struct
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader, entity_writer

from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.bounds import BoundsError, checkBody
from kafkatwist.protocol.header import (
    INT16,
    INT32,
    MalformedHeader,
    readUnsignedVarint,
    responseHeaderBytes,
    skipTaggedFields,
)

_REQUEST_HEAD = struct.Struct(">hhi")


class MalformedRequest(ValueError):
    """
    The body does not parse as the schema its header names.
    """


class EncodedResponse:
    """
    A response body already encoded, as chunks: C{bytes}-like objects and
    L{kafkatwist.interfaces.IFileRegion}s (record data a PLAINTEXT connection
    sends with C{sendfile}).  The network layer prepends size and header.

    @ivar chunks: the pieces, in order.
    @ivar size: their total length in bytes.
    @ivar errors: the response's error counts (C{{error code: how many}},
        Kafka's C{AbstractResponse.errorCounts}: every place that carries
        an error code, NONE too) for the request metrics; C{None} if the
        encoder did not say (not counted).
    """

    __slots__ = ("chunks", "size", "errors")

    def __init__(self, chunks, size: int | None = None, errors: dict[int, int] | None = None) -> None:
        self.chunks = chunks
        self.size = sum(chunkLength(c) for c in chunks) if size is None else size
        self.errors = errors


BYTES_TYPES = (bytes, bytearray, memoryview)


def chunkLength(chunk) -> int:
    """
    @param chunk: C{bytes}-like, or an L{kafkatwist.interfaces.IFileRegion}.
    """
    if isinstance(chunk, (bytes, bytearray)):
        return len(chunk)
    if isinstance(chunk, memoryview):
        return chunk.nbytes
    return chunk.length


def closeRegions(chunks) -> None:
    """
    Release the file regions among C{chunks} (a response that will not be,
    or has been, sent).
    """
    if not chunks:
        return
    for chunk in chunks:
        if not isinstance(chunk, BYTES_TYPES):
            chunk.close()


def decodeRequest(apiKey: int, apiVersion: int, frame, bodyOffset: int):
    """
    The body is walked by L{checkBody} first: C{kio}'s native reader must
    never see a length larger than the frame (it would abort the process).

    @return: the request entity.
    @raise MalformedRequest: if the body does not parse.
    """
    cls = requestType(apiKey, apiVersion)
    try:
        checkBody(cls, frame, bodyOffset)
    except BoundsError as e:
        raise MalformedRequest(str(e)) from None
    reader: Callable[..., tuple[Any, int]] = entity_reader(cls)
    try:
        entity, end = reader(frame, bodyOffset)
    except Exception as e:
        raise MalformedRequest(f"{type(e).__name__}: {e}") from e
    return entity


def encodeBody(entity) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def encodeResponseFrame(apiKey: int, apiVersion: int, correlationId: int, body) -> list:
    """
    @param body: an entity, or an L{EncodedResponse}.
    @return: the chunks to write, size prefix first.
    """
    header = responseHeaderBytes(apiKey, apiVersion, correlationId)
    if isinstance(body, EncodedResponse):
        return [INT32.pack(len(header) + body.size) + header, *body.chunks]
    payload = encodeBody(body)
    return [INT32.pack(len(header) + len(payload)) + header + payload]


# -- the client side ---------------------------------------------------------


def encodeRequestFrame(
    apiKey: int, apiVersion: int, correlationId: int, clientId: str | None, entity
) -> bytes:
    """
    @return: a whole request frame, size prefix included.
    """
    head = _REQUEST_HEAD.pack(apiKey, apiVersion, correlationId)
    if clientId is None:
        head += INT16.pack(-1)
    else:
        raw = clientId.encode("utf-8")
        head += INT16.pack(len(raw)) + raw
    if type(entity).__flexible__:
        head += b"\x00"
    payload = encodeBody(entity)
    return INT32.pack(len(head) + len(payload)) + head + payload


def decodeResponseFrame(apiKey: int, apiVersion: int, frame) -> tuple[int, object]:
    """
    @param frame: the bytes after the size prefix.
    @return: (correlation id, response entity).
    """
    (correlationId,) = INT32.unpack_from(frame, 0)
    offset = 4
    cls = responseType(apiKey, apiVersion)
    try:
        if cls.__flexible__ and apiKey != 18:  # type: ignore[attr-defined]
            offset = skipTaggedFields(frame, offset)
        # A broker's answer is as untrusted as a client's request.
        checkBody(cls, frame, offset)
    except (MalformedHeader, BoundsError) as e:
        raise MalformedRequest(str(e)) from e
    entity: Any
    entity, _ = entity_reader(cls)(frame, offset)
    return correlationId, entity


__all__ = [
    "EncodedResponse",
    "MalformedRequest",
    "decodeRequest",
    "encodeBody",
    "encodeResponseFrame",
    "chunkLength",
    "closeRegions",
    "encodeRequestFrame",
    "decodeResponseFrame",
    "readUnsignedVarint",
]
