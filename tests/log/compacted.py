"""
Helpers for log cleaner tests: keyed batches, reading a whole log back, and
what a compacted log must hold.
"""

from __future__ import annotations

from kafkatwist.log.region import readRecords
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches

__all__ = ["append", "expectedLatest", "readAll", "readBatches"]


def append(log, pairs, nowMs: int, *, timestamp: int | None = None, **kw) -> int:
    """
    Append one batch of C{(key, value)} pairs (strings or bytes; C{None}
    value: a tombstone).

    @return: its base offset.
    """

    def raw(x):
        return x.encode() if isinstance(x, str) else x

    records = [
        Record(timestamp=timestamp if timestamp is not None else nowMs, key=raw(k), value=raw(v))
        for k, v in pairs
    ]
    return log.append(buildBatch(records, **kw), nowMs).firstOffset


def readBatches(log, start: int | None = None):
    """
    Every batch of the log from C{start} (default: its start), decoded.
    """
    offset = log.logStartOffset if start is None else start
    out = []
    while offset < log.logEndOffset:
        data = readRecords(log.read(offset, 1 << 20).records)
        batches = list(decodeBatches(data))
        assert batches, f"no batch at {offset}"
        for batch in batches:
            if batch.lastOffset >= offset:
                out.append(batch)
                offset = batch.nextOffset
    return out


def readAll(log):
    """
    @return: C{[(offset, key, value)]} of every record, checking offsets
        strictly increase.
    """
    out = []
    for batch in readBatches(log):
        for record in batch.records:
            if out:
                assert record.offset > out[-1][0], "offsets go backwards"
            assert batch.baseOffset <= record.offset <= batch.lastOffset
            out.append((record.offset, record.key, record.value))
    return out


def expectedLatest(records) -> dict:
    """
    key -> (offset, value) of the last record of each key.
    """
    latest = {}
    for offset, key, value in records:
        latest[key] = (offset, value)
    return latest
