"""
Transactions for the exactly-once sink, over the wire client.

A task writes its rows inside a Kafka transaction of its own and leaves it
open; the driver commits every task's transaction once Spark commits the
job (or the micro-batch), and aborts them if it aborts.  Kafka checks an
EndTxn only against the transactional id, producer id and epoch -- not the
connection that began the transaction -- so the task's commit message
carries exactly those (Flink's Kafka sink resumes transactions the same
way).

Each task's transactional id is C{<kafka.transactional.id>-<partition id>}:
a retried task (and the next micro-batch's task of the same partition)
starts with InitProducerId on the same id, which fences the attempt before
it and aborts its open transaction, so a failed attempt's rows are never
committed.  Writes inside a transaction are idempotent (producer id,
epoch, sequence numbers), so resending a Produce after a lost connection
cannot duplicate either.

A streaming query's driver may die half way through committing a
micro-batch's transactions: Spark then runs that micro-batch again when the
query restarts, and the tasks whose transactions were committed must not
write their rows twice.  So the driver records what it commits in the
sink's commit log (L{CommitLog}, a compacted topic) before the first EndTxn:
the micro-batch id and every task's handle.  A restarted query reads it
before any task runs (L{recoverStream}); if the last micro-batch was being
committed, it finishes that commit (EndTxn is idempotent: a committed
transaction answers NONE again) and learns which tasks' rows are in Kafka;
when Spark runs the micro-batch again, those tasks write nothing, the others
(whose transactions had passed their timeout and were aborted) write
theirs, and their InitProducerId fences and aborts whatever the previous
attempt left open.
"""

from __future__ import annotations

import datetime
import json
import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.entities import nested
from kafkatwist.protocol.records import Record

__all__ = [
    "CommitLog",
    "IdempotentProducer",
    "Recovered",
    "TransactionHandle",
    "TransactionalProducer",
    "abortTransactions",
    "commitStreamBatch",
    "commitTransactions",
    "recoverStream",
    "transactionalIdFor",
]

INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
END_TXN = 26
FIND_COORDINATOR = 10
DESCRIBE_TRANSACTIONS = 65
COORDINATOR_TYPE_TRANSACTION = 1

#: answers after which a coordinator request is sent again (after a pause)
_RETRY = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
    ErrorCode.request_timed_out,
    ErrorCode.network_exception,
}


def transactionalIdFor(prefix: str, partitionId: int) -> str:
    return f"{prefix}-{partitionId}"


@dataclass(frozen=True)
class TransactionHandle:
    """
    What finishes one task's transaction: its ids, and whether it holds
    anything (a task without rows has no transaction to end).
    """

    transactionalId: str
    producerId: int
    producerEpoch: int
    empty: bool = False
    #: the Spark partition id of the task
    partitionId: int = -1


def _coordinator(client, transactionalId: str) -> int | None:
    """
    The node id of the transaction coordinator of C{transactionalId}, asked
    afresh each time: it moves with the leader of its C{__transaction_state}
    partition, and the callers (inside L{_retrying}) ask again after
    NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE.
    """

    def build(version, cls):
        if version >= 4:
            return cls(key_type=COORDINATOR_TYPE_TRANSACTION, coordinator_keys=(transactionalId,))
        return cls(key=transactionalId, key_type=COORDINATOR_TYPE_TRANSACTION)

    _, response = client.call(FIND_COORDINATOR, build)
    if hasattr(response, "coordinators"):
        (found,) = response.coordinators
        error, nodeId = found.error_code, found.node_id
    else:
        error, nodeId = response.error_code, response.node_id
    if error != ErrorCode.none:
        raise KafkaError(error, f"no transaction coordinator for {transactionalId!r}")
    return int(nodeId)


def _retrying(what: str, attempt, deadline: float):
    """
    Run C{attempt()} (returning an error code and a result) until it
    answers something other than a retriable coordinator error.
    """
    pause = 0.05
    while True:
        try:
            error, result = attempt()
        except KafkaError as e:
            # FindCoordinator's own errors, and a broken connection (the
            # coordinator's broker died): find the coordinator again.
            if e.code not in _RETRY or time.monotonic() > deadline:
                raise
            error, result = e.code, None
        if error == ErrorCode.none:
            return result
        if error not in _RETRY or time.monotonic() > deadline:
            raise KafkaError(error, what)
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


class IdempotentProducer:
    """
    An idempotent task's producer id (Kafka's C{enable.idempotence}, the
    at-least-once sink's default with acks=all): a producer id from
    InitProducerId without a transactional id, from any broker (ids are
    unique across the cluster), and per partition the sequence number of
    each batch.  A batch resent after a leader change or a broken connection
    carries the same sequence, so the partition's leader -- old or new, the
    producer state is replicated with the log -- does not append it twice.
    """

    transactionalId = None

    def __init__(self, client, requestTimeoutMs: int) -> None:
        self.client = client
        self.requestTimeoutMs = requestTimeoutMs
        self._sequences: dict = {}
        deadline = time.monotonic() + requestTimeoutMs / 1000.0

        def init():
            def build(version, cls):
                fields = cls.__dataclass_fields__
                values = dict(
                    transactional_id=None,
                    # what Kafka's producer sends: ignored without an id
                    transaction_timeout=datetime.timedelta(milliseconds=60_000),
                    producer_id=-1, producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False,
                )
                return cls(**{k: v for k, v in values.items() if k in fields})

            _, response = client.call(INIT_PRODUCER_ID, build)
            return response.error_code, (int(response.producer_id), int(response.producer_epoch))

        self.producerId, self.producerEpoch = _retrying("InitProducerId", init, deadline)

    def beforeWrite(self, topic: str, partition: int) -> None:
        pass

    def nextSequence(self, topic: str, partition: int, records: int) -> int:
        """
        The base sequence of the next batch of C{records} records to the
        partition.
        """
        sequence = self._sequences.get((topic, partition), 0)
        self._sequences[(topic, partition)] = (sequence + records) & 0x7FFFFFFF
        return sequence


class TransactionalProducer(IdempotentProducer):
    """
    One task's transaction: InitProducerId on construction, then
    L{beforeWrite} for each partition (AddPartitionsToTxn the first time)
    and L{nextSequence} for each batch it produces.

    @param client: a L{kafkatwist.client.KafkaWireClient}.
    """

    def __init__(
        self, client, transactionalId: str, timeoutMs: int, requestTimeoutMs: int,
        partitionId: int = -1,
    ):
        self.client = client
        self.transactionalId = transactionalId
        self.partitionId = partitionId
        self.requestTimeoutMs = requestTimeoutMs
        self._partitions: set = set()
        self._sequences = {}
        deadline = time.monotonic() + requestTimeoutMs / 1000.0

        def init():
            nodeId = _coordinator(client, transactionalId)

            def build(version, cls):
                fields = cls.__dataclass_fields__
                values = dict(
                    transactional_id=transactionalId,
                    transaction_timeout=datetime.timedelta(milliseconds=timeoutMs),
                    producer_id=-1, producer_epoch=-1, enable2_pc=False, keep_prepared_txn=False,
                )
                return cls(**{k: v for k, v in values.items() if k in fields})

            _, response = client.call(INIT_PRODUCER_ID, build, nodeId)
            return response.error_code, (int(response.producer_id), int(response.producer_epoch))

        # CONCURRENT_TRANSACTIONS while the coordinator aborts the open
        # transaction of the attempt before this one.
        self.producerId, self.producerEpoch = _retrying(
            f"InitProducerId for {transactionalId!r}", init, deadline
        )

    @property
    def handle(self) -> TransactionHandle:
        return TransactionHandle(
            self.transactionalId, self.producerId, self.producerEpoch, not self._partitions,
            self.partitionId,
        )

    def beforeWrite(self, topic: str, partition: int) -> None:
        """
        Add the partition to the transaction before its first batch.
        """
        if (topic, partition) in self._partitions:
            return
        client = self.client
        deadline = time.monotonic() + self.requestTimeoutMs / 1000.0

        def request(cls):
            Topic = nested(cls, "AddPartitionsToTxnTopic")
            return cls(
                v3_and_below_transactional_id=self.transactionalId,
                v3_and_below_producer_id=self.producerId,
                v3_and_below_producer_epoch=self.producerEpoch,
                v3_and_below_topics=(Topic(name=topic, partitions=(partition,)),),
            )

        def add():
            nodeId = _coordinator(client, self.transactionalId)
            # v4+ is the brokers' batched form.
            _, response = client.call(ADD_PARTITIONS_TO_TXN, _capped(3, request), nodeId)
            errors = [
                p.partition_error_code
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
            return (errors[0] if errors else ErrorCode.unknown_server_error), None

        _retrying(f"AddPartitionsToTxn {topic}-{partition}", add, deadline)
        self._partitions.add((topic, partition))


def _capped(highest: int, request):
    """
    A wire client C{build} that uses at most version C{highest}.
    """

    def build(version, cls):
        if version > highest:
            version = highest
            cls = requestType(cls.__api_key__, version)
        return version, request(cls)

    return build


def _endTxn(
    client, handle: TransactionHandle, commit: bool, deadline: float, accept=frozenset()
) -> int:
    """
    End the transaction of C{handle}.

    @param accept: error codes returned rather than raised.
    @return: C{ErrorCode.none}, or one of C{accept}.
    """
    def request(cls):
        return cls(
            transactional_id=handle.transactionalId,
            producer_id=handle.producerId,
            producer_epoch=handle.producerEpoch,
            committed=commit,
        )

    def end():
        nodeId = _coordinator(client, handle.transactionalId)
        # v5 is transaction protocol v2 (an epoch bump per transaction).
        _, response = client.call(END_TXN, _capped(4, request), nodeId)
        if response.error_code in accept:
            return ErrorCode.none, response.error_code
        return response.error_code, ErrorCode.none

    return _retrying(
        f"{'committing' if commit else 'aborting'} the transaction of "
        f"{handle.transactionalId!r} (producer {handle.producerId}, epoch {handle.producerEpoch})",
        end,
        deadline,
    )


def _describe(client, handles, requestTimeoutMs: int = 30_000) -> dict:
    """
    transactional id -> (state name, producer id, epoch) as the coordinator
    has it.
    """
    out = {}
    deadline = time.monotonic() + requestTimeoutMs / 1000.0
    for handle in handles:

        def build(version, cls, handle=handle):
            return cls(transactional_ids=(handle.transactionalId,))

        def describe(handle=handle):
            nodeId = _coordinator(client, handle.transactionalId)
            try:
                _, response = client.call(DESCRIBE_TRANSACTIONS, build, nodeId)
                (state,) = response.transaction_states
            except Exception as e:
                # kio cannot read back a start time of -1 (the client reports
                # the answer as undecodable): an id with no transaction open,
                # which is all that matters here.
                if isinstance(e, KafkaError) and "cannot decode" not in str(e):
                    raise
                return ErrorCode.none, (ErrorCode.none, "no transaction open", -1, -1)
            if state.error_code in _RETRY:
                return state.error_code, None
            return ErrorCode.none, (
                state.error_code, state.transaction_state, int(state.producer_id),
                int(state.producer_epoch),
            )

        out[handle.transactionalId] = _retrying(
            f"DescribeTransactions {handle.transactionalId!r}", describe, deadline
        )
    return out


def commitTransactions(client, handles, requestTimeoutMs: int, beforeCommit=None) -> int:
    """
    The driver's commit: check that every task's transaction is still open
    with the producer that wrote it, then commit them all.

    @param beforeCommit: called with the handles after the check, before
        the first EndTxn.
    @return: how many transactions were committed.
    @raise KafkaError: a transaction can no longer be committed (it passed
        its timeout and was aborted, or a later attempt fenced it); nothing
        was committed then.  Or a commit failed after the check (a
        transaction timed out in between): those before it are committed.
    """
    handles = [h for h in handles if h is not None and not h.empty]
    _checkOpen(client, handles, requestTimeoutMs)
    if beforeCommit is not None:
        beforeCommit(handles)
    deadline = time.monotonic() + requestTimeoutMs / 1000.0
    for handle in handles:
        _endTxn(client, handle, True, deadline)
    return len(handles)


def _checkOpen(client, handles, requestTimeoutMs: int = 30_000) -> None:
    """
    @raise KafkaError: a transaction of C{handles} is not open with the
        producer that wrote it.
    """
    described = _describe(client, handles, requestTimeoutMs)
    for transactionalId, (error, state, producerId, epoch) in described.items():
        handle = next(h for h in handles if h.transactionalId == transactionalId)
        if error != ErrorCode.none or state != "Ongoing" or (producerId, epoch) != (
            handle.producerId, handle.producerEpoch
        ):
            raise KafkaError(
                ErrorCode.invalid_txn_state if error == ErrorCode.none else error,
                f"the transaction of {transactionalId!r} cannot be committed: it is {state or error}"
                f" (producer {producerId}, epoch {epoch}; the task wrote with producer "
                f"{handle.producerId}, epoch {handle.producerEpoch}). Was the job slower than "
                f"kafka.transaction.timeout.ms, or was the task run again?",
            )


def abortTransactions(client, handles, requestTimeoutMs: int) -> None:
    """
    The driver's abort: abort the open transactions of the tasks that
    finished.  Failures are left to the transactions' timeout.
    """
    deadline = time.monotonic() + requestTimeoutMs / 1000.0
    for handle in handles:
        if handle is None or handle.empty:
            continue
        try:
            _endTxn(client, handle, False, deadline)
        except KafkaError:
            pass


# -- the streaming sink's commit log --------------------------------------------------------

#: commit log states: the driver is committing a micro-batch's
#: transactions / has committed them
COMMITTING = "committing"
COMMITTED = "committed"
#: EndTxn answers that mean the transaction was aborted (its timeout
#: passed, or a later InitProducerId fenced it): its task must write again
_ABORTED = frozenset(
    {ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced, ErrorCode.invalid_txn_state}
)


@dataclass(frozen=True)
class Recovered:
    """
    What a restarted streaming query learnt from the commit log: the tasks
    (Spark partition ids) of micro-batch C{batchId} whose rows are
    committed, which must not write them again if Spark reruns it.
    """

    batchId: int
    partitions: frozenset


class CommitLog:
    """
    The streaming sink's commit log: a compacted topic of one partition
    whose last record says which micro-batch the driver commits or
    committed, as JSON: C{{"batch": id, "state": "committing" | "committed",
    "handles": [[partition id, transactional id, producer id, epoch]...],
    "done": [partition ids committed]}}.
    """

    KEY = b"commit"

    def __init__(self, client, topic: str) -> None:
        self.client = client
        self.topic = topic

    def create(self) -> None:
        # Replicated as Kafka's internal topics are (3, or fewer on a
        # smaller cluster): losing it would lose what the driver committed.
        brokers = len(self.client.metadata([]).brokers)
        self.client.createTopics(
            {self.topic: (1, {"cleanup.policy": "compact"})},
            replicationFactor=max(1, min(3, brokers)),
            ignoreExisting=True,
        )
        # Just created, the topic reaches the other brokers' metadata a
        # moment later (UNKNOWN_TOPIC_OR_PARTITION meanwhile, retriable in
        # Kafka): wait for a leader, within the client's timeout.
        deadline = time.monotonic() + self.client.timeout
        while True:
            found = self.client.metadata([self.topic]).topics.get(self.topic)
            if found is not None and found.error == ErrorCode.none and found.partitions.get(0, -1) >= 0:
                return
            if time.monotonic() >= deadline:
                return  # the reads that follow fail with the broker's error
            time.sleep(0.1)

    def latest(self) -> dict | None:
        """
        The last entry, or C{None} if there is none.
        """
        end = self.client.listOffsets(self.topic, [0])[0][0]
        offset = end
        while offset > 0:
            # Only this sink writes here, one record per batch: the last
            # record is at end - 1 unless compaction left a gap there.
            offset = max(offset - 64, 0)
            found = self.client.fetch(self.topic, 0, offset).records
            if found:
                return json.loads(bytes(found[-1].value))
        return None

    def append(self, entry: dict) -> None:
        record = Record(key=self.KEY, value=json.dumps(entry, separators=(",", ":")).encode())
        self.client.produce(self.topic, 0, [record], acks=-1)


def recoverStream(client, commitLogTopic: str, requestTimeoutMs: int) -> Recovered | None:
    """
    Before a streaming query's tasks run: finish the commit its driver was
    making when it died, if any.

    @return: what the last micro-batch of the commit log committed, or
        C{None} if the log is empty.
    @raise KafkaError: a transaction's commit can be neither finished nor
        found aborted (the query cannot tell which rows are in Kafka).
    """
    log = CommitLog(client, commitLogTopic)
    log.create()
    entry = log.latest()
    if entry is None:
        return None
    batchId = int(entry["batch"])
    done = {int(p) for p in entry.get("done", ())}
    if entry.get("state") == COMMITTING:
        deadline = time.monotonic() + requestTimeoutMs / 1000.0
        for partitionId, transactionalId, producerId, epoch in entry.get("handles", ()):
            handle = TransactionHandle(transactionalId, producerId, epoch, False, partitionId)
            if _endTxn(client, handle, True, deadline, _ABORTED) == ErrorCode.none:
                done.add(int(partitionId))
        log.append({"batch": batchId, "state": COMMITTED, "done": sorted(done)})
    return Recovered(batchId, frozenset(done))


def commitStreamBatch(client, commitLogTopic: str, batchId: int, handles, recovered,
                      requestTimeoutMs: int) -> int:
    """
    The streaming driver's commit of micro-batch C{batchId}: recorded in
    the commit log before the first EndTxn and after the last.

    @param recovered: the partition ids of the tasks that wrote nothing
        because their rows were committed by an earlier attempt.
    @return: how many transactions were committed.
    """
    log = CommitLog(client, commitLogTopic)
    handles = [h for h in handles if h is not None]
    done = set(recovered) | {h.partitionId for h in handles if h.empty}

    def record(open_):
        log.append({
            "batch": batchId, "state": COMMITTING, "done": sorted(done),
            "handles": [[h.partitionId, h.transactionalId, h.producerId, h.producerEpoch]
                        for h in open_],
        })

    committed = commitTransactions(client, handles, requestTimeoutMs, beforeCommit=record)
    done |= {h.partitionId for h in handles}
    log.append({"batch": batchId, "state": COMMITTED, "done": sorted(done)})
    return committed


def fenceTransactions(client, prefix: str, partitionIds, timeoutMs: int, requestTimeoutMs: int):
    """
    Abort whatever transaction the tasks C{partitionIds} of a failed job
    left open: InitProducerId on their ids fences them and aborts it.
    """
    for partitionId in partitionIds:
        try:
            TransactionalProducer(
                client, transactionalIdFor(prefix, partitionId), timeoutMs, requestTimeoutMs
            )
        except KafkaError:
            pass
