"""
The transaction coordinator as the broker and its request handlers see it
(C{broker.transactionCoordinator}): the sans-io
L{kafkatwist.coordinator.transaction.coordinator.TransactionCoordinator}
run by a L{CoordinatorRuntime} over C{__transaction_state}, with its
markers handed to a marker channel (L{kafkatwist.coordinator.transaction.channel}:
in-process on one broker, WriteTxnMarkers to each partition's leader in a
cluster).

Threads: the machine belongs to the runtime's owner (a serial executor, as
the group coordinator's); appends to C{__transaction_state} run on one
serial queue per partition; markers run on their own serial queue (a
marker's append to a data partition is a disk write, and may wait for the
group coordinator), never on the owner; in a cluster the channel's own
threads take them to the leaders.  Timers (the timeout abort and the
id expiry sweeps, marker retries) run on the coordinator's timer thread.

Every request method takes a C{replyTo} first and returns nothing;
C{replyTo(result)} is called once, with the result documented on the
machine's entry point, or a L{twisted.python.failure.Failure}.  Safe from
any thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkatwist.coordinator.runtime import CoordinatorRuntime
from kafkatwist.util.executor import SerialExecutor
from kafkatwist.coordinator.transaction.channel import LocalMarkerChannel
from kafkatwist.coordinator.transaction.coordinator import TransactionCoordinator
from kafkatwist.coordinator.transaction.effects import WriteMarkers
from kafkatwist.coordinator.transaction.logstore import loadTransactions
from kafkatwist.errors import ErrorCode

__all__ = ["TransactionCoordinatorService"]


class _Runtime(CoordinatorRuntime):
    """
    The shared runtime, plus the one effect only this coordinator has.
    """

    def __init__(self, machine, clock, coordinatorLog, markerChannel) -> None:
        super().__init__(machine, clock, coordinatorLog)
        self.markerChannel = markerChannel
        self._markers = SerialExecutor(perTurn=1)

    def _perform(self, effects) -> None:
        others = []
        for effect in effects:
            if type(effect) is WriteMarkers:
                if others:
                    super()._perform(others)
                    others = []
                self._markers.submit(self._writeMarkers, effect)
            else:
                others.append(effect)
        if others:
            super()._perform(others)

    def _writeMarkers(self, effect: WriteMarkers) -> None:
        # On the markers' queue, off the owner.
        def written(results) -> None:
            self.input(self._machine.markersWritten, effect.token, results)

        self.markerChannel.write(
            effect.producerId,
            effect.producerEpoch,
            effect.commit,
            effect.coordinatorEpoch,
            effect.partitions,
            written,
        )


class TransactionCoordinatorService:
    """
    @param clock: the runtime's clock (see L{CoordinatorRuntime}).
    @param coordinatorLog: C{__transaction_state}, a
        L{kafkatwist.coordinator.transaction.logstore.TransactionStateLog}.
    @param markerWriter: a L{kafkatwist.coordinator.transaction.markers.MarkerWriter}
        (also what the WriteTxnMarkers handler writes with).
    @param markerChannel: what takes the coordinator's markers to the
        partitions (default: a L{LocalMarkerChannel} over C{markerWriter}).
    @param remoteVerifier: in a cluster, a
        L{kafkatwist.coordinator.transaction.verifier.RemoteVerifier} that
        asks the coordinator of an id this broker does not coordinate.
    @param settings: the L{TransactionCoordinator}'s keyword arguments.
    """

    def __init__(self, clock, coordinatorLog, markerWriter, markerChannel=None,
                 remoteVerifier=None, **settings) -> None:
        self.clock = clock
        self.remoteVerifier = remoteVerifier
        self.log = coordinatorLog
        self.markerWriter = markerWriter
        if markerChannel is None:
            markerChannel = LocalMarkerChannel(markerWriter)
        self.markerChannel = markerChannel
        epoch = getattr(coordinatorLog, "coordinatorEpoch", None)
        self.machine = TransactionCoordinator(
            numPartitions=coordinatorLog.numPartitions,
            coordinatorEpoch=epoch(0) if epoch is not None else 0,
            **settings,
        )
        self.runtime = _Runtime(self.machine, clock, coordinatorLog, markerChannel)

    @property
    def numPartitions(self) -> int:
        return self.machine.numPartitions

    # -- lifecycle ---------------------------------------------------------------

    def load(self, partitions=None) -> None:
        """
        Read the transactional ids back and start serving (blocking).

        @param partitions: the partitions to read (default: all; none in a
            cluster, where they are loaded one by one, L{loadPartition}).
        """
        self.runtime.call(self.machine.load, loadTransactions(self.log, partitions))

    def loadPartition(self, partition: int, coordinatorEpoch: int) -> None:
        """
        Become the coordinator of C{partition}'s transactional ids (this
        broker now leads it at leader epoch C{coordinatorEpoch}).
        Blocking: a loader thread's, never a reactor's.
        """
        self.runtime.call(self.machine.beginLoading, partition)
        loaded = loadTransactions(self.log, partitions=(partition,))
        self.runtime.call(self.machine.loadPartition, partition, loaded, coordinatorEpoch)

    def unloadPartition(self, partition: int) -> None:
        self.runtime.call(self.machine.unloadPartition, partition)

    def shutdown(self) -> None:
        self.runtime.stop(self.machine.shutdown)
        self.markerChannel.stop()
        if self.remoteVerifier is not None:
            self.remoteVerifier.stop()

    # -- requests ------------------------------------------------------------------

    def initProducerId(
        self, replyTo, transactionalId: str, timeoutMs: int, expectedProducerId: int,
        expectedEpoch: int, newProducerId: int,
    ) -> None:
        self.runtime.request(
            self.machine.initProducerId, replyTo, transactionalId, timeoutMs,
            expectedProducerId, expectedEpoch, newProducerId,
        )

    def addPartitions(self, replyTo, transactionalId, producerId, epoch, partitions) -> None:
        self.runtime.request(
            self.machine.addPartitions, replyTo, transactionalId, producerId, epoch,
            list(partitions),
        )

    def verifyPartitions(
        self, replyTo, transactionalId, producerId, epoch, partitions, forward: bool = True
    ) -> None:
        """
        Whether C{partitions} are in the producer's transaction, asked of
        this broker's coordinator or, in a cluster, of the id's coordinator
        wherever it is (the answer then comes on the verifier's thread).

        @param forward: C{False} for another broker's question, answered
            here only (as Kafka's coordinator does), so that two brokers
            with different views of the coordinator never pass a question
            back and forth.
        """
        partitions = list(partitions)
        remote = self.remoteVerifier
        if remote is not None and forward:
            answer = replyTo

            def replyTo(result) -> None:
                if isinstance(result, ErrorCode) and result == ErrorCode.not_coordinator:
                    remote.verify(answer, transactionalId, producerId, epoch, partitions)
                else:
                    answer(result)

        self.runtime.request(
            self.machine.verifyPartitions, replyTo, transactionalId, producerId, epoch,
            partitions,
        )

    def endTxn(self, replyTo, transactionalId, producerId, epoch, commit: bool) -> None:
        self.runtime.request(
            self.machine.endTxn, replyTo, transactionalId, producerId, epoch, commit
        )

    def describe(self, replyTo, transactionalIds: Iterable[str]) -> None:
        self.runtime.request(self.machine.describe, replyTo, list(transactionalIds))

    def listTransactions(self, replyTo, states, producerIds, durationMs: int = -1) -> None:
        self.runtime.request(
            self.machine.listTransactions, replyTo, list(states), list(producerIds), durationMs
        )
