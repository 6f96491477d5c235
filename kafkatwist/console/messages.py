"""
The message browser's reading: a page of records of one partition's log,
read batch by batch from a given offset until the page is full (never the
whole log, never more batches than the page's records sit in), and shown as
UTF-8, pretty JSON or hex.  Runs on a request handler thread.
"""

from __future__ import annotations

import datetime
import json
import struct

from kafkatwist.errors import KafkaError
from kafkatwist.protocol.records import decodeBatches

#: the most records one page shows
MAX_PAGE = 100
#: bytes asked of the log per read (whole batches: at least one)
READ_CHUNK = 64 * 1024
#: the most bytes of one key, value or header shown (the size is told)
SHOWN_BYTES = 16 * 1024
FORMATS = ("auto", "utf8", "json", "hex")


def parseTimestamp(text: str) -> int:
    """
    Milliseconds since the epoch, or an ISO 8601 date and time (UTC unless
    it says otherwise, as a browser's datetime-local field sends it).

    @raise ValueError: for anything else.
    """
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return int(moment.timestamp() * 1000)


def showBytes(data: bytes | None) -> dict | None:
    """
    A key, value or header value as the browser shows it: its size, its
    UTF-8 text when it is text, its JSON pretty-printed when it is JSON, and
    its hex; each cut at L{SHOWN_BYTES}.
    """
    if data is None:
        return None
    size = len(data)
    shown = bytes(data[:SHOWN_BYTES])
    text = None
    pretty = None
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError:
        # A cut may split a character: only the last few bytes may fail.
        try:
            text = shown[: max(0, len(shown) - 3)].decode("utf-8") if size > SHOWN_BYTES else None
        except UnicodeDecodeError:
            text = None
    if text is not None and any(ord(c) < 32 and c not in "\t\r\n" for c in text):
        text = None
    if text is not None and size <= SHOWN_BYTES:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        else:
            if isinstance(parsed, (dict, list)):
                pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
    return {
        "size": size,
        "truncated": size > SHOWN_BYTES,
        "utf8": text,
        "json": pretty,
        "hex": shown.hex(" "),
    }


def _control(record) -> str | None:
    key = record.key or b""
    if len(key) >= 4:
        _, kind = struct.unpack_from(">hh", key)
        return {0: "ABORT", 1: "COMMIT"}.get(kind, f"CONTROL({kind})")
    return "CONTROL"


def _abortedRanges(log, position: int) -> tuple[tuple, int]:
    """
    The aborted transactions overlapping what a read from C{position}
    returns, and the last stable offset (a read_committed read's answer,
    whose records are not read).
    """
    try:
        info = log.read(position, READ_CHUNK, minOneBatch=True, readCommitted=True)
    except (KafkaError, TypeError):
        return (), log.highWatermark
    if not isinstance(info.records, (bytes, bytearray, memoryview)):
        info.records.close()
    return tuple(info.abortedTransactions or ()), info.lastStableOffset


def readPage(log, start: int, limit: int, stopAt: int | None = None) -> tuple[list[dict], int]:
    """
    Records of C{log} from offset C{start}, at most C{limit}, below
    C{stopAt} (the high watermark by default).  A transactional record is
    C{committed}, C{aborted} (as a read_committed consumer decides, from
    the log's aborted-transaction index) or C{open} (at or past the last
    stable offset).

    @return: (records as dicts, the offset after the last one read).
    """
    end = log.highWatermark if stopAt is None else min(stopAt, log.highWatermark)
    position = max(start, log.logStartOffset)
    out: list[dict] = []
    while len(out) < limit and position < end:
        aborted, lastStable = _abortedRanges(log, position)
        pendingAborts = sorted(aborted, key=lambda a: a[1])
        abortedNow: set[int] = set()
        try:
            info = log.read(position, READ_CHUNK, minOneBatch=True)
        except KafkaError:
            break
        data = info.records
        if not isinstance(data, (bytes, bytearray, memoryview)):
            try:
                data = data.read()
            finally:
                info.records.close()
        if not data:
            break
        moved = False
        for batch in decodeBatches(data):
            while pendingAborts and pendingAborts[0][1] <= batch.lastOffset:
                abortedNow.add(pendingAborts.pop(0)[0])
            control = batch.isControl
            txn = None
            if batch.isTransactional and not control:
                if batch.baseOffset >= lastStable:
                    txn = "open"
                elif batch.producerId in abortedNow:
                    txn = "aborted"
                else:
                    txn = "committed"
            for record in batch.records:
                if record.offset < position or record.offset >= end:
                    continue
                out.append({
                    "partition": log.partition,
                    "offset": record.offset,
                    "timestamp": record.timestamp,
                    "timestampType": "LogAppendTime" if batch.timestampType else "CreateTime",
                    "key": None if control else showBytes(record.key),
                    "value": None if control else showBytes(record.value),
                    "headers": [
                        {"key": k, "value": showBytes(v)} for k, v in record.headers
                    ],
                    "transactional": batch.isTransactional,
                    "transaction": txn,
                    "control": _control(record) if control else None,
                    "producerId": batch.producerId,
                    "compression": batch.compression,
                })
                if len(out) >= limit:
                    return out, record.offset + 1
            if control and batch.isTransactional:
                abortedNow.discard(batch.producerId)
            if batch.nextOffset > position:
                position = batch.nextOffset
                moved = True
        if not moved:
            break
    return out, position
