"""
Kafka record batches straight into Arrow columns.

A Spark task reads hundreds of thousands of records; decoding each into a
Python object and converting those back into Arrow would dominate the read.
Instead, only the one step that is inherently sequential runs in Python: a
tight loop that finds where each record starts (each record's length prefix
says where the next one is).  Everything else -- the timestamp and offset
deltas, key and value lengths, the header count -- is decoded for all
records of a fetch at once with Arrow compute kernels, treating the
decompressed record bytes as one C{uint8} array and walking a vector of
positions through the fields one varint at a time.

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

from array import array

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


_U64_7F = pa.scalar(0x7F, pa.uint64())
_U64_ONE = pa.scalar(1, pa.uint64())
_U8_80 = pa.scalar(0x80, pa.uint8())
_I64_ZERO = pa.scalar(0, pa.int64())
_I64_ONE = pa.scalar(1, pa.int64())
_I64_MINUS_ONE = pa.scalar(-1, pa.int64())
_I64_TWO = pa.scalar(2, pa.int64())
_I64_THOUSAND = pa.scalar(1000, pa.int64())
_INT32_MAX = (1 << 31) - 1


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


_arange = pa.array([], pa.int64())


def _range(n: int) -> pa.Array:
    """
    C{0 .. n-1} as an int64 array: a zero-copy slice of a cached one, since
    building it from Python ints costs more than the decode it serves.
    """
    global _arange
    if len(_arange) < n:
        size = max(n, 2 * len(_arange), 1 << 16)
        numbers = array("q", range(size))
        _arange = pa.Array.from_buffers(pa.int64(), size, [None, pa.py_buffer(numbers)])
    return _arange.slice(0, n)


def _int64(values: array) -> pa.Array:
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _recordPositions(data: bytes, pos: int, count: int, append) -> int:
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


def _varints(u8: pa.Array, pos: pa.Array, last: pa.Scalar) -> tuple[pa.Array, pa.Array]:
    """
    Decode one zigzag varint at each position of C{pos} in C{u8}.

    @param last: the buffer's last index; reads past a varint's end are
        clamped to it (their bytes are masked out anyway).
    @return: (values as int64, positions just after each varint).
    """
    first = pc.take(u8, pos)
    value = pc.bit_wise_and(first.cast(pa.uint64()), _U64_7F)
    more = pc.greater_equal(first, _U8_80)
    if pc.any(more).as_py():
        length = pa.repeat(_I64_ONE, len(pos))
        cursor = pos
        shift = 7
        while pc.any(more).as_py():
            if shift > 63:
                raise CorruptRecordError("varint longer than 10 bytes")
            cursor = pc.min_element_wise(pc.add(cursor, _I64_ONE), last)
            byte = pc.take(u8, cursor)
            bits = pc.shift_left(
                pc.bit_wise_and(byte.cast(pa.uint64()), _U64_7F), pa.scalar(shift, pa.uint64())
            )
            value = pc.if_else(more, pc.bit_wise_or(value, bits), value)
            length = pc.add(length, more.cast(pa.int64()))
            more = pc.and_(more, pc.greater_equal(byte, _U8_80))
            shift += 7
        after = pc.add(pos, length)
    else:
        after = pc.add(pos, _I64_ONE)
    # zigzag: even n -> n/2, odd n -> -(n+1)/2 == ~(n >> 1)
    half = pc.shift_right(value, _U64_ONE).cast(pa.int64())
    negative = pc.equal(pc.bit_wise_and(value, _U64_ONE), _U64_ONE)
    return pc.if_else(negative, pc.bit_wise_not(half), half), after


def _binaryColumn(
    data: pa.Buffer, starts: pa.Array, lengths: pa.Array, null: pa.Array | None
) -> pa.Array:
    """
    The byte ranges C{[start, start + length)} of C{data} as a binary
    column, null where C{null} says so (where C{length} is -1).
    """
    n = len(starts)
    if null is not None and pc.all(null).as_py():
        return pa.nulls(n, pa.binary())
    size = pc.max_element_wise(lengths, _I64_ZERO)
    ends = pc.add(starts, size)
    indices = _range(2 * n)
    # position i of the interleaving takes starts[i/2] (even i) or
    # ends[i/2] (odd i), i.e. element (i >> 1) + (i & 1) * n of starts+ends
    pick = pc.add(
        pc.shift_right(indices, _I64_ONE),
        pc.multiply(pc.bit_wise_and(indices, _I64_ONE), pa.scalar(n, pa.int64())),
    )
    bounds = pc.take(pa.concat_arrays([starts, ends]), pick).cast(pa.int32())
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, bounds.buffers()[1], data])
    column = pc.take(spans, pc.multiply(_range(n), _I64_TWO))
    if null is not None and pc.any(null).as_py():
        column = pc.if_else(null, pa.scalar(None, pa.binary()), column)
    return column


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
        chunks: list[bytes] = []
        counts: list[int] = []
        baseOffsets = array("q")
        baseTimestamps = array("q")
        deltaFactors = array("q")
        timestampTypes = array("i")
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
            payload = view[start + BATCH_HEADER_SIZE : pos]
            codec = batch.attributes & _COMPRESSION_MASK
            chunks.append(decompress(codec, payload) if codec else payload)
            count = batch.recordCount
            counts.append(count)
            baseOffsets.extend(array("q", [batch.baseOffset]) * count)
            if batch.attributes & _LOG_APPEND_TIME:
                # Every record of a log-append-time batch carries the
                # broker's time, which it stores as the batch maxTimestamp.
                baseTimestamps.extend(array("q", [batch.maxTimestamp]) * count)
                deltaFactors.extend(array("q", [0]) * count)
                timestampTypes.extend(array("i", [1]) * count)
            else:
                baseTimestamps.extend(array("q", [batch.baseTimestamp]) * count)
                deltaFactors.extend(array("q", [1]) * count)
                timestampTypes.extend(array("i", [0]) * count)
        if not chunks:
            return DecodedFetch(None, nextOffset, -1)
        # One buffer for the whole fetch: the record loop and the kernels
        # then work on absolute positions, without a base per batch.
        data = b"".join(chunks) if len(chunks) > 1 else bytes(chunks[0])
        positions = array("q")
        append = positions.append
        pos = 0
        for chunk, count in zip(chunks, counts):
            end = pos + len(chunk)
            pos = _recordPositions(data, pos, count, append)
            if pos != end:
                raise CorruptRecordError(
                    f"a batch's {count} records do not fill its {len(chunk)} bytes"
                )
        return self._columns(
            data, positions, baseOffsets, baseTimestamps, deltaFactors, timestampTypes,
            fromOffset, untilOffset, nextOffset,
        )

    def _columns(
        self, data, positions, baseOffsets, baseTimestamps, deltaFactors, timestampTypes,
        fromOffset, untilOffset, nextOffset,
    ) -> DecodedFetch:
        n = len(positions)
        if len(data) > _INT32_MAX:
            # Binary offsets are 32-bit; a fetch is bounded far below this.
            raise CorruptRecordError(f"fetch of {len(data)} bytes is too large to decode at once")
        buffer = pa.py_buffer(data)
        u8 = pa.Array.from_buffers(pa.uint8(), len(data), [None, buffer])
        last = pa.scalar(len(data) - 1, pa.int64())
        lengthPositions = _int64(positions)
        # a record ends where the next one's length prefix starts
        recordEnds = pa.concat_arrays(
            [lengthPositions.slice(1), pa.array([len(data)], pa.int64())]
        )

        try:
            lengths, pos = _varints(u8, lengthPositions, last)
            if not pc.all(pc.equal(pc.add(pos, lengths), recordEnds)).as_py():
                raise CorruptRecordError("record lengths do not add up")
            pos = pc.add(pos, _I64_ONE)  # skip the record attributes byte
            timestampDeltas, pos = _varints(u8, pos, last)
            offsetDeltas, pos = _varints(u8, pos, last)
            keyLengths, keyStarts = _varints(u8, pos, last)
            pos = pc.add(keyStarts, pc.max_element_wise(keyLengths, _I64_ZERO))
            valueLengths, valueStarts = _varints(u8, pos, last)
            pos = pc.add(valueStarts, pc.max_element_wise(valueLengths, _I64_ZERO))
            headerCounts, pos = _varints(u8, pos, last)
        except pa.ArrowIndexError:
            # a length ran a field past the end of the buffer
            raise CorruptRecordError("record fields run past the end of the batch") from None

        # The record framing and the fields must agree; nothing is built
        # over the buffer until they do (a bad offset would read out of it).
        if pc.any(pc.less(keyLengths, _I64_MINUS_ONE)).as_py():
            raise CorruptRecordError("negative key length")
        if pc.any(pc.less(valueLengths, _I64_MINUS_ONE)).as_py():
            raise CorruptRecordError("negative value length")
        if pc.any(pc.less(headerCounts, _I64_ZERO)).as_py():
            raise CorruptRecordError("negative header count")
        if not pc.all(pc.less_equal(pos, recordEnds)).as_py():
            raise CorruptRecordError("record fields overrun the record")
        noHeaders = pc.equal(headerCounts, _I64_ZERO)
        if not pc.all(pc.or_(pc.invert(noHeaders), pc.equal(pos, recordEnds))).as_py():
            raise CorruptRecordError("bytes left over after a record's fields")

        offsets = pc.add(_int64(baseOffsets), offsetDeltas)
        timestampsMs = pc.add(
            _int64(baseTimestamps), pc.multiply(timestampDeltas, _int64(deltaFactors))
        )
        columns = [
            _binaryColumn(buffer, keyStarts, keyLengths, pc.equal(keyLengths, _I64_MINUS_ONE)),
            _binaryColumn(
                buffer, valueStarts, valueLengths, pc.equal(valueLengths, _I64_MINUS_ONE)
            ),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            offsets,
            pc.multiply(timestampsMs, _I64_THOUSAND).cast(pa.timestamp("us", tz="UTC")),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(timestampTypes)]),
        ]
        if self.includeHeaders:
            columns.append(self._headers(data, noHeaders, pos, headerCounts, recordEnds))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)

        inRange = pc.and_(
            pc.greater_equal(offsets, pa.scalar(fromOffset, pa.int64())),
            pc.less(offsets, pa.scalar(untilOffset, pa.int64())),
        )
        kept = pc.sum(inRange.cast(pa.int64())).as_py() or 0
        if kept == 0:
            return DecodedFetch(None, nextOffset, -1)
        if kept != n:
            batch = batch.filter(inRange)
        return DecodedFetch(batch, nextOffset, batch.column(4)[-1].as_py())

    def _headers(self, data, noHeaders, pos, headerCounts, recordEnds) -> pa.Array:
        n = len(noHeaders)
        listType = self.schema.field("headers").type
        structType = listType.value_type
        if pc.all(noHeaders).as_py():
            return pa.ListArray.from_arrays(
                pa.repeat(pa.scalar(0, pa.int32()), n + 1),
                pa.array([], structType),
                type=listType,
            )
        withHeaders = pc.indices_nonzero(pc.invert(noHeaders)).to_pylist()
        positions = pos.to_pylist()
        counts = headerCounts.to_pylist()
        ends = recordEnds.to_pylist()
        perRecord: dict[int, list] = {}
        try:
            for i in withHeaders:
                headers, after = decodeHeaders(data, positions[i], counts[i])
                if after != ends[i]:
                    raise CorruptRecordError(f"record headers end at {after}, not {ends[i]}")
                perRecord[i] = headers
        except IndexError:
            raise CorruptRecordError("record headers run past the record") from None
        listOffsets = array("i", [0])
        keys: list[str] = []
        values: list[bytes | None] = []
        total = 0
        for i in range(n):
            headers = perRecord.get(i)
            if headers:
                for k, v in headers:
                    keys.append(k)
                    values.append(v)
                total += len(headers)
            listOffsets.append(total)
        flat = pa.StructArray.from_arrays(
            [pa.array(keys, pa.string()), pa.array(values, pa.binary())],
            fields=list(structType),
        )
        return pa.ListArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(listOffsets)]),
            flat,
            type=listType,
        )


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
