"""
The security state files in the data directory: one JSON object per line
after a header line naming the kind and version.

Written whole with L{kafkatwist.util.atomic.replaceFile} (a temporary file,
fsynced, renamed over the old one, the directory fsynced), readable by the
broker's user only, so a crash leaves the old or the new file and a change
is on disk before it is acknowledged.  Read line by line: a damaged line is
skipped with one log line, the others are kept (start-up never fails on one
bad record).
"""

from __future__ import annotations

import json

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.atomic import replaceFile
from kafkatwist.util.startup import StartupError

__all__ = ["readRecords", "writeRecords", "storeRecords", "StateFileError"]

log = Logger()


class StateFileError(StartupError):
    """
    The file is not a kafkatwist state file of the expected kind or version:
    the broker refuses to start rather than run without its users or ACLs.
    """


def writeRecords(path: str, kind: str, version: int, records: list[dict]) -> None:
    lines = [json.dumps({"kind": kind, "version": version}, sort_keys=True)]
    lines += [json.dumps(record, sort_keys=True, ensure_ascii=False) for record in records]
    replaceFile(path, ("\n".join(lines) + "\n").encode("utf-8"), mode=0o600)


def storeRecords(path: str, kind: str, version: int, records: list[dict]) -> None:
    """
    L{writeRecords} for a change a client asked for: a failed write answers
    the client KAFKA_STORAGE_ERROR (nothing was changed) instead of escaping
    as an unknown server error.

    @raise KafkaError: the file could not be written.
    """
    try:
        writeRecords(path, kind, version, records)
    except OSError as e:
        raise KafkaError(ErrorCode.kafka_storage_error, f"cannot write {path}: {e.strerror}") from None


def readRecords(path: str, kind: str, version: int) -> list[dict]:
    """
    @return: the records; empty if the file does not exist.
    @raise StateFileError: the header names another kind or a newer version
        (refusing to start beats silently dropping users or ACLs).
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if not lines:
        return []
    try:
        header = json.loads(lines[0])
        if not isinstance(header, dict):
            raise ValueError("not an object")
    except ValueError as e:
        raise StateFileError(f"{path}: unreadable header line ({e})") from None
    if header.get("kind") != kind:
        raise StateFileError(f"{path}: holds {header.get('kind')!r}, expected {kind!r}")
    if header.get("version") != version:
        raise StateFileError(f"{path}: version {header.get('version')!r}, this broker reads {version}")
    records = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError as e:
            log.error("Skipping damaged line {number} of {path}: {error}", number=number, path=path, error=e)
            continue
        records.append(record)
    return records
