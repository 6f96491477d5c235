"""
Kafka's C{.lock} in each data directory: taken at start-up, before anything
is written there, so a second broker on the same directory stops with one
line instead of writing into the first one's files.

The lock is an C{flock} on C{<dir>/.lock}, the same file and kind of lock
the log manager holds for the broker's life; C{flock} locks belong to the
open file, so they survive twistd's fork into the background.  Because two
open files conflict even within one process, L{DataDirLock.handOver}
releases it just before the log manager takes its own.
"""

from __future__ import annotations

import fcntl
import os

from kafkatwist.util.startup import StartupError

LOCK_FILE = ".lock"


class DataDirInUse(StartupError):
    """
    Another process holds a data directory's C{.lock}.
    """

    def __init__(self, directory: str, holder: str | None) -> None:
        self.directory = directory
        who = f"pid {holder}" if holder else "another process"
        super().__init__(
            f"data directory {directory} is in use by another broker ({who} holds its {LOCK_FILE})"
        )


class DataDirLock:
    """
    The C{.lock} of every directory in C{log.dirs}, held together.
    """

    def __init__(self, directories: list[str]) -> None:
        self.directories = [os.path.abspath(d) for d in directories]
        self._fds: list[int] = []

    def acquire(self) -> None:
        """
        Create the directories if missing and lock each one, or lock none.

        @raise DataDirInUse: another process holds one of them.
        @raise OSError: a directory cannot be created or written.
        """
        try:
            for directory in self.directories:
                os.makedirs(directory, exist_ok=True)
                self._fds.append(_lock(directory))
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def handOver(self) -> None:
        """
        Release the locks for the log manager to take: it locks the same
        files itself, and an C{flock} held here would refuse it.
        """
        self.release()

    def probe(self) -> None:
        """
        Whether another process holds one of the directories, writing
        nothing (a missing C{.lock} is not created): checked before any
        port is bound.

        @raise DataDirInUse: one is held.
        """
        for directory in self.directories:
            try:
                fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDONLY)
            except OSError:
                continue  # no lock file (yet), or unreadable: acquire() says
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _readHolder(fd)
                raise DataDirInUse(directory, holder) from None
            finally:
                os.close(fd)

    def check(self) -> None:
        """
        After the log manager failed to open: if another process has taken a
        directory since L{handOver}, say so.

        @raise DataDirInUse: it has.
        """
        probe = DataDirLock(self.directories)
        probe.acquire()
        probe.release()


def _lock(directory: str) -> int:
    path = os.path.join(directory, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _readHolder(fd)
        os.close(fd)
        raise DataDirInUse(directory, holder) from None
    except BaseException:
        os.close(fd)
        raise
    # Kafka leaves the file empty; the holder's pid makes the refusal
    # above name who to look for.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _readHolder(fd: int) -> str | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if text.isdigit() else None
