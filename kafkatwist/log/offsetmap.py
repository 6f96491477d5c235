"""
The cleaner's dedupe map: a hash of each key to the offset of its latest
record, bounded by memory (Kafka's C{SkimpyOffsetMap}).

Keys themselves are never kept, only a 96-bit hash: Python's 64-bit keyed
SipHash of the key (its key is random per process, so collisions cannot be
precomputed by whoever writes the keys) combined with the key's CRC-32C.  Two
keys colliding on all 96 bits would make the cleaner drop the older one's
latest record; with a million keys in one map that is about one pass in
10^17.  Kafka uses 128-bit MD5 hashes for the same purpose.

Memory: a Python dict entry costs far more than the 24 bytes of Kafka's
packed map.  L{BYTES_PER_ENTRY} is what one entry measures with the live
offset set the filter pass builds from the map (see
L{kafkatwist.log.cleaning}), so C{log.cleaner.dedupe.buffer.size} bounds
what the map really uses: 128 MiB hold about 750,000 keys per pass at the
default load factor.  A pass whose dirty section has more distinct keys
stops mapping there and leaves the rest for the next pass, as Kafka's does.
"""

from __future__ import annotations

from crc32c import crc32c

__all__ = ["BYTES_PER_ENTRY", "OffsetMap", "keyHash"]

#: measured bytes per entry: dict slot and index, a 96-bit int key, an int
#: offset, and the entry's share of the live offset set
BYTES_PER_ENTRY = 160


def keyHash(key) -> int:
    """
    The map's hash of C{key} (bytes).
    """
    return (hash(key) << 32) ^ crc32c(key)


class OffsetMap:
    """
    Key hash -> latest offset, for the keys of one cleaning pass.

    The hot loops use C{entries} directly.

    @ivar slots: entries the memory budget pays for.
    @ivar capacity: entries allowed before the map counts as full
        (C{slots * load factor}).
    @ivar latestOffset: the last offset whose batch was fully mapped; the
        cleaner keeps every record above it.
    """

    def __init__(self, memoryBytes: int, loadFactor: float = 0.9) -> None:
        self.slots = max(1, memoryBytes // BYTES_PER_ENTRY)
        self.capacity = max(1, int(self.slots * loadFactor))
        self.entries: dict[int, int] = {}
        self.latestOffset = -1

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def full(self) -> bool:
        return len(self.entries) >= self.capacity

    def put(self, key, offset: int) -> None:
        self.entries[keyHash(key)] = offset

    def get(self, key) -> int:
        """
        @return: the latest offset of C{key}, or -1.
        """
        return self.entries.get(keyHash(key), -1)

    def updateLatestOffset(self, offset: int) -> None:
        if offset > self.latestOffset:
            self.latestOffset = offset

    @property
    def utilization(self) -> float:
        """
        Share of the memory budget in use (Kafka's buffer utilization).
        """
        return len(self.entries) / self.slots

    def clear(self) -> None:
        self.entries = {}
        self.latestOffset = -1
