"""
The embedded consumer protocol (Kafka's C{ConsumerProtocol}): the bytes a
consumer puts in the JoinGroup protocol metadata.

The coordinator treats member metadata as opaque except for one purpose: to
know which topics a consumer group is subscribed to (OffsetDelete answers
GROUP_SUBSCRIBED_TO_TOPIC, and a stable group's offsets of topics it no
longer consumes may expire).  Only the subscription is parsed; assignments
stay opaque.

Wire format (non-flexible, big-endian), C{ConsumerProtocolSubscription}::

    version          int16
    topics           [string]            (int32 count, int16 length + UTF-8)
    userData         nullable bytes      (int32 length, -1 for null)
    ownedPartitions  [topic string, partitions [int32]]   v1+
    generationId     int32                                v2+
    rackId           nullable string                      v3+
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ConsumerSubscription",
    "encodeSubscription",
    "parseSubscription",
]

CONSUMER_PROTOCOL_TYPE = "consumer"

# The highest subscription version understood.  Like Kafka, a higher version
# is read as this one: later versions only append fields, so the prefix
# parses.
_LATEST_VERSION = 3


@dataclass(frozen=True)
class ConsumerSubscription:
    """
    A decoded consumer subscription.

    @ivar version: the version the member wrote.
    @ivar topics: subscribed topic names, in the order sent.
    @ivar userData: assignor user data, or C{None}.
    @ivar ownedPartitions: C{(topic, [partition, ...])} pairs (v1+).
    @ivar generationId: the member's generation (v2+), -1 if absent.
    @ivar rackId: the member's rack (v3+), or C{None}.
    """

    version: int
    topics: tuple[str, ...]
    userData: bytes | None = None
    ownedPartitions: tuple[tuple[str, tuple[int, ...]], ...] = field(default=())
    generationId: int = -1
    rackId: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(bytes(data))
        self._pos = 0

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._data):
            raise ValueError("truncated consumer protocol subscription")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def int16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def string(self, nullable: bool = False) -> str | None:
        n = self.int16()
        if n < 0:
            if nullable:
                return None
            raise ValueError("null string where a string is required")
        return bytes(self._take(n)).decode("utf-8")

    def bytes_(self) -> bytes | None:
        n = self.int32()
        if n < 0:
            return None
        return bytes(self._take(n))

    def count(self) -> int:
        n = self.int32()
        if n < 0:
            raise ValueError("negative array length")
        return n


def parseSubscription(data: bytes) -> ConsumerSubscription:
    """
    Decode a consumer protocol subscription.

    @param data: the JoinGroup protocol metadata of a C{consumer} group.
    @return: the L{ConsumerSubscription}.
    @raise ValueError: the bytes are not a subscription.
    """
    r = _Reader(data)
    version = r.int16()
    if version < 0:
        raise ValueError(f"unsupported consumer protocol version {version}")
    readAs = min(version, _LATEST_VERSION)
    topics = tuple(r.string() for _ in range(r.count()))  # type: ignore[misc]
    userData = r.bytes_()
    owned: list[tuple[str, tuple[int, ...]]] = []
    generationId = -1
    rackId = None
    if readAs >= 1:
        for _ in range(r.count()):
            topic = r.string()
            owned.append((topic, tuple(r.int32() for _ in range(r.count()))))  # type: ignore[arg-type]
    if readAs >= 2:
        generationId = r.int32()
    if readAs >= 3:
        rackId = r.string(nullable=True)
    return ConsumerSubscription(version, topics, userData, tuple(owned), generationId, rackId)


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encodeSubscription(
    topics,
    userData: bytes | None = None,
    version: int = 0,
    ownedPartitions=(),
    generationId: int = -1,
    rackId: str | None = None,
) -> bytes:
    """
    Encode a consumer protocol subscription (the inverse of
    L{parseSubscription}; used by tests and tools).

    @return: C{bytes}.
    """
    out = [struct.pack(">h", version), struct.pack(">i", len(topics))]
    out += [_string(t) for t in topics]
    out.append(
        struct.pack(">i", -1) if userData is None else struct.pack(">i", len(userData)) + userData
    )
    if version >= 1:
        out.append(struct.pack(">i", len(ownedPartitions)))
        for topic, partitions in ownedPartitions:
            out.append(_string(topic))
            out.append(struct.pack(">i", len(partitions)))
            out += [struct.pack(">i", p) for p in partitions]
    if version >= 2:
        out.append(struct.pack(">i", generationId))
    if version >= 3:
        out.append(_string(rackId))
    return b"".join(out)
