"""
Taking a transaction's end markers to the leaders of its partitions
(Kafka's C{TransactionMarkerChannelManager}): the transaction coordinator
hands over one transaction's marker at a time (L{MarkerChannel.write}); the
channel finds each partition's current leader in the cluster's metadata,
queues the marker per destination broker, and each destination sends
everything queued for it as one WriteTxnMarkers request (v1, the version
Kafka 3.x brokers use between themselves), with markers of several
transactions in it.  The answers go back per transaction:
C{onDone({(topic, partition): error or None})}.

One attempt per call: what is retried, and when, is the coordinator's
decision (L{kafkatwist.coordinator.transaction.coordinator}), and every
retry comes back here, so it is routed with fresh metadata.  A partition
without a leader answers NOT_LEADER_OR_FOLLOWER, a lost connection
NETWORK_EXCEPTION for every partition of the request (both retried); a
partition whose topic no longer exists (or is being deleted) answers
C{None}: no marker is needed there (Kafka drops it from the transaction).

Partitions this broker leads take the in-process path: the same
L{kafkatwist.coordinator.transaction.markers.MarkerWriter} the
WriteTxnMarkers handler uses, so the same checks (leadership, epochs,
C{min.insync.replicas}) and the same wait for the ISR.

Threads: the channel's state (transactions waiting for answers, the
destinations) belongs to its owner thread C{kafkatwist-txn-markers};
L{MarkerChannel.write} hands work to it from any thread.  Each destination
broker has a sender thread (C{kafkatwist-txn-markers-to-<id>}) owning its
queue's drained batch and its blocking connection; the local destination's
sender does the in-process disk writes.  Senders hand their answers back to
the owner; nothing is shared but each destination's lock-protected queue.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.client.connection import BrokerConnection, KafkaConnectionError
from kafkatwist.cluster.owner import OwnerThread
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import ITxnMarkerChannel
from kafkatwist.logthrottle import LogThrottle
from kafkatwist.protocol.apis import WRITE_TXN_MARKERS, requestType
from kafkatwist.protocol.entities import make, nested

__all__ = ["LocalMarkerChannel", "MarkerChannel", "WRITE_TXN_MARKERS_VERSION"]

log = Logger()
E = ErrorCode

#: what Kafka 3.x brokers send each other (C{writeTxnMarkersRequestVersion}
#: from IBP 2.8 on)
WRITE_TXN_MARKERS_VERSION = 1

NO_LEADER = -1

#: a dead broker is asked again every retry until the controller moves its
#: leaders: its lines are counted, not each logged
_sendLogs = LogThrottle()


@implementer(ITxnMarkerChannel)
class LocalMarkerChannel:
    """
    One broker: every partition is local, and the log manager is the
    metadata (a partition without a log was deleted).

    @param writer: the L{MarkerWriter}.
    """

    def __init__(self, writer) -> None:
        self.writer = writer

    def write(self, producerId, producerEpoch, commit, coordinatorEpoch, partitions, onDone):
        def written(results: dict) -> None:
            onDone({
                tp: None if error == E.unknown_topic_or_partition else error
                for tp, error in results.items()
            })

        self.writer.write(producerId, producerEpoch, commit, coordinatorEpoch, partitions, written)

    def stop(self) -> None:
        pass


class _Marker:
    """
    One transaction's marker, waiting for the answers of its partitions
    (on the owner).
    """

    __slots__ = ("producerId", "producerEpoch", "commit", "coordinatorEpoch", "onDone",
                 "results", "waiting")

    def __init__(self, producerId, producerEpoch, commit, coordinatorEpoch, onDone) -> None:
        self.producerId = producerId
        self.producerEpoch = producerEpoch
        self.commit = commit
        self.coordinatorEpoch = coordinatorEpoch
        self.onDone = onDone
        self.results: dict = {}
        self.waiting = 0


class _Destination:
    """
    One destination broker's queue and sender thread.

    @param send: C{send(entries)} -> C{[{tp: error}]}, one per entry, or
        C{None} if it answers them itself; called on the sender thread;
        raises L{KafkaConnectionError} when the broker could not be asked.
    @param answered: C{answered(entry, results)}, any thread.
    """

    def __init__(self, brokerId: int, send: Callable, answered: Callable, name: str) -> None:
        self.brokerId = brokerId
        self._send = send
        self._answered = answered
        self._cond = threading.Condition()
        self._queue: list = []
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def enqueue(self, entry) -> None:
        with self._cond:
            self._queue.append(entry)
            self._cond.notify()

    def stop(self) -> list:
        with self._cond:
            self._stopped = True
            left, self._queue = self._queue, []
            self._cond.notify()
        return left

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
                    log.info, ("unsent", self.brokerId),
                    "transaction markers to broker {broker} not sent ({error}); they are retried",
                    broker=self.brokerId, error=e,
                )
                answers = [{tp: E.network_exception for tp in partitions}
                           for _, partitions in entries]
            except Exception:
                log.failure("sending transaction markers to broker {broker} failed",
                            broker=self.brokerId)
                answers = [{tp: E.unknown_server_error for tp in partitions}
                           for _, partitions in entries]
            if answers is None:
                continue  # answered by the writer
            for entry, results in zip(entries, answers):
                self._answered(entry, results)


@implementer(ITxnMarkerChannel)
class MarkerChannel:
    """
    A cluster's marker channel.

    @param brokerId: this broker.
    @param image: returns the current cluster metadata (a
        L{kafkatwist.cluster.image.ClusterImage}); any thread.
    @param writer: the in-process L{MarkerWriter} for local partitions.
    @param endpoint: C{endpoint(brokerId)} -> C{(host, port)} or C{None}
        (the L{IBrokerDirectory}).
    @param timeoutMs: how long a WriteTxnMarkers may take: the leader waits
        up to C{request.timeout.ms} for its ISR before it answers.
    @param connect: builds a connected L{BrokerConnection} (tests).
    """

    def __init__(self, brokerId: int, image: Callable, writer, endpoint: Callable,
                 timeoutMs: int = 30_000, connect: Callable | None = None) -> None:
        self.brokerId = brokerId
        self._image = image
        self.writer = writer
        self._endpoint = endpoint
        self._timeout = timeoutMs / 1000.0
        self._connect = connect or self._openConnection
        self.owner = OwnerThread("kafkatwist-txn-markers")
        # -- owned by the owner thread --
        self._destinations: dict[int, _Destination] = {}
        self._stopped = False
        self._closed = threading.Event()
        self.owner.start()

    # -- any thread -----------------------------------------------------------------

    def write(self, producerId, producerEpoch, commit, coordinatorEpoch, partitions, onDone):
        """
        Send one transaction's marker to the leaders of C{partitions};
        C{onDone({(topic, partition): ErrorCode or None})} once every
        partition answered (on the channel's owner thread).
        """
        marker = _Marker(producerId, producerEpoch, commit, coordinatorEpoch, onDone)
        self.owner.submit(self._route, marker, list(dict.fromkeys(partitions)))

    def stop(self) -> None:
        """
        Stop the senders and the owner; markers under way are not answered
        (the coordinator stops with them; the next coordinator of their
        transactions sends them again).
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

    # -- on the owner -----------------------------------------------------------------

    def _stopOwned(self) -> list:
        self._stopped = True
        destinations = list(self._destinations.values())
        for destination in destinations:
            destination.stop()
        self._destinations.clear()
        return destinations

    def _route(self, marker: _Marker, partitions: list) -> None:
        image = self._image()
        byLeader: dict[int, list] = {}
        for tp in partitions:
            topic, partition = tp
            assignment = image.topics.get(topic)
            gone = assignment is None or partition not in assignment.partitions
            if gone or topic in image.deleting:
                log.info(
                    "{topic}-{partition} no longer exists: no marker of producer {pid}"
                    " needed there",
                    topic=topic, partition=partition, pid=marker.producerId,
                )
                marker.results[tp] = None
                continue
            leader = image.leader(topic, partition)
            if leader == NO_LEADER:
                marker.results[tp] = E.not_leader_or_follower
                continue
            byLeader.setdefault(leader, []).append(tp)
        if self._stopped:
            return
        marker.waiting = len(byLeader)
        if not byLeader:
            marker.onDone(marker.results)
            return
        for leader, tps in byLeader.items():
            destination = self._destinations.get(leader)
            if destination is None:
                destination = self._destinations[leader] = _Destination(
                    leader,
                    self._sendLocal if leader == self.brokerId else self._sender(leader),
                    self._answered,
                    f"kafkatwist-txn-markers-to-{leader}",
                )
            destination.enqueue((marker, tps))

    def _answered(self, entry, results: dict) -> None:
        # Any thread: to the owner.
        self.owner.submit(self._take, entry, results)

    def _take(self, entry, results: dict) -> None:
        marker, _ = entry
        marker.results.update(results)
        marker.waiting -= 1
        if marker.waiting == 0:
            marker.onDone(marker.results)

    # -- on a sender thread ---------------------------------------------------------------

    def _sendLocal(self, entries: list) -> None:
        # The disk writes happen here; each answer comes once the ISR has
        # the marker (the writer's wait is bounded by its timeout).
        for entry in entries:
            marker, partitions = entry
            try:
                self.writer.write(
                    marker.producerId, marker.producerEpoch, marker.commit,
                    marker.coordinatorEpoch, partitions,
                    lambda results, entry=entry: self._answered(entry, results),
                )
            except Exception:
                log.failure("writing the marker of producer {pid} here failed",
                            pid=marker.producerId)
                self._answered(entry, {tp: E.unknown_server_error for tp in partitions})
        return None

    def _sender(self, brokerId: int) -> Callable:
        connection: list = [None]

        def send(entries: list) -> list:
            current = connection[0]
            if current is None or not current.connected:
                current = connection[0] = self._connect(brokerId)
            try:
                return self._request(current, entries)
            except KafkaError:
                current.close()
                raise

        return send

    def _openConnection(self, brokerId: int) -> BrokerConnection:
        endpoint = self._endpoint(brokerId)
        if endpoint is None:
            raise KafkaConnectionError(f"broker {brokerId} is not alive")
        host, port = endpoint
        connection = BrokerConnection(
            host, port, clientId=f"broker-{self.brokerId}-txn-markers",
            # The leader answers after its ISR wait, at most timeoutMs.
            timeout=self._timeout + 5,
        )
        connection.connect()
        return connection

    def _request(self, connection, entries: list) -> list:
        cls = requestType(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        Marker = nested(cls, "WritableTxnMarker")
        Topic = nested(cls, "WritableTxnMarkerTopic")
        markers = []
        for marker, partitions in entries:
            byTopic: dict = {}
            for topic, partition in partitions:
                byTopic.setdefault(topic, []).append(partition)
            markers.append(make(
                Marker,
                producer_id=marker.producerId,
                producer_epoch=marker.producerEpoch,
                transaction_result=marker.commit,
                coordinator_epoch=marker.coordinatorEpoch,
                topics=tuple(make(Topic, name=t, partition_indexes=tuple(ps))
                             for t, ps in byTopic.items()),
            ))
        response = connection.request(
            WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, make(cls, markers=tuple(markers)),
            timeout=self._timeout + 5,
        )
        # Answers are keyed by producer id (one open transaction each).
        byProducer: dict = {}
        for result in response.markers:
            errors = byProducer.setdefault(int(result.producer_id), {})
            for topic in result.topics:
                for p in topic.partitions:
                    errors[(topic.name, int(p.partition_index))] = ErrorCode(p.error_code)
        answers = []
        for marker, partitions in entries:
            errors = byProducer.get(marker.producerId, {})
            # A partition the answer leaves out was not written.
            answers.append({tp: errors.get(tp, E.unknown_server_error) for tp in partitions})
        return answers
