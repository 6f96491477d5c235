"""
Kafka's limits on producer timestamps (C{message.timestamp.before.max.ms},
C{message.timestamp.after.max.ms}, and the deprecated
C{message.timestamp.difference.max.ms} they fall back to): a CreateTime
record whose timestamp is too far behind or ahead of the broker's clock is
refused with INVALID_TIMESTAMP, as Kafka's C{LogValidator} does.

Only topics with a limit pay: with the "behind" limit set every record is
walked (decompressed if need be: a record's delta may be negative, so the
batch's base timestamp is no lower bound); the "ahead" limit alone is
settled by the batch's max timestamp, records are walked only to name the
one refused.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.compaction import dataRecords

__all__ = ["checkTimestamps"]

_UNLIMITED = 2**63 - 1
_NO_TIMESTAMP = -1


def checkTimestamps(buf, batches, config, nowMs: int) -> None:
    """
    @param batches: the validated batches of C{buf}.
    @param config: the topic's L{kafkatwist.log.config.LogConfig}
        (CreateTime; the caller skips LogAppendTime topics).
    @raise KafkaError: INVALID_TIMESTAMP with Kafka's message, or
        CORRUPT_MESSAGE for records that do not decode.
    """
    before, after = config.messageTimestampBeforeMaxMs, config.messageTimestampAfterMaxMs
    if before >= _UNLIMITED and after >= _UNLIMITED:
        return
    low = nowMs - before if before < _UNLIMITED else -(2**63)
    high = nowMs + after if after < _UNLIMITED else _UNLIMITED
    if before >= _UNLIMITED:
        # The batch's max timestamp bounds all of its records.
        wanted = lambda header: header.maxTimestamp > high  # noqa: E731
    else:
        wanted = None
    for header, records in dataRecords(buf, batches, config.maxMessageBytes, wanted):
        for record in records:
            timestamp = header.baseTimestamp + record[2]
            if timestamp == _NO_TIMESTAMP or low <= timestamp <= high:
                continue
            raise KafkaError(
                ErrorCode.invalid_timestamp,
                f"Timestamp {timestamp} of message with offset {header.baseOffset + record[3]} is "
                f"out of range. The timestamp should be within [{low}, {high}]",
            )
