"""
Kafka's offset checkpoint files (C{recovery-point-offset-checkpoint},
C{log-start-offset-checkpoint}): a version line (0), a count line, then one
C{topic partition offset} line per partition.  Written to a temporary file,
fsynced and renamed over the old one, so a crash leaves either version.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.util.atomic import replaceFile

__all__ = [
    "CLEAN_SHUTDOWN",
    "LOG_START_OFFSET",
    "RECOVERY_POINT",
    "readCheckpoint",
    "writeCheckpoint",
]

log = Logger()

RECOVERY_POINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
_VERSION = 0


def readCheckpoint(path: str) -> dict[tuple[str, int], int]:
    """
    @return: (topic, partition) -> offset; empty if the file is missing or
        malformed (which only costs a longer recovery).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    except OSError as e:
        # Unreadable (EIO, EACCES, a directory in its place): the same
        # fallback as a malformed file, so one bad file never stops start-up.
        log.warn(
            "Ignoring unreadable checkpoint {path}: {error}; recovering from the start of "
            "every log in it",
            path=path,
            error=e,
        )
        return {}
    try:
        lines = raw.decode("ascii").splitlines()
        if int(lines[0]) != _VERSION:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            entries[(topic, int(partition))] = int(offset)
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        return entries
    except (ValueError, IndexError) as e:
        # Kafka's answer too: recover from the start of every log, and keep
        # every segment's data (log start offsets fall back to the first
        # segment's base).
        log.warn(
            "Ignoring malformed checkpoint {path}: {error}; recovering from the start of "
            "every log in it",
            path=path,
            error=e,
        )
        return {}


def writeCheckpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    lines = [str(_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    replaceFile(path, ("\n".join(lines) + "\n").encode("utf-8"))
