"""
An acks=all produce waiting for its ISR (Kafka's C{DelayedProduce}): the
answer goes out once the high watermark of every partition it appended to
has passed its last batch, or at the request's timeout with
REQUEST_TIMED_OUT for the partitions still short.  A partition whose
replica stopped leading (or changed epoch) meanwhile answers
NOT_LEADER_OR_FOLLOWER: the client retries on the new leader (an
idempotent producer without duplicates).  One whose ISR fell below
C{min.insync.replicas} after the append answers
NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka's.

Threads: checked on whichever thread moved a high watermark (the replica
manager's owner) or changed a role; its timer fires on the connection's
Processor, where the expiry only builds the answer (no I/O).
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.util.purgatory import DelayedOperation
from kafkatwist.replication.appends import notEnoughReplicas

__all__ = ["DelayedProduce", "Waiting"]


class Waiting:
    """
    One partition of the produce: where its data ends and in which epoch it
    was appended.
    """

    __slots__ = ("topic", "partition", "log", "requiredOffset", "leaderEpoch", "error")

    def __init__(self, topic, partition, log, requiredOffset, leaderEpoch) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.requiredOffset = requiredOffset
        self.leaderEpoch = leaderEpoch
        #: C{None} while waiting, then the partition's answer
        self.error: ErrorCode | None = None


def replicated(waiting: Waiting) -> ErrorCode | None:
    """
    Kafka's C{checkEnoughReplicasReachOffset}: the partition's answer if
    it has one now.
    """
    log = waiting.log
    if not log.isLeader or log.leaderEpoch != waiting.leaderEpoch:
        return ErrorCode.not_leader_or_follower
    if log.highWatermark >= waiting.requiredOffset:
        if notEnoughReplicas(log) is not None:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none
    return None


class DelayedProduce(DelayedOperation):
    """
    @param answer: C{answer(errors)} builds the response from
        C{{(topic, partition): ErrorCode}} (errors of the waiting
        partitions; the others keep their append's answer).
    """

    def __init__(self, clock, waiting: list, answer, pending) -> None:
        super().__init__(clock)
        self.waiting = waiting
        self.answer = answer
        self.pending = pending

    def keys(self):
        return {(w.topic, w.partition) for w in self.waiting}

    def tryComplete(self) -> bool:
        for w in self.waiting:
            if w.error is None:
                error = replicated(w)
                if error is None:
                    return False
                w.error = error
        return self.forceComplete()

    def canExpireHere(self) -> bool:
        return True

    def onComplete(self) -> None:
        errors = {
            (w.topic, w.partition): ErrorCode.request_timed_out if w.error is None else w.error
            for w in self.waiting
        }
        self.pending.complete(self.answer(errors))
