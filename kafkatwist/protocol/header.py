"""
Request and response headers, parsed and written by hand because every
request pays for them: a C{struct} unpack is several times cheaper than a
generic schema walk.
"""

import struct

from kafkatwist.protocol.apis import API_VERSIONS, isFlexible

_HEAD = struct.Struct(">hhih")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")

#: api key, version, correlation id and a null client id string
MIN_HEADER_SIZE = _HEAD.size


class MalformedHeader(ValueError):
    """
    The bytes are not a request header Kafka would accept.
    """


class RequestHeader:
    """
    @ivar bodyOffset: where the request body starts in the frame.
    """

    # A plain slots class: a frozen dataclass sets each field through
    # object.__setattr__, and every request pays for it.
    __slots__ = ("apiKey", "apiVersion", "correlationId", "clientId", "bodyOffset")

    def __init__(self, apiKey, apiVersion, correlationId, clientId, bodyOffset) -> None:
        self.apiKey = apiKey
        self.apiVersion = apiVersion
        self.correlationId = correlationId
        self.clientId = clientId
        self.bodyOffset = bodyOffset

    def __repr__(self) -> str:
        return (
            f"RequestHeader(apiKey={self.apiKey}, apiVersion={self.apiVersion}, "
            f"correlationId={self.correlationId}, clientId={self.clientId!r}, "
            f"bodyOffset={self.bodyOffset})"
        )


def parseRequestHeader(frame) -> RequestHeader:
    """
    Parse the header at the start of C{frame} (the bytes after the size
    prefix).  The header is v1 (legacy client id) or v2 (v1 plus tagged
    fields) depending on whether the API version is flexible; the client id
    stays a legacy nullable string in both, as Kafka special-cases it.

    @raise MalformedHeader: if the frame is too short or inconsistent.
    """
    if len(frame) < MIN_HEADER_SIZE:
        raise MalformedHeader(f"frame of {len(frame)} bytes is shorter than a request header")
    apiKey, apiVersion, correlationId, clientIdLength = _HEAD.unpack_from(frame, 0)
    offset = MIN_HEADER_SIZE
    if clientIdLength < 0:
        if clientIdLength != -1:
            raise MalformedHeader(f"client id length {clientIdLength}")
        clientId = None
    else:
        end = offset + clientIdLength
        if end > len(frame):
            raise MalformedHeader("client id runs past the end of the frame")
        try:
            clientId = str(frame[offset:end], "utf-8")
        except UnicodeDecodeError as e:
            raise MalformedHeader("client id is not UTF-8") from e
        offset = end
    # Flexible versions use request header v2 -- ApiVersions included; only
    # its *response* header stays v0.
    if isFlexible(apiKey, apiVersion):
        if offset < len(frame) and frame[offset] == 0:
            # (no tagged fields: the usual header, read inline)
            offset += 1
        else:
            offset = skipTaggedFields(frame, offset)
    return RequestHeader(apiKey, apiVersion, correlationId, clientId, offset)


def readUnsignedVarint(buf, offset: int) -> tuple[int, int]:
    """
    @return: (value, offset after it).
    @raise MalformedHeader: if the varint is truncated or longer than 5 bytes.
    """
    value = 0
    shift = 0
    end = len(buf)
    while True:
        if offset >= end:
            raise MalformedHeader("truncated varint")
        b = buf[offset]
        offset += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise MalformedHeader("varint longer than 5 bytes")


def writeUnsignedVarint(out: bytearray, value: int) -> None:
    """
    Append C{value} as an unsigned varint (compact lengths, counts).
    """
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def unsignedVarint(value: int) -> bytes:
    """
    C{value} as an unsigned varint (what L{writeUnsignedVarint} appends).
    """
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    writeUnsignedVarint(out, value)
    return bytes(out)


def readLength(buf, offset: int, flexible: bool, legacy: struct.Struct) -> tuple[int, int]:
    """
    Read what L{writeLength} writes.

    @return: (length, offset after it); -1 is null.
    """
    if flexible:
        n, offset = readUnsignedVarint(buf, offset)
        return n - 1, offset
    (n,) = legacy.unpack_from(buf, offset)
    return n, offset + legacy.size


def writeLength(out: bytearray, n: int, flexible: bool, legacy: struct.Struct) -> None:
    """
    Append a length or count: compact (varint of C{n + 1}) in flexible
    versions, else C{legacy} (L{INT16} for strings, L{INT32} for arrays and
    bytes); -1 is null.
    """
    if flexible:
        writeUnsignedVarint(out, n + 1)
    else:
        out += legacy.pack(n)


def writeString(out: bytearray, text: str | None, flexible: bool) -> None:
    """
    Append a nullable string, compact or legacy.
    """
    if text is None:
        writeLength(out, -1, flexible, INT16)
        return
    raw = text.encode("utf-8")
    writeLength(out, len(raw), flexible, INT16)
    out += raw


def skipTaggedFields(buf, offset: int) -> int:
    count, offset = readUnsignedVarint(buf, offset)
    for _ in range(count):
        _tag, offset = readUnsignedVarint(buf, offset)
        size, offset = readUnsignedVarint(buf, offset)
        offset += size
        if offset > len(buf):
            raise MalformedHeader("tagged field runs past the end of the frame")
    return offset


def responseHeaderBytes(apiKey: int, apiVersion: int, correlationId: int) -> bytes:
    """
    Response header v0 (correlation id) or v1 (plus an empty tagged-field
    section) for flexible versions; ApiVersions always uses v0 so a client
    can read the error of a version it sent too high.
    """
    if apiKey != API_VERSIONS and isFlexible(apiKey, apiVersion):
        return INT32.pack(correlationId) + b"\x00"
    return INT32.pack(correlationId)
