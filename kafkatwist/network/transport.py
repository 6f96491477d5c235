"""
Kafka's transport layers: how a connection's bytes reach the socket.

L{PlaintextTransportLayer} writes straight to the socket when Twisted's
buffer is empty (one C{sendmsg}, no extra reactor round trip) and sends record
data from segment files with C{os.sendfile}, so it never passes through
Python.  L{SslTransportLayer} hands everything to Twisted's TLS protocol,
reading file regions into memory first, as Kafka's C{SslTransportLayer}
must -- in bounded chunks, read on a request handler thread (no disk I/O on
a Processor), one chunk ahead of the socket and no further.

Both expose the same small surface to L{KafkaConnection}: C{writeChunks},
C{transferFrom}, C{whenFlushed}, C{principal}.
"""

from __future__ import annotations

import errno
import os
import socket
from functools import partial

from twisted.internet.interfaces import IPullProducer
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.security.sslprincipal import defaultSslPrincipal

log = Logger()

ANONYMOUS = "User:ANONYMOUS"

_WOULD_BLOCK = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)
#: (Linux; 0 where the flag does not exist: the head then has its own segment)
_MSG_MORE = getattr(socket, "MSG_MORE", 0)

#: bytes of a file region read (and encrypted) at a time for TLS: a slow TLS
#: consumer holds about two of these (one being sent, one read ahead), not
#: its whole C{fetch.max.bytes}; large enough that the hop to a handler
#: thread per chunk is noise next to encrypting it
TLS_READ_CHUNK = 256 * 1024


@implementer(IPullProducer)
class _FlushWaiter:
    """
    A pull producer registered on a TCP transport only to be told when its
    write buffer has drained and the socket is writable again: Twisted's
    C{doWrite} calls C{resumeProducing} exactly then.
    """

    def __init__(self, layer: "PlaintextTransportLayer") -> None:
        self.layer = layer
        self.registering = False

    def resumeProducing(self) -> None:
        if not self.registering:
            self.layer._flushed()

    def stopProducing(self) -> None:
        self.layer._stopped()


class PlaintextTransportLayer:
    """
    Direct socket writes and C{sendfile} for a C{tcp.Server} transport.
    """

    securityProtocol = "PLAINTEXT"
    principal = ANONYMOUS

    def __init__(self, transport) -> None:
        self.transport = transport
        self._socket = transport.socket
        self._fd = transport.fileno()
        self._waiter: _FlushWaiter | None = None
        self._onFlushed = None

    def _buffered(self) -> int:
        t = self.transport
        return len(t.dataBuffer) - t.offset + t._tempDataLen

    def writeChunks(self, chunks) -> int:
        """
        Send as much of a run of bytes-like C{chunks} as the socket takes
        now, in one C{sendmsg} and without buffering: a response's header
        and body leave in one segment rather than one C{send} (and one
        wake-up of the client) each.

        @return: bytes written, counted over the chunks in order; less than
            their total means call L{whenFlushed} and try the rest later; -1
            if the connection broke.
        """
        t = self.transport
        if len(t.dataBuffer) - t.offset + t._tempDataLen:  # (_buffered, inline)
            return 0
        try:
            return self._socket.sendmsg(chunks)
        except OSError as e:
            if e.errno in _WOULD_BLOCK:
                return 0
            return -1

    def writeBefore(self, chunk) -> int:
        """
        L{writeChunks} of one bytes-like C{chunk} that more data (a file
        region's C{sendfile}) follows at once: sent with C{MSG_MORE}, so
        that the kernel puts it in the same segment as what follows rather
        than in a segment of its own (one packet, and one wake-up of the
        client, fewer per Fetch answer).
        """
        t = self.transport
        if len(t.dataBuffer) - t.offset + t._tempDataLen:  # (_buffered, inline)
            return 0
        try:
            return self._socket.send(chunk, _MSG_MORE)
        except OSError as e:
            if e.errno in _WOULD_BLOCK:
                return 0
            return -1

    def transferFrom(self, region, position: int, count: int) -> int | None:
        """
        C{sendfile} up to C{count} bytes of C{region} from file offset
        C{position}.

        @return: bytes sent; C{None} if the socket is full; 0 at the end of
            the file (the region was truncated); -1 if the connection broke.
        """
        t = self.transport
        if len(t.dataBuffer) - t.offset + t._tempDataLen:  # (_buffered, inline)
            return None
        try:
            return os.sendfile(self._fd, region.fileno(), position, count)
        except OSError as e:
            if e.errno in _WOULD_BLOCK:
                return None
            return -1

    def whenFlushed(self, callback) -> None:
        """
        Call C{callback()} once the socket can take more data.
        """
        self._onFlushed = callback
        if self._waiter is None:
            self._waiter = _FlushWaiter(self)
            self._waiter.registering = True
            try:
                self.transport.registerProducer(self._waiter, False)
            finally:
                self._waiter.registering = False
        self.transport.startWriting()

    def _flushed(self) -> None:
        callback, self._onFlushed = self._onFlushed, None
        if self._waiter is not None:
            self._waiter = None
            self.transport.unregisterProducer()
        if callback is not None:
            callback()

    def _stopped(self) -> None:
        self._waiter = None
        self._onFlushed = None


class BufferedTransportLayer:
    """
    Everything through the transport's own buffered C{write}: any
    C{ITransport} (Twisted's fakes in tests, and TLS below).
    """

    securityProtocol = "PLAINTEXT"

    def __init__(self, transport) -> None:
        self.transport = transport
        self.principal = ANONYMOUS

    def writeChunks(self, chunks) -> int:
        write = self.transport.write
        for chunk in chunks:
            write(bytes(chunk) if isinstance(chunk, memoryview) else chunk)
        return sum(len(chunk) for chunk in chunks)

    def writeBefore(self, chunk) -> int:
        return self.writeChunks((chunk,))

    def transferFrom(self, region, position: int, count: int) -> int | None:
        data = os.pread(region.fileno(), count, position)
        if data:
            self.transport.write(data)
        return len(data)

    def whenFlushed(self, callback) -> None:
        # The transport buffers everything it is given; backpressure comes
        # through the streaming producer the connection registers.
        callback()

    def setWritePaused(self, paused: bool) -> None:
        """
        The transport asked the connection to stop (or resume) producing.
        """


def _preadAndClose(fd: int, count: int, position: int) -> bytes:
    try:
        return os.pread(fd, count, position)
    finally:
        os.close(fd)


class SslTransportLayer(BufferedTransportLayer):
    """
    Everything through Twisted's C{TLSMemoryBIOProtocol}; the principal comes
    from the client certificate once the handshake completed.

    Record data is read from the file in chunks of L{TLS_READ_CHUNK} on a
    handler thread (C{offload}) and written to the TLS transport one chunk
    at a time: the next chunk is read while the previous one is sent, and
    none is written while the transport has asked to pause (its socket is
    backed up).

    @param principalBuilder: client certificate -> C{User:...}
        (L{kafkatwist.security.sslprincipal.SslPrincipalBuilder}).
    @param offload: C{offload(f, args, then)} runs C{f(*args)} on a thread
        that may touch the disk, then C{then(result or exception)} on this
        connection's thread.
    """

    securityProtocol = "SSL"

    def __init__(self, transport, offload, principalBuilder=defaultSslPrincipal) -> None:
        super().__init__(transport)
        self._offload = offload
        self._principalBuilder = principalBuilder
        self._writePaused = False
        self._onFlushed = None
        self._reading = False
        #: the chunk read ahead: (region, position, bytes or OSError)
        self._ready = None

    def transferFrom(self, region, position: int, count: int) -> int | None:
        """
        Write the next chunk of C{region} if it has been read.

        @return: bytes written; C{None} while the chunk is being read (call
            L{whenFlushed}); 0 at the end of the file; -1 if it could not be
            read.
        """
        ready, self._ready = self._ready, None
        if ready is not None and ready[0] is region and ready[1] == position:
            data = ready[2]
            if isinstance(data, Exception):
                return -1
            if data:
                self.transport.write(data)
                if len(data) < count:
                    self._startRead(region, position + len(data), count - len(data))
            return len(data)
        if not self._reading:
            self._startRead(region, position, count)
        return None

    def _startRead(self, region, position: int, count: int) -> None:
        self._reading = True
        # The read gets its own descriptor: the region may be closed here
        # (connection lost) while the read is under way elsewhere.
        try:
            fd = os.dup(region.fileno())
        except OSError as e:
            self._readDone(region, position, e)
            return
        self._offload(
            _preadAndClose,
            (fd, min(count, TLS_READ_CHUNK), position),
            partial(self._readDone, region, position),
        )

    def _readDone(self, region, position: int, result) -> None:
        self._reading = False
        if isinstance(result, Exception):
            log.error(
                "Reading record data at {position} for a TLS response failed: {error}",
                position=position,
                error=result,
            )
        self._ready = (region, position, result)
        self._maybeFlushed()

    def whenFlushed(self, callback) -> None:
        """
        Call C{callback()} once the chunk read ahead is there and the
        transport takes data.
        """
        self._onFlushed = callback
        self._maybeFlushed()

    def setWritePaused(self, paused: bool) -> None:
        self._writePaused = paused
        if not paused:
            self._maybeFlushed()

    def _maybeFlushed(self) -> None:
        if self._onFlushed is None or self._writePaused or self._reading:
            return
        callback, self._onFlushed = self._onFlushed, None
        callback()

    def handshakeCompleted(self) -> None:
        certificate = self.transport.getPeerCertificate()
        if certificate is not None:
            # Kafka's name for it; raises NoMatchingRule when no
            # ssl.principal.mapping.rules rule applies.
            self.principal = self._principalBuilder(certificate)


def tuneSocket(sock: socket.socket, sendBuffer: int, receiveBuffer: int) -> None:
    """
    Kafka's accept-time socket settings: no Nagle delay (small responses
    would otherwise wait for the client's delayed ACK), buffer sizes.
    """
    sock.setblocking(False)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if sendBuffer > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sendBuffer)
    if receiveBuffer > 0:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receiveBuffer)
