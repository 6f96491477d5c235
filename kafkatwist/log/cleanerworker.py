"""
The cleaner process: where the on-disk log's cleaning passes do their work.

A pass is pure Python over every record of the dirty section, seconds of
CPU for a large log.  In the broker process it would hold the GIL against
the Processors and handler threads (each waiting up to the 5 ms switch
interval for it), which the produce latency would show; in a process of
its own it runs on another core and the broker only sees the swap.  Each
cleaner thread (C{log.cleaner.threads}) drives one such process, started on
first use and again if it dies.

The process reads the segments by path and writes the cleaned segment's
C{.cleaned} files beside them (L{kafkatwist.log.swap.CleanedSegment}); it
never renames or deletes anything else.  The cleaner thread swaps each
cleaned segment in and answers before the process starts the next one, so
at most one swap is ever in flight.  The process dies with its cleaner
thread (C{PR_SET_PDEATHSIG}), so after a crash of the broker nothing keeps
writing into its directories.

Protocol over the process's stdin/stdout: frames of a 4-byte big-endian
length and a pickle (both ends are this module).  Parent to child:
C{("clean", task, directory, options)}, then C{("continue",)} or
C{("stop",)} after each group.  Child to parent: C{("group", result)} per
cleaned segment, then C{("done", stats)}, C{("corrupt", message)} or
C{("error", message)}.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import struct
import subprocess
import sys

from kafkatwist.log.cleaning import CleaningAborted, Throttler, cleanLog
from kafkatwist.log.offsetmap import OffsetMap
from kafkatwist.log.segment import segmentFileName
from kafkatwist.log.swap import CleanedSegment
from kafkatwist.protocol.records import CorruptRecordError

__all__ = ["FileReader", "WorkerDied", "WorkerProcess", "main"]

_LENGTH = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1


class WorkerDied(Exception):
    """
    The cleaner process exited or broke the protocol.
    """


class FileReader:
    """
    C{pread} over a segment file opened by path.
    """

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def pread(self, n: int, position: int) -> bytes:
        return os.pread(self.fd, n, position)

    def close(self) -> None:
        os.close(self.fd)


def segmentOpener(directory: str):
    """
    @return: C{open_(sourceSegment)} for L{kafkatwist.log.cleaning.cleanLog}.
    """

    def open_(source):
        return FileReader(os.path.join(directory, segmentFileName(source.baseOffset, ".log")))

    return open_


def _send(stream, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_LENGTH.pack(len(data)) + data)
    stream.flush()


def _receive(stream):
    header = stream.read(_LENGTH.size)
    if len(header) < _LENGTH.size:
        raise EOFError("the other end closed")
    (length,) = _LENGTH.unpack(header)
    data = stream.read(length)
    if len(data) < length:
        raise EOFError("the other end closed mid-message")
    return pickle.loads(data)


class WorkerProcess:
    """
    The cleaner thread's end: starts the process and runs passes in it.

    @param cpus: CPUs the process may run on (C{None}: any).
    """

    def __init__(self, cpus: frozenset[int] | None = None) -> None:
        self.cpus = cpus
        self._process: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _start(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            env = dict(os.environ)
            # Its own random hash key, so no one can precompute collisions
            # of the dedupe map's key hashes.
            env.pop("PYTHONHASHSEED", None)
            # Where this process found kafkatwist, however it was started.
            env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
            args = [sys.executable, "-m", "kafkatwist.log.cleanerworker", str(os.getpid())]
            if self.cpus:
                args.append(",".join(map(str, sorted(self.cpus))))
            self._process = subprocess.Popen(
                args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, close_fds=True
            )
        return self._process

    def clean(self, task, directory: str, options: dict, onGroup):
        """
        Run one pass in the process.

        @param onGroup: C{onGroup(result)} -> whether to go on; called for
            every cleaned segment once its files are complete.
        @return: the L{kafkatwist.log.cleaning.CleaningStats}.
        @raise CorruptRecordError: the log has a damaged batch.
        @raise WorkerDied: the process died (it is restarted next time).
        """
        process = self._start()
        self._talk(process, _send, process.stdin, ("clean", task, directory, options))
        while True:
            message = self._talk(process, _receive, process.stdout)
            kind = message[0]
            if kind == "group":
                going = onGroup(message[1])
                self._talk(process, _send, process.stdin, ("continue",) if going else ("stop",))
            elif kind == "done":
                return message[1]
            elif kind == "aborted":
                raise CleaningAborted(message[1])
            elif kind == "corrupt":
                raise CorruptRecordError(message[1])
            else:
                raise WorkerDied(f"cleaner process failed: {message[1]}")

    def _talk(self, process, operation, *args):
        try:
            return operation(*args)
        except (OSError, EOFError, pickle.UnpicklingError) as e:
            self.kill()
            raise WorkerDied(f"cleaner process {process.pid} died: {e}") from None

    def kill(self) -> None:
        """
        Stop the process at once (shutdown, or a broken pass).
        """
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.kill()
        except OSError:
            pass
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass


def _dieWithParent(parentPid: int) -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parentPid:
        os._exit(1)


def _pass(stdin, stdout, task, directory: str, options: dict) -> None:
    offsetMap = OffsetMap(options["mapBytes"], options["loadFactor"])
    stopped = []

    def onGroup(sink, result) -> None:
        _send(stdout, ("group", result))
        if _receive(stdin)[0] != "continue":
            stopped.append(result.baseOffset)
            raise CleaningAborted(f"stopped after the segment at {result.baseOffset}")

    def newSink(baseOffset: int) -> CleanedSegment:
        return CleanedSegment(directory, baseOffset, task.nowMs)

    try:
        stats = cleanLog(
            task,
            offsetMap,
            segmentOpener(directory),
            newSink,
            onGroup,
            chunkSize=options["chunkSize"],
            throttler=Throttler(options["bytesPerSecond"]),
        )
    except CleaningAborted as e:
        _send(stdout, ("aborted", str(e)))
    except CorruptRecordError as e:
        _send(stdout, ("corrupt", str(e)))
    except Exception as e:  # noqa: BLE001 - reported to the broker, which logs it
        _send(stdout, ("error", f"{type(e).__name__}: {e}"))
    else:
        _send(stdout, ("done", stats))


def main(argv: list[str]) -> None:
    _dieWithParent(int(argv[0]))
    # A Ctrl-C at the terminal reaches the whole process group: the broker
    # stops this process itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if len(argv) > 1:
        try:
            os.sched_setaffinity(0, {int(cpu) for cpu in argv[1].split(",")})
        except (OSError, ValueError):
            pass
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the protocol stream.
    sys.stdout = sys.stderr
    while True:
        try:
            message = _receive(stdin)
        except EOFError:
            return
        if message[0] == "clean":
            _, task, directory, options = message
            _pass(stdin, stdout, task, directory, options)


if __name__ == "__main__":
    main(sys.argv[1:])
