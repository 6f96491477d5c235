"""
KIP-890 part 1's verification across brokers (Kafka's
C{AddPartitionsToTxnManager}): before a partition leader appends a
producer's first transactional batch (or a group coordinator its
transactional offsets), it asks the transactional id's coordinator whether
the partition is in the producer's transaction.  When that coordinator is
another broker -- the leader of the id's C{__transaction_state} partition,
as the cluster's metadata says -- the question goes to it as
AddPartitionsToTxn v5 with C{verify_only}, the questions queued for one
coordinator together in one request (several transactional ids in it).

Answers are what the local coordinator's C{verifyPartitions} gives: a
C{{(topic, partition): ErrorCode}} (NONE, or TRANSACTION_ABORTABLE for a
partition not in the transaction), or one error for all.  A coordinator
that cannot be found or reached, or that no longer coordinates the id,
answers COORDINATOR_NOT_AVAILABLE, which the leader turns into a retriable
error for its client.

Threads: the destinations belong to the verifier's owner thread
C{kafkatwist-txn-verifier}; each coordinator broker has a sender thread
(C{kafkatwist-txn-verifier-to-<id>}) that owns its connection; the answer
is given on that thread.
"""

from __future__ import annotations

from collections.abc import Callable

from kafkatwist.coordinator.transaction.formats import TRANSACTION_STATE_TOPIC, partitionOf
from kafkatwist.coordinator.transaction.interbroker import (
    Destination,
    Destinations,
    connectedSender,
)
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import ADD_PARTITIONS_TO_TXN, requestType
from kafkatwist.protocol.entities import NO_LEADER, make, nested

__all__ = ["RemoteVerifier", "VERIFY_VERSION"]

E = ErrorCode

#: AddPartitionsToTxn's brokers' form with TRANSACTION_ABORTABLE (Kafka 3.8+)
VERIFY_VERSION = 5


#: a coordinator's answer that means "ask again later" to the leader
_ELSEWHERE = {E.not_coordinator: E.coordinator_not_available}


class _Question:
    __slots__ = ("replyTo", "transactionalId", "producerId", "producerEpoch", "partitions")

    def __init__(self, replyTo, transactionalId, producerId, producerEpoch, partitions) -> None:
        self.replyTo = replyTo
        self.transactionalId = transactionalId
        self.producerId = producerId
        self.producerEpoch = producerEpoch
        self.partitions = partitions


class RemoteVerifier(Destinations):
    """
    @param brokerId: this broker.
    @param image: returns the cluster's metadata (a
        L{kafkatwist.cluster.image.ClusterImage}); any thread.
    @param endpoint: C{endpoint(brokerId)} -> C{(host, port)} or C{None}.
    @param numPartitions: C{__transaction_state}'s partition count.
    @param timeoutMs: C{request.timeout.ms}.
    @param connect: builds a connected connection to a broker (tests).
    """

    def __init__(self, brokerId: int, image: Callable, endpoint: Callable, numPartitions: int,
                 timeoutMs: int = 30_000, connect: Callable | None = None) -> None:
        self._numPartitions = numPartitions
        super().__init__("kafkatwist-txn-verifier", brokerId, image, endpoint, timeoutMs, connect)

    def verify(self, replyTo, transactionalId: str, producerId: int, producerEpoch: int,
               partitions) -> None:
        """
        Ask the id's coordinator; C{replyTo(answer)} once, on another
        thread.  Any thread.
        """
        question = _Question(replyTo, transactionalId, producerId, producerEpoch,
                             list(dict.fromkeys(partitions)))
        self.owner.submit(self._route, question)

    # -- on the owner -------------------------------------------------------------------

    def _route(self, question: _Question) -> None:
        partition = partitionOf(question.transactionalId, self._numPartitions)
        coordinator = self._image().leader(TRANSACTION_STATE_TOPIC, partition)
        if coordinator == NO_LEADER or coordinator == self.brokerId:
            # No coordinator now, or this broker's is still loading the
            # partition (it answered NOT_COORDINATOR): later.
            question.replyTo(E.coordinator_not_available)
            return
        self._destination(coordinator, lambda: Destination(
            coordinator,
            connectedSender(self._connect, coordinator, self._request),
            lambda question, error: E.coordinator_not_available,
            lambda question, answer: question.replyTo(answer),
            f"kafkatwist-txn-verifier-to-{coordinator}", "transaction verifications",
        )).enqueue(question)

    # -- on a sender thread -------------------------------------------------------------------

    def _request(self, connection, questions: list) -> list:
        answers: dict[int, object] = {}
        # A transactional id appears once per request (its answers are
        # keyed by it): a second question for it waits for the next one.
        while len(answers) < len(questions):
            batch, seen = [], set()
            for index, question in enumerate(questions):
                if index not in answers and question.transactionalId not in seen:
                    seen.add(question.transactionalId)
                    batch.append((index, question))
            for index, answer in zip((i for i, _ in batch),
                                     self._ask(connection, [q for _, q in batch])):
                answers[index] = answer
        return [answers[i] for i in range(len(questions))]

    def _ask(self, connection, questions: list) -> list:
        cls = requestType(ADD_PARTITIONS_TO_TXN, VERIFY_VERSION)
        Transaction = nested(cls, "AddPartitionsToTxnTransaction")
        Topic = nested(cls, "AddPartitionsToTxnTopic")
        transactions = []
        for question in questions:
            byTopic: dict = {}
            for topic, partition in question.partitions:
                byTopic.setdefault(topic, []).append(partition)
            transactions.append(make(
                Transaction,
                transactional_id=question.transactionalId,
                producer_id=question.producerId,
                producer_epoch=question.producerEpoch,
                verify_only=True,
                topics=tuple(make(Topic, name=t, partitions=tuple(ps))
                             for t, ps in byTopic.items()),
            ))
        response = connection.request(
            ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, make(cls, transactions=tuple(transactions)),
            timeout=self._timeout + 5,
        )
        error = ErrorCode(response.error_code)
        if error != E.none:
            return [_ELSEWHERE.get(error, error)] * len(questions)
        byId: dict = {}
        for result in response.results_by_transaction:
            errors = byId.setdefault(result.transactional_id, {})
            for topic in result.topic_results:
                for p in topic.results_by_partition:
                    code = ErrorCode(p.partition_error_code)
                    errors[(topic.name, int(p.partition_index))] = _ELSEWHERE.get(code, code)
        return [
            {tp: byId.get(q.transactionalId, {}).get(tp, E.coordinator_not_available)
             for tp in q.partitions}
            for q in questions
        ]
