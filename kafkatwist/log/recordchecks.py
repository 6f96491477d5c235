"""
Kafka's checks of each record a client appends (C{LogValidator}'s
C{validateRecord}, KIP-467): a batch with refused records is refused whole,
naming each refused record's index in its batch, so Produce v8+ answers
C{record_errors} and the producer's delivery report says which records.

  - A compacted topic refuses records without a key (INVALID_RECORD).
  - A producer may not claim LogAppendTime: a batch with that timestamp
    type is refused on a LogAppendTime topic, and on a CreateTime topic when
    it carries no time (INVALID_TIMESTAMP, which names the whole refusal
    when any record has it).

The checks of a batch's shape (sizes, CRC, counts, codec) come before, in
L{kafkatwist.protocol.batch.validateRecordSet}, and refuse the batch with
no record named.  A topic's timestamp bounds
(C{message.timestamp.before.max.ms} and friends) are not topic configs
here, so no record is refused for its time.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode, recordValidationError
from kafkatwist.log.compaction import keylessRecords
from kafkatwist.log.stored import decompressedLimit
from kafkatwist.protocol.batch import NO_TIMESTAMP, TIMESTAMP_TYPE_BIT

__all__ = ["checkClientRecords"]


def checkClientRecords(buf, batches, topicPartition: str, config) -> None:
    """
    @param batches: the L{kafkatwist.protocol.batch.ValidBatch}es of
        C{buf}, already validated.
    @param config: the topic's L{kafkatwist.log.config.LogConfig}.
    @raise KafkaError: for the first batch with refused records, with its
        C{recordErrors}; CORRUPT_MESSAGE for records that do not decode.
    """
    compacted = config.compacts
    view = None
    for position, header in batches:
        claimsAppendTime = bool(header.attributes & TIMESTAMP_TYPE_BIT) and (
            config.logAppendTime or header.maxTimestamp == NO_TIMESTAMP
        )
        keyless = ()
        if compacted:
            if view is None:
                view = memoryview(buf).cast("B")
            keyless = keylessRecords(
                view, position, header, decompressedLimit(config.maxMessageBytes)
            )
        if not claimsAppendTime and not keyless:
            continue
        refused = []
        keyless = set(keyless)
        for index in range(header.recordsCount):
            if index in keyless:
                refused.append((
                    ErrorCode.invalid_record, index,
                    f"Compacted topic cannot accept message without key in topic partition "
                    f"{topicPartition}.",
                ))
            elif claimsAppendTime:
                refused.append((
                    ErrorCode.invalid_timestamp, index,
                    f"Invalid timestamp type in message {index} of the batch at {position}. "
                    "Producer should not set timestamp type to LogAppendTime.",
                ))
        raise recordValidationError(refused)
