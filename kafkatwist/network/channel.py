"""
The RequestChannel between Processors and handler threads, and Kafka's
KIP-72 MemoryPool.

Processors never block: when the channel is full, or the pool is exhausted,
they keep the request (the connection stays muted) and are called back when
room appears.  Handler threads take requests in small batches so one wake-up
serves several requests.
"""

from __future__ import annotations

import queue
import threading
import time
from time import monotonic as _monotonic

from kafkatwist.protocol.header import RequestHeader


class Request:
    """
    One request on its way through the broker (Kafka's
    C{RequestChannel.Request}).

    @ivar frame: the bytes after the size prefix (released once handled).
    @ivar memory: bytes reserved from the L{MemoryPool}.
    @ivar timings: monotonic times for the request metrics: received,
        dequeued (by a handler), completed (response ready), sent.
    """

    __slots__ = (
        "processor",
        "connection",
        "context",
        "header",
        "frame",
        "memory",
        "receivedAt",
        "dequeuedAt",
        "completedAt",
        "handler",
    )

    def __init__(self, processor, connection, context, header: RequestHeader, frame, memory: int):
        self.processor = processor
        self.connection = connection
        self.context = context
        self.header = header
        self.frame = frame
        self.memory = memory
        self.receivedAt = _monotonic()
        self.dequeuedAt = 0.0
        self.completedAt = 0.0
        self.handler = None


class Response:
    """
    What goes back to the Processor: the chunks to write (size prefix and
    header included) or C{None} when no response is sent (acks=0), or
    C{close=True} to drop the connection.
    """

    __slots__ = ("request", "chunks", "close", "reason")

    def __init__(self, request: Request, chunks, close: bool = False, reason: str = "") -> None:
        self.request = request
        self.chunks = chunks
        self.close = close
        self.reason = reason


class MemoryPool:
    """
    Bounds the bytes held by queued requests (C{queued.max.request.bytes}).

    As Kafka's C{SimpleMemoryPool}, an allocation succeeds while any memory
    is left, so a request never waits for more than the pool holds.
    (Connections refuse frames larger than the whole pool before asking.)
    A capacity of 0 or less never refuses (Kafka's C{MemoryPool.NONE}).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity if capacity > 0 else -1
        self._available = capacity
        self._lock = threading.Lock()
        self._waiters: list = []

    @property
    def available(self) -> int:
        return self._available

    @property
    def used(self) -> int:
        return 0 if self.capacity < 0 else self.capacity - self._available

    def tryAllocate(self, size: int, waiter=None) -> bool:
        """
        Reserve C{size} bytes.

        @param waiter: called (from the releasing thread) once memory is
            available again, if this allocation failed.
        @return: whether the bytes were reserved.
        """
        if self.capacity < 0:
            return True
        with self._lock:
            if self._available > 0:
                self._available -= size
                return True
            if waiter is not None:
                self._waiters.append(waiter)
            return False

    def release(self, size: int) -> None:
        if self.capacity < 0 or size == 0:
            return
        with self._lock:
            self._available += size
            if self._available <= 0 or not self._waiters:
                return
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter()


class RequestChannel:
    """
    A bounded queue of L{Request}s (C{queued.max.requests}).

    Requests travel in lists of up to C{batchSize} through a C
    C{queue.SimpleQueue}: one put and one wake-up per list, and none of the
    pure-Python machinery of C{threading.Condition}, which dominated profiles
    of the hop.  The bound is a counter beside it.
    """

    def __init__(self, capacity: int, batchSize: int = 8) -> None:
        self.capacity = capacity
        self.batchSize = batchSize
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._count = 0
        self._lock = threading.Lock()
        self._blockedProcessors: list = []

    def __len__(self) -> int:
        return self._count

    def sendRequests(self, requests: list[Request], processor) -> int:
        """
        Enqueue as many of C{requests} as fit.

        @param processor: notified through C{processor.channelHasRoom()}
            once room appears, if not all fitted.
        @return: how many were accepted (a prefix of C{requests}).
        """
        n = len(requests)
        with self._lock:
            if self.capacity - self._count >= n:
                # (the usual case: all fit)
                self._count += n
                accepted = requests
            else:
                room = self.capacity - self._count
                accepted = requests[: max(room, 0)]
                self._count += len(accepted)
                if processor not in self._blockedProcessors:
                    self._blockedProcessors.append(processor)
        size = self.batchSize
        if len(accepted) <= size:
            if accepted:
                self._queue.put(accepted)
        else:
            for i in range(0, len(accepted), size):
                self._queue.put(accepted[i : i + size])
        return len(accepted)

    def sendCall(self, f, *args) -> None:
        """
        Have a handler thread run C{f(*args)}: work that must not run on a
        reactor thread (disk reads for a parked Fetch that expired, file
        reads for TLS).  Never refused, and not counted against the
        capacity: each call stands for a request already admitted.  Safe
        from any thread.
        """
        self._queue.put((f, args))

    def receiveRequests(self, timeout: float | None = None) -> list[Request] | tuple | None:
        """
        Block until a batch of requests (or a call) is queued.

        @return: the batch; a C{(f, args)} tuple from L{sendCall}; an empty
            list on timeout; C{None} once the channel is closed.
        """
        try:
            batch = self._queue.get(True, timeout)
        except queue.Empty:
            return []
        if batch is None or batch.__class__ is tuple:
            return batch
        with self._lock:
            self._count -= len(batch)
            blocked = self._blockedProcessors
            if blocked:
                self._blockedProcessors = []
        if len(batch) == 1:
            batch[0].dequeuedAt = time.monotonic()
        else:
            now = time.monotonic()
            for request in batch:
                request.dequeuedAt = now
        if blocked:
            for processor in blocked:
                processor.channelHasRoom()
        return batch

    def close(self, consumers: int = 1) -> None:
        """
        Tell C{consumers} handler threads to stop, once they have taken
        what is queued.
        """
        for _ in range(consumers):
            self._queue.put(None)
