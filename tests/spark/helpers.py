"""
Producing known records quickly, and checking them.
"""

from __future__ import annotations

import datetime

from kio.schema.delete_records.v0.request import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)

from kafkatwist.protocol.records import Record, buildBatch
from kafkatwist.util import debian, jvm

BASE_TIMESTAMP = 1_700_000_000_000

NO_JAVA = "java not found: the Spark connector tests need Java 17 to run PySpark"


def javaMissing() -> bool:
    """
    Whether there is no Java to run PySpark on, after installing Debian's
    when this process may (L{kafkatwist.util.jvm.ensureJava}).
    """
    try:
        jvm.ensureJava()
    except debian.PackageUnavailable:
        return True
    return False
CODECS = ["none", "lz4", "zstd", "gzip", "snappy"]


def recordFor(partition: int, index: int) -> Record:
    """
    The index-th record produced to a partition: everything is derived from
    (partition, index), so a reader can check any row on its own.
    """
    headers = [("index", b"%d" % index), ("empty", None)] if index % 3 == 0 else []
    return Record(
        timestamp=BASE_TIMESTAMP + index * 10,
        key=None if index % 10 == 7 else b"key-%d-%d" % (partition, index),
        value=b"value-%d-%d-" % (partition, index) + b"x" * (index % 50),
        headers=headers,
    )


def produce(client, topic: str, partition: int, count: int, start: int = 0,
            perBatch: int = 2000, compression: str | None = None) -> None:
    """
    Produce records C{start .. start+count-1} of L{recordFor} as prebuilt
    batches (one Produce request each), cycling through codecs by partition
    unless C{compression} is given.
    """
    codec = compression or CODECS[partition % len(CODECS)]
    for first in range(start, start + count, perBatch):
        last = min(first + perBatch, start + count)
        records = [recordFor(partition, i) for i in range(first, last)]
        client.produce(topic, partition, buildBatch(records, codec))


def expectedRow(partition: int, index: int, headers: bool = True) -> tuple:
    r = recordFor(partition, index)
    row = (
        r.key,
        r.value,
        partition,
        index,
        datetime.datetime.fromtimestamp(r.timestamp / 1000, datetime.timezone.utc),
        0,
    )
    if headers:
        row += (r.headers,)
    return row


def arrowRows(table, headers: bool = True) -> list[tuple]:
    """
    Rows of an Arrow table of the Kafka schema, in the form of
    L{expectedRow}, sorted by (partition, offset).
    """
    columns = [
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("partition").to_pylist(),
        table.column("offset").to_pylist(),
        [
            t.replace(tzinfo=datetime.timezone.utc) if t.tzinfo is None else t
            for t in table.column("timestamp").to_pylist()
        ],
        table.column("timestampType").to_pylist(),
    ]
    if headers:
        columns.append(
            [[(h["key"], h["value"]) for h in hs] for hs in table.column("headers").to_pylist()]
        )
    return sorted(zip(*columns), key=lambda row: (row[2], row[3]))


def deleteRecords(client, topic: str, partition: int, before: int) -> None:
    """
    Move a partition's log start offset to C{before}, as retention would.
    """
    response = client.send(
        21,
        DeleteRecordsRequest(
            topics=(
                DeleteRecordsTopic(
                    name=topic,
                    partitions=(DeleteRecordsPartition(partition_index=partition, offset=before),),
                ),
            ),
            timeout=datetime.timedelta(seconds=10),
        ),
    )
    for t in response.topics:
        for p in t.partitions:
            assert p.error_code == 0, p


def createPartitions(client, topic: str, count: int) -> None:
    """
    Grow C{topic} to C{count} partitions.
    """
    from kio.schema.create_partitions.v0.request import (
        CreatePartitionsRequest,
        CreatePartitionsTopic,
    )

    response = client.send(
        37,
        CreatePartitionsRequest(
            topics=(CreatePartitionsTopic(name=topic, count=count, assignments=None),),
            timeout=datetime.timedelta(seconds=10),
            validate_only=False,
        ),
    )
    for result in response.results:
        assert result.error_code == 0, result


def readCommitted(bootstrap, topic, partitions, isolation="read_committed"):
    """
    Every value of C{topic} a consumer with C{isolation} sees, up to the
    partitions' ends.
    """
    import time

    from confluent_kafka import Consumer, TopicPartition

    from kafkatwist.client import KafkaWireClient

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{time.monotonic()}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    with KafkaWireClient(bootstrap) as client:
        level = 1 if isolation == "read_committed" else 0
        ends = {p: client.listOffsets(topic, [p], isolationLevel=level)[p][0] for p in partitions}
    assigned = [TopicPartition(topic, p, 0) for p in partitions]
    consumer.assign(assigned)
    values = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
                continue
            # The position moves past aborted records and markers too.
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(assigned)):
                break
    finally:
        consumer.close()
    return values


def decodeBothWays(decoder, raw, *args):
    """
    C{decoder.decode(raw, *args)}, and the same records as the reader gets
    them -- a read-only view into a larger received frame
    (C{fetchRaw(view=True)}) -- decoded again: the two must agree, the
    same batch or the same error.
    """
    from kafkatwist.protocol.records import CorruptRecordError

    frame = bytearray(b"\x11" * 37) + bytes(raw) + b"\x22" * 11
    view = memoryview(frame).toreadonly()[37 : 37 + len(raw)]
    outcomes = []
    for data in (raw, view):
        try:
            outcomes.append(decoder.decode(data, *args))
        except CorruptRecordError as e:
            outcomes.append(e)
    plain, viewed = outcomes
    if isinstance(plain, Exception):
        assert type(viewed) is type(plain) and str(viewed) == str(plain), (plain, viewed)
        raise plain
    assert not isinstance(viewed, Exception), viewed
    assert (viewed.nextOffset, viewed.lastOffset) == (plain.nextOffset, plain.lastOffset)
    assert (viewed.batch is None) == (plain.batch is None)
    if plain.batch is not None:
        assert viewed.batch.equals(plain.batch)
    return plain
