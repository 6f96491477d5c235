"""
C{dump-log}: what C{kafka-dump-log.sh} prints, for kafkatwist's files.

    python -m kafkatwist.tools dump-log [--deep-iteration] [--print-data-log]
        [--verify-index-only] [--index-sanity-check] FILE...

A C{.log} prints one line per batch (and with C{--deep-iteration} one per
record); a C{.index} or C{.timeindex} its entries, checked against the
C{.log} beside it; a C{.snapshot} the producer state it holds.
"""

from __future__ import annotations

import os

from kafkatwist.log.index import CorruptIndex
from kafkatwist.log.producerstate import CorruptSnapshot, decodeSnapshot, lastSequence
from kafkatwist.log.stored import StoredBatchError, decodeStoredBatches
from kafkatwist.log.txnindex import CorruptTxnIndex, decodeEntries
from kafkatwist.protocol.batch import (
    compressionCodec,
    isControl,
    isTransactional,
    timestampType,
)
from kafkatwist.tools.segments import (
    FILE_NAME,
    SegmentFile,
    indexMismatches,
    rawOffsetEntries,
    rawTimeEntries,
    readOffsetIndex,
    readTimeIndex,
    sibling,
    timeIndexMismatches,
)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: a decoded batch may inflate to this much (the tool reads one batch at a time)
MAX_DECOMPRESSED = 1 << 30


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _timestampName(attributes: int) -> str:
    return "LogAppendTime" if timestampType(attributes) else "CreateTime"


def dumpLog(path: str, out, deep: bool, printData: bool) -> int:
    problems = 0
    with SegmentFile(path) as log:
        out.write(f"Log starting offset: {log.baseOffset}\n")
        for batch in log.batches():
            h = batch.header
            if batch.error is not None:
                out.write(f"Found a batch that is not sound at position {batch.position}: {batch.error}; "
                          f"{log.size - batch.position} bytes from there on are not read\n")
                problems += 1
                break
            seq = h.baseSequence
            out.write(
                f"baseOffset: {h.baseOffset} lastOffset: {h.lastOffset} count: {h.recordsCount} "
                f"baseSequence: {seq} lastSequence: {lastSequence(seq, h.lastOffsetDelta) if seq >= 0 else -1} "
                f"producerId: {h.producerId} producerEpoch: {h.producerEpoch} "
                f"partitionLeaderEpoch: {h.partitionLeaderEpoch} "
                f"isTransactional: {_bool(isTransactional(h.attributes))} "
                f"isControl: {_bool(isControl(h.attributes))} position: {batch.position} "
                f"{_timestampName(h.attributes)}: {h.maxTimestamp} size: {h.size} magic: {h.magic} "
                f"compresscodec: {CODECS[compressionCodec(h.attributes)]} crc: {h.crc} isvalid: true\n"
            )
            if deep:
                problems += _dumpRecords(log.bytesAt(batch.position, h.size), h, out, printData)
    return problems


def _dumpRecords(data, header, out, printData: bool) -> int:
    try:
        [decoded] = list(decodeStoredBatches(data, maxDecompressedBytes=MAX_DECOMPRESSED))
    except StoredBatchError as e:
        out.write(f"| records of the batch at offset {header.baseOffset} do not decode: {e.message}\n")
        return 1
    kind = _timestampName(header.attributes)
    for record in decoded.records:
        sequence = (lastSequence(header.baseSequence, record.offset - header.baseOffset)
                    if header.baseSequence >= 0 else -1)
        line = (
            f"| offset: {record.offset} {kind}: {record.timestamp} "
            f"keySize: {len(record.key) if record.key is not None else -1} "
            f"valueSize: {len(record.value) if record.value is not None else -1} "
            f"sequence: {sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]"
        )
        if printData:
            if record.key is not None:
                line += f" key: {_text(record.key)}"
            line += f" payload: {_text(record.value) if record.value is not None else ''}"
        out.write(line + "\n")
    return 0


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def dumpIndex(path: str, out, verifyOnly: bool) -> int:
    logPath = sibling(path, "log")
    if not os.path.exists(logPath):
        out.write(f"No log file {logPath} to check the index against\n")
        for offset, position in rawOffsetEntries(path):
            if not verifyOnly:
                out.write(f"offset: {offset} position: {position}\n")
        return 1
    with SegmentFile(logPath) as log:
        if not verifyOnly:
            for offset, position in rawOffsetEntries(path):
                out.write(f"offset: {offset} position: {position}\n")
        problems = indexMismatches(log, path)
    for problem in problems:
        out.write(f"Mismatch: {problem}\n")
    return len(problems)


def dumpTimeIndex(path: str, out, verifyOnly: bool) -> int:
    logPath = sibling(path, "log")
    if not verifyOnly:
        for timestamp, offset in rawTimeEntries(path):
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
    if not os.path.exists(logPath):
        out.write(f"No log file {logPath} to check the time index against\n")
        return 1
    with SegmentFile(logPath) as log:
        problems = timeIndexMismatches(log, path)
    for problem in problems:
        out.write(f"Mismatch: {problem}\n")
    return len(problems)


def dumpSnapshot(path: str, out) -> int:
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = decodeSnapshot(data)
    except CorruptSnapshot as e:
        out.write(f"Producer snapshot cannot be read: {e}\n")
        return 1
    for entry in entries:
        batches = " ".join(
            f"[firstSequence: {b.firstSeq} lastSequence: {b.lastSeq} firstOffset: {b.firstOffset} "
            f"lastOffset: {b.lastOffset} timestamp: {b.maxTimestamp}]"
            for b in entry.batches
        )
        out.write(f"producerId: {entry.producerId} producerEpoch: {entry.epoch} "
                  f"coordinatorEpoch: {entry.coordinatorEpoch} "
                  f"currentTxnFirstOffset: {entry.currentTxnFirstOffset} "
                  f"lastTimestamp: {entry.lastTimestamp} batches: {batches}\n")
    return 0


def dumpTxnIndex(path: str, out) -> int:
    """
    An aborted-transaction index, one line per entry as Kafka prints it.
    """
    with open(path, "rb") as f:
        data = f.read()
    try:
        entries = decodeEntries(data)
    except CorruptTxnIndex as e:
        out.write(f"Transaction index cannot be read: {e}\n")
        return 1
    for entry in entries:
        out.write(f"version: 0 producerId: {entry.producerId} firstOffset: {entry.firstOffset} "
                  f"lastOffset: {entry.lastOffset} lastStableOffset: {entry.lastStableOffset}\n")
    return 0


def sanityCheck(path: str, out) -> int:
    """
    Kafka's C{--index-sanity-check}: would the broker use this index as it is?
    """
    logPath = sibling(path, "log")
    size = os.path.getsize(logPath) if os.path.exists(logPath) else 0
    try:
        if path.endswith(".index"):
            readOffsetIndex(path, size)
        else:
            readTimeIndex(path)
    except CorruptIndex as e:
        out.write(f"{path} failed sanity check: {e}\n")
        return 1
    out.write(f"{path} passed sanity check.\n")
    return 0


def dumpFile(path: str, out, *, deep=False, printData=False, verifyOnly=False, sanity=False) -> int:
    """
    @return: the number of problems found.
    """
    match = FILE_NAME.match(os.path.basename(path))
    if match is None:
        out.write(f"Ignoring {path}: not a .log, .index, .timeindex, .snapshot or .txnindex file with a "
                  "20-digit base offset\n")
        return 1
    kind = match.group(2)
    out.write(f"Dumping {path}\n")
    if kind == "log":
        return dumpLog(path, out, deep or printData, printData)
    if kind == "snapshot":
        return dumpSnapshot(path, out)
    if kind == "txnindex":
        return dumpTxnIndex(path, out)
    if sanity:
        return sanityCheck(path, out)
    if kind == "index":
        return dumpIndex(path, out, verifyOnly)
    return dumpTimeIndex(path, out, verifyOnly)
