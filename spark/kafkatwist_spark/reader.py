"""
The read side: a batch reader, a stream reader, and the loop executors run
to fetch an offset range from the partition's leader.

Planning (C{partitions()}, C{latestOffset()}...) runs in Python processes on
the driver; C{read()} runs on executors, on a pickled copy of the reader.
Readers therefore hold only their validated configuration; wire clients
are opened where they are used (see L{kafkatwist_spark.clients}).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator

import pyarrow as pa
from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kafkatwist.client import EARLIEST as LIST_EARLIEST
from kafkatwist.client import LATEST as LIST_LATEST
from kafkatwist.client import KafkaConnectionError
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.records import CorruptRecordError

from kafkatwist_spark.clients import discardSharedClient, openClient, sharedClient
from kafkatwist_spark.columnar import ArrowRecordDecoder, kafkaArrowSchema
from kafkatwist_spark.offsets import (
    DataLossError,
    OffsetRange,
    OffsetReader,
    dataLossMessage,
    fromJson,
    rateLimit,
    splitRanges,
    toJson,
)
from kafkatwist_spark.options import SourceConfig, TopicPartition, oneLineErrors

__all__ = [
    "KafkaBatchReader",
    "KafkaInputPartition",
    "KafkaStreamReader",
    "readRange",
]


def _retriable(code: ErrorCode) -> bool:
    """
    Whether a fetch failing with C{code} is worth repeating: leadership
    moved, the broker was busy or briefly unreachable.
    """
    return code.retriable or code in (
        ErrorCode.broker_not_available,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
    )


def _backoff(config: SourceConfig, failures: int) -> None:
    """
    Sleep before retry number C{failures}: C{fetchOffset.retryIntervalMs},
    doubling, capped at 5 s.
    """
    time.sleep(min(5.0, config.fetchRetryIntervalMs / 1000.0 * 2 ** (failures - 1)))


#: a fetch that returns no whole batch is retried with a larger limit, up to
#: this (a broker sends the first batch whole anyway, per KIP-74)
_MAX_FETCH_BYTES = 256 << 20

#: how long a partition whose end went back is asked again before that is
#: taken for data loss: right after a leader change the new leader's high
#: watermark can lag the old one's until its followers fetch (Kafka's
#: brokers answer OFFSET_NOT_AVAILABLE meanwhile, KIP-207; the client
#: retries that too)
_SETTLE_SECONDS = 5.0


class KafkaInputPartition(InputPartition):
    """
    One Spark task's work: one offset range of one topic-partition.
    """

    def __init__(self, offsetRange: OffsetRange) -> None:
        super().__init__(offsetRange)
        self.offsetRange = offsetRange

    def __repr__(self) -> str:
        r = self.offsetRange
        return f"KafkaInputPartition({r.topic}-{r.partition} [{r.fromOffset}, {r.untilOffset}))"


def _arrowSchema(schema: StructType | None, includeHeaders: bool) -> pa.Schema:
    """
    The Arrow schema Spark will check returned batches against: derived
    from the Spark schema the way PySpark derives it, so that the two can
    not drift apart.
    """
    if schema is not None:
        try:
            from pyspark.sql.pandas.types import to_arrow_schema

            return to_arrow_schema(schema, timezone="UTC")
        except ImportError:  # pragma: no cover - PySpark always ships it
            pass
    return kafkaArrowSchema(includeHeaders)


def readRange(
    config: SourceConfig, offsetRange: OffsetRange, arrowSchema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """
    Fetch C{offsetRange} from its partition's leader, one Arrow record batch
    per Fetch response.

    One Fetch at a time, on this thread: a Fetch sent ahead from a second
    thread (and connection) while the last response was decoded cost the
    worker 60% more CPU and was no faster.  The responses it received were
    allocated from that thread's malloc arena, which glibc shrinks each
    time this thread frees them: every response's pages were faulted in
    anew (44,000 page faults per million records against 5,800).

    Records that are gone when the fetch gets to them (aged out since the
    range was planned, or the partition truncated) raise L{DataLossError}
    if C{config.failOnDataLoss}, and are skipped otherwise.

    @raise KafkaError: for errors that persist past the retries.
    """
    r = offsetRange
    decoder = ArrowRecordDecoder(r.topic, r.partition, arrowSchema)
    isolation = 1 if config.readCommitted else 0
    offset = r.fromOffset
    maxBytes = config.fetchMaxBytes
    failures = 0
    while offset < r.untilOffset:
        try:
            client = sharedClient(config.connection)
            # the records a view of the received response, not a copy
            raw = client.fetchRaw(
                r.topic, r.partition, offset, maxBytes=maxBytes, isolationLevel=isolation,
                view=True,
            )
            if raw.error != ErrorCode.offset_out_of_range and _retriable(raw.error):
                raise KafkaError(raw.error, f"fetch {r.topic}-{r.partition} at {offset}")
        except KafkaError as e:
            retriable = isinstance(e, KafkaConnectionError) or _retriable(e.code)
            failures += 1
            if not retriable or failures > config.fetchRetries:
                raise
            # A fresh client re-reads metadata and reconnects: the leader
            # may have moved or the connection gone stale.
            discardSharedClient(config.connection)
            _backoff(config, failures)
            continue
        if raw.error == ErrorCode.offset_out_of_range:
            moved = _outOfRange(config, client, r, offset)
            if moved == offset:
                # In range again by the time we looked: the log moved
                # under the fetch.  Try again, a bounded number of times.
                failures += 1
                if failures > config.fetchRetries:
                    raise KafkaError(raw.error, f"fetch {r.topic}-{r.partition} at {offset}")
            offset = moved
            continue
        failures = 0
        if raw.error != ErrorCode.none:
            raise KafkaError(raw.error, f"fetch {r.topic}-{r.partition} at offset {offset}")
        try:
            decoded = decoder.decode(
                raw.records, offset, r.untilOffset,
                raw.abortedTransactions if config.readCommitted else None,
            )
        except CorruptRecordError as e:
            raise CorruptRecordError(
                f"{r.topic}-{r.partition}, fetching from offset {offset}: {e}"
            ) from e
        if decoded.batch is not None:
            yield decoded.batch
        if decoded.nextOffset > offset:
            offset = decoded.nextOffset
            continue
        # No whole batch came back.
        if raw.highWatermark <= offset:
            _lost(
                config,
                f"Offsets [{offset}, {r.untilOffset}) of {r.topic}-{r.partition} were planned "
                f"but the partition now ends at {raw.highWatermark}",
            )
            return
        if maxBytes >= _MAX_FETCH_BYTES:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"{r.topic}-{r.partition} at offset {offset}: a batch larger than "
                f"{_MAX_FETCH_BYTES} bytes",
            )
        maxBytes *= 4


def _lost(config: SourceConfig, what: str) -> None:
    if config.failOnDataLoss:
        raise DataLossError(dataLossMessage(what))


def _outOfRange(config: SourceConfig, client, r: OffsetRange, offset: int) -> int:
    """
    Where to go on after OFFSET_OUT_OF_RANGE at C{offset}: the earliest
    offset if retention removed C{offset}, the end of the range if the
    partition was truncated below it, C{offset} itself if it is in range
    after all.
    """
    earliest = client.listOffsets(r.topic, r.partition, LIST_EARLIEST)[r.partition][0]
    if offset < earliest:
        _lost(
            config,
            f"Cannot fetch offset {offset} of {r.topic}-{r.partition}: the earliest available "
            f"offset is now {earliest}",
        )
        return min(earliest, r.untilOffset)
    latest = client.listOffsets(
        r.topic, r.partition, LIST_LATEST, isolationLevel=1 if config.readCommitted else 0
    )[r.partition][0]
    if offset <= latest:
        return offset
    _lost(
        config,
        f"Cannot fetch offset {offset} of {r.topic}-{r.partition}: the partition now ends at "
        f"{latest}",
    )
    return r.untilOffset


_frozen = False


def freezeWorkerHeap() -> None:
    """
    Move everything the Python worker holds so far (PySpark, pyarrow,
    numpy, this connector and the wire client, all imported by now) out of
    the garbage collector's view, once per process.

    PySpark's daemon runs C{gc.collect()} after every task of a reused
    worker (pyspark/daemon.py, the worker loop), and each full collection
    walks every tracked object: about 60,000 with this connector loaded,
    30-40 ms a task, most of a worker's CPU outside the decode.  The same
    holds for the workers Spark plans a query in (pyspark 4.3 runs
    C{DataSource.schema()} and C{reader()} with C{partitions()} in daemon
    workers of their own, reused and collected after each call): there the
    collection was over half their CPU, ~0.035 CPU-s per worker and query,
    so the source's C{schema()} and C{reader()} freeze too.  Objects
    frozen are still freed when no longer referenced; only reference
    cycles among them (a module's, alive for the process anyway) are no
    longer looked for -- so garbage cycles (an earlier task's state) are
    collected first, once, or they would be kept for the worker's life.
    """
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
        keepWorkerMemory()


#: mallopt's parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: whether L{keepWorkerMemory} changed the allocator's settings
allocatorTuned = False


#: buffers below this come from the heap, not C{mmap}s of their own (glibc
#: before 2.26 refuses more than 32 MiB on 64-bit); above the 4 MB a Fetch
#: response is
WORKER_MMAP_THRESHOLD = 32 << 20
#: the most freed memory at the heap's top the worker keeps before trimming
WORKER_TRIM_THRESHOLD = 128 << 20


def keepWorkerMemory() -> bool:
    """
    Have glibc keep freed memory for reuse in this (Python worker) process
    instead of handing it back to the kernel: buffers below
    L{WORKER_MMAP_THRESHOLD} come from the heap rather than from C{mmap}s of
    their own, and the heap is trimmed only past L{WORKER_TRIM_THRESHOLD}
    free.

    Each Fetch response (up to C{kafka.max.partition.fetch.bytes}, 4 MB) and
    the columns decoded from it are freed before the next fetch; by default
    glibc unmaps or trims them every time, and every response's pages are
    faulted in anew (~20% of the reader's CPU in one process).  The worker
    keeps at most L{WORKER_TRIM_THRESHOLD} of freed memory.  Once per
    process, called by L{freezeWorkerHeap}; nothing is done where there is
    no glibc.

    @return: whether the settings were changed.
    """
    global allocatorTuned
    if allocatorTuned:
        return True
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    allocatorTuned = tuneAllocator(mallopt)
    return allocatorTuned


def tuneAllocator(mallopt) -> bool:
    """
    Set the mmap threshold, then -- only if glibc took it -- the trim
    threshold: setting either turns glibc's dynamic mmap threshold off, so a
    trim threshold set alone would leave every 4 MB response an C{mmap} of
    its own, unmapped after use: worse than nothing.

    @param mallopt: glibc's C{mallopt}.
    @return: whether both were set.
    """
    if mallopt(_M_MMAP_THRESHOLD, WORKER_MMAP_THRESHOLD) != 1:
        return False
    return mallopt(_M_TRIM_THRESHOLD, WORKER_TRIM_THRESHOLD) == 1


class _ReaderBase:
    """
    What the batch and stream readers share: configuration, the executor
    side, and a driver-side client opened on first use.
    """

    def __init__(self, config: SourceConfig, schema: StructType | None) -> None:
        self.config = config
        self.schema = schema
        self._client = None

    def __getstate__(self):
        # Pickled to executors: the client stays behind.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _offsetReader(self) -> OffsetReader:
        if self._client is None:
            self._client = openClient(self.config.connection)
        return OffsetReader(self.config, self._client)

    def _retrying(self, operation):
        """
        Run C{operation(offsetReader)}, again on a fresh connection after a
        network error or a retriable Kafka error, up to
        C{fetchOffset.numRetries} times.  Option and data loss errors are
        not retried: they would only fail again.
        """
        failures = 0
        while True:
            try:
                return operation(self._offsetReader())
            except KafkaError as e:
                if not (isinstance(e, KafkaConnectionError) or _retriable(e.code)):
                    raise
                failures += 1
                if failures > self.config.fetchRetries:
                    raise
                self._closeClient()
                _backoff(self.config, failures)

    def _closeClient(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaInputPartition):
            # Spark plans one empty partition when there is nothing to read.
            return iter(())
        freezeWorkerHeap()
        return readRange(
            self.config,
            partition.offsetRange,
            _arrowSchema(self.schema, self.config.includeHeaders),
        )


class KafkaBatchReader(_ReaderBase, DataSourceReader):
    """
    C{spark.read.format("kafkatwist")}: the offsets between
    C{startingOffsets} and C{endingOffsets} (or the timestamp options),
    resolved when the query is planned.
    """

    @oneLineErrors
    def partitions(self) -> list[KafkaInputPartition]:
        try:
            ranges = self._retrying(OffsetReader.batchRanges)
        finally:
            self._closeClient()
        pieces = splitRanges(
            ranges, self.config.minPartitions, self.config.maxRecordsPerPartition
        )
        return [KafkaInputPartition(r) for r in pieces]


class KafkaStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """
    C{spark.readStream.format("kafkatwist")}: micro-batches of offset
    ranges, C{{topic: {partition: offset}}} in the checkpoint.

    Partitions that appear while the query runs (more partitions, or new
    topics matching C{subscribePattern}) are read from their earliest
    offset.  C{maxOffsetsPerTrigger} bounds each micro-batch through the
    engine's read limits, and C{Trigger.AvailableNow} stops at the offsets
    that were the latest when the query started.
    """

    def __init__(self, config: SourceConfig, schema: StructType | None) -> None:
        super().__init__(config, schema)
        self._target: dict[TopicPartition, int] | None = None
        self._latest: dict[TopicPartition, int] | None = None

    @oneLineErrors
    def initialOffset(self) -> dict:
        def initial(offsets: OffsetReader) -> dict:
            partitions = offsets.partitions()
            if not partitions:
                return {}
            return toJson(offsets.resolve(self.config.starting, partitions, starting=True))

        return self._retrying(initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.config.maxOffsetsPerTrigger:
            return ReadMaxRows(self.config.maxOffsetsPerTrigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._retrying(lambda offsets: offsets.latest(offsets.partitions()))

    @oneLineErrors
    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self._retrying(lambda offsets: self._latestOffset(offsets, start, limit))

    def _latestOffset(self, offsets: OffsetReader, start: dict, limit: ReadLimit) -> dict:
        startMap = fromJson(start)
        current = offsets.partitions()
        currentSet = set(current)
        gone = sorted(tp for tp in startMap if tp not in currentSet)
        if gone:
            _lost(
                self.config,
                "Partitions " + ", ".join(f"{t}-{p}" for t, p in gone) + " are gone",
            )
        fromMap = {tp: startMap[tp] for tp in current if tp in startMap}
        new = [tp for tp in current if tp not in startMap]
        if self._target is not None:
            # Trigger.AvailableNow: nothing beyond what existed at the start.
            new = [tp for tp in new if tp in self._target]
        if new:
            fromMap.update(offsets.earliest(new))
        latest = _settled(offsets, fromMap, offsets.latest(fromMap))
        self._latest = dict(latest)
        if self._target is not None:
            latest = {tp: min(o, self._target.get(tp, fromMap[tp])) for tp, o in latest.items()}
        for tp, offset in sorted(latest.items()):
            if offset < fromMap[tp]:
                # The partition now ends before where the stream is: the
                # topic was recreated, or the log truncated.  Going on means
                # continuing from its new end.
                _lost(
                    self.config,
                    f"{tp[0]}-{tp[1]} was at offset {fromMap[tp]} but now ends at {offset}",
                )
                latest[tp] = max(offset, 0)
        if isinstance(limit, ReadMaxRows):
            end = rateLimit(fromMap, latest, limit.max_rows)
        else:
            end = dict(latest)
        if end == startMap:
            return start
        return toJson(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else toJson(self._latest)

    @oneLineErrors
    def partitions(self, start: dict, end: dict) -> list[KafkaInputPartition]:
        return self._retrying(lambda offsets: self._partitions(offsets, start, end))

    def _partitions(self, offsets: OffsetReader, start: dict, end: dict) -> list:
        startMap = fromJson(start)
        endMap = fromJson(end)
        if not endMap:
            return []
        new = [tp for tp in endMap if tp not in startMap]
        fromMap = dict(startMap)
        if new:
            fromMap.update(offsets.earliest(new))
        ranges = []
        for tp, untilOffset in sorted(endMap.items()):
            fromOffset = fromMap[tp]
            if untilOffset < fromOffset:
                # latestOffset saw the partition go backwards (and was told
                # to go on): nothing to read here in this batch.
                continue
            ranges.append(OffsetRange(tp[0], tp[1], fromOffset, untilOffset))
        ranges = self._skipLost(offsets, ranges)
        pieces = splitRanges(
            ranges, self.config.minPartitions, self.config.maxRecordsPerPartition
        )
        return [KafkaInputPartition(r) for r in pieces]

    def _skipLost(self, offsets: OffsetReader, ranges: list[OffsetRange]) -> list[OffsetRange]:
        """
        Check the ranges still start at available offsets: retention may
        have removed records since the offsets were chosen.  Executors check
        again as they fetch; checking here fails the query before tasks are
        launched (or moves the ranges on, when data loss is tolerated).
        """
        wanted = [(r.topic, r.partition) for r in ranges if r.size]
        if not wanted:
            return ranges
        earliest = offsets.earliest(wanted)
        out = []
        for r in ranges:
            first = earliest.get((r.topic, r.partition), r.fromOffset)
            if r.size and r.fromOffset < first:
                _lost(
                    self.config,
                    f"Cannot read offset {r.fromOffset} of {r.topic}-{r.partition}: the earliest "
                    f"available offset is now {first}",
                )
                r = OffsetRange(r.topic, r.partition, min(first, r.untilOffset), r.untilOffset)
            out.append(r)
        return out

    def commit(self, end: dict) -> None:
        # Spark's checkpoint is the record of progress; like Spark's own
        # Kafka source, nothing is committed to the cluster.
        pass

    def stop(self) -> None:
        self._closeClient()


def _settled(offsets: OffsetReader, fromMap: dict, latest: dict) -> dict:
    """
    C{latest}, with the partitions that end before C{fromMap} says the
    stream is asked again (with a growing pause, for up to
    L{_SETTLE_SECONDS}) until they do not.
    """
    deadline = time.monotonic() + _SETTLE_SECONDS
    pause = 0.1
    while time.monotonic() < deadline:
        behind = {tp: fromMap[tp] for tp, o in latest.items() if o < fromMap[tp]}
        if not behind:
            break
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
        latest = {**latest, **offsets.latest(behind)}
    return latest
