"""
Kafka's per-record checks of a client's batches (KIP-467): which records
are refused, with which code and message, and that unrefused batches pass.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.recordchecks import checkClientRecords
from kafkatwist.protocol.batch import validateRecordSet
from kafkatwist.protocol.records import Record, buildBatch

NOW = 1_700_000_000_000
UNLIMITED = 2**63 - 1
KEYLESS = "Compacted topic cannot accept message without key in topic partition t-0."


def config(compact=False, logAppendTime=False, before=UNLIMITED, after=UNLIMITED):
    return SimpleNamespace(
        compacts=compact, logAppendTime=logAppendTime, messageTimestampBeforeMaxMs=before,
        messageTimestampAfterMaxMs=after, maxMessageBytes=1 << 20,
    )


def check(batch, cfg):
    data = bytearray(batch)
    checkClientRecords(data, validateRecordSet(data), "t-0", cfg, NOW)


def refusal(batch, cfg) -> KafkaError:
    with pytest.raises(KafkaError) as e:
        check(batch, cfg)
    return e.value


def records(*keys, timestamps=None):
    timestamps = timestamps or [NOW] * len(keys)
    return [Record(key=k, value=b"v", timestamp=t) for k, t in zip(keys, timestamps)]


def test_nothing_to_check_passes():
    check(buildBatch(records(None, None)), config())
    check(buildBatch(records(b"a", b"b"), compression="gzip"), config(compact=True))


def test_keyless_records_of_a_compacted_topic():
    e = refusal(buildBatch(records(b"a", None, b"b", None), compression="lz4"), config(compact=True))
    assert e.code == ErrorCode.invalid_record
    assert e.recordErrors == ((1, KEYLESS), (3, KEYLESS))
    assert e.message.startswith("One or more records have been rejected due to 2 record errors")


def test_only_the_first_three_are_shown():
    e = refusal(buildBatch(records(*[None] * 5)), config(compact=True))
    assert len(e.recordErrors) == 5 and e.message.count("RecordError(") == 3


def test_time_bounds():
    cfg = config(before=3_600_000, after=60_000)
    check(buildBatch(records(b"a", timestamps=[NOW - 3_600_000])), cfg)
    e = refusal(
        buildBatch(records(b"a", b"b", b"c", timestamps=[NOW, NOW - 3_600_001, NOW + 60_001])), cfg
    )
    assert e.code == ErrorCode.invalid_timestamp
    assert e.message == "One or more records have been rejected due to invalid timestamp"
    assert [i for i, _ in e.recordErrors] == [1, 2]
    assert e.recordErrors[0][1] == (
        f"Timestamp {NOW - 3_600_001} of message with offset 1 is out of range. The timestamp "
        f"should be within [{NOW - 3_600_000}, {NOW + 60_000}]"
    )
    # The "ahead" bound alone: settled by the max timestamp when it holds.
    check(buildBatch(records(b"a", timestamps=[NOW - 10**9])), config(after=0))
    assert [i for i, _ in refusal(
        buildBatch(records(b"a", b"b", timestamps=[NOW, NOW + 1])), config(after=0)
    ).recordErrors] == [1]
    # No bounds on a LogAppendTime topic: the broker's time replaces them.
    check(buildBatch(records(b"a", timestamps=[0])), config(logAppendTime=True, before=1))


def test_a_key_error_comes_before_a_time_error():
    e = refusal(
        buildBatch(records(None, b"b", timestamps=[0, 0])), config(compact=True, before=1000)
    )
    assert e.code == ErrorCode.invalid_timestamp
    assert e.recordErrors[0] == (0, KEYLESS) and "out of range" in e.recordErrors[1][1]


def test_claimed_log_append_time():
    claimed = buildBatch(records(b"a", b"b"), timestampType=1)
    e = refusal(claimed, config(logAppendTime=True))
    assert e.code == ErrorCode.invalid_timestamp and [i for i, _ in e.recordErrors] == [0, 1]
    assert "should not set timestamp type to LogAppendTime" in e.recordErrors[0][1]
    # With a time on a CreateTime topic: kept, bounds checked on that time.
    check(claimed, config())
    e = refusal(claimed, config(after=-1))
    assert "out of range" in e.recordErrors[0][1]
    # Without a time on a CreateTime topic: refused.
    timeless = buildBatch(records(b"a", timestamps=[-1]), timestampType=1, maxTimestamp=-1)
    assert refusal(timeless, config()).code == ErrorCode.invalid_timestamp
