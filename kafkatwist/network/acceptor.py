"""
The Acceptor: a listening socket on the main reactor that accepts, enforces
connection quotas (L{kafkatwist.network.connectionquotas}), and hands
sockets round-robin to the Processors (Kafka's C{SocketServer.Acceptor}).
It never reads a byte of a connection itself, and never blocks: where
Kafka's acceptor thread waits (a connection creation rate over its limit)
this one stops reading its socket and a reactor timer admits the
connection and resumes.
"""

from __future__ import annotations

import errno
import socket

from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.util.logthrottle import connectionLogs
from kafkatwist.network.connectionquotas import ConnectionQuotas
from kafkatwist.network.transport import tuneSocket

__all__ = ["Acceptor", "ConnectionQuotas"]

log = Logger()

#: accept() calls per wake-up before letting the reactor serve others
ACCEPTS_PER_READ = 64
#: pause after EMFILE/ENFILE, when accept() would otherwise busy-loop
DESCRIPTOR_BACKOFF_SECONDS = 0.1


@implementer(IReadDescriptor)
class Acceptor:
    """
    @ivar port: the bound port (useful with port 0 in tests).
    """

    def __init__(self, reactor, listener, processors, quotas: ConnectionQuotas,
                 sendBuffer: int = -1, receiveBuffer: int = -1, backlog: int = 1024) -> None:
        self.reactor = reactor
        self.listener = listener
        self.processors = processors
        self.quotas = quotas
        self.sendBuffer = sendBuffer
        self.receiveBuffer = receiveBuffer
        self._next = 0
        family = socket.AF_INET6 if ":" in listener.host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((listener.host, listener.port))
        self.socket.listen(backlog)
        self.socket.setblocking(False)
        self.port = self.socket.getsockname()[1]
        self._fd = self.socket.fileno()
        self._reading = False
        self._resumeCall = None
        #: the socket held back by a connection creation rate
        self._held = None
        #: sockets over their ip's connection_creation_rate -> the timer
        #: that closes them
        self._throttled: dict = {}

    def startListening(self) -> None:
        self._reading = True
        self.reactor.addReader(self)

    def stopListening(self) -> None:
        if self._resumeCall is not None and self._resumeCall.active():
            self._resumeCall.cancel()
        self._resumeCall = None
        if self._held is not None:
            self._held[0].close()
            self._held = None
        for sock, call in self._throttled.items():
            if call.active():
                call.cancel()
            sock.close()
        self._throttled = {}
        if self._reading:
            self._reading = False
            self.reactor.removeReader(self)
        if self._fd != -1:
            self.socket.close()
            self._fd = -1

    # IReadDescriptor

    def fileno(self) -> int:
        return self._fd

    def logPrefix(self) -> str:
        return f"Acceptor({self.listener})"

    def connectionLost(self, reason) -> None:
        self.stopListening()

    def doRead(self) -> None:
        for _ in range(ACCEPTS_PER_READ):
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warn(
                        "{listener}: cannot accept ({error}); pausing accepts",
                        listener=self.listener,
                        error=e.strerror,
                    )
                    self._pauseAccepting()
                    return
                if e.errno in (errno.ECONNABORTED, errno.EINTR, errno.EPROTO):
                    continue
                raise
            host = address[0]
            delayMs = self.quotas.acceptDelayMs(self.listener.name)
            if delayMs > 0:
                # Over max.connection.creation.rate: this connection waits,
                # and so does every later one (the backlog keeps them).
                self._held = (sock, host)
                self._pause(delayMs / 1000.0)
                return
            self._admit(sock, host)

    def _admit(self, sock, host: str) -> None:
        throttleMs = self.quotas.ipThrottleMs(self.listener.name, host)
        if throttleMs > 0:
            connectionLogs.emit(
                log.info, ("throttled", host, self.listener.name),
                "Closing connection from {host} on {listener} in {delay} ms: over its "
                "connection_creation_rate",
                host=host,
                listener=self.listener,
                delay=throttleMs,
            )
            self._throttled[sock] = self.reactor.callLater(throttleMs / 1000.0, self._closeThrottled, sock)
            return
        refused = self.quotas.tryAcquire(host)
        if refused is not None:
            connectionLogs.emit(
                log.info, ("refused", host, refused),
                "Refused connection from {host} on {listener}: {why}",
                host=host,
                listener=self.listener,
                why=refused,
            )
            sock.close()
            return
        try:
            tuneSocket(sock, self.sendBuffer, self.receiveBuffer)
        except OSError:
            self.quotas.release(host)
            sock.close()
            return
        # The list may have shrunk since (num.network.threads).
        processors = self.processors
        processor = processors[self._next % len(processors)]
        self._next = (self._next + 1) % len(processors)
        processor.accept(sock, self.listener, host)

    def _closeThrottled(self, sock) -> None:
        del self._throttled[sock]
        sock.close()

    def _pauseAccepting(self) -> None:
        self._pause(DESCRIPTOR_BACKOFF_SECONDS)

    def _pause(self, seconds: float) -> None:
        if self._reading:
            self._reading = False
            self.reactor.removeReader(self)
            self._resumeCall = self.reactor.callLater(seconds, self._resume)

    def _resume(self) -> None:
        self._resumeCall = None
        held, self._held = self._held, None
        if held is not None:
            self._admit(*held)
        if self._fd != -1 and not self._reading:
            self._reading = True
            self.reactor.addReader(self)
