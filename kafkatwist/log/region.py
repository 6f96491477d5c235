"""
L{IFileRegion}: a byte range of a segment, owning a duplicate descriptor.

The region holds an C{os.dup} of the segment's descriptor, so neither the
handle cache closing the segment's own descriptor nor retention unlinking the
file can break a send that is still pending: the kernel keeps the inode
alive until the last descriptor is closed.
"""

from __future__ import annotations

import os
import threading

from zope.interface import implementer

from kafkatwist.interfaces import IFileRegion

__all__ = ["FileRegion", "readRecords"]


@implementer(IFileRegion)
class FileRegion:
    """
    C{length} bytes at C{position} of the file open on C{fd}.

    @param fd: a descriptor this region owns and closes.
    """

    def __init__(self, fd: int, position: int, length: int) -> None:
        self._fd = fd
        self._position = position
        self.length = length
        self._closeLock = threading.Lock()

    def __repr__(self) -> str:
        return f"<FileRegion fd={self._fd} position={self._position} length={self.length}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def fileno(self) -> int:
        if self._fd is None:
            raise ValueError("region is closed")
        return self._fd

    def position(self) -> int:
        return self._position

    def read(self) -> bytes:
        fd = self.fileno()
        data = os.pread(fd, self.length, self._position)
        # pread may return short on some filesystems; loop until complete.
        while len(data) < self.length:
            more = os.pread(fd, self.length - len(data), self._position + len(data))
            if not more:
                raise OSError(f"region truncated: {len(data)} of {self.length} bytes")
            data += more
        return data

    def close(self) -> None:
        with self._closeLock:
            fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:
        # A safety net: a region dropped without close() must not leak its
        # descriptor (hundreds of fetches per second would exhaust them).
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            try:
                os.close(fd)
            except OSError:
                pass


def readRecords(records) -> bytes:
    """
    The bytes of a L{kafkatwist.log.ReadInfo}'s C{records}: bytes as they
    are, a region read and closed.  For the few readers that decode records
    (ListOffsets by timestamp, loading group state), never for Fetch.
    """
    if isinstance(records, (bytes, bytearray, memoryview)):
        return bytes(records)
    try:
        return records.read()
    finally:
        records.close()
