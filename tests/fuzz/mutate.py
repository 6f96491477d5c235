"""
Protocol-aware mutations of a request frame: lengths, counts and varints
set to what a parser fears (null, negative, one past, the frame size, 2^31,
5- and 6-byte varints), nulls where arrays go, unknown and oversized tagged
fields, other versions and ApiKeys under the same body, extreme values in
fixed fields, and inside record sets: lying counts, magics, codecs, lengths,
garbage and bomb payloads with their CRC recomputed so they get past the
first check.  Plus the blind ones: truncation, extension, bit flips,
splices.
"""

from __future__ import annotations

import random
import struct
from functools import cache

from crc32c import crc32c

from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.batch import ATTRIBUTES_AT, CRC_AT, HEADER_SIZE, LOG_OVERHEAD
from kafkatwist.protocol.header import parseRequestHeader, writeUnsignedVarint
from tests.fuzz.bombs import bomb
from tests.fuzz.fields import FIXED, LENGTH, MARKER, RECORDS, TAGS, Field, locate

_INTERESTING_32 = (-1, -2, 0, 1, 2**31 - 1, -(2**31), 2**16, 2**24, 0x7FFFFFF0, 255, 65535)
_INTERESTING_16 = (-1, -2, 0, 1, 2**15 - 1, -(2**15), 255, 0x7FF0)
_VARINTS = (
    b"\x00",  # null
    b"\x01",  # empty
    b"\x7f",
    b"\xff\x7f",
    b"\xff\xff\xff\xff\x0f",  # 2^32 - 1
    b"\xff\xff\xff\xff\x7f",  # 2^35 - 1 (issue 11's abort)
    b"\xff\xff\xff\x7f",
    b"\x80\x80\x80\x80\x80\x01",  # six bytes
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",  # ten bytes
    b"\x80",  # truncated
)
_FIXED_VALUES = (
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\xff\xff\xff\xff",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\x00\x00\x00\x00",
    b"\x7f\xff\xff\xff\xff\xff\xff\xff",
    b"\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\x80\x00\x00\x00\x00\x00\x00\x00",
)
_BOMBS = {"gzip": 256, "zstd": 8192, "lz4": 64, "snappy": 16}
_CODEC_IDS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@cache
def _fields(apiKey: int, version: int, frame: bytes) -> tuple[int, tuple[Field, ...]]:
    """
    @return: (body offset, fields) of a seed frame; no fields if its schema
        is unknown here.
    """
    offset = parseRequestHeader(frame).bodyOffset
    try:
        return offset, tuple(locate(requestType(apiKey, version), frame, offset))
    except Exception:
        return offset, ()


def _lengthBytes(field: Field, value: int) -> bytes:
    if field.flexible:
        out = bytearray()
        writeUnsignedVarint(out, (value + 1) & 0xFFFFFFFFF if value >= -1 else 0x7FFFFFFF)
        return bytes(out)
    return struct.pack(">h" if field.short else ">i", _clamp(value, field.short))


def _clamp(value: int, short: bool) -> int:
    bits = 16 if short else 32
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


class Mutator:
    """
    @ivar counts: how often each mutation was applied.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counts: dict[str, int] = {}
        self._table = [
            (30, self.length),
            (6, self.null),
            (22, self.records),
            (10, self.fixed),
            (5, self.tags),
            (5, self.marker),
            (6, self.version),
            (1, self.apiKey),
            (5, self.truncate),
            (2, self.extend),
            (5, self.flip),
            (3, self.splice),
            (2, self.clientId),
        ]
        self._byKinds: dict = {}

    def mutate(self, apiKey: int, version: int, frame: bytes) -> bytes:
        """
        @return: C{frame} after one to three mutations.
        """
        offset, fields = _fields(apiKey, version, frame)
        table, weights = self._applicable(fields)
        # Structural mutations first, on the seed's known layout, from the
        # end backwards so earlier positions stay valid; blind ones after.
        chosen = self.rng.choices(table, weights, k=self.rng.choice((1, 1, 1, 2, 2, 3)))
        chosen.sort(key=lambda c: c[1] in (self.truncate, self.extend, self.flip, self.splice,
                                           self.version, self.apiKey, self.clientId))
        data = bytearray(frame)
        floor = len(data) + 1
        for _, mutation in chosen:
            name = mutation.__name__
            result = mutation(data, offset, fields, floor)
            if result is None:
                continue
            data, floor = result
            self.counts[name] = self.counts.get(name, 0) + 1
        if data == frame:
            # Nothing applied (no such field in this seed) or it changed
            # nothing: a blind flip, so no frame goes out unmutated.
            data, _ = self.flip(data, offset, fields, floor)
            self.counts["flip"] = self.counts.get("flip", 0) + 1
        return bytes(data)

    def _applicable(self, fields) -> tuple[list, list]:
        """
        The mutations this seed has fields for, with their weights.
        """
        key = frozenset(f.kind for f in fields)
        cached = self._byKinds.get(key)
        if cached is None:
            needs = {self.length: LENGTH, self.null: LENGTH, self.records: RECORDS,
                     self.fixed: FIXED, self.tags: TAGS, self.marker: MARKER}
            table = [(w, m) for w, m in self._table if needs.get(m) in (None, *key)]
            cached = self._byKinds[key] = (table, [w for w, _ in table])
        return cached

    # -- structural --------------------------------------------------------

    def _pick(self, fields, kinds, floor) -> Field | None:
        candidates = [f for f in fields if f.kind in kinds and f.position + f.size <= floor]
        return self.rng.choice(candidates) if candidates else None

    def length(self, data, offset, fields, floor):
        field = self._pick(fields, (LENGTH,), floor)
        if field is None:
            return None
        rng = self.rng
        if field.flexible and rng.random() < 0.5:
            raw = rng.choice(_VARINTS)
        else:
            left = len(data) - field.position
            value = rng.choice(
                (_INTERESTING_16 if field.short else _INTERESTING_32)
                + (field.value + 1, field.value - 1, field.value * 2 + 7, left, left + 1, left // 2)
            )
            raw = _lengthBytes(field, value)
        data[field.position : field.position + field.size] = raw
        return data, field.position

    def null(self, data, offset, fields, floor):
        field = self._pick(fields, (LENGTH,), floor)
        if field is None:
            return None
        data[field.position : field.position + field.size] = _lengthBytes(field, -1)
        return data, field.position

    def marker(self, data, offset, fields, floor):
        field = self._pick(fields, (MARKER,), floor)
        if field is None:
            return None
        data[field.position] = self.rng.choice((0xFF, 0x00, 0x01, 0x80, 0xFE))
        return data, field.position

    def tags(self, data, offset, fields, floor):
        field = self._pick(fields, (TAGS,), floor)
        if field is None:
            return None
        rng = self.rng
        tag = rng.choice((0, 1, 2, 3, 7, 100, 2**31 - 1))
        size = rng.choice((0, 1, 4, 16, 2**20, 2**31 - 1))
        section = bytearray()
        writeUnsignedVarint(section, rng.choice((1, 2, 1000, 2**31 - 1)))
        writeUnsignedVarint(section, tag)
        writeUnsignedVarint(section, size)
        section += rng.randbytes(min(size, rng.choice((0, 1, 4, 16))))
        data[field.position : field.position + field.size] = section
        return data, field.position

    def fixed(self, data, offset, fields, floor):
        field = self._pick(fields, (FIXED,), floor)
        if field is None:
            return None
        value = self.rng.choice(_FIXED_VALUES)
        at = field.position + self.rng.randrange(max(1, field.size - len(value) + 1))
        end = min(at + len(value), field.position + field.size)
        data[at:end] = value[: end - at]
        return data, floor

    def records(self, data, offset, fields, floor):
        field = self._pick(fields, (RECORDS,), floor)
        if field is None:
            return None
        start, end = field.position, field.position + field.size
        batch = bytearray(data[start:end])
        batch = self._mutateBatch(batch)
        # The records' length prefix must follow the new size.
        lengthField = max(
            (f for f in fields if f.kind == LENGTH and f.position < start), key=lambda f: f.position
        )
        data[start:end] = batch
        if self.rng.random() < 0.9:
            data[lengthField.position : lengthField.position + lengthField.size] = _lengthBytes(
                lengthField, len(batch)
            )
        return data, lengthField.position

    def _mutateBatch(self, batch: bytearray) -> bytearray:
        rng = self.rng
        if len(batch) < HEADER_SIZE:
            return batch
        # Bombs (6) cost the broker tens of milliseconds each: rarer.
        choice = rng.choices(range(9), (10, 10, 10, 8, 10, 6, 1, 8, 20))[0]
        if choice == 0:  # recordsCount
            struct.pack_into(">i", batch, 57, rng.choice((0, -1, 2**31 - 1, 2, 1000, 5)))
        elif choice == 1:  # lastOffsetDelta (and maybe count to match)
            delta = rng.choice((0, -1, 2**31 - 2, 7, 1 << 20))
            struct.pack_into(">i", batch, 23, delta)
            if rng.random() < 0.5:
                struct.pack_into(">i", batch, 57, delta + 1)
        elif choice == 2:  # batchLength
            struct.pack_into(">i", batch, 8, rng.choice((0, -1, 48, 49, len(batch), 2**31 - 1)))
        elif choice == 3:  # magic
            batch[16] = rng.choice((0, 1, 3, 0xFF))
        elif choice == 4:  # attributes: codec, control, transactional
            struct.pack_into(">h", batch, ATTRIBUTES_AT, rng.choice((5, 6, 7, 0x20, 0x30, 0x10, 0x08, -1)))
        elif choice == 5:  # producer id/epoch/sequence
            at = rng.choice((43, 51, 53))
            size = {43: 8, 51: 2, 53: 4}[at]
            batch[at : at + size] = rng.choice((b"\xff", b"\x7f", b"\x00")) * size
        elif choice == 6:  # a bomb as payload
            codec = rng.choice(tuple(_BOMBS))
            batch = batch[:HEADER_SIZE] + bomb(codec, _BOMBS[codec])
            struct.pack_into(">h", batch, ATTRIBUTES_AT, _CODEC_IDS[codec])
            struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
        elif choice == 7:  # garbage payload, any codec
            batch = batch[:HEADER_SIZE] + rng.randbytes(rng.randint(0, 64))
            struct.pack_into(">h", batch, ATTRIBUTES_AT, rng.randrange(5))
            struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
        else:  # bytes of the payload (records, or the compressed stream)
            for _ in range(rng.randint(1, 4)):
                if len(batch) > HEADER_SIZE:
                    at = rng.randrange(HEADER_SIZE, len(batch))
                    batch[at] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01, rng.randrange(256)))
        if rng.random() < 0.85 and len(batch) > ATTRIBUTES_AT:
            size = LOG_OVERHEAD + struct.unpack_from(">i", batch, 8)[0]
            covered = batch[ATTRIBUTES_AT : max(ATTRIBUTES_AT, min(size, len(batch)))]
            struct.pack_into(">I", batch, CRC_AT, crc32c(bytes(covered)))
        return batch

    # -- header ------------------------------------------------------------

    def version(self, data, offset, fields, floor):
        if len(data) < 4:
            return None
        (current,) = struct.unpack_from(">h", data, 2)
        value = self.rng.choice((current + 1, current - 1, 0, -1, 99, self.rng.randrange(20)))
        struct.pack_into(">h", data, 2, _clamp(value, True))
        return data, floor

    def apiKey(self, data, offset, fields, floor):
        if len(data) < 2:
            return None
        struct.pack_into(">h", data, 0, self.rng.choice((-1, 99, 1000, 32767, self.rng.randrange(70))))
        return data, floor

    def clientId(self, data, offset, fields, floor):
        if len(data) < 10:
            return None
        struct.pack_into(">h", data, 8, self.rng.choice((-1, -2, 0, 32767, 300)))
        return data, floor

    # -- blind -------------------------------------------------------------

    def truncate(self, data, offset, fields, floor):
        return data[: self.rng.randrange(len(data) + 1)], floor

    def extend(self, data, offset, fields, floor):
        return data + self.rng.randbytes(self.rng.choice((1, 4, 64, 1024))), floor

    def flip(self, data, offset, fields, floor):
        for _ in range(self.rng.randint(1, 8)):
            if data:
                data[self.rng.randrange(len(data))] ^= 1 << self.rng.randrange(8)
        return data, floor

    def splice(self, data, offset, fields, floor):
        if len(data) < 2:
            return None
        a = self.rng.randrange(len(data))
        b = self.rng.randrange(a, len(data))
        if self.rng.random() < 0.5:
            del data[a:b]
        else:
            data[a:a] = data[a:b]
        return data, floor
