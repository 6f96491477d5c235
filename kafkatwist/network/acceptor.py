"""
The Acceptor: a listening socket on the main reactor that accepts, enforces
connection quotas, and hands sockets round-robin to the Processors (Kafka's
C{SocketServer.Acceptor}).  It never reads a byte of a connection itself.
"""

from __future__ import annotations

import errno
import socket
import threading
from collections import Counter

from twisted.internet.interfaces import IReadDescriptor
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.logthrottle import connectionLogs
from kafkatwist.network.transport import tuneSocket

log = Logger()

#: accept() calls per wake-up before letting the reactor serve others
ACCEPTS_PER_READ = 64
#: pause after EMFILE/ENFILE, when accept() would otherwise busy-loop
DESCRIPTOR_BACKOFF_SECONDS = 0.1


class ConnectionQuotas:
    """
    C{max.connections}, C{max.connections.per.ip} and its per-address
    C{max.connections.per.ip.overrides}, counted at accept time and
    released when a Processor sees the connection close.  Thread-safe.
    """

    def __init__(self, maxConnections: int, maxPerIp: int, overrides=None) -> None:
        self.maxConnections = maxConnections
        self.maxPerIp = maxPerIp
        self.overrides: dict[str, int] = dict(overrides or {})
        self._lock = threading.Lock()
        self._perIp: Counter[str] = Counter()
        self.total = 0

    def tryAcquire(self, host: str) -> str | None:
        """
        @return: C{None} if the connection may proceed, else why not.
        """
        with self._lock:
            if self.total >= self.maxConnections:
                return f"max.connections={self.maxConnections} reached"
            limit = self.overrides.get(host)
            if limit is not None:
                if self._perIp[host] >= limit:
                    return f"max.connections.per.ip.overrides={host}:{limit} reached"
            elif self._perIp[host] >= self.maxPerIp:
                return f"max.connections.per.ip={self.maxPerIp} reached for {host}"
            self.total += 1
            self._perIp[host] += 1
            return None

    def release(self, host: str) -> None:
        with self._lock:
            if self._perIp[host] <= 0:
                return
            self.total -= 1
            self._perIp[host] -= 1
            if not self._perIp[host]:
                del self._perIp[host]

    def update(self, maxConnections: int, maxPerIp: int, overrides=None) -> None:
        """
        New limits (a dynamic update): connections above them stay, new
        ones wait until the count is under.
        """
        with self._lock:
            self.maxConnections, self.maxPerIp = maxConnections, maxPerIp
            self.overrides = dict(overrides or {})

    def count(self, host: str) -> int:
        with self._lock:
            return self._perIp[host]


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

    def startListening(self) -> None:
        self._reading = True
        self.reactor.addReader(self)

    def stopListening(self) -> None:
        if self._resumeCall is not None and self._resumeCall.active():
            self._resumeCall.cancel()
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
                continue
            try:
                tuneSocket(sock, self.sendBuffer, self.receiveBuffer)
            except OSError:
                self.quotas.release(host)
                sock.close()
                continue
            # The list may have shrunk since (num.network.threads).
            processors = self.processors
            processor = processors[self._next % len(processors)]
            self._next = (self._next + 1) % len(processors)
            processor.accept(sock, self.listener, host)

    def _pauseAccepting(self) -> None:
        if self._reading:
            self._reading = False
            self.reactor.removeReader(self)
            self._resumeCall = self.reactor.callLater(DESCRIPTOR_BACKOFF_SECONDS, self._resume)

    def _resume(self) -> None:
        self._resumeCall = None
        if self._fd != -1 and not self._reading:
            self._reading = True
            self.reactor.addReader(self)
