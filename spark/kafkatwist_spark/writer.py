"""
The write side: a batch sink and a streaming sink, at-least-once, or
exactly-once with C{kafka.transactional.id}.

Each task groups its rows by topic-partition and sends one Produce request
per partition whenever about C{kafka.batch.size} bytes are pending, and
whatever is left at the end of its input.  A task that fails after some
requests succeeded leaves those records in Kafka, and Spark's retry writes
them again: at-least-once, as with Spark's own Kafka sink.  Committing a
job or a micro-batch has nothing left to do.

Exactly-once (L{kafkatwist_spark.transactional}): each task writes inside a
transaction of its own, which it leaves open; the job's (or micro-batch's)
commit on the driver commits them all, its abort aborts them, and a retried
task fences and aborts the attempt before it.  A read_committed reader sees
each row once.

Rows without a C{partition} go where Kafka's Java producer would put them:
keyed rows to C{murmur2(key) % partitions}, so that readers relying on key
placement agree with other producers; rows without a key stick to one
partition per request, then move on round-robin.
"""

from __future__ import annotations

import random
import struct
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from kio.schema.errors import ErrorCode
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from kafkatwist.client import KafkaConnectionError
from kafkatwist.errors import KafkaError
from kafkatwist_spark.clients import discardSharedClient, openClient, sharedClient
from kafkatwist_spark.encoding import encodeBatch
from kafkatwist_spark.options import OptionError, SinkConfig
from kafkatwist_spark.transactional import (
    IdempotentProducer,
    Recovered,
    TransactionalProducer,
    abortTransactions,
    commitStreamBatch,
    commitTransactions,
    fenceTransactions,
    recoverStream,
    transactionalIdFor,
)

__all__ = [
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "SinkColumns",
    "checkSinkSchema",
    "murmur2",
]

#: bytes a record costs beyond its key and value (varints, attributes)
_RECORD_OVERHEAD = 20


def murmur2(data: bytes) -> int:
    """
    Kafka's murmur2 hash (C{org.apache.kafka.common.utils.Utils.murmur2}),
    as a signed 32-bit integer: what the Java producer's default
    partitioner hashes keys with.
    """
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    whole = length >> 2
    if whole:
        for k in struct.unpack_from(f"<{whole}I", data):
            k = (k * m) & 0xFFFFFFFF
            k ^= k >> 24
            k = (k * m) & 0xFFFFFFFF
            h = ((h * m) & 0xFFFFFFFF) ^ k
    rest = length & 3
    tail = whole << 2
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def keyPartition(key: bytes, partitions: int) -> int:
    """
    The partition the Java producer picks for C{key}.
    """
    return (murmur2(key) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True)
class SinkColumns:
    """
    Where the sink finds its inputs in the DataFrame (column names as the
    DataFrame spells them, matched case-insensitively like Spark does).
    """

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


def _sameHeaders(dataType) -> bool:
    if not isinstance(dataType, ArrayType) or not isinstance(dataType.elementType, StructType):
        return False
    fields = dataType.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name.lower() == "key"
        and isinstance(fields[0].dataType, StringType)
        and fields[1].name.lower() == "value"
        and isinstance(fields[1].dataType, BinaryType)
    )


def checkSinkSchema(schema: StructType, config: SinkConfig) -> SinkColumns:
    """
    Check the DataFrame has what the sink writes, as Spark's Kafka sink
    does: a C{value} (string or binary), and optionally C{key} (string or
    binary), C{topic} (string; needed unless the C{topic} option is set),
    C{partition} (int) and C{headers}
    (array<struct<key:string,value:binary>>).  Other columns are ignored.

    @raise OptionError: naming the missing or mistyped column (or the
        C{topic} option).
    """
    byName = {f.name.lower(): f for f in schema.fields}

    def column(name: str, allowed: tuple, description: str) -> str | None:
        found = byName.get(name)
        if found is None:
            return None
        if not isinstance(found.dataType, allowed):
            raise OptionError(
                name,
                f"the '{name}' column must be {description}, "
                f"but it is {found.dataType.simpleString()}",
            )
        return found.name

    value = column("value", (StringType, BinaryType), "a string or binary")
    if value is None:
        raise OptionError(
            "value",
            "the DataFrame has no 'value' column, which the kafkatwist sink writes as each "
            "record's value (columns: " + ", ".join(schema.fieldNames()) + ")",
        )
    key = column("key", (StringType, BinaryType), "a string or binary")
    topic = column("topic", (StringType,), "a string")
    partition = column("partition", (IntegerType,), "an int")
    headers = None
    if "headers" in byName:
        if not _sameHeaders(byName["headers"].dataType):
            raise OptionError(
                "headers",
                "the 'headers' column must be array<struct<key:string,value:binary>>, but it is "
                + byName["headers"].dataType.simpleString(),
            )
        headers = byName["headers"].name
    if topic is None and config.topic is None:
        raise OptionError(
            "topic",
            "no topic to write to: set the 'topic' option, or give the DataFrame a "
            "'topic' column",
        )
    return SinkColumns(value=value, key=key, topic=topic, partition=partition, headers=headers)


class KafkaCommitMessage(WriterCommitMessage):
    """
    What one task wrote: {(topic, partition): record count}, and in the
    exactly-once mode the L{TransactionHandle} that commits it.
    """

    def __init__(
        self, counts: dict[tuple[str, int], int], transaction=None, recoveredPartition=None
    ) -> None:
        self.counts = counts
        self.transaction = transaction
        #: the task's partition id if it wrote nothing because an earlier
        #: attempt of its micro-batch committed its rows (streaming)
        self.recoveredPartition = recoveredPartition

    @property
    def records(self) -> int:
        return sum(self.counts.values())


class _Pending:
    """
    One partition's records waiting to be produced, as columns.
    """

    __slots__ = ("keys", "values", "headers", "size")

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        #: per record, or None while no record has headers
        self.headers: list | None = None
        self.size = 0


class _Producer:
    """
    Buffers one task's records per partition and produces them in batches.
    """

    def __init__(self, config: SinkConfig, transaction=None) -> None:
        self.config = config
        #: the task's L{TransactionalProducer} (exactly-once mode) or
        #: L{IdempotentProducer} (idempotent at-least-once), else None
        self.transaction = transaction
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.written: Counter = Counter()
        self._partitionCounts: dict[str, int] = {}
        self._sticky: dict[str, int] = {}

    def partitionCount(self, topic: str) -> int:
        count = self._partitionCounts.get(topic)
        if count is not None:
            return count
        deadline = time.monotonic() + self.config.requestTimeoutMs / 1000.0
        while True:
            client = sharedClient(self.config.connection)
            # Like a Kafka producer, ask the broker to create a missing
            # topic (it does if auto.create.topics.enable is on).
            meta = client.metadata([topic], allowAutoTopicCreation=True).topics.get(topic)
            if meta is not None and meta.error == ErrorCode.none and meta.partitions:
                count = len(meta.partitions)
                self._partitionCounts[topic] = count
                return count
            error = meta.error if meta is not None else ErrorCode.unknown_topic_or_partition
            if not error.retriable or time.monotonic() > deadline:
                raise KafkaError(
                    error,
                    f"can not write to topic {topic!r}: it does not exist "
                    f"and the broker did not create it",
                )
            time.sleep(0.1)

    def partitionFor(self, topic: str, key: bytes | None, partition: int | None) -> int:
        """
        Where a row goes: its C{partition} column if set (checked against
        the topic), else by key hash, else the topic's sticky partition.
        """
        count = self._partitionCounts.get(topic) or self.partitionCount(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise KafkaError(
                    ErrorCode.unknown_topic_or_partition,
                    f"the 'partition' column says {partition}, but topic {topic!r} has "
                    f"partitions 0-{count - 1}",
                )
            return partition
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % count
        sticky = self._sticky.get(topic)
        if sticky is None:
            sticky = self._sticky[topic] = random.randrange(count)
        return sticky

    def add(self, tp: tuple[str, int], key, value, headers) -> None:
        pending = self.pending.get(tp)
        if pending is None:
            pending = self.pending[tp] = _Pending()
        pending.keys.append(key)
        pending.values.append(value)
        size = _RECORD_OVERHEAD
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        if headers:
            if pending.headers is None:
                pending.headers = [None] * (len(pending.values) - 1)
            pending.headers.append(headers)
            for headerKey, headerValue in headers:
                size += len(headerKey) + (len(headerValue) if headerValue else 0) + 4
        elif pending.headers is not None:
            pending.headers.append(None)
        pending.size += size
        if pending.size >= self.config.batchBytes:
            self.send(tp)

    def send(self, tp: tuple[str, int]) -> None:
        pending = self.pending.pop(tp, None)
        if pending is None or not pending.values:
            return
        topic, partition = tp
        transaction = self.transaction
        producer = transactionalId = None
        if transaction is not None:
            transaction.beforeWrite(topic, partition)
            producer = (
                transaction.producerId,
                transaction.producerEpoch,
                transaction.nextSequence(topic, partition, len(pending.values)),
            )
            transactionalId = transaction.transactionalId
        payload = encodeBatch(
            pending.keys,
            pending.values,
            pending.headers,
            int(time.time() * 1000),
            self.config.compression,
            producer,
            transactional=transactionalId is not None,
        )
        attempt = 0
        while True:
            try:
                sharedClient(self.config.connection).produce(
                    topic,
                    partition,
                    payload,
                    acks=self.config.acks,
                    timeoutMs=self.config.requestTimeoutMs,
                    transactionalId=transactionalId,
                )
                break
            except KafkaError as e:
                retriable = isinstance(e, KafkaConnectionError) or e.code.retriable
                attempt += 1
                if not retriable or attempt > self.config.retries:
                    raise
                # The client already followed a moving leader for as long as
                # its timeout.  A retry after a lost connection may duplicate
                # a batch without a producer id (kafka.enable.idempotence
                # false): that is the at-least-once contract; an idempotent
                # or transactional batch keeps its sequence numbers, and the
                # broker recognises it.
                discardSharedClient(self.config.connection)
                time.sleep(self.config.retryBackoffMs / 1000.0 * attempt)
        self.written[tp] += len(pending.values)
        if self._sticky.get(topic) == partition:
            # Keyless rows move on to the next partition, as the Java
            # producer's sticky partitioner does once a batch is sent.
            self._sticky[topic] = (partition + 1) % self.partitionCount(topic)

    def flush(self) -> None:
        for tp in list(self.pending):
            self.send(tp)


def _bytesColumn(batch: pa.RecordBatch, name: str | None) -> list | None:
    if name is None:
        return None
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        # UTF-8 text goes out as its bytes: the cast only relabels buffers.
        column = pc.cast(column, pa.binary())
    return column.to_pylist()


#: the local property Spark's micro-batch execution sets to the batch id
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def writeArrow(
    config: SinkConfig,
    columns: SinkColumns,
    batches: Iterator[pa.RecordBatch],
    recovered: Recovered | None = None,
) -> KafkaCommitMessage:
    """
    Produce every row of C{batches}; the body of a sink task.

    @param recovered: (streaming, exactly-once) the tasks of a micro-batch
        whose rows an earlier attempt committed: such a task writes nothing.
    """
    transaction = None
    if config.transactionalIdPrefix is not None:
        from pyspark import TaskContext

        context = TaskContext.get()
        partitionId = context.partitionId()
        if recovered is not None and partitionId in recovered.partitions:
            batchId = context.getLocalProperty(BATCH_ID_PROPERTY)
            if batchId is not None and int(batchId) == recovered.batchId:
                for _ in batches:
                    pass
                return KafkaCommitMessage({}, None, recoveredPartition=partitionId)
        transaction = TransactionalProducer(
            sharedClient(config.connection),
            transactionalIdFor(config.transactionalIdPrefix, partitionId),
            config.transactionTimeoutMs,
            config.requestTimeoutMs,
            partitionId,
        )
    elif config.idempotent:
        transaction = IdempotentProducer(sharedClient(config.connection), config.requestTimeoutMs)
    producer = _Producer(config, transaction)
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        values = _bytesColumn(batch, columns.value)
        keys = _bytesColumn(batch, columns.key) or [None] * n
        topics = (
            [config.topic] * n if config.topic is not None
            else batch.column(columns.topic).to_pylist()
        )
        partitions = (
            batch.column(columns.partition).to_pylist() if columns.partition else [None] * n
        )
        headers = batch.column(columns.headers).to_pylist() if columns.headers else None
        partitionFor, add = producer.partitionFor, producer.add
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("a row has a null 'topic' column and no 'topic' option is set")
            key = keys[i]
            recordHeaders = None
            if headers is not None and headers[i]:
                recordHeaders = [(h["key"], h["value"]) for h in headers[i]]
                if any(k is None for k, _ in recordHeaders):
                    raise ValueError("a row of the 'headers' column has a header with a null key")
            add((topic, partitionFor(topic, key, partitions[i])), key, values[i], recordHeaders)
    producer.flush()
    return KafkaCommitMessage(
        dict(producer.written),
        transaction.handle if isinstance(transaction, TransactionalProducer) else None,
    )


def commitJob(config: SinkConfig, messages) -> None:
    """
    The driver's commit: in the exactly-once mode, commit every task's
    transaction.
    """
    if config.transactionalIdPrefix is None:
        return  # Records are in Kafka as soon as each Produce is acknowledged.
    client = openClient(config.connection)
    try:
        commitTransactions(
            client, [m.transaction for m in messages if m is not None], config.requestTimeoutMs
        )
    finally:
        client.close()


def abortJob(config: SinkConfig, messages) -> None:
    """
    The driver's abort: in the exactly-once mode, abort the transactions of
    the tasks that finished, and fence the ids of those that did not (so
    their open transactions end now rather than at their timeout).
    """
    if config.transactionalIdPrefix is None:
        return  # Nothing can be taken back out of a log: at-least-once.
    client = openClient(config.connection)
    try:
        abortTransactions(
            client, [m.transaction for m in messages if m is not None], config.requestTimeoutMs
        )
        fenceTransactions(
            client,
            config.transactionalIdPrefix,
            [i for i, m in enumerate(messages) if m is None],
            config.transactionTimeoutMs,
            config.requestTimeoutMs,
        )
    finally:
        client.close()


class KafkaBatchWriter(DataSourceArrowWriter):
    """
    C{df.write.format("kafkatwist").mode("append").save()}.
    """

    def __init__(self, config: SinkConfig, columns: SinkColumns) -> None:
        self.config = config
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return writeArrow(self.config, self.columns, iterator)

    def commit(self, messages) -> None:
        commitJob(self.config, messages)

    def abort(self, messages) -> None:
        abortJob(self.config, messages)


def recoverStreamJob(config: SinkConfig) -> Recovered | None:
    """
    The streaming driver's first step (L{recoverStream}), in the
    exactly-once mode.
    """
    if config.transactionalIdPrefix is None:
        return None
    client = openClient(config.connection)
    try:
        return recoverStream(client, config.commitLogTopic, config.requestTimeoutMs)
    finally:
        client.close()


def commitStreamJob(config: SinkConfig, messages, batchId: int) -> None:
    """
    The streaming driver's commit of a micro-batch.
    """
    if config.transactionalIdPrefix is None:
        return
    client = openClient(config.connection)
    try:
        commitStreamBatch(
            client,
            config.commitLogTopic,
            batchId,
            [m.transaction for m in messages if m is not None],
            [m.recoveredPartition for m in messages
             if m is not None and m.recoveredPartition is not None],
            config.requestTimeoutMs,
        )
    finally:
        client.close()


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """
    C{df.writeStream.format("kafkatwist")}: each micro-batch's rows,
    at-least-once (a micro-batch replayed after a failure writes again), or
    exactly-once with C{kafka.transactional.id}: the micro-batch's commit
    commits its tasks' transactions, recorded in the sink's commit log so
    that a query restarted after its driver died half way through a commit
    finishes it and does not write those rows again.

    @param recovered: what L{recoverStreamJob} found (Spark makes the
        writer on the driver before the tasks run, and again for each
        commit).
    """

    def __init__(
        self, config: SinkConfig, columns: SinkColumns, recovered: Recovered | None = None
    ) -> None:
        self.config = config
        self.columns = columns
        self.recovered = recovered

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return writeArrow(self.config, self.columns, iterator, self.recovered)

    def commit(self, messages, batchId: int) -> None:
        commitStreamJob(self.config, messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        abortJob(self.config, messages)
