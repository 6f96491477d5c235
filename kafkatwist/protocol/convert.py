"""
Conversions between message formats v0/v1 and record batches (v2), as
Kafka 3.x makes them: up at produce (C{LogValidator}), down at fetch
(C{RecordsUtil.downConvert}).  The log stores only v2, so only the clients
that send or read the old formats pay for them.

Up (L{upConvert}): the produce request's v0/v1 messages become one v2
batch, offsets 0..n-1 (the log assigns the real ones, and stamps
LogAppendTime topics), no producer id, each record keeping its key, value
and timestamp (-1 from v0), no headers.  A compressed wrapper becomes a v2
batch of its inner messages compressed with the wrapper's codec (the broker
keeps the producer's codec, as it does for v2); the client's inner offsets
are ignored, as Kafka ignores them (KAFKA-9669).

Down (L{downConvert}): each v2 batch becomes v0/v1 messages, control
batches dropped: an uncompressed batch one message per record at its
absolute offset, leaving out records before the fetch offset (old clients
rely on it); a compressed batch one wrapper of the same codec holding all
its records (inner offsets relative in v1, absolute in v0; the wrapper at
the last record's offset).  Headers, producer ids and the transactional
flag have no place in the old formats and are lost, as in Kafka.
LogAppendTime batches give every message the batch's time and the
timestamp-type bit (v1).

Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.protocol.batch import (
    COMPRESSION_ZSTD,
    TIMESTAMP_LOG_APPEND_TIME,
    isControl,
)
from kafkatwist.protocol.compression import decompressionLimit
from kafkatwist.protocol.legacy_records import (
    MAGIC_AT,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    compressInner,
    decompressWrapper,
    encodeMessage,
    readMessageSet,
)
from kafkatwist.protocol.records import Record, buildBatch

__all__ = ["downConvert", "legacyMagic", "upConvert"]


def legacyMagic(records) -> int | None:
    """
    @return: 0 or 1 if C{records} begin with a v0/v1 message, else C{None}
        (a record batch, or too short to tell: left to the batch checks).
    """
    if records is None or len(records) <= MAGIC_AT:
        return None
    magic = records[MAGIC_AT]
    return magic if magic < 2 else None


def upConvert(records, *, maxMessageBytes: int, logAppendTime: bool) -> bytes:
    """
    One produce request's v0/v1 message set for one partition, checked as
    Kafka's C{LogValidator} checks it, as one v2 batch.

    @param logAppendTime: the topic's C{message.timestamp.type} is
        LogAppendTime.
    @raise KafkaError: CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE
        (see L{readMessageSet}); INVALID_RECORD for a compressed wrapper
        beside other messages; INVALID_TIMESTAMP for a message claiming
        LogAppendTime where Kafka refuses it.
    """
    magic = legacyMagic(records)
    if magic is None:
        raise ValueError("not a v0/v1 message set")
    messages = readMessageSet(records, magic, maxEntryBytes=maxMessageBytes)
    codec = 0
    if any(m.codec for m in messages):
        if len(messages) > 1:
            raise KafkaError(
                ErrorCode.invalid_record, "Compressed outer record has more than one batch"
            )
        [wrapper] = messages
        codec = wrapper.codec
        claims = [(wrapper, m) for m in decompressWrapper(wrapper, decompressionLimit(maxMessageBytes))]
    else:
        claims = [(m, m) for m in messages]
    converted = []
    for index, (batch, message) in enumerate(claims):
        # Kafka's LogValidator.validateTimestamp: a producer may not set
        # LogAppendTime, except on a message with a time for a CreateTime
        # topic (where the time is kept).
        if batch.logAppendTime and (logAppendTime or message.timestamp == NO_TIMESTAMP):
            raise KafkaError(
                ErrorCode.invalid_timestamp,
                f"message {index}: producers should not set the timestamp type to LogAppendTime",
            )
        converted.append(Record(timestamp=message.timestamp, key=message.key, value=message.value))
    return buildBatch(converted, compression=codec)


def downConvert(data, magic: int, fetchOffset: int, decodeBatches) -> Iterator[bytes]:
    """
    The v0/v1 log entries for the v2 batches of C{data}, one at a time, so
    the caller stops at its size limit without converting the rest.

    @param decodeBatches: C{decodeBatches(data)} yields the decoded batches
        (the log's bounded, checking decoder of stored data).
    @raise KafkaError: UNSUPPORTED_COMPRESSION_TYPE at a zstd batch, which
        no v0/v1 consumer can read (Kafka answers so, or stops before it).
    """
    for batch in decodeBatches(data):
        if isControl(batch.attributes) or not batch.records:
            continue
        codec = batch.attributes & 0x07
        if codec == COMPRESSION_ZSTD:
            raise KafkaError(
                ErrorCode.unsupported_compression_type,
                f"the batch at offset {batch.baseOffset} is zstd, which message format v{magic} cannot carry",
            )
        appendTime = batch.timestampType == TIMESTAMP_LOG_APPEND_TIME
        attributes = TIMESTAMP_TYPE_BIT if appendTime and magic > 0 else 0
        if not codec:
            for r in batch.records:
                if r.offset >= fetchOffset:
                    yield encodeMessage(r.offset, magic, attributes, _time(r, batch, appendTime), r.key, r.value)
            continue
        records = batch.records
        first = records[0].offset
        inner = b"".join(
            encodeMessage(
                r.offset - first if magic > 0 else r.offset,
                magic,
                attributes,
                _time(r, batch, appendTime),
                r.key,
                r.value,
            )
            for r in records
        )
        if appendTime:
            wrapperTime = batch.maxTimestamp
        else:
            wrapperTime = max(_time(r, batch, False) for r in records)
        yield encodeMessage(
            records[-1].offset,
            magic,
            attributes | codec,
            wrapperTime,
            None,
            compressInner(codec, magic, inner),
        )


def _time(record, batch, appendTime: bool) -> int:
    if appendTime:
        return batch.maxTimestamp
    return NO_TIMESTAMP if record.timestamp is None else record.timestamp
