"""
Kafka's checks of each record a client appends (C{LogValidator}'s
C{validateRecord}, KIP-467): a batch with refused records is refused whole,
naming each refused record's index in its batch, so Produce v8+ answers
C{record_errors} and the producer's delivery report says which records.
Each record is checked as Kafka checks it, the key first:

  - A compacted topic refuses records without a key (INVALID_RECORD).
  - On a CreateTime topic, a record's time must lie within
    C{message.timestamp.before.max.ms} behind and
    C{message.timestamp.after.max.ms} ahead of the broker's clock (both
    falling back to the deprecated C{message.timestamp.difference.max.ms};
    unlimited by default) (INVALID_TIMESTAMP).
  - A producer may not claim LogAppendTime: a batch with that timestamp
    type is refused on a LogAppendTime topic, and on a CreateTime topic when
    it carries no time (INVALID_TIMESTAMP).  A claim with a time on a
    CreateTime topic is kept, its records all bearing the batch's max
    timestamp.

INVALID_TIMESTAMP names the whole refusal when any record has it.

Only what a topic asks for costs: records are decoded for a compacted
topic, and for the time bounds (the "ahead" bound alone is settled by the
batch's max timestamp, records are walked only to name the ones refused);
otherwise a batch costs a bit test.  The checks of a batch's shape (sizes,
CRC, counts, codec) come before, in
L{kafkatwist.protocol.batch.validateRecordSet}, and refuse the batch with
no record named.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode, KafkaError, recordValidationError
from kafkatwist.log.compaction import batchPayload, recordsOf
from kafkatwist.log.stored import decompressedLimit
from kafkatwist.protocol.batch import CONTROL_BIT, NO_TIMESTAMP, TIMESTAMP_TYPE_BIT
from kafkatwist.protocol.records import CorruptRecordError

__all__ = ["checkClientRecords"]

_UNLIMITED = 2**63 - 1
# A record tuple from recordsOf: (length, attributes, timestamp delta,
# offset delta, key, ...).
_TIMESTAMP_DELTA, _OFFSET_DELTA, _KEY = 2, 3, 4


def checkClientRecords(buf, batches, topicPartition: str, config, nowMs: int) -> None:
    """
    @param batches: the L{kafkatwist.protocol.batch.ValidBatch}es of
        C{buf}, already validated.
    @param config: the topic's L{kafkatwist.log.config.LogConfig}.
    @raise KafkaError: for the first batch with refused records, with its
        C{recordErrors}; CORRUPT_MESSAGE for records that do not decode.
    """
    compacted = config.compacts
    createTime = not config.logAppendTime
    before = config.messageTimestampBeforeMaxMs if createTime else _UNLIMITED
    after = config.messageTimestampAfterMaxMs if createTime else _UNLIMITED
    low = nowMs - before if before < _UNLIMITED else -(2**63)
    high = nowMs + after if after < _UNLIMITED else _UNLIMITED
    view = None
    for position, header in batches:
        attributes = header.attributes
        if attributes & CONTROL_BIT:
            continue
        claimed = bool(attributes & TIMESTAMP_TYPE_BIT)
        # A record of a LogAppendTime batch bears the batch's max timestamp.
        claimedTime = header.maxTimestamp if claimed else None
        if claimed and createTime and claimedTime != NO_TIMESTAMP:
            suspect = not low <= claimedTime <= high
            walkTimes = False
        else:
            suspect = claimed
            walkTimes = (not claimed) and (
                before < _UNLIMITED or (after < _UNLIMITED and header.maxTimestamp > high)
            )
        if not (compacted or walkTimes or suspect):
            continue
        records = None
        if compacted or walkTimes:
            if view is None:
                view = memoryview(buf).cast("B")
            try:
                data = batchPayload(
                    view, position, header.size, attributes,
                    decompressedLimit(config.maxMessageBytes),
                )
                records = recordsOf(data, header.recordsCount, header.lastOffsetDelta)
            except CorruptRecordError as e:
                raise KafkaError(ErrorCode.corrupt_message, f"batch at {position}: {e}") from None
        refused = []
        for index in range(header.recordsCount):
            record = records[index] if records is not None else None
            if compacted and record[_KEY] is None:
                refused.append((
                    ErrorCode.invalid_record, index,
                    f"Compacted topic cannot accept message without key in topic partition "
                    f"{topicPartition}.",
                ))
                continue
            timestamp = (
                claimedTime if claimed else header.baseTimestamp + record[_TIMESTAMP_DELTA]
                if walkTimes else NO_TIMESTAMP
            )
            if createTime and timestamp != NO_TIMESTAMP:
                if not low <= timestamp <= high:
                    offset = header.baseOffset + (
                        record[_OFFSET_DELTA] if record is not None else index
                    )
                    refused.append((
                        ErrorCode.invalid_timestamp, index,
                        f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                        f"The timestamp should be within [{low}, {high}]",
                    ))
            elif claimed:
                refused.append((
                    ErrorCode.invalid_timestamp, index,
                    f"Invalid timestamp type in message {index} of the batch at {position}. "
                    "Producer should not set timestamp type to LogAppendTime.",
                ))
        if refused:
            raise recordValidationError(refused)
