"""
C{check-data-dir}: look over a data directory without starting the broker.

    python -m kafkatwist.tools check-data-dir DIR...

Reads every segment of every partition (batch lengths, magic, CRC-32C,
record counts, offsets increasing across batches and segments), checks each
offset and time index entry against the log, decodes producer snapshots and
the checkpoint files.  Nothing is written, locked or repaired: it is safe
on a directory a broker is using (whose newest segment may be mid-append).
Exit status 0 when nothing is wrong, 1 when something is.
"""

from __future__ import annotations

import fcntl
import json
import os
import re

from kafkatwist.log.meta import META_PROPERTIES
from kafkatwist.util.dirlock import LOCK_FILE
from kafkatwist.log.checkpoint import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    readCheckpoint,
)
from kafkatwist.log.manager import TOPIC_METADATA
from kafkatwist.log.producerstate import CorruptSnapshot, decodeSnapshot
from kafkatwist.log.txnindex import CorruptTxnIndex, decodeEntries
from kafkatwist.tools.segments import FILE_NAME, SegmentFile, indexMismatches, timeIndexMismatches

#: C{<topic>-<partition>}, as Kafka names partition directories
PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


class Report:
    def __init__(self, out) -> None:
        self.out = out
        self.problems: list[str] = []

    def note(self, text: str) -> None:
        self.out.write(text + "\n")

    def problem(self, text: str) -> None:
        self.problems.append(text)


def checkDataDir(directory: str, out) -> int:
    """
    @return: the number of problems found.
    """
    report = Report(out)
    directory = os.path.abspath(directory)
    report.note(f"Checking {directory} (read-only)")
    _checkTopLevel(directory, report)
    partitions = segments = batches = 0
    ends: dict[tuple[str, int], int] = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        match = PARTITION_DIR.match(name)
        if not os.path.isdir(path) or match is None:
            continue
        partitions += 1
        counted = _checkPartition(path, report)
        segments += counted[0]
        batches += counted[1]
        if counted[2] is not None:
            ends[(match.group(1), int(match.group(2)))] = counted[2]
    _checkCheckpoints(directory, ends, report)
    if partitions > len(ends):
        report.note(f"{partitions - len(ends)} partitions without records are not listed")
    for problem in report.problems:
        report.note(f"PROBLEM {problem}")
    report.note(
        f"{partitions} partitions, {segments} segments, {batches} batches checked: "
        + (f"{len(report.problems)} problems" if report.problems else "no problems")
    )
    return len(report.problems)


def _checkTopLevel(directory: str, report: Report) -> None:
    meta = os.path.join(directory, META_PROPERTIES)
    if os.path.exists(meta):
        values = {}
        with open(meta, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    values[key.strip()] = value.strip()
        if "cluster.id" in values:
            report.note(f"{META_PROPERTIES}: cluster.id={values['cluster.id']} "
                        f"node.id={values.get('node.id', '?')}")
        else:
            report.problem(f"{meta}: no cluster.id")
    else:
        report.note(f"{META_PROPERTIES}: none (a broker has not started on this directory)")
    holder = _lockHolder(directory)
    report.note("In use: " + (f"yes, by a running broker ({holder})" if holder else "no"))
    if not holder:
        clean = os.path.exists(os.path.join(directory, CLEAN_SHUTDOWN))
        report.note("Last shutdown: " + ("clean" if clean else
                    "not clean (the next start recovers segments past each recovery point)"))


def _lockHolder(directory: str) -> str | None:
    """
    Who holds the directory's C{.lock}, without creating or keeping it.
    """
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            return f"pid {pid}" if pid.isdigit() else "unknown pid"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def _checkPartition(path: str, report: Report) -> tuple[int, int, int | None]:
    """
    @return: (segments, batches, next offset after the last batch or None).
    """
    name = os.path.basename(path)
    metadata = os.path.join(path, TOPIC_METADATA)
    try:
        with open(metadata, encoding="utf-8") as f:
            json.load(f)
    except FileNotFoundError:
        report.problem(f"{name}: no {TOPIC_METADATA}")
    except (OSError, ValueError) as e:
        report.problem(f"{metadata}: unreadable: {e}")
    files: dict[int, set[str]] = {}
    for entry in os.listdir(path):
        match = FILE_NAME.match(entry)
        if match:
            files.setdefault(int(match.group(1)), set()).add(match.group(2))
    nextOffset = None
    segments = batches = 0
    for base in sorted(files):
        kinds = files[base]
        stem = os.path.join(path, f"{base:020d}")
        if "snapshot" in kinds:
            try:
                with open(stem + ".snapshot", "rb") as f:
                    decodeSnapshot(f.read())
            except CorruptSnapshot as e:
                report.problem(f"{name}/{base:020d}.snapshot: {e}")
        if "txnindex" in kinds:
            try:
                with open(stem + ".txnindex", "rb") as f:
                    decodeEntries(f.read())
            except CorruptTxnIndex as e:
                report.problem(f"{name}/{base:020d}.txnindex: {e} (the broker rebuilds it)")
        if "log" not in kinds:
            for orphan in sorted(kinds - {"snapshot"}):
                report.problem(f"{name}/{base:020d}.{orphan}: no .log beside it")
            continue
        segments += 1
        if nextOffset is not None and base < nextOffset:
            report.problem(f"{name}/{base:020d}.log: base offset {base} overlaps the previous "
                           f"segment, which ends at {nextOffset - 1}")
        with SegmentFile(stem + ".log") as log:
            for batch in log.batches():
                if batch.error is not None:
                    report.problem(f"{name}/{base:020d}.log: {batch.error}; "
                                   f"{log.size - batch.position} bytes from position {batch.position} "
                                   "cannot be read")
                    break
                batches += 1
                h = batch.header
                floor = nextOffset if nextOffset is not None else base
                if h.baseOffset < max(floor, base):
                    report.problem(f"{name}/{base:020d}.log: batch at position {batch.position} "
                                   f"starts at offset {h.baseOffset}, below {max(floor, base)}")
                nextOffset = h.lastOffset + 1
            for kind, check in (("index", indexMismatches), ("timeindex", timeIndexMismatches)):
                if kind in kinds:
                    for problem in check(log, f"{stem}.{kind}"):
                        report.problem(os.path.relpath(problem, os.path.dirname(path)))
    if batches:
        report.note(f"{name}: {segments} segments, {batches} batches, offsets up to {nextOffset - 1}")
    return segments, batches, nextOffset


def _checkCheckpoints(directory: str, ends: dict[tuple[str, int], int], report: Report) -> None:
    for fileName in (RECOVERY_POINT, LOG_START_OFFSET):
        path = os.path.join(directory, fileName)
        if not os.path.exists(path):
            continue
        entries = _readCheckpointStrictly(path, report)
        for (topic, partition), offset in sorted(entries.items()):
            if not os.path.isdir(os.path.join(directory, f"{topic}-{partition}")):
                report.problem(f"{fileName}: {topic}-{partition} has no directory")
            elif offset > ends.get((topic, partition), 0):
                report.problem(f"{fileName}: {topic}-{partition} at {offset}, past the log's end "
                               f"{ends.get((topic, partition), 0)}")


def _readCheckpointStrictly(path: str, report: Report) -> dict[tuple[str, int], int]:
    """
    The broker reads a malformed checkpoint as empty (a longer recovery);
    here that is worth saying.
    """
    entries = readCheckpoint(path)
    if not entries:
        with open(path, encoding="utf-8") as f:
            if f.read().split() != ["0", "0"]:
                report.problem(f"{os.path.basename(path)}: malformed; the broker would ignore it")
    return entries
