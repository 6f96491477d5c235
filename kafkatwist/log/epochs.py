"""
The leader-epoch cache of one partition (Kafka's C{LeaderEpochFileCache})
and its C{leader-epoch-checkpoint} file: which leader epoch began at which
offset.  It answers OffsetForLeaderEpoch (KIP-101/279: a follower, or a
client validating its position after a leader change (KIP-320), asks where
an epoch ended here) and is truncated with the log.

The file is Kafka's: a version line (0), a count line, then one
C{epoch startOffset} line per entry, oldest first; replaced whole (temporary
file, fsync, rename, directory fsync), so a crash leaves the old or the new
list.  A file that does not parse is ignored with one line (the cache then
starts empty and fills again from the batches appended; Kafka's answer for
an empty cache is an undefined epoch, which makes a follower fall back to
its high watermark).

Thread: the partition's lock (see L{kafkatwist.log.partition}) owns the
entries; readers see a tuple replaced whole.
"""

from __future__ import annotations

from bisect import bisect_right

from twisted.logger import Logger

from kafkatwist.util.atomic import replaceFile

__all__ = [
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "LeaderEpochCache",
    "readEpochCheckpoint",
]

log = Logger()

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0


def readEpochCheckpoint(path: str) -> list[tuple[int, int]]:
    """
    @return: C{(epoch, startOffset)} entries; empty if the file is missing
        or malformed (logged).
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return []
    except OSError as e:
        log.warn("Cannot read {path}: {error}; leader epochs start empty", path=path, error=e)
        return []
    try:
        lines = raw.decode("ascii").splitlines()
        if int(lines[0]) != _VERSION:
            raise ValueError(f"unknown version {lines[0]!r}")
        count = int(lines[1])
        entries = []
        for line in lines[2 : 2 + count]:
            epoch, offset = line.split(" ")
            entries.append((int(epoch), int(offset)))
        if len(entries) != count:
            raise ValueError(f"expected {count} entries, found {len(entries)}")
        for (e1, o1), (e2, o2) in zip(entries, entries[1:]):
            if e2 <= e1 or o2 < o1:
                raise ValueError(f"entries out of order: {e1} {o1} then {e2} {o2}")
        return entries
    except (ValueError, IndexError, UnicodeDecodeError) as e:
        log.warn(
            "Ignoring malformed {path}: {error}; leader epochs start empty", path=path, error=e
        )
        return []


class LeaderEpochCache:
    """
    @param path: the checkpoint file, or C{None} (a log in memory).
    @ivar entries: C{(epoch, startOffset)} tuples, epochs and offsets
        increasing; replaced whole on every change.
    """

    def __init__(self, path: str | None, entries=()) -> None:
        self.path = path
        self.entries: tuple[tuple[int, int], ...] = tuple(entries)
        #: the newest epoch (a plain attribute: a leader's append reads it)
        self.latestEpoch = self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def __repr__(self) -> str:
        return f"<LeaderEpochCache {list(self.entries)}>"

    @classmethod
    def load(cls, path: str) -> LeaderEpochCache:
        return cls(path, readEpochCheckpoint(path))

    def _replace(self, entries) -> None:
        entries = tuple(entries)
        if entries == self.entries:
            return
        if self.path is not None:
            lines = [str(_VERSION), str(len(entries))]
            lines += [f"{epoch} {offset}" for epoch, offset in entries]
            replaceFile(self.path, ("\n".join(lines) + "\n").encode("ascii"))
        self.entries = entries
        self.latestEpoch = entries[-1][0] if entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, startOffset: int) -> bool:
        """
        Record that C{epoch} begins at C{startOffset} (a leader's first
        append in its epoch, or a replicated batch of a newer epoch).
        Entries it contradicts -- an epoch as new or newer, or one starting
        at or after it -- are dropped, as Kafka's cache drops them.

        @return: whether the cache changed (and was written).
        @raise OSError: the checkpoint could not be written; the cache is
            unchanged.
        """
        if epoch < 0:
            return False
        entries = self.entries
        if entries and entries[-1][0] == epoch and entries[-1][1] <= startOffset:
            return False
        kept = [(e, o) for e, o in entries if e < epoch and o < startOffset]
        kept.append((epoch, startOffset))
        self._replace(kept)
        return True

    def endOffsetFor(self, requestedEpoch: int, logEndOffset: int) -> tuple[int, int]:
        """
        Kafka's C{endOffsetFor}: C{(epoch, endOffset)} -- the largest epoch
        at or below C{requestedEpoch} and the offset where it ended (the
        next epoch's start, or the log end for the latest).
        """
        entries = self.entries
        if requestedEpoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if entries[-1][0] == requestedEpoch:
            return requestedEpoch, logEndOffset
        epochs = [e for e, _ in entries]
        higher = bisect_right(epochs, requestedEpoch)
        if higher == len(entries):
            # Newer than any epoch known here.
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            # Older than any known: it ended where the first known began.
            return requestedEpoch, entries[0][1]
        return entries[higher - 1][0], entries[higher][1]

    def truncateFromEnd(self, endOffset: int) -> None:
        """
        Drop the entries starting at or after C{endOffset} (the log was
        truncated to it).
        """
        if self.entries and self.entries[-1][1] >= endOffset:
            self._replace([(e, o) for e, o in self.entries if o < endOffset])

    def truncateFromStart(self, startOffset: int) -> None:
        """
        The log now starts at C{startOffset}: entries before it collapse
        into one starting there.
        """
        entries = self.entries
        if not entries or entries[0][1] >= startOffset:
            return
        later = [(e, o) for e, o in entries if o > startOffset]
        earlier = [(e, o) for e, o in entries if o <= startOffset]
        self._replace([(earlier[-1][0], startOffset)] + later)

    def clear(self) -> None:
        self._replace(())

    def epochForOffset(self, offset: int) -> int:
        """
        The epoch the batch at C{offset} was written in, as far as the cache
        knows (C{UNDEFINED_EPOCH} below its first entry).
        """
        found = UNDEFINED_EPOCH
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found
