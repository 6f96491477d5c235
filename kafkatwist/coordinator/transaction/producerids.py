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

from twisted.python.failure import Failure

BLOCK_SIZE = 1000


class ProducerIdManager:
    """
    Hands out producer ids, reserving them on disk a block at a time.

    @param reserveBlock: C{reserveBlock(size)} reserves the next block
        durably and returns its first id (by default: the
        C{producer-id-block} file of C{directory}).
    """

    def __init__(self, directory: str | None = None, reserveBlock=None, reserveBlockLater=None) -> None:
        self._lock = threading.Lock()
        if reserveBlock is None:
            self.path = os.path.join(directory, "producer-id-block")
            reserveBlock = self._reserveOnDisk
        self._reserveBlock = reserveBlock
        #: C{reserveBlockLater(size, onDone)}: reserve without waiting,
        #: C{onDone(start, error)} on any thread (in a cluster: ZooKeeper,
        #: through the cluster's owner); C{None}: L{nextIdLater} reserves in
        #: place (the file)
        self._reserveBlockLater = reserveBlockLater
        #: callers of L{nextIdLater} waiting for the block being reserved
        self._waiting: list = []
        self._reserving = False
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

    def nextIdLater(self, onDone) -> None:
        """
        C{onDone(producerId)}, or C{onDone(Failure)}: at once while the
        current block lasts; when it is used up, once the next one is
        reserved -- without the caller waiting for ZooKeeper in a cluster
        (C{onDone} then runs on the cluster's owner thread).
        """
        if self._reserveBlockLater is None:
            try:
                producerId = self.nextId()
            except Exception:
                onDone(Failure())
                return
            onDone(producerId)
            return
        with self._lock:
            if self._next < self._blockEnd:
                producerId = self._next
                self._next += 1
            else:
                producerId = None
                self._waiting.append(onDone)
                if self._reserving:
                    return
                self._reserving = True
        if producerId is not None:
            onDone(producerId)
            return
        self._reserveBlockLater(BLOCK_SIZE, self._reserved)

    def _reserved(self, start, error) -> None:
        handed = []
        with self._lock:
            waiting, self._waiting = self._waiting, []
            if error is None:
                self._next, self._blockEnd = start, start + BLOCK_SIZE
                for onDone in waiting:
                    if self._next < self._blockEnd:
                        handed.append((onDone, self._next))
                        self._next += 1
                    else:
                        self._waiting.append(onDone)
            self._reserving = bool(self._waiting) and error is None
            again = self._reserving
        if error is not None:
            for onDone in waiting:
                onDone(Failure(error))
            return
        for onDone, producerId in handed:
            onDone(producerId)
        if again:
            self._reserveBlockLater(BLOCK_SIZE, self._reserved)
