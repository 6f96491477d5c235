"""
Kafka record batches straight into Arrow columns.

A Spark task reads hundreds of thousands of records; decoding each into a
Python object and converting those back into Arrow would dominate the read.
Instead the record bytes of a whole fetch are one C{uint8} array, and every
field is decoded for all records at once with numpy, walking a vector of
positions through the fields one varint at a time.

Only one step is sequential: finding where each record starts (each
record's length prefix says where the next one is).  Producers mostly write
batches of records of equal length, or of a few runs of equal lengths (the
offset delta's varint grows by a byte at record 64), so that step is
guessed a run at a time and checked vectorized: from a record of length
C{L}, the next records are guessed to start every C{L} bytes, and the guess
holds up to the first of them whose length prefix is not C{L}'s.  A batch
whose runs are short (records of varied lengths) is walked by a tight
Python loop instead.

Keys and values are never copied into Python objects either.  A record's
key is the byte range C{[start, end)} of the buffer, and the ranges of
successive records are increasing and disjoint, so the interleaved bounds
C{start0, end0, start1, end1, ...} are valid Arrow binary offsets: a binary
array over the whole buffer whose even elements are the keys (and odd ones
the bytes between them).  Taking the even elements gives a compact binary
column in one C++ call.

Headers, when asked for, are decoded in Python, only for the records that
have any.

The decoder is checked against the reference decoder in
L{kafkatwist.protocol.records} (which it relies on for batch framing, CRCs
and decompression) by the tests.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkatwist.protocol.batch import (
    CODEC_MASK as _COMPRESSION_MASK,
    TIMESTAMP_TYPE_BIT as _LOG_APPEND_TIME,
)
from kafkatwist.protocol.markers import MarkerError, readMarker
from kafkatwist.protocol.records import (
    BATCH_HEADER_SIZE,
    CorruptRecordError,
    decodeBatches,
    decodeHeaders,
    decompress,
    readVarint,
)

__all__ = ["ArrowRecordDecoder", "DecodedFetch", "kafkaArrowSchema"]


_INT32_MAX = (1 << 31) - 1

#: a batch with fewer records than this is walked by the loop: guessing
#: its runs costs more than walking it
_MIN_GUESSED_BATCH = 16
#: a guessed run shorter than this, or more than this many runs in a batch,
#: and the rest of the batch is walked by the loop (records of varied lengths)
_MIN_RUN = 16
_MAX_RUNS = 8


def kafkaArrowSchema(includeHeaders: bool) -> pa.Schema:
    """
    The Arrow form of Spark's Kafka schema, as PySpark derives it
    (C{to_arrow_schema(schema, timezone="UTC")}): Spark checks batches a
    data source returns against exactly this.
    """
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if includeHeaders:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def _walk(data, pos: int, count: int, append) -> int:
    """
    Append where each of C{count} records starting at C{pos} in C{data}
    begins (at its length prefix), and return the position after the last.

    The one loop that must run per record, so it is kept to the bone: a
    record's length is read only to find the next record, without the
    zigzag sign (a negative length is caught later, when the lengths are
    decoded again, vectorized, and checked against these positions).
    """
    try:
        for _ in range(count):
            append(pos)
            v = data[pos]
            if v < 0x80:
                pos += 1 + (v >> 1)
            else:
                w = data[pos + 1]
                if w < 0x80:
                    pos += 2 + (((v & 0x7F) | (w << 7)) >> 1)
                else:
                    v, after = readVarint(data, pos)
                    pos = after + (v >> 1)
    except IndexError:
        raise CorruptRecordError("record runs past the end of its batch") from None
    return pos


def _recordPositions(data, u8: np.ndarray, pos: int, end: int, count: int, out: list) -> int:
    """
    Append to C{out} C{(starts, prefix)}: arrays of where each of C{count}
    records starting at C{pos} begins (at its length prefix), with the width
    of their length prefix for a run of records of one length (C{None} for
    walked records: their lengths are decoded and checked later); return
    the position after the last.  The records should end at C{end}.

    Runs of records of one length are guessed and checked vectorized (see
    the module's docstring); what the guesses do not cover is walked by
    L{_walk}.  A run's records are framed exactly: each one's length prefix
    is the first one's bytes, a non-negative length that ends it where the
    next one starts.
    """
    if count < _MIN_GUESSED_BATCH:
        walked: list[int] = []
        pos = _walk(data, pos, count, walked.append)
        out.append((np.array(walked, np.int64), None))
        return pos
    runs = 0
    while count:
        try:
            v, after = readVarint(data, pos)
        except CorruptRecordError:
            raise CorruptRecordError("record runs past the end of its batch") from None
        prefix = after - pos
        stride = prefix + (v >> 1)
        if v & 1 or stride > end - pos or runs >= _MAX_RUNS:
            # a negative length or one past the batch (the loop and the
            # checks catch those), or records of varied lengths
            break
        runs += 1
        guess = np.arange(pos, pos + stride * count, stride, dtype=np.int64)
        # A record starts at guess[i + 1] if one starts at guess[i] and its
        # length prefix is the same bytes as the first one's.
        same = np.ones(count, np.bool_)
        for k in range(prefix):
            same &= _gather(u8, guess + k) == data[pos + k]
        same &= guess + stride <= end
        if same.all():
            run = count
        else:
            run = int(same.argmin())
        out.append((guess[:run] if run < count else guess, prefix))
        # the record after the last of the run starts right after it
        pos += stride * run
        count -= run
        if count and run < _MIN_RUN:
            break
    if count:
        walked = []
        pos = _walk(data, pos, count, walked.append)
        out.append((np.array(walked, np.int64), None))
    return pos


def _gather(u8: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """
    C{u8[pos]}, positions past the end clamped to the last byte.

    Positions are never negative (every one is a record's start moved on
    by lengths checked non-negative); indexing is twice as fast as
    C{take(mode="clip")}, which is left for the rare fetch where a
    position is past the end (a corrupt record, refused by the callers).
    """
    try:
        return u8[pos]
    except IndexError:
        return u8.take(pos, mode="clip")


def _varints(u8: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """
    Decode one zigzag varint at each position of C{pos} in C{u8}.

    Reads past the buffer's end are clamped to its last byte: what is read
    there is garbage, and the callers' checks that fields end within their
    record refuse it.

    @return: (values as int64, positions just after each varint).
    """
    first = _gather(u8, pos)
    more = first >= 0x80
    if not more.any():
        value = first.astype(np.int64)
        after = pos + 1
    else:
        value = (first & 0x7F).astype(np.uint64)
        length = np.ones(len(pos), np.int64)
        shift = 7
        while more.any():
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
            byte = _gather(u8, pos + length)
            value |= np.where(more, (byte & 0x7F).astype(np.uint64) << np.uint64(shift), 0)
            length += more
            more &= byte >= 0x80
            shift += 7
        after = pos + length
        value = value.view(np.int64)
    # zigzag: n -> (n >>> 1) ^ -(n & 1)
    return ((value >> 1) & 0x7FFF_FFFF_FFFF_FFFF) ^ -(value & 1), after


_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _checkLength(lengths: np.ndarray, size: int, field: str) -> None:
    """
    Refuse a key or value length below -1 (null) or beyond the fetch: one
    comparison for both (a length below -1 is, plus one and unsigned, a
    huge one).
    """
    if ((lengths + 1).view(np.uint64) > size + 1).any():
        if (lengths < -1).any():
            raise CorruptRecordError(f"negative {field} length")
        raise CorruptRecordError("record fields overrun the record")


def _validity(null: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(~null, bitorder="little"))


def _binaryColumn(
    buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, null: np.ndarray
) -> pa.Array:
    """
    The byte ranges C{[start, start + length)} of C{buffer} as a binary
    column, null where C{null} says so (where C{length} is -1).
    """
    n = len(starts)
    nulls = int(np.count_nonzero(null))
    if nulls == n:
        return pa.nulls(n, pa.binary())
    bounds = np.empty(2 * n, np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + np.maximum(lengths, 0)
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    column = pc.take(spans, pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
    # take's answer carries an all-valid bitmap: leave it out when nothing
    # is null, the layout a ready-made column has (Spark loads the same).
    _, offsets, data = column.buffers()
    return pa.Array.from_buffers(
        pa.binary(), n, [_validity(null) if nulls else None, offsets, data], null_count=nulls
    )


class DecodedFetch:
    """
    What L{ArrowRecordDecoder.decode} found in one fetch.

    @ivar batch: the records in the requested offset range, or C{None} if
        there were none.
    @ivar nextOffset: where to fetch next: past the last whole batch seen
        (control batches and records outside the range included), or the
        offset asked for if the fetch held no whole batch.
    @ivar lastOffset: the offset of the last record in C{batch}, or -1.
    """

    __slots__ = ("batch", "nextOffset", "lastOffset")

    def __init__(self, batch: pa.RecordBatch | None, nextOffset: int, lastOffset: int) -> None:
        self.batch = batch
        self.nextOffset = nextOffset
        self.lastOffset = lastOffset


class ArrowRecordDecoder:
    """
    Decodes one topic-partition's fetched record bytes into Arrow record
    batches of Spark's Kafka schema.

    @param schema: the Arrow schema to produce (see L{kafkaArrowSchema});
        includes C{headers} if and only if headers are wanted.
    """

    def __init__(
        self, topic: str, partition: int, schema: pa.Schema, checkCrc: bool = True
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.schema = schema
        self.includeHeaders = "headers" in schema.names
        self.checkCrc = checkCrc
        self._constant: tuple[int, pa.Array, pa.Array] | None = None
        self._createTimes: pa.Array | None = None

    def decode(
        self, raw, fromOffset: int, untilOffset: int, aborted=None
    ) -> DecodedFetch:
        """
        Decode the records of C{raw} (a Fetch response's record bytes) whose
        offsets are in C{[fromOffset, untilOffset)}.

        @param aborted: for a read_committed fetch, its aborted transactions
            (C{(producerId, firstOffset)}): their batches are left out, as
            a Kafka consumer leaves them out.
        @raise CorruptRecordError: if a batch is malformed or its CRC is wrong.
        """
        skip = _AbortedFilter(aborted) if aborted is not None else None
        view = memoryview(raw)
        # (start, end) of each kept batch's records in raw, or its
        # decompressed records
        spans: list[tuple[int, int]] = []
        decompressed: list[bytes | None] = []
        counts: list[int] = []
        baseOffsets: list[int] = []
        baseTimestamps: list[int] = []
        logAppendTime: list[bool] = []
        compressed = False
        nextOffset = fromOffset
        pos = 0
        for batch in decodeBatches(view, checkCrc=self.checkCrc, decodeRecords=False):
            start, pos = pos, pos + batch.sizeInBytes
            if batch.baseOffset >= untilOffset:
                # Nothing of the range is left before this batch (a
                # compacted log has gaps): the range is read.
                nextOffset = max(nextOffset, untilOffset)
                break
            nextOffset = max(nextOffset, batch.nextOffset)
            if skip is not None and batch.isTransactional and skip(batch, view[start:pos]):
                continue
            if batch.isControl or batch.lastOffset < fromOffset or not batch.recordCount:
                continue
            codec = batch.attributes & _COMPRESSION_MASK
            if codec:
                compressed = True
                decompressed.append(decompress(codec, view[start + BATCH_HEADER_SIZE : pos]))
            else:
                decompressed.append(None)
            spans.append((start + BATCH_HEADER_SIZE, pos))
            counts.append(batch.recordCount)
            baseOffsets.append(batch.baseOffset)
            if batch.attributes & _LOG_APPEND_TIME:
                # Every record of a log-append-time batch carries the
                # broker's time, which it stores as the batch maxTimestamp.
                baseTimestamps.append(batch.maxTimestamp)
                logAppendTime.append(True)
            else:
                baseTimestamps.append(batch.baseTimestamp)
                logAppendTime.append(False)
        if not spans:
            return DecodedFetch(None, nextOffset, -1)
        if compressed:
            # One buffer for the whole fetch: the record walk and the
            # kernels then work on absolute positions, without a base per
            # batch.
            parts = [
                chunk if chunk is not None else view[s:e]
                for chunk, (s, e) in zip(decompressed, spans)
            ]
            data = b"".join(parts) if len(parts) > 1 else bytes(parts[0])
            bounds = []
            at = 0
            for part in parts:
                bounds.append((at, at + len(part)))
                at += len(part)
        else:
            # Uncompressed records are read where they are, in the fetch
            # (bytes, or a view of the buffer the response was received
            # into: nothing decoded refers to it afterwards).
            data = raw if isinstance(raw, bytes) else view
            bounds = spans
        if len(data) > _INT32_MAX:
            # Binary offsets are 32-bit; a fetch is bounded far below this.
            raise CorruptRecordError(f"fetch of {len(data)} bytes is too large to decode at once")
        u8 = np.frombuffer(data, np.uint8)
        positions: list[tuple[np.ndarray, int | None]] = []
        for (start, end), count in zip(bounds, counts):
            if _recordPositions(data, u8, start, end, count, positions) != end:
                raise CorruptRecordError(
                    f"a batch's {count} records do not fill its {end - start} bytes"
                )
        if len(positions) > 1:
            starts = np.concatenate([chunk for chunk, _ in positions])
        else:
            starts = positions[0][0]
        # a record ends where the next one's length prefix starts (the last
        # at the end of its batch)
        ends = np.empty_like(starts)
        ends[:-1] = starts[1:]
        batchEnds = np.cumsum(counts) - 1
        ends[batchEnds] = [end for _, end in bounds]
        bodies = self._bodies(u8, positions, starts, ends)
        counts_ = np.array(counts, np.int64)
        perRecord = (
            np.repeat(np.array(baseOffsets, np.int64), counts_),
            np.repeat(np.array(baseTimestamps, np.int64), counts_),
            np.repeat(np.array(logAppendTime, np.bool_), counts_) if any(logAppendTime) else None,
        )
        return self._columns(data, u8, bodies, ends, perRecord, fromOffset, untilOffset,
                             nextOffset)

    @staticmethod
    def _bodies(u8, positions, starts, ends) -> np.ndarray:
        """
        Where each record's attributes byte is, just after its length
        prefix: known for a run's records (framed exactly when found); for
        walked records, their lengths are decoded and must end each one
        where the next begins (the walk read them without the sign).
        """
        if all(prefix is not None for _, prefix in positions):
            if len({prefix for _, prefix in positions}) == 1:
                return starts + positions[0][1]
            return np.concatenate([chunk + prefix for chunk, prefix in positions])
        bodies = np.empty_like(starts)
        at = 0
        for chunk, prefix in positions:
            n = len(chunk)
            if prefix is not None:
                np.add(chunk, prefix, out=bodies[at : at + n])
            else:
                lengths, after = _varints(u8, chunk)
                if not np.array_equal(after + lengths, ends[at : at + n]):
                    raise CorruptRecordError("record lengths do not add up")
                bodies[at : at + n] = after
            at += n
        return bodies

    def _columns(
        self, data, u8, bodies, ends, perRecord, fromOffset, untilOffset, nextOffset
    ) -> DecodedFetch:
        size = len(data)
        pos = bodies + 1  # skip the record attributes byte
        timestampDeltas, pos = _varints(u8, pos)
        offsetDeltas, pos = _varints(u8, pos)
        keyLengths, keyStarts = _varints(u8, pos)
        # Lengths are checked before they move a position on, so that
        # positions stay within a few buffer sizes (no overflow).
        _checkLength(keyLengths, size, "key")
        pos = keyStarts + np.maximum(keyLengths, 0)
        valueLengths, valueStarts = _varints(u8, pos)
        _checkLength(valueLengths, size, "value")
        pos = valueStarts + np.maximum(valueLengths, 0)
        headerCounts, pos = _varints(u8, pos)

        # The record framing and the fields must agree; nothing is built
        # over the buffer until they do (a bad offset would read out of it).
        if not headerCounts.any():
            noHeaders = None  # no record has headers: each ends after the count
            if not np.array_equal(pos, ends):
                if (pos > ends).any():
                    raise CorruptRecordError("record fields overrun the record")
                raise CorruptRecordError("bytes left over after a record's fields")
        else:
            if (headerCounts < 0).any():
                raise CorruptRecordError("negative header count")
            if (pos > ends).any():
                raise CorruptRecordError("record fields overrun the record")
            noHeaders = headerCounts == 0
            if not (pos == ends)[noHeaders].all():
                raise CorruptRecordError("bytes left over after a record's fields")

        baseOffsets, baseTimestamps, logAppendTime = perRecord
        offsets = baseOffsets + offsetDeltas
        if logAppendTime is None:
            timestampsMs = baseTimestamps + timestampDeltas
        else:
            timestampsMs = np.where(logAppendTime, baseTimestamps,
                                    baseTimestamps + timestampDeltas)

        if offsets.min() >= fromOffset and offsets.max() < untilOffset:
            kept = len(offsets)  # all of them: no mask to build
        else:
            inRange = (offsets >= fromOffset) & (offsets < untilOffset)
            kept = int(np.count_nonzero(inRange))
        if kept == 0:
            return DecodedFetch(None, nextOffset, -1)
        if noHeaders is None and self.includeHeaders:
            noHeaders = np.ones(len(offsets), np.bool_)
        if kept != len(offsets):
            if logAppendTime is None:
                logAppendTime = np.zeros(len(offsets), np.bool_)
            # only at a range's ends: select the records before building
            offsets = offsets[inRange]
            timestampsMs = timestampsMs[inRange]
            logAppendTime = logAppendTime[inRange]
            keyStarts, keyLengths = keyStarts[inRange], keyLengths[inRange]
            valueStarts, valueLengths = valueStarts[inRange], valueLengths[inRange]
            if noHeaders is not None:
                noHeaders = noHeaders[inRange]
            pos, headerCounts = pos[inRange], headerCounts[inRange]
            ends = ends[inRange]
        n = kept
        buffer = pa.py_buffer(data)
        topic, partition = self._constantColumns(n)
        if logAppendTime is None:
            timestampTypes = self._createTime(n)
        else:
            timestampTypes = pa.array(logAppendTime.astype(np.int32))
        columns = [
            _binaryColumn(buffer, keyStarts, keyLengths, keyLengths == -1),
            _binaryColumn(buffer, valueStarts, valueLengths, valueLengths == -1),
            topic,
            partition,
            pa.array(offsets),
            pa.Array.from_buffers(_TIMESTAMP, n, [None, pa.py_buffer(timestampsMs * 1000)]),
            timestampTypes,
        ]
        if self.includeHeaders:
            columns.append(self._headers(data, noHeaders, pos, headerCounts, ends))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        return DecodedFetch(batch, nextOffset, int(offsets[-1]))

    def _constantColumns(self, n: int) -> tuple[pa.Array, pa.Array]:
        """
        The topic and partition columns of C{n} rows, kept for the next
        fetch of as many records (immutable arrays, shared by the batches).
        """
        cached = self._constant
        if cached is None or cached[0] != n:
            cached = self._constant = (
                n,
                pa.repeat(pa.scalar(self.topic, pa.string()), n),
                pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            )
        return cached[1], cached[2]

    def _createTime(self, n: int) -> pa.Array:
        """
        A timestampType column of C{n} CreateTime (0) rows, kept as
        L{_constantColumns} are.
        """
        cached = self._createTimes
        if cached is None or len(cached) != n:
            cached = self._createTimes = pa.array(np.zeros(n, np.int32))
        return cached

    def _headers(self, data, noHeaders, pos, headerCounts, recordEnds) -> pa.Array:
        n = len(noHeaders)
        listType = self.schema.field("headers").type
        structType = listType.value_type
        withHeaders = np.flatnonzero(~noHeaders)
        if not len(withHeaders):
            return pa.ListArray.from_arrays(
                pa.array(np.zeros(n + 1, np.int32)), pa.array([], structType), type=listType
            )
        keys: list[str] = []
        values: list[bytes | None] = []
        sizes = np.zeros(n, np.int32)
        try:
            for i, at, count, end in zip(
                withHeaders.tolist(),
                pos[withHeaders].tolist(),
                headerCounts[withHeaders].tolist(),
                recordEnds[withHeaders].tolist(),
            ):
                headers, after = decodeHeaders(data, at, count)
                if after != end:
                    raise CorruptRecordError(f"record headers end at {after}, not {end}")
                for k, v in headers:
                    keys.append(k)
                    # a view of the fetch, when the records are one
                    values.append(v if v is None or isinstance(v, bytes) else bytes(v))
                sizes[i] = len(headers)
        except IndexError:
            raise CorruptRecordError("record headers run past the record") from None
        listOffsets = np.zeros(n + 1, np.int32)
        np.cumsum(sizes, out=listOffsets[1:])
        flat = pa.StructArray.from_arrays(
            [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
            fields=list(structType),
        )
        return pa.ListArray.from_arrays(pa.array(listOffsets), flat, type=listType)


class _AbortedFilter:
    """
    The Kafka consumer's rule for read_committed fetches: a transactional
    batch is dropped when its producer has an aborted transaction listed
    with a first offset at or before it, until that producer's ABORT
    marker.
    """

    def __init__(self, aborted) -> None:
        self._pending = sorted(aborted, key=lambda entry: entry[1])
        self._next = 0
        self._producers: set[int] = set()

    def __call__(self, batch, data) -> bool:
        """
        @return: whether to leave C{batch} (a transactional one) out.
        """
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= batch.baseOffset:
            self._producers.add(pending[self._next][0])
            self._next += 1
        if batch.isControl:
            try:
                marker = readMarker(data)
            except MarkerError:
                return True
            if marker.isAborted:
                self._producers.discard(batch.producerId)
            return True
        return batch.producerId in self._producers
