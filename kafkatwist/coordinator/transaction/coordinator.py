"""
Kafka's transaction coordinator (C{TransactionCoordinator.scala},
C{TransactionStateManager}, the marker pipeline) as a sans-io state
machine, transaction protocol v1 (KIP-98 with KIP-890 part 1's partition
verification; KIP-890 part 2's per-transaction epoch bump is not served).

Inputs and outputs
==================

Like the group coordinator (L{kafkatwist.coordinator.coordinator}), every
entry point takes the current time first and returns effects: answers
(L{Respond}), records for C{__transaction_state} (L{Append}), timers
(L{SetTimer}, L{CancelTimer}) and markers to write (L{WriteMarkers}).
Their outcomes come back as inputs: L{TransactionCoordinator.appendCompleted},
L{TransactionCoordinator.markersWritten}, L{TransactionCoordinator.timerFired}.
Nothing here blocks, reads a clock or touches a log.

A change of a transactional id is prepared (C{pending}), appended, and
applied only once the append succeeded; meanwhile every mutating request
for the id answers CONCURRENT_TRANSACTIONS, as in Kafka.

Life of a transaction
=====================

InitProducerId bumps the epoch (fencing the previous producer instance) and
writes Empty; if a transaction was still open it is aborted first, with the
epoch bumped, and the request answered CONCURRENT_TRANSACTIONS (the client
retries).  AddPartitionsToTxn (and AddOffsetsToTxn, as its group's
C{__consumer_offsets} partition) writes Ongoing.  EndTxn writes
PrepareCommit or PrepareAbort and answers; then the markers are written to
every partition of the transaction, retried while a partition answers a
retriable error, and CompleteCommit or CompleteAbort is written.  A
transaction Ongoing for longer than its timeout is aborted the same way
with the epoch bumped (the abandoned producer is fenced).  An id idle for
C{transactional.id.expiration.ms} is removed (a tombstone).  After a
restart, transactions found in PrepareCommit or PrepareAbort get their
markers again.

Errors are Kafka's internal ones (PRODUCER_FENCED, ...); the handlers map
them to what older request versions know.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from twisted.logger import Logger

from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer
from kafkatwist.coordinator.runtime import machineEntry
from kafkatwist.coordinator.transaction.effects import WriteMarkers
from kafkatwist.coordinator.transaction.formats import (
    TxnLogValue,
    partitionOf,
    transactionRecord,
)
from kafkatwist.coordinator.transaction.state import (
    EPOCH_EXHAUSTED,
    TxnMetadata,
    TxnSnapshot,
    TxnState,
)
from kafkatwist.errors import ErrorCode

__all__ = [
    "InitProducerIdResult",
    "TransactionCoordinator",
    "TxnDescription",
    "TxnListing",
]

log = Logger()
E = ErrorCode
S = TxnState

#: timer keys
ABORT_SWEEP = ("txn-abort-timed-out",)
EXPIRY_SWEEP = ("txn-expire-ids",)
MARKER_RETRY = "txn-marker-retry"
COMPLETE_RETRY = "txn-complete-retry"

#: Kafka's C{appendTransactionToLog} error mapping for answers
_APPEND_ERRORS = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_enough_replicas_after_append: E.coordinator_not_available,
    E.request_timed_out: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
    E.message_too_large: E.unknown_server_error,
    E.record_list_too_large: E.unknown_server_error,
}

#: marker errors after which the partition is asked again (Kafka's
#: C{TransactionMarkerRequestCompletionHandler}; NETWORK_EXCEPTION is a
#: lost connection, COORDINATOR_* a C{__consumer_offsets} partition whose
#: group coordinator is not ready)
_RETRY_MARKER = {
    E.unknown_topic_or_partition,
    E.not_leader_or_follower,
    E.not_enough_replicas,
    E.not_enough_replicas_after_append,
    E.request_timed_out,
    E.kafka_storage_error,
    E.network_exception,
    E.coordinator_not_available,
    E.coordinator_load_in_progress,
    E.not_coordinator,
}

#: marker errors that end the sending without a Complete record: the
#: producer or this coordinator was fenced by a newer one, which finishes
#: the transaction itself
_STOP_MARKERS = {E.invalid_producer_epoch, E.transaction_coordinator_fenced}

#: marker errors for which the partition is dropped from the transaction
#: (the producer could not have written there either)
_DROP_MARKER = {E.unsupported_for_message_format, E.unsupported_version}


@dataclass(frozen=True)
class InitProducerIdResult:
    errorCode: ErrorCode
    producerId: int = -1
    producerEpoch: int = -1


@dataclass(frozen=True)
class TxnDescription:
    """
    One transactional id for DescribeTransactions.
    """

    transactionalId: str
    errorCode: ErrorCode
    state: str = ""
    timeoutMs: int = 0
    startTimestampMs: int = -1
    producerId: int = -1
    producerEpoch: int = -1
    partitions: frozenset = frozenset()


@dataclass(frozen=True)
class TxnListing:
    transactionalId: str
    producerId: int
    state: str


#: an entry point: set the time, collect and return the effects
_entry = machineEntry()


class TransactionCoordinator:
    """
    Every transactional id of this broker.

    @param numPartitions: C{__transaction_state}'s partition count.
    @param maxTimeoutMs: C{transaction.max.timeout.ms}.
    @param expirationMs: C{transactional.id.expiration.ms}.
    @param abortIntervalMs: C{transaction.abort.timed.out.transaction.cleanup.interval.ms}.
    @param expiryIntervalMs: C{transaction.remove.expired.transaction.cleanup.interval.ms}.
    @param retryBackoffMs: wait before asking a partition again for a
        marker, or writing a Complete record again.
    @param ownsAllPartitions: one broker coordinates every transactional
        id; in a cluster (C{False}) only those of the C{__transaction_state}
        partitions it leads (L{loadPartition}, L{unloadPartition}).
    """

    def __init__(
        self,
        *,
        numPartitions: int = 50,
        maxTimeoutMs: int = 900_000,
        expirationMs: int = 604_800_000,
        abortIntervalMs: int = 10_000,
        expiryIntervalMs: int = 3_600_000,
        retryBackoffMs: int = 100,
        coordinatorEpoch: int = 0,
        ownsAllPartitions: bool = True,
    ) -> None:
        self.numPartitions = numPartitions
        #: the partitions whose ids are loaded here (None: all), and the
        #: coordinator epoch (the partition's leader epoch) of each
        self._owned: set[int] | None = None if ownsAllPartitions else set()
        self._loading: set[int] = set()
        self._epochs: dict[int, int] = {}
        self._maxTimeoutMs = maxTimeoutMs
        self._expirationMs = expirationMs
        self._abortIntervalMs = abortIntervalMs
        self._expiryIntervalMs = expiryIntervalMs
        self._retryBackoffMs = retryBackoffMs
        self.coordinatorEpoch = coordinatorEpoch
        self._txns: dict[str, TxnMetadata] = {}
        self._active = False
        self._loaded = False
        self.nowMs = 0
        self._fx: list | None = None
        self._tokens = itertools.count(1)
        self._continuations: dict[int, Callable] = {}
        # transactional id -> partitions whose marker is still to be written
        self._markersPending: dict[str, set] = {}
        #: (transactional id, partition, error) of unexpected marker answers
        #: already logged
        self._warned: set = set()

    # ------------------------------------------------------------------
    # Effects

    def _respond(self, replyTo, result) -> None:
        if replyTo is not None:
            self._fx.append(Respond(replyTo, result))

    def _setTimer(self, key, delayMs: int) -> None:
        self._fx.append(SetTimer(key, max(int(delayMs), 0)))

    def _append(self, meta: TxnMetadata, value: TxnLogValue | None, onDone) -> None:
        token = next(self._tokens)
        self._continuations[token] = onDone
        self._fx.append(
            Append(meta.partition, (transactionRecord(meta.transactionalId, value),), token)
        )

    def _writeMarkers(self, meta: TxnMetadata, snapshot: TxnSnapshot, partitions) -> None:
        token = next(self._tokens)
        self._continuations[token] = functools.partial(self._onMarkers, meta)
        self._fx.append(
            WriteMarkers(
                snapshot.producerId,
                snapshot.producerEpoch,
                snapshot.state is S.PREPARE_COMMIT,
                self._epochs.get(meta.partition, self.coordinatorEpoch),
                frozenset(partitions),
                token,
            )
        )

    # ------------------------------------------------------------------
    # Lifecycle

    @_entry
    def load(self, loaded: Iterable[tuple[str, int, TxnLogValue]]) -> None:
        """
        Take the transactional ids read back from C{__transaction_state}
        (the last value of each), then serve: transactions left prepared
        get their markers, the periodic sweeps are armed.

        @param loaded: C{(transactional id, partition, value)}.
        """
        self._take(loaded)
        self._active = self._loaded = True
        self._completeLeftOver(self._txns.values())
        self._setTimer(ABORT_SWEEP, self._abortIntervalMs)
        self._setTimer(EXPIRY_SWEEP, self._expiryIntervalMs)

    @_entry
    def beginLoading(self, partition: int) -> None:
        if self._owned is not None and partition not in self._owned:
            self._loading.add(partition)

    @_entry
    def loadPartition(self, partition: int, loaded, coordinatorEpoch: int) -> None:
        """
        Take the transactional ids of one C{__transaction_state} partition
        this broker now leads (at C{coordinatorEpoch}, its leader epoch,
        which the markers it writes carry); prepared transactions get their
        markers.
        """
        if self._owned is None:
            return
        self._loading.discard(partition)
        self._epochs[partition] = coordinatorEpoch
        if partition in self._owned:
            return
        self._owned.add(partition)
        self._take(loaded)
        self._completeLeftOver([m for m in self._txns.values() if m.partition == partition])

    @_entry
    def unloadPartition(self, partition: int) -> None:
        """
        This broker no longer leads C{partition}: its ids are forgotten
        here (the new leader's coordinator loads them).
        """
        if self._owned is None:
            return
        self._loading.discard(partition)
        self._owned.discard(partition)
        for transactionalId in [t for t, m in self._txns.items() if m.partition == partition]:
            del self._txns[transactionalId]
            self._markersPending.pop(transactionalId, None)
            self._forgetWarnings(transactionalId)

    def _take(self, loaded) -> None:
        for transactionalId, partition, value in loaded:
            self._txns[transactionalId] = TxnMetadata(
                transactionalId,
                TxnSnapshot(
                    producerId=value.producerId,
                    producerEpoch=value.producerEpoch,
                    txnTimeoutMs=value.txnTimeoutMs,
                    state=value.state,
                    partitions=frozenset(value.partitions),
                    txnStartTimestampMs=value.startTimestampMs,
                    txnLastUpdateTimestampMs=value.lastUpdateTimestampMs,
                    previousProducerId=value.previousProducerId,
                ),
                partition=partition,
            )

    def _completeLeftOver(self, metas) -> None:
        for meta in list(metas):
            if meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                log.info(
                    "transactional id {id}: completing its {state} left at the last stop",
                    id=meta.transactionalId, state=meta.state.displayName,
                )
                self._sendMarkers(meta)

    @_entry
    def shutdown(self) -> None:
        self._active = False
        for key in (ABORT_SWEEP, EXPIRY_SWEEP):
            self._fx.append(CancelTimer(key))

    def _statusError(self, transactionalId: str | None = None) -> ErrorCode | None:
        if not self._loaded:
            return E.coordinator_load_in_progress
        if not self._active:
            return E.not_coordinator
        if self._owned is not None and transactionalId is not None:
            partition = partitionOf(transactionalId, self.numPartitions)
            if partition not in self._owned:
                return E.coordinator_load_in_progress if partition in self._loading else E.not_coordinator
        return None

    # ------------------------------------------------------------------
    # Inputs from the shell

    @_entry
    def appendCompleted(self, token: int, error: ErrorCode) -> None:
        onDone = self._continuations.pop(token, None)
        if onDone is not None:
            onDone(error)

    @_entry
    def markersWritten(self, token: int, results: dict) -> None:
        """
        A L{WriteMarkers} finished.

        @param results: C{(topic, partition)} -> error code.
        """
        onDone = self._continuations.pop(token, None)
        if onDone is not None:
            onDone(results)

    @_entry
    def timerFired(self, key) -> None:
        if not self._active:
            return
        if key == ABORT_SWEEP:
            self._abortTimedOut()
            self._setTimer(ABORT_SWEEP, self._abortIntervalMs)
        elif key == EXPIRY_SWEEP:
            self._expireIds()
            self._setTimer(EXPIRY_SWEEP, self._expiryIntervalMs)
        elif key[0] == MARKER_RETRY:
            meta = self._txns.get(key[1])
            if (
                meta is not None
                and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
                and key[1] in self._markersPending
            ):
                self._sendMarkers(meta)
        elif key[0] == COMPLETE_RETRY:
            meta = self._txns.get(key[1])
            if meta is not None and meta.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._complete(meta)

    # ------------------------------------------------------------------
    # InitProducerId

    @_entry
    def initProducerId(
        self,
        replyTo,
        transactionalId: str,
        timeoutMs: int,
        expectedProducerId: int,
        expectedEpoch: int,
        newProducerId: int,
    ) -> None:
        """
        InitProducerId with a transactional id.

        @param expectedProducerId: v3+'s producer id (-1: none), with
            C{expectedEpoch}.
        @param newProducerId: a fresh producer id, used if one is needed
            (the handler takes it from the broker's producer id block).
        @return: (by C{replyTo}) an L{InitProducerIdResult}.
        """
        def fail(error: ErrorCode) -> None:
            self._respond(replyTo, InitProducerIdResult(error))

        error = self._statusError(transactionalId)
        if error is not None:
            return fail(error)
        if not 0 < timeoutMs <= self._maxTimeoutMs:
            return fail(E.invalid_transaction_timeout)
        meta = self._txns.get(transactionalId)
        if meta is None:
            meta = self._txns[transactionalId] = TxnMetadata(
                transactionalId,
                TxnSnapshot(
                    producerId=newProducerId, producerEpoch=-1, txnTimeoutMs=timeoutMs,
                    state=S.EMPTY, txnLastUpdateTimestampMs=self.nowMs,
                ),
                partition=partitionOf(transactionalId, self.numPartitions),
            )
        if meta.pending is not None:
            return fail(E.concurrent_transactions)
        current = meta.current
        expected = expectedProducerId >= 0
        if expected and not (
            current.producerEpoch == -1
            or expectedProducerId == current.producerId
            or (
                expectedProducerId == current.previousProducerId
                and expectedEpoch >= EPOCH_EXHAUSTED
            )
        ):
            return fail(E.producer_fenced)
        state = current.state
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return fail(E.concurrent_transactions)
        if state is S.ONGOING:
            # Fence the producer that left it open and abort it; the
            # client asks again once the abort completed.
            self._fenceAndAbort(meta, lambda error: fail(
                E.concurrent_transactions if error == E.none else error
            ))
            return
        if current.producerEpoch >= EPOCH_EXHAUSTED and (
            not expected or expectedEpoch == current.producerEpoch
        ):
            # Kafka's prepareProducerIdRotation.
            target = meta.prepare(
                producerId=newProducerId, producerEpoch=0,
                previousProducerId=current.producerId if expected else -1,
                lastProducerEpoch=current.producerEpoch if expected else -1,
                txnTimeoutMs=timeoutMs, state=S.EMPTY, partitions=frozenset(),
                txnStartTimestampMs=-1, txnLastUpdateTimestampMs=self.nowMs,
            )
        else:
            bumped = current.producerEpoch + 1
            if not expected:
                epoch, lastEpoch = bumped, -1
            elif current.producerEpoch == -1 or expectedEpoch == current.producerEpoch:
                epoch, lastEpoch = bumped, current.producerEpoch
            elif expectedEpoch == current.lastProducerEpoch:
                # A retry of a bump whose answer was lost.
                epoch, lastEpoch = current.producerEpoch, current.lastProducerEpoch
            else:
                return fail(E.producer_fenced)
            target = meta.prepare(
                producerEpoch=epoch, lastProducerEpoch=lastEpoch, txnTimeoutMs=timeoutMs,
                state=S.EMPTY, partitions=frozenset(), txnStartTimestampMs=-1,
                txnLastUpdateTimestampMs=self.nowMs,
            )

        def written(error: ErrorCode) -> None:
            if error != E.none:
                fail(_APPEND_ERRORS.get(error, error))
                return
            self._respond(
                replyTo, InitProducerIdResult(E.none, target.producerId, target.producerEpoch)
            )

        self._write(meta, target, written)

    # ------------------------------------------------------------------
    # AddPartitionsToTxn, AddOffsetsToTxn, verification

    def _checkProducer(self, transactionalId: str, producerId: int, epoch: int):
        """
        @return: C{(metadata, None)} or C{(None, error)}.
        """
        error = self._statusError(transactionalId)
        if error is not None:
            return None, error
        meta = self._txns.get(transactionalId)
        if meta is None or meta.current.producerId != producerId:
            return None, E.invalid_producer_id_mapping
        if meta.current.producerEpoch != epoch:
            return None, E.producer_fenced
        return meta, None

    @_entry
    def addPartitions(
        self, replyTo, transactionalId: str, producerId: int, epoch: int, partitions
    ) -> None:
        """
        Add partitions to the producer's transaction (starting it).

        @return: (by C{replyTo}) one error code for all the partitions.
        """
        meta, error = self._checkProducer(transactionalId, producerId, epoch)
        if error is not None:
            return self._respond(replyTo, error)
        partitions = frozenset(partitions)
        current = meta.current
        if meta.pending is not None or current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return self._respond(replyTo, E.concurrent_transactions)
        if current.state is S.ONGOING and partitions <= current.partitions:
            return self._respond(replyTo, E.none)
        starts = current.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        target = meta.prepare(
            state=S.ONGOING,
            partitions=(frozenset() if starts else current.partitions) | partitions,
            txnStartTimestampMs=self.nowMs if starts else current.txnStartTimestampMs,
            txnLastUpdateTimestampMs=self.nowMs,
        )

        def written(error: ErrorCode) -> None:
            self._respond(replyTo, _APPEND_ERRORS.get(error, error))

        self._write(meta, target, written)

    @_entry
    def verifyPartitions(
        self, replyTo, transactionalId: str, producerId: int, epoch: int, partitions
    ) -> None:
        """
        KIP-890 part 1 (AddPartitionsToTxn with C{verify_only}): whether
        the partitions are in the producer's open transaction, without
        changing anything.

        @return: (by C{replyTo}) C{{(topic, partition): error}}: NONE, or
            TRANSACTION_ABORTABLE for a partition not in the transaction;
            or one error code for all.
        """
        meta, error = self._checkProducer(transactionalId, producerId, epoch)
        if error is not None:
            return self._respond(replyTo, error)
        current = meta.current
        pending = meta.pending
        if current.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT) or (
            # Adding partitions only ever grows the transaction.
            pending is not None and pending.state is not S.ONGOING
        ):
            return self._respond(replyTo, E.concurrent_transactions)
        inTxn = current.partitions if current.state is S.ONGOING else frozenset()
        self._respond(
            replyTo,
            {tp: E.none if tp in inTxn else E.transaction_abortable for tp in partitions},
        )

    # ------------------------------------------------------------------
    # EndTxn

    @_entry
    def endTxn(self, replyTo, transactionalId: str, producerId: int, epoch: int, commit: bool):
        """
        Commit or abort the producer's transaction.

        @return: (by C{replyTo}) an error code, once the PrepareCommit or
            PrepareAbort record is written (the markers follow).
        """
        meta, error = self._checkProducer(transactionalId, producerId, epoch)
        if error is not None:
            return self._respond(replyTo, error)
        if meta.pending is not None:
            return self._respond(replyTo, E.concurrent_transactions)
        state = meta.state
        if state is S.ONGOING:
            self._prepareEnd(meta, commit, lambda error: self._respond(replyTo, error))
            return
        same = (state is S.COMPLETE_COMMIT and commit) or (state is S.COMPLETE_ABORT and not commit)
        if same:
            # A retry of an EndTxn whose answer was lost.
            return self._respond(replyTo, E.none)
        preparing = (state is S.PREPARE_COMMIT and commit) or (
            state is S.PREPARE_ABORT and not commit
        )
        self._respond(replyTo, E.concurrent_transactions if preparing else E.invalid_txn_state)

    def _prepareEnd(self, meta: TxnMetadata, commit: bool, onWritten, **changes) -> None:
        target = meta.prepare(
            state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
            txnLastUpdateTimestampMs=self.nowMs,
            **changes,
        )

        def written(error: ErrorCode) -> None:
            if error == E.none:
                onWritten(E.none)
                self._sendMarkers(meta)
            else:
                onWritten(_APPEND_ERRORS.get(error, error))

        self._write(meta, target, written)

    def _fenceAndAbort(self, meta: TxnMetadata, onWritten) -> None:
        """
        Kafka's C{prepareFenceProducerEpoch} then the coordinator's abort:
        the markers carry the bumped epoch, so the producer that left the
        transaction open is fenced in every partition it wrote.
        """
        current = meta.current
        self._prepareEnd(
            meta, False, onWritten,
            producerEpoch=current.producerEpoch + 1, lastProducerEpoch=-1,
        )

    # ------------------------------------------------------------------
    # Markers

    def _sendMarkers(self, meta: TxnMetadata) -> None:
        remaining = self._markersPending.get(meta.transactionalId)
        if remaining is None:
            remaining = self._markersPending[meta.transactionalId] = set(meta.current.partitions)
        if not remaining:
            self._complete(meta)
            return
        self._writeMarkers(meta, meta.current, remaining)

    def _onMarkers(self, meta: TxnMetadata, results: dict) -> None:
        """
        @param results: C{(topic, partition)} -> error code, or C{None} for
            a partition that no longer exists (no marker needed there).
        """
        transactionalId = meta.transactionalId
        remaining = self._markersPending.get(transactionalId)
        if self._txns.get(transactionalId) is not meta or remaining is None:
            # Unloaded (another broker coordinates the id now), or unloaded
            # and loaded again: that load sent the markers anew.
            return
        retry = False
        for tp, error in results.items():
            if error is None or error == E.none or error in _DROP_MARKER:
                if error is not None and error != E.none:
                    log.warn(
                        "transactional id {id}: {topic}-{partition} refused the marker ({error});"
                        " going on without it",
                        id=transactionalId, topic=tp[0], partition=tp[1], error=error.name,
                    )
                remaining.discard(tp)
            elif error in _STOP_MARKERS:
                log.warn(
                    "transactional id {id}: {topic}-{partition} answered {error} to the marker"
                    " of producer {pid} (coordinator epoch {epoch}): a newer producer or"
                    " coordinator took over; no more markers sent from here",
                    id=transactionalId, topic=tp[0], partition=tp[1], error=error.name,
                    pid=meta.current.producerId,
                    epoch=self._epochs.get(meta.partition, self.coordinatorEpoch),
                )
                del self._markersPending[transactionalId]
                self._forgetWarnings(transactionalId)
                return
            else:
                if error not in _RETRY_MARKER and (transactionalId, tp, error) not in self._warned:
                    # Once per transaction, partition and error: it is
                    # asked again every retry.
                    self._warned.add((transactionalId, tp, error))
                    log.warn(
                        "transactional id {id}: unexpected {error} from {topic}-{partition}"
                        " for its marker; trying again",
                        id=transactionalId, topic=tp[0], partition=tp[1], error=error.name,
                    )
                retry = True
        if retry:
            self._setTimer((MARKER_RETRY, transactionalId), self._retryBackoffMs)
        elif not remaining:
            self._complete(meta)

    def _forgetWarnings(self, transactionalId: str) -> None:
        if self._warned:
            self._warned = {w for w in self._warned if w[0] != transactionalId}

    def _complete(self, meta: TxnMetadata) -> None:
        if meta.pending is not None:
            return
        current = meta.current
        target = meta.prepare(
            state=S.COMPLETE_COMMIT if current.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT,
            partitions=frozenset(),
            txnLastUpdateTimestampMs=self.nowMs,
        )

        def written(error: ErrorCode) -> None:
            if error == E.none:
                self._markersPending.pop(meta.transactionalId, None)
                self._forgetWarnings(meta.transactionalId)
            else:
                log.warn(
                    "transactional id {id}: writing {state} failed ({error}); trying again",
                    id=meta.transactionalId, state=target.state.displayName, error=error.name,
                )
                self._setTimer((COMPLETE_RETRY, meta.transactionalId), self._retryBackoffMs)

        self._write(meta, target, written)

    # ------------------------------------------------------------------
    # Writing

    def _write(self, meta: TxnMetadata, target: TxnSnapshot, onDone) -> None:
        """
        Append C{target} (the pending change); apply it if that worked,
        drop it if not; then C{onDone(error)}.
        """

        def appended(error: ErrorCode) -> None:
            if meta.pending is target:
                meta.pending = None
                if error == E.none:
                    meta.current = target
            onDone(error)

        self._append(meta, _logValue(target), appended)

    # ------------------------------------------------------------------
    # Timeouts and expiry

    def _abortTimedOut(self) -> None:
        for meta in list(self._txns.values()):
            current = meta.current
            if (
                current.state is S.ONGOING
                and meta.pending is None
                and current.txnStartTimestampMs + current.txnTimeoutMs < self.nowMs
            ):
                log.info(
                    "transactional id {id}: aborting the transaction of producer {pid}"
                    " (epoch {epoch}), open past its timeout of {timeout} ms",
                    id=meta.transactionalId, pid=current.producerId,
                    epoch=current.producerEpoch, timeout=current.txnTimeoutMs,
                )
                self._fenceAndAbort(meta, lambda error: None)

    def _expireIds(self) -> None:
        for meta in list(self._txns.values()):
            current = meta.current
            if (
                current.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
                and meta.pending is None
                and current.txnLastUpdateTimestampMs <= self.nowMs - self._expirationMs
            ):
                self._expire(meta)

    def _expire(self, meta: TxnMetadata) -> None:
        target = meta.prepare(state=S.DEAD)

        def appended(error: ErrorCode) -> None:
            if meta.pending is target:
                meta.pending = None
                if error == E.none and self._txns.get(meta.transactionalId) is meta:
                    del self._txns[meta.transactionalId]
                    log.info("transactional id {id} expired", id=meta.transactionalId)

        self._append(meta, None, appended)

    # ------------------------------------------------------------------
    # Administration

    @_entry
    def describe(self, replyTo, transactionalIds: Iterable[str]) -> None:
        """
        @return: (by C{replyTo}) a L{TxnDescription} per id, in order.
        """
        out = []
        for transactionalId in transactionalIds:
            meta = self._txns.get(transactionalId)
            error = self._statusError(transactionalId)
            if error is not None:
                out.append(TxnDescription(transactionalId, error))
            elif meta is None or meta.state is S.DEAD:
                out.append(TxnDescription(transactionalId, E.transactional_id_not_found))
            else:
                current = meta.current
                out.append(
                    TxnDescription(
                        transactionalId, E.none, current.state.displayName,
                        current.txnTimeoutMs, current.txnStartTimestampMs,
                        current.producerId, current.producerEpoch, current.partitions,
                    )
                )
        self._respond(replyTo, out)

    @_entry
    def listTransactions(
        self, replyTo, states: Iterable[str], producerIds: Iterable[int], durationMs: int = -1
    ) -> None:
        """
        @return: (by C{replyTo}) C{(error, unknown state filters,
            [TxnListing])}.
        """
        error = self._statusError()
        if error is not None:
            return self._respond(replyTo, (error, (), ()))
        states = list(states)
        wanted = {TxnState.byName(s) for s in states} - {None}
        unknown = tuple(s for s in states if TxnState.byName(s) is None)
        pids = set(producerIds)
        out = []
        for meta in self._txns.values():
            current = meta.current
            if current.state is S.DEAD:
                continue
            if states and current.state not in wanted:
                continue
            if pids and current.producerId not in pids:
                continue
            # Kafka's rule (an id without a transaction has start -1).
            if durationMs >= 0 and self.nowMs - current.txnStartTimestampMs <= durationMs:
                continue
            out.append(
                TxnListing(meta.transactionalId, current.producerId, current.state.displayName)
            )
        self._respond(replyTo, (E.none, unknown, tuple(out)))

    # ------------------------------------------------------------------
    # For tests and metrics (on the owner)

    def metadata(self, transactionalId: str) -> TxnMetadata | None:
        return self._txns.get(transactionalId)


def _logValue(snapshot: TxnSnapshot) -> TxnLogValue | None:
    if snapshot.state is S.DEAD:
        return None
    return TxnLogValue(
        producerId=snapshot.producerId,
        producerEpoch=snapshot.producerEpoch,
        txnTimeoutMs=snapshot.txnTimeoutMs,
        state=snapshot.state,
        partitions=frozenset() if snapshot.state is S.EMPTY else snapshot.partitions,
        lastUpdateTimestampMs=snapshot.txnLastUpdateTimestampMs,
        startTimestampMs=snapshot.txnStartTimestampMs,
        previousProducerId=snapshot.previousProducerId,
    )

