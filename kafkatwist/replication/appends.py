"""
The append path (Kafka's C{ReplicaManager.appendRecords} and
C{Partition.appendRecordsToLeader}): the one place where an append meets
replication.  Produce, WriteTxnMarkers (and the transaction coordinator's
own markers) and the coordinators' log stores append through it; the
L{kafkatwist.replication.manager.ReplicaManager} offers it to handlers as
C{broker.replicaManager}.

  - acks: anything but -1, 0 and 1 is refused (INVALID_REQUIRED_ACKS)
    before the append, for every caller.
  - C{min.insync.replicas}: L{notEnoughReplicas} is the one check.  An
    acks=-1 append from a client, and every marker of WriteTxnMarkers, is
    refused with NOT_ENOUGH_REPLICAS before anything is written while the
    ISR is smaller (L{_checkBefore}); every acks=-1 wait (the coordinators'
    appends among them) answers NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
    is below it when the high watermark passes.
  - "Is this partition replicated?": L{IPartitionLog.replicated} (the high
    watermark is held back for followers) is the one way to ask; where it
    is not, an acks=-1 append is answered at once.
  - acks=-1 waiting: L{ReplicaManager.awaitReplicas} (a produce's
    partitions, one L{DelayedProduce}) and L{ReplicaManager.awaitReplication}
    (one partition: coordinators and markers), both in the produce
    purgatory.
  - Transaction verification (KIP-890 part 1): L{transactionGuards} and
    L{ReplicaManager.verifyTransaction}.

Threads: everything here runs on the calling thread (a request handler or
a coordinator's append executor) and reads only what the replica manager's
owner publishes on the logs (C{inSyncReplicas}, the high watermark,
C{isLeader}, C{leaderEpoch}); appends write to disk, so never a reactor.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode, KafkaError

__all__ = [
    "CLIENT",
    "COORDINATOR",
    "MARKERS",
    "VALID_ACKS",
    "VERIFY_ERRORS",
    "appendMarker",
    "appendToLeader",
    "notEnoughReplicas",
    "transactionGuards",
    "verificationErrors",
]

E = ErrorCode

#: a verification's answer -> the partition's error (Kafka's
#: AddPartitionsToTxnManager for Produce v10 and below)
VERIFY_ERRORS = {
    E.transaction_abortable: E.invalid_txn_state,
    E.producer_fenced: E.invalid_producer_epoch,
    E.concurrent_transactions: E.not_enough_replicas,
    E.coordinator_load_in_progress: E.not_enough_replicas,
    E.coordinator_not_available: E.not_enough_replicas,
    E.not_coordinator: E.not_enough_replicas,
}


#: the acks a producer may ask for (Kafka's C{isValidRequiredAcks}): none,
#: the leader's, the ISR's
VALID_ACKS = frozenset((-1, 0, 1))


def notEnoughReplicas(partitionLog) -> str | None:
    """
    The C{min.insync.replicas} check: why the partition's ISR is too small
    for an acks=-1 write, or C{None} (also where it is not replicated).
    """
    isr = partitionLog.inSyncReplicas
    if isr is None:
        return None
    minIsr = partitionLog.config.minInsyncReplicas
    if len(isr) < minIsr:
        return f"the ISR has {len(isr)} replicas, min.insync.replicas is {minIsr}"
    return None


#: who appends (Kafka's C{AppendOrigin}): a client's Produce; the
#: WriteTxnMarkers path (the transaction coordinator's markers into data
#: partitions, local or from another broker); a coordinator's own records
#: (and the group coordinator's markers into C{__consumer_offsets})
CLIENT, MARKERS, COORDINATOR = "client", "markers", "coordinator"


def _checkBefore(partitionLog, requiredAcks: int, origin: str) -> None:
    """
    Refuse an acks=-1 append while the ISR is below
    C{min.insync.replicas}, before anything is written: a client's, and
    every marker of WriteTxnMarkers.  A coordinator's own appends are
    checked once replicated instead (NOT_ENOUGH_REPLICAS_AFTER_APPEND, see
    L{kafkatwist.replication.delayed.replicated}), as they always were here.
    """
    if requiredAcks == -1 and origin != COORDINATOR:
        refused = notEnoughReplicas(partitionLog)
        if refused is not None:
            raise KafkaError(E.not_enough_replicas, refused)


def appendToLeader(
    partitionLog, records, nowMs: int, requiredAcks: int, *, origin: str = CLIENT,
    verificationGuard=None, convert=None,
):
    """
    Append one partition's records on its leader.

    @param requiredAcks: the request's acks: -1 checks
        C{min.insync.replicas} first (L{_checkBefore}); any but -1, 0 and 1
        (L{VALID_ACKS}) is refused with INVALID_REQUIRED_ACKS before
        anything else, as Kafka's C{appendRecords} refuses it.
    @param origin: L{CLIENT} (the log checks the records as a client's) or
        L{COORDINATOR} (the broker's own batches).
    @param verificationGuard: the guard a transaction verification gave.
    @param convert: C{convert(records)} -> the record batches to append
        (message formats v0/v1 up-converted), run after the check.
    @return: the log's L{kafkatwist.log.AppendInfo}.
    @raise KafkaError: the check or the log refused it.
    """
    if requiredAcks != 1:
        if requiredAcks == -1:
            if origin != COORDINATOR:
                # (_checkBefore, inline: this is every produce's path)
                refused = notEnoughReplicas(partitionLog)
                if refused is not None:
                    raise KafkaError(E.not_enough_replicas, refused)
        elif requiredAcks != 0:
            # Kafka answers it without a message: the client is broken.
            raise KafkaError(E.invalid_required_acks)
    if convert is not None:
        records = convert(records)
    if verificationGuard is not None:
        return partitionLog.append(records, nowMs, verificationGuard=verificationGuard)
    if origin == CLIENT:
        return partitionLog.append(records, nowMs)
    return partitionLog.append(records, nowMs, isFromClient=False)


def appendMarker(
    partitionLog, producerId, producerEpoch, commit, coordinatorEpoch, nowMs, *,
    origin: str = MARKERS,
):
    """
    Append an end-transaction marker, with acks=-1 as Kafka's
    WriteTxnMarkers does.

    @param origin: L{MARKERS}, or L{COORDINATOR} for the group
        coordinator's markers into C{__consumer_offsets}.
    @return: the log's L{kafkatwist.log.AppendInfo}, or C{None} when there
        was nothing to end.
    @raise KafkaError: the check or the log refused it.
    """
    _checkBefore(partitionLog, -1, origin)
    return partitionLog.appendMarker(producerId, producerEpoch, commit, coordinatorEpoch, nowMs)


def transactionGuards(logManager, producer, partitions) -> tuple[dict, list]:
    """
    What a transactional produce must verify before its appends (KIP-890
    part 1): the partitions where the producer has no transaction open
    yet each take a verification guard (a marker written meanwhile voids
    it).

    @param producer: C{(producerId, epoch)} of the request's first
        transactional batch.
    @param partitions: C{(topic, partition, found)}, C{found} being the
        C{(producerId, epoch)} of that partition's transactional batch, or
        C{None} for a partition without one.
    @return: C{(verified, unverified)}: C{(topic, partition)} -> a guard,
        or the error the partition gets instead of an append; and the
        partitions to ask the coordinator about.
    """
    producerId = producer[0]
    verified: dict = {}
    unverified = []
    for topic, partition, found in partitions:
        if found is None:
            continue
        if found != producer:
            verified[(topic, partition)] = E.invalid_producer_id_mapping
            continue
        log = logManager.getLog(topic, partition) if logManager else None
        if log is None or log.producerState.hasOngoingTxn(producerId):
            # The log decides (under its lock) whether it is open.
            continue
        tp = (topic, partition)
        verified[tp] = log.verificationGuard(producerId)
        unverified.append(tp)
    return verified, unverified


def verificationErrors(result, unverified, verified) -> None:
    """
    Record the coordinator's answer to a verification in C{verified}: the
    partitions it did not confirm get the error Produce answers them with.

    @param result: C{{(topic, partition): ErrorCode}}, or one L{ErrorCode}
        (or a failure) for all.
    """
    if isinstance(result, dict):
        for tp in unverified:
            error = result.get(tp, E.none)
            if error != E.none:
                verified[tp] = VERIFY_ERRORS.get(error, error)
    else:
        error = result if isinstance(result, ErrorCode) else E.not_enough_replicas
        for tp in unverified:
            verified[tp] = VERIFY_ERRORS.get(error, error)
