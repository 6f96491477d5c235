"""
Writing end-transaction markers: what WriteTxnMarkers does on the broker
that leads the partitions (Kafka's C{KafkaApis.handleWriteTxnMarkersRequest}).

The transaction coordinator calls this in-process for its own markers into
partitions this broker leads (L{kafkatwist.coordinator.transaction.channel}
sends the others to their leaders); the WriteTxnMarkers handler calls it
for requests from other brokers' coordinators and from an operator's
C{kafka-transactions.sh abort}.  As in Kafka, a marker is appended with
acks=-1: refused (NOT_ENOUGH_REPLICAS) while the ISR is smaller than
C{min.insync.replicas}, and answered once the ISR has it.

A data partition gets the control batch appended by its log
(L{kafkatwist.log.partition.PartitionLog.appendMarker}), and long-poll
fetches waiting on it are woken, since the marker may move its last stable
offset.  A C{__consumer_offsets} partition gets it through the group
coordinator, which also makes the transaction's offsets visible (commit) or
drops them (abort); its "not ready" errors are answered as
NOT_LEADER_OR_FOLLOWER, as Kafka does.

Blocking: appends write to disk, so call from a handler or coordinator
thread, never a reactor.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from twisted.logger import Logger

from kafkatwist.coordinator.formats import OFFSETS_TOPIC
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.replication.appends import appendMarker

__all__ = ["MarkerWriter"]

log = Logger()
E = ErrorCode

_GROUP_NOT_READY = {
    E.coordinator_not_available,
    E.coordinator_load_in_progress,
    E.not_coordinator,
}


class MarkerWriter:
    """
    @ivar awaitReplication: C{awaitReplication(topic, partition,
        requiredOffset, onDone)} answers once the partition's ISR has the
        marker (the replica manager's
        L{kafkatwist.replication.manager.ReplicaManager.replicationWaiter};
        set by the broker), C{None} answers at once.

    @param logManager: an L{kafkatwist.interfaces.ILogManager}.
    @param groupCoordinator: returns the group coordinator (or C{None}).
    @param wake: C{wake((topic, partition))} after a marker was appended
        (the fetch purgatory's C{checkAndComplete}).
    @param clock: milliseconds since the epoch (marker timestamps).
    """

    def __init__(
        self,
        logManager,
        groupCoordinator: Callable[[], object] = lambda: None,
        wake: Callable[[tuple], None] = lambda key: None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._logManager = logManager
        self._groupCoordinator = groupCoordinator
        self._wake = wake
        self._clock = clock or (lambda: int(time.time() * 1000))
        self.awaitReplication = None

    def write(
        self,
        producerId: int,
        producerEpoch: int,
        commit: bool,
        coordinatorEpoch: int,
        partitions: Iterable[tuple[str, int]],
        onDone: Callable[[dict], None],
    ) -> None:
        """
        Write one transaction's marker into C{partitions}; C{onDone} gets
        C{{(topic, partition): error}} once all are done (perhaps before
        this returns, perhaps on another thread).
        """
        partitions = list(dict.fromkeys(partitions))
        results: dict = {}
        # The group coordinator may answer on another thread meanwhile.
        lock = threading.Lock()
        waiting = [len(partitions) + 1]

        def done(tp, error) -> None:
            with lock:
                if tp is not None:
                    results[tp] = error
                waiting[0] -= 1
                last = waiting[0] == 0
            if last:
                onDone(results)

        for tp in partitions:
            topic, partition = tp
            if topic == OFFSETS_TOPIC:
                self._groupMarker(
                    tp, producerId, producerEpoch, commit, coordinatorEpoch, done
                )
            else:
                self._dataMarker(tp, producerId, producerEpoch, commit, coordinatorEpoch, done)
        done(None, None)

    def _dataMarker(self, tp, producerId, producerEpoch, commit, coordinatorEpoch, done) -> None:
        partitionLog = self._logManager.getLog(*tp) if self._logManager is not None else None
        if partitionLog is None:
            done(tp, E.unknown_topic_or_partition)
            return
        # Kafka appends markers with acks=-1: a leader whose ISR is below
        # min.insync.replicas refuses them as it refuses such a produce
        # (the replica manager's append path decides).
        try:
            info = appendMarker(
                partitionLog, producerId, producerEpoch, commit, coordinatorEpoch, self._clock()
            )
        except KafkaError as e:
            done(tp, e.code)
            return
        except OSError as e:
            log.warn("marker for {tp} not written: {error}", tp=tp, error=e)
            done(tp, E.kafka_storage_error)
            return
        self._wake(tp)
        awaitReplication = self.awaitReplication
        if awaitReplication is None or info is None:
            done(tp, E.none)
            return
        awaitReplication(tp[0], tp[1], info.lastOffset + 1, lambda error: done(tp, error))

    def _groupMarker(self, tp, producerId, producerEpoch, commit, coordinatorEpoch, done) -> None:
        coordinator = self._groupCoordinator()
        complete = getattr(coordinator, "completeTransaction", None)
        if complete is None:
            done(tp, E.not_leader_or_follower)
            return

        def answered(error) -> None:
            if not isinstance(error, ErrorCode):
                # A failure of the coordinator: ask again later.
                error = E.not_leader_or_follower
            elif error in _GROUP_NOT_READY:
                error = E.not_leader_or_follower
            done(tp, error)

        complete(answered, tp[1], producerId, producerEpoch, commit, coordinatorEpoch)
