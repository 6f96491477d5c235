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

from collections.abc import Callable

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.coordinator.transaction.interbroker import (
    Destination,
    Destinations,
    connectedSender,
)
from kafkatwist.errors import ErrorCode
from kafkatwist.interfaces import ITxnMarkerChannel
from kafkatwist.protocol.apis import WRITE_TXN_MARKERS, requestType
from kafkatwist.protocol.entities import NO_LEADER, make, nested

__all__ = ["LocalMarkerChannel", "MarkerChannel", "WRITE_TXN_MARKERS_VERSION"]

log = Logger()
E = ErrorCode

#: what Kafka 3.x brokers send each other (C{writeTxnMarkersRequestVersion}
#: from IBP 2.8 on)
WRITE_TXN_MARKERS_VERSION = 1



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


@implementer(ITxnMarkerChannel)
class MarkerChannel(Destinations):
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
        self.writer = writer
        super().__init__("kafkatwist-txn-markers", brokerId, image, endpoint, timeoutMs, connect)

    # -- any thread -----------------------------------------------------------------

    def write(self, producerId, producerEpoch, commit, coordinatorEpoch, partitions, onDone):
        """
        Send one transaction's marker to the leaders of C{partitions};
        C{onDone({(topic, partition): ErrorCode or None})} once every
        partition answered (on the channel's owner thread).
        """
        marker = _Marker(producerId, producerEpoch, commit, coordinatorEpoch, onDone)
        self.owner.submit(self._route, marker, list(dict.fromkeys(partitions)))

    # -- on the owner -----------------------------------------------------------------

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
            self._destination(leader, lambda leader=leader: Destination(
                leader,
                self._sendLocal if leader == self.brokerId
                else connectedSender(self._connect, leader, self._request),
                lambda entry, error: dict.fromkeys(entry[1], error),
                self._answered,
                f"kafkatwist-txn-markers-to-{leader}", "transaction markers",
            )).enqueue((marker, tps))

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
