"""
What the transaction machinery's requests to other brokers share (Kafka's
C{InterBrokerSendThread}s): a queue and a sender thread per destination
broker that drains the queue into one request at a time over its own
blocking connection (L{Destination}), and that connection, opened to the
broker's first advertised listener and kept until it fails
(L{connectedSender}).

Threads: a destination's thread owns its connection and the batch it
drained; the queue is the one object shared with the thread that fills it,
behind the destination's lock.  Answers are handed to a callable, from the
sender thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.logger import Logger

from kafkatwist.client.connection import BrokerConnection, KafkaConnectionError
from kafkatwist.util.owner import OwnerThread
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.logthrottle import LogThrottle

__all__ = ["Destination", "Destinations", "connectedSender", "openConnection"]

log = Logger()
E = ErrorCode

#: a dead broker is asked again every retry until the controller moves its
#: leaders: its lines are counted, not each logged
_sendLogs = LogThrottle()


class Destination:
    """
    One destination broker's queue and sender thread.

    @param send: C{send(entries)} -> one answer per entry, or C{None} if
        it answers them itself; called on the sender thread; raises
        L{KafkaError} when the broker could not be asked.
    @param failed: C{failed(entry, error)} -> the entry's answer when its
        request could not be made (C{error}: NETWORK_EXCEPTION, or
        UNKNOWN_SERVER_ERROR for a bug).
    @param answered: C{answered(entry, answer)}, on the sender thread.
    @param what: what is sent, for log lines ("transaction markers").
    """

    def __init__(self, brokerId: int, send: Callable, failed: Callable, answered: Callable,
                 name: str, what: str) -> None:
        self.brokerId = brokerId
        self._send = send
        self._failed = failed
        self._answered = answered
        self._what = what
        self._cond = threading.Condition()
        self._queue: list = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def enqueue(self, entry) -> None:
        with self._cond:
            self._queue.append(entry)
            self._cond.notify()

    def stop(self) -> None:
        """
        Stop the thread; what is queued is not answered.
        """
        with self._cond:
            self._stopped = True
            self._queue = []
            self._cond.notify()

    def join(self, timeout: float) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                entries, self._queue = self._queue, []
            try:
                answers = self._send(entries)
            except KafkaError as e:
                _sendLogs.emit(
                    log.info, (self._what, self.brokerId),
                    "{what} to broker {broker} not sent ({error}); they are retried",
                    what=self._what, broker=self.brokerId, error=e,
                )
                answers = [self._failed(entry, E.network_exception) for entry in entries]
            except Exception:
                log.failure("sending {what} to broker {broker} failed",
                            what=self._what, broker=self.brokerId)
                answers = [self._failed(entry, E.unknown_server_error) for entry in entries]
            if answers is None:
                continue  # answered by the sender
            for entry, answer in zip(entries, answers):
                self._answered(entry, answer)


class Destinations:
    """
    An owner thread (started here) and the destinations made on it, one
    per broker, until L{stop}.

    @param name: the owner thread's name; its senders' are C{<name>-to-<id>}.
    @param brokerId: this broker.
    @param image: returns the cluster's metadata (a
        L{kafkatwist.cluster.image.ClusterImage}); any thread.
    @param endpoint: C{endpoint(brokerId)} -> C{(host, port)} or C{None}
        (the L{IBrokerDirectory}).
    @param timeoutMs: C{request.timeout.ms}: how long a request may take.
    @param connect: builds a connected connection to a broker (tests).
    """

    def __init__(self, name: str, brokerId: int, image: Callable, endpoint: Callable,
                 timeoutMs: int, connect: Callable | None) -> None:
        self.name = name
        self.brokerId = brokerId
        self._image = image
        self._endpoint = endpoint
        self._timeout = timeoutMs / 1000.0
        self._connect = connect or self._openConnection
        self.owner = OwnerThread(name)
        # -- owned by the owner thread --
        self._destinations: dict[int, Destination] = {}
        self._stopped = False
        self._closed = threading.Event()
        self.owner.start()

    def _destination(self, brokerId: int, make: Callable) -> Destination:
        """
        On the owner: the destination of C{brokerId}, made by C{make()} the
        first time.
        """
        destination = self._destinations.get(brokerId)
        if destination is None:
            destination = self._destinations[brokerId] = make()
        return destination

    def _openConnection(self, brokerId: int) -> BrokerConnection:
        # The other side may wait up to timeoutMs before it answers.
        return openConnection(self._endpoint, brokerId, f"broker-{self.brokerId}-{self.name}",
                              self._timeout + 5)

    def stop(self) -> None:
        """
        Stop the senders and the owner; what is under way is not answered.
        """
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            destinations = self.owner.call(self._stopOwned, timeout=5)
        except Exception:
            destinations = []
        self.owner.stop()
        for destination in destinations:
            # A sender blocked on a dead broker is a daemon: not waited for.
            destination.join(1.0)

    def _stopOwned(self) -> list:
        self._stopped = True
        destinations = list(self._destinations.values())
        for destination in destinations:
            destination.stop()
        self._destinations.clear()
        return destinations


def openConnection(endpoint: Callable, brokerId: int, clientId: str,
                   timeout: float) -> BrokerConnection:
    """
    A connected L{BrokerConnection} to C{brokerId} (C{endpoint(brokerId)}
    -> C{(host, port)} or C{None}, the L{IBrokerDirectory}).

    @raise KafkaConnectionError: the broker is not alive or not reachable.
    """
    address = endpoint(brokerId)
    if address is None:
        raise KafkaConnectionError(f"broker {brokerId} is not alive")
    host, port = address
    connection = BrokerConnection(host, port, clientId=clientId, timeout=timeout)
    connection.connect()
    return connection


def connectedSender(connect: Callable, brokerId: int, request: Callable) -> Callable:
    """
    A L{Destination}'s C{send}: C{request(connection, entries)} over a
    connection to C{brokerId} made by C{connect(brokerId)} when there is
    none, closed when a request fails.
    """
    connection: list = [None]

    def send(entries: list):
        current = connection[0]
        if current is None or not current.connected:
            current = connection[0] = connect(brokerId)
        try:
            return request(current, entries)
        except KafkaError:
            current.close()
            raise

    return send
