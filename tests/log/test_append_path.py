"""
The append path's checks, each done once (issue 29): the inline batch
checks of C{validateRecordSet} answer exactly what C{batchError} and
C{recordsError} answer batch by batch, the per-record checks run whenever a
topic or a batch asks for them, and what an append reports and writes is
what it was.
"""

from __future__ import annotations

import random

import pytest
from crc32c import crc32c

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import AppendInfo
from kafkatwist.protocol import batch as B
from kafkatwist.protocol.compression import decompressionLimit
from kafkatwist.protocol.records import Record, buildBatch

from .batches import makeBatch
from .helpers import NOW, newLog, readAll


def _reference(buf, maxBatchBytes=None, allowControl=False):
    """
    The record set's checks as separate passes, batch by batch: the answer
    L{B.validateRecordSet} must give.
    """
    view = memoryview(buf).cast("B")
    end = len(view)
    if end == 0:
        return (ErrorCode.invalid_record, "empty record set")
    out = []
    position = 0
    while position < end:
        header, error = B.batchError(view, position, end - position)
        if error is not None:
            return (error.code, error.message)
        if maxBatchBytes is not None and header.size > maxBatchBytes:
            return (ErrorCode.message_too_large, None)
        if not allowControl and header.attributes & B.CONTROL_BIT:
            return (ErrorCode.invalid_record, "clients may not write control batches")
        error = B.recordsError(view, position, header, decompressionLimit(maxBatchBytes), bytes(buf))
        if error is not None:
            return (error.code, error.message)
        out.append((position, header))
        position += header.size
    return out


def _validated(buf, **kw):
    try:
        return [tuple(b) for b in B.validateRecordSet(buf, **kw)]
    except KafkaError as e:
        return (e.code, None if e.code == ErrorCode.message_too_large else e.message)


def _recordSet(rng) -> bytearray:
    data = bytearray()
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        n = rng.choice([1, 1, 2, 5, 70])
        data += buildBatch(
            [Record(value=b"v" * rng.randrange(0, 200), timestamp=NOW + i) for i in range(n)],
            compression=rng.choice(["none", "none", "none", "gzip"]),
            producerId=rng.choice([-1, 7]),
            producerEpoch=0,
            baseSequence=0,
            isControl=rng.random() < 0.05,
        )
    return data


@pytest.mark.parametrize("seed", range(4))
def test_inline_batch_checks_answer_as_the_separate_ones(seed):
    rng = random.Random(seed)
    for _ in range(300):
        data = _recordSet(rng)
        damage = rng.random()
        if damage < 0.5:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif damage < 0.6:
            del data[rng.randrange(len(data)) :]
        elif damage < 0.7:
            # A damaged header field that the CRC does not cover.
            at = rng.choice([8, 9, 10, 11, B.MAGIC_AT])
            data[at] = rng.randrange(256)
        kw = {}
        if rng.random() < 0.2:
            kw["maxBatchBytes"] = rng.randrange(60, 400)
        if rng.random() < 0.5:
            kw["allowControl"] = True
        assert _validated(bytes(data), **kw) == _validated(bytearray(data), **kw)
        assert _validated(bytearray(data), **kw) == _reference(bytes(data), **kw)


def test_a_claimed_log_append_time_is_checked_on_a_topic_without_record_checks(harness):
    # The topic asks for no per-record check; the batch's claim is still one.
    manager, log = newLog(harness)
    assert not log.config.recordChecks
    claimed = makeBatch(1, attributes=B.TIMESTAMP_TYPE_BIT, baseTimestamp=-1, timestampStep=0)
    with pytest.raises(KafkaError) as e:
        log.append(claimed, NOW)
    assert e.value.code == ErrorCode.invalid_timestamp
    assert log.logEndOffset == 0
    manager.createTopic("u", 1, {"message.timestamp.type": "LogAppendTime"})
    appendTime = manager.getLog("u", 0)
    with pytest.raises(KafkaError) as e:
        appendTime.append(makeBatch(1, attributes=B.TIMESTAMP_TYPE_BIT, baseTimestamp=NOW), NOW)
    assert e.value.code == ErrorCode.invalid_timestamp


@pytest.mark.parametrize(
    "configs, checks",
    [
        ({}, False),
        ({"cleanup.policy": "compact"}, True),
        ({"message.timestamp.before.max.ms": "1000"}, True),
        ({"message.timestamp.after.max.ms": "1000"}, True),
        ({"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "1000"}, False),
    ],
)
def test_record_checks_follow_the_topic(harness, configs, checks):
    _, log = newLog(harness, configs)
    assert log.config.recordChecks is checks


def test_append_info(harness):
    _, log = newLog(harness)
    log.append(makeBatch(2, baseTimestamp=NOW), NOW)
    info = log.append(makeBatch(1, baseTimestamp=NOW + 5) + makeBatch(3, baseTimestamp=NOW + 1), NOW)
    assert info == AppendInfo(
        firstOffset=2, lastOffset=5, logAppendTime=-1, logStartOffset=0, maxTimestamp=NOW + 5,
        offsetOfMaxTimestamp=2, numRecords=4, validBytes=info.validBytes, duplicate=False,
    )
    assert info.validBytes == len(makeBatch(1)) + len(makeBatch(3))
    with pytest.raises(AttributeError):
        info.firstOffset = 0  # type: ignore[misc]


def test_offsets_and_leader_epoch_written_in_place(harness):
    _, log = newLog(harness)
    log.leaderEpoch = 3
    log.append(makeBatch(2), NOW)
    log.append(makeBatch(1), NOW)
    stored = readAll(log, 0)
    headers = [h for _, h in B.iterBatchHeaders(stored)]
    assert [(h.baseOffset, h.batchLength, h.partitionLeaderEpoch) for h in headers] == [
        (0, len(makeBatch(2)) - B.LOG_OVERHEAD, 3),
        (2, len(makeBatch(1)) - B.LOG_OVERHEAD, 3),
    ]
    B.validateRecordSet(stored)  # CRCs still valid


def test_index_entries_every_interval_with_indexes_loaded_late(harness):
    # The indexes are loaded when an entry is due, not on every append: the
    # entries are those a rebuild from the log finds.
    manager, log = newLog(harness, {"index.interval.bytes": "300"})
    for i in range(60):
        log.append(makeBatch(1, valueSize=50 + i % 7, baseTimestamp=NOW + i), NOW)
    segment = log.activeSegment
    offsetIndex, timeIndex = segment.indexes()
    assert len(offsetIndex) > 5
    entries = [(offsetIndex.relativeOffsets[i], offsetIndex.positions[i]) for i in range(len(offsetIndex))]
    times = [(timeIndex.timestamps[i], timeIndex.relativeOffsets[i]) for i in range(len(timeIndex))]
    if harness.onDisk:
        manager = harness.restart(manager)
        segment = manager.getLog("t", 0).activeSegment
        again = segment.indexes()[0]
        assert [(again.relativeOffsets[i], again.positions[i]) for i in range(len(again))] == entries
    rebuiltOffsets, rebuiltTimes = segment._rebuildIndexes(300)
    assert entries == [
        (rebuiltOffsets.relativeOffsets[i], rebuiltOffsets.positions[i]) for i in range(len(rebuiltOffsets))
    ]
    # (a rebuild adds the segment's last max timestamp at the end)
    assert times == [
        (rebuiltTimes.timestamps[i], rebuiltTimes.relativeOffsets[i]) for i in range(len(times))
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("valueSize", [50, 3000])  # record sets under and over 4 KiB
def test_record_sets_of_every_codec_and_buffer_type(codec, valueSize):
    # Small record sets are read without memoryviews (their CRC and
    # compressed payload sliced as copies), large ones through one.
    records = [Record(value=bytes([i]) * valueSize, timestamp=NOW + i) for i in range(3)]
    data = buildBatch(records, compression=codec) + buildBatch(records[:1], compression=codec)
    for buf in (bytes(data), bytearray(data), memoryview(bytes(data))):
        assert [h.recordsCount for _, h in B.validateRecordSet(buf)] == [3, 1]
    damaged = bytearray(data)
    damaged[B.HEADER_SIZE] ^= 0xFF  # the first batch's payload, CRC made to match
    B.CRC.pack_into(damaged, B.CRC_AT, crc32c(bytes(damaged[B.ATTRIBUTES_AT : len(data) - len(
        buildBatch(records[:1], compression=codec))])))
    for buf in (bytes(damaged), bytearray(damaged), memoryview(bytes(damaged))):
        assert _validated(buf) == _reference(bytes(damaged))
        assert isinstance(_validated(buf), tuple)  # refused
