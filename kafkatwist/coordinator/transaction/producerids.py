"""
Producer ids, reserved a block at a time: on disk in C{producer-id-block}
of the first data directory (one broker), or -- through C{reserveBlock} --
in ZooKeeper's C{/latest_producer_id_block} (Kafka's ZooKeeper-mode
C{ProducerIdManager}), so a restart never hands out an id again and no two
brokers hand out the same id.
"""

from __future__ import annotations

import os
import threading

BLOCK_SIZE = 1000


class ProducerIdManager:
    """
    Hands out producer ids, reserving them on disk a block at a time.

    @param reserveBlock: C{reserveBlock(size)} reserves the next block
        durably and returns its first id (by default: the
        C{producer-id-block} file of C{directory}).
    """

    def __init__(self, directory: str | None = None, reserveBlock=None) -> None:
        self._lock = threading.Lock()
        if reserveBlock is None:
            self.path = os.path.join(directory, "producer-id-block")
            reserveBlock = self._reserveOnDisk
        self._reserveBlock = reserveBlock
        self._next = self._blockEnd = 0

    def _reserveOnDisk(self, size: int) -> int:
        start = max(self._readReserved(), self._blockEnd)
        self._reserve(start + size)
        return start

    def _readReserved(self) -> int:
        try:
            with open(self.path, encoding="ascii") as f:
                return int(f.read().strip() or 0)
        except FileNotFoundError:
            return 0

    def _reserve(self, end: int) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{end}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def nextId(self) -> int:
        with self._lock:
            if self._next >= self._blockEnd:
                start = self._reserveBlock(BLOCK_SIZE)
                self._next, self._blockEnd = start, start + BLOCK_SIZE
            producerId = self._next
            self._next += 1
            return producerId
