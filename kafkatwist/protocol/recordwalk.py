"""
The one walk over a magic 2 batch's records: every untrusted length,
count and varint of a record is checked here and nowhere else.

One record (varints zigzag-encoded)::

    length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value,
    headerCount varint, [keyLength varint, key, valueLength varint, value]

Two forms, one module:

  - L{walkRecords}, a generator yielding where each record's fields are
    (L{RecordSpan}'s layout), every field parsed and checked: the codec's
    decoder, the log cleaner and the append-time record checks read records
    through it and slice out what they need.
  - L{skipRecords}, the produce path's walk: record lengths only, stepping
    over runs of equal-length records at C speed (a Python loop per record
    is the produce path's largest cost), and the last record's offset delta.

Whatever the bytes, both raise L{CorruptRecordError} and nothing else; the
broker answers it as CORRUPT_MESSAGE (stored or fetched records) or
INVALID_RECORD (records a client appends).  Varints are one-byte inline,
longer ones read by L{readVarint} (at most 10 bytes).
"""

from __future__ import annotations

from collections.abc import Iterator

from kafkatwist.protocol.compression import CorruptRecordError
from kafkatwist.protocol.varint import readVarint

__all__ = [
    "MIN_RECORD_SIZE",
    "RecordSpan",
    "decodeHeaders",
    "skipRecords",
    "walkRecords",
]

#: the smallest record: its length, then attributes, timestamp delta,
#: offset delta, key length, value length and header count, a byte each
MIN_RECORD_SIZE = 7

#: what L{walkRecords} yields per record, a plain tuple (named here for
#: readers): its byte range C{[start, end)} (length prefix included), its
#: timestamp delta and where that delta ends (to rebase it), its offset
#: delta, its key and value as position and size (size -1: null), where
#: its headers start and how many there are.
RecordSpan = tuple[int, int, int, int, int, int, int, int, int, int, int]
#: positions in a L{RecordSpan}
START, END, TIMESTAMP_DELTA, DELTA_END, OFFSET_DELTA = 0, 1, 2, 3, 4
KEY_AT, KEY_SIZE, VALUE_AT, VALUE_SIZE, HEADERS_AT, HEADER_COUNT = 5, 6, 7, 8, 9, 10


def walkRecords(data, count: int, lastOffsetDelta: int | None = None) -> Iterator[RecordSpan]:
    """
    Walk the C{count} records filling C{data} (a batch's decompressed
    records: C{bytes}, C{bytearray} or a byte C{memoryview}), one
    L{RecordSpan} per record.

    Checked: each record's length is at least a record's and within
    C{data}; a key or value is null (-1) or fits its record; the header count
    is not negative and each header's key (never null) and value fit the
    record; the fields end exactly where the record does; C{data} ends
    with the last record.

    @param lastOffsetDelta: if given, offset deltas must also increase
        within C{[0, lastOffsetDelta]} (what the log cleaner relies on).
    @raise CorruptRecordError: for any of the above, a truncated varint or
        one longer than 10 bytes.  Raised lazily, at the record that breaks
        them (and after the last one for trailing bytes).
    """
    n = len(data)
    pos = 0
    previous = -1
    try:
        for _ in range(count):
            start = pos
            v = data[pos]
            if v < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                v = (v & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                v, pos = readVarint(data, pos)
            if v & 1 or v >> 1 < MIN_RECORD_SIZE - 1:
                raise CorruptRecordError(
                    f"record at byte {start} has length {(v >> 1) ^ -(v & 1)}"
                )
            end = pos + (v >> 1)
            if end > n:
                raise CorruptRecordError(f"record at byte {start} overruns its batch")
            pos += 1  # attributes, unused

            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v, pos = readVarint(data, pos)
            timestampDelta = (v >> 1) ^ -(v & 1)
            deltaEnd = pos

            v = data[pos]
            if v < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                v = (v & 0x7F) | (data[pos + 1] << 7)
                pos += 2
            else:
                v, pos = readVarint(data, pos)
            offsetDelta = (v >> 1) ^ -(v & 1)
            if lastOffsetDelta is not None:
                if offsetDelta <= previous or offsetDelta > lastOffsetDelta:
                    raise CorruptRecordError(f"record offset delta {offsetDelta} out of order")
                previous = offsetDelta

            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v, pos = readVarint(data, pos)
            keyAt = pos
            if v & 1:  # negative: only -1 (null) is valid
                if v != 1:
                    raise CorruptRecordError(f"record at byte {start}: negative key length")
                keySize = -1
            else:
                keySize = v >> 1
                pos += keySize
                if pos > end:
                    raise CorruptRecordError(f"record at byte {start}: key overruns the record")

            v = data[pos]
            if v < 0x80:
                pos += 1
            else:
                v, pos = readVarint(data, pos)
            valueAt = pos
            if v & 1:
                if v != 1:
                    raise CorruptRecordError(f"record at byte {start}: negative value length")
                valueSize = -1
            else:
                valueSize = v >> 1
                pos += valueSize
                if pos > end:
                    raise CorruptRecordError(f"record at byte {start}: value overruns the record")

            v = data[pos]
            if v == 0:
                pos += 1
                headersAt = pos
                headerCount = 0
            else:
                v, pos = readVarint(data, pos)
                headersAt = pos
                headerCount = (v >> 1) ^ -(v & 1)
                pos = _skipHeaders(data, pos, headerCount, end)

            if pos != end:
                raise CorruptRecordError(
                    f"record at byte {start} has {end - pos} bytes left over after its fields"
                )
            yield (
                start, end, timestampDelta, deltaEnd, offsetDelta,
                keyAt, keySize, valueAt, valueSize, headersAt, headerCount,
            )
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    if pos != n:
        raise CorruptRecordError(f"{n - pos} bytes after the batch's {count} records")


def _skipHeaders(data, pos: int, count: int, end: int) -> int:
    """
    Step over C{count} headers at C{pos}, which must stay within C{end}.
    """
    if count < 0:
        raise CorruptRecordError(f"header count {count}")
    if count * 2 > end - pos:
        raise CorruptRecordError(f"{count} headers cannot fit in {end - pos} bytes")
    for _ in range(count):
        v, pos = readVarint(data, pos)
        if v & 1:
            raise CorruptRecordError("null header key")
        pos += v >> 1
        if pos > end:
            raise CorruptRecordError("header key overruns the record")
        v, pos = readVarint(data, pos)
        if v & 1:
            if v != 1:
                raise CorruptRecordError("negative header value length")
        else:
            pos += v >> 1
            if pos > end:
                raise CorruptRecordError("header value overruns the record")
    return pos


def decodeHeaders(data, pos: int, count: int) -> tuple[list, int]:
    """
    Decode C{count} record headers at C{pos}.

    @return: C{[(key, value or None), ...]} and the position after them.
    @raise CorruptRecordError: a negative count, a null key, a key or value
        running past C{data}.  A key that is not UTF-8 is decoded with
        replacement characters, as Kafka's clients do.
    """
    end = len(data)
    _skipHeaders(data, pos, count, end)  # every length checked first
    headers = []
    for _ in range(count):
        v, pos = readVarint(data, pos)
        stop = pos + (v >> 1)
        # Kafka's clients decode header keys leniently (malformed bytes
        # become U+FFFD); refusing them would make one record unreadable.
        headerKey = bytes(data[pos:stop]).decode("utf-8", "replace")
        v, pos = readVarint(data, stop)
        if v & 1:
            headerValue = None
        else:
            stop = pos + (v >> 1)
            headerValue = data[pos:stop]
            pos = stop
        headers.append((headerKey, headerValue))
    return headers, pos


def skipRecords(data, pos: int, end: int, count: int) -> int:
    """
    Step through C{count} records from C{pos} by their length prefixes,
    checking that together they fill C{[pos, end)} exactly: the count a
    consumer's record iterator will trust is the count there is.

    Only the lengths are read: parsing each record's fields too (as Kafka's
    validator does, and L{walkRecords}) costs ten times as much in Python --
    about 1 us per record, three times the whole produce path -- so a record
    whose insides do not add up is stored as sent; readers of stored batches
    refuse it with CorruptRecordError.

    @param data: a C{bytes} or C{bytearray} (strided slices and C{lstrip}
        are what make runs cheap; a memoryview has neither).
    @return: the last record's offset delta.
    @raise CorruptRecordError: for records that do not add up or run past
        C{end}.
    """
    try:
        if count == 1:
            # One record (a one-record produce): its length must reach the end.
            v = data[pos]
            if v < 0x80:
                if v & 1 or v < 12:
                    raise CorruptRecordError(f"record length {(v >> 1) ^ -(v & 1)}")
                at = pos + 1
                stop = at + (v >> 1)
            elif data[pos + 1] < 0x80:
                if v & 1:
                    raise CorruptRecordError("negative record length")
                at = pos + 2
                stop = at + (((v & 0x7F) | (data[pos + 1] << 7)) >> 1)
            else:
                v, at = readVarint(data, pos)
                if v & 1:
                    raise CorruptRecordError("negative record length")
                stop = at + (v >> 1)
            if stop != end:
                raise CorruptRecordError(f"1 records end at {stop - end:+} bytes from their batch's end")
            # Its offset delta (L{_offsetDelta}, inline: every one-record
            # produce's path).
            at += 1
            at = at + 1 if data[at] < 0x80 else readVarint(data, at)[1]
            v = data[at]
            if v >= 0x80:
                v, _ = readVarint(data, at)
            return (v >> 1) ^ -(v & 1)
        last = pos
        declared = count
        # Records walked one by one before runs are looked for again: a batch
        # of mixed sizes pays for one failed look in this many records.
        plain = 0
        # The one loop run per record on the produce path: kept to the bone,
        # lengths read inline in their one- and two-byte forms (records under
        # 8 KiB).
        while count:
            last = pos
            v = data[pos]
            if v < 0x80:
                if v & 1 or v < 12:  # negative, or shorter than a record can be
                    raise CorruptRecordError(f"record length {(v >> 1) ^ -(v & 1)}")
                width = 1
                step = 1 + (v >> 1)
            elif data[pos + 1] < 0x80:
                if v & 1:
                    raise CorruptRecordError("negative record length")
                width = 2
                step = 2 + (((v & 0x7F) | (data[pos + 1] << 7)) >> 1)
            else:
                # 8 KiB and more: the loop's cost per record is nothing beside
                # the bytes, so no runs are looked for.
                v, at = readVarint(data, pos)
                if v & 1:
                    raise CorruptRecordError("negative record length")
                pos = at + (v >> 1)
                count -= 1
                continue
            pos += step
            count -= 1
            if plain:
                plain -= 1
                continue
            # A producer's batch is mostly runs of records of one size (its
            # first 64 records one byte shorter than the rest: their offset
            # deltas).  Records following this one with the same length prefix
            # are stepped over at C speed: each prefix byte is compared down a
            # strided slice, and the run is as long as every byte matches.  The
            # positions stepped to are exactly the ones the loop above would
            # reach.  The window starts at 64 (a producer's first run) and grows
            # sixteenfold while the run holds: a run of n records costs about
            # log16(n) looks (the Python around each look, not the compares, is
            # what costs), and a run that ends wastes at most fifteen times its
            # length in compared bytes, never more than the loop above costs.
            first = data[last:last + 1]
            second = data[last + 1:last + 2] if width == 2 else None
            window = 64
            while count:
                m = (end - pos) // step
                if m > count:
                    m = count
                if m > window:
                    m = window
                if m < 1:
                    break
                stop = pos + m * step
                # A whole window that matches (the usual case) is one memcmp;
                # lstrip, which finds where a run ends, looks each byte up.
                column = data[pos:stop:step]
                rest = 0 if column == first * m else len(column.lstrip(first))
                if second is not None:
                    column = data[pos + 1:stop:step]
                    if column != second * m:
                        other = len(column.lstrip(second))
                        if other > rest:
                            rest = other
                run = m - rest
                if run:
                    last = pos + (run - 1) * step
                    pos += run * step
                    count -= run
                if rest:
                    if not run:
                        plain = 32
                    break
                window <<= 4
        if pos != end:
            raise CorruptRecordError(f"{declared} records end at {pos - end:+} bytes from their batch's end")
        # The last record's offset delta, after its length (one- and
        # two-byte varints read inline, as above).
        return _offsetDelta(
            data,
            last + 1 if data[last] < 0x80 else last + 2 if data[last + 1] < 0x80 else readVarint(data, last)[1],
        )
    except IndexError:
        raise CorruptRecordError("records run past the end of their batch") from None


def _offsetDelta(data, at: int) -> int:
    """
    The offset delta of a record whose fields start at C{at} (after its
    length): past its attributes and timestamp delta (a one-byte varint
    read inline).

    @raise IndexError: the record runs past C{data}.
    """
    at += 1
    at = at + 1 if data[at] < 0x80 else readVarint(data, at)[1]
    v = data[at]
    if v >= 0x80:
        v, _ = readVarint(data, at)
    return (v >> 1) ^ -(v & 1)
