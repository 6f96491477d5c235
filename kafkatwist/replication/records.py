"""
DeleteRecords on a replicated partition (Kafka's C{DelayedDeleteRecords}):
the leader moves its own log start offset at once, its followers move
theirs from the C{log_start_offset} of its fetch responses and say so in
their next fetch; the answer goes out once the partition's low watermark
(the smallest log start offset over the leader and its followers on live
brokers) reaches the requested offset, or at the request's timeout with
REQUEST_TIMED_OUT for the partitions still short.  A replica that stopped
leading meanwhile answers NOT_LEADER_OR_FOLLOWER.

Threads: checked on the thread that raised a low watermark (the replica
manager's owner, after a follower's fetch) or on the handler's; its timer
fires on the connection's Processor, where the expiry only builds the
answer (no I/O).
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.util.purgatory import DelayedOperation

__all__ = ["DelayedDeleteRecords", "Trimming"]

#: DeleteRecords' low watermark when there is none to give
INVALID_LOW_WATERMARK = -1


class Trimming:
    """
    One partition of the request: the offset its low watermark must reach.

    @ivar lowWatermark: the answer's low watermark (the one at the request
        until the partition completes).
    @ivar error: C{None} while waiting, then the partition's answer.
    """

    __slots__ = ("key", "log", "requiredOffset", "leaderEpoch", "lowWatermark", "error")

    def __init__(self, key, log, requiredOffset: int, lowWatermark: int) -> None:
        self.key = key
        self.log = log
        self.requiredOffset = requiredOffset
        self.leaderEpoch = log.leaderEpoch
        self.lowWatermark = lowWatermark
        self.error: ErrorCode | None = None


class DelayedDeleteRecords(DelayedOperation):
    """
    @param lowWatermark: C{lowWatermark(topic, partition, log)}, the
        replica manager's.
    @param answer: C{answer({key: (ErrorCode, lowWatermark)})} builds the
        response of the waiting partitions (the others keep theirs).
    """

    def __init__(self, clock, waiting: list, lowWatermark, answer, pending) -> None:
        super().__init__(clock)
        self.waiting = waiting
        self.lowWatermark = lowWatermark
        self.answer = answer
        self.pending = pending

    def keys(self):
        return {w.key for w in self.waiting}

    def tryComplete(self) -> bool:
        short = False
        for w in self.waiting:
            if w.error is not None:
                continue
            log = w.log
            if not log.isLeader or log.leaderEpoch != w.leaderEpoch:
                w.error, w.lowWatermark = ErrorCode.not_leader_or_follower, INVALID_LOW_WATERMARK
                continue
            lowWatermark = self.lowWatermark(w.key[0], w.key[1], log)
            if lowWatermark >= w.requiredOffset:
                w.error, w.lowWatermark = ErrorCode.none, lowWatermark
            else:
                short = True
        return False if short else self.forceComplete()

    def canExpireHere(self) -> bool:
        return True

    def onComplete(self) -> None:
        self.pending.complete(self.answer({
            w.key: (ErrorCode.request_timed_out if w.error is None else w.error, w.lowWatermark)
            for w in self.waiting
        }))
