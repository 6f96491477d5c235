"""
Which replica may answer what (Kafka's C{Partition.getLocalLog}): a request
naming a leader epoch (KIP-320's C{current_leader_epoch}; -1 when the
client does not know it) is fenced when it is older than this replica's
(FENCED_LEADER_EPOCH: the client's metadata is stale) or newer
(UNKNOWN_LEADER_EPOCH: this broker has not heard of the new epoch yet, the
client retries), and only the leader serves produce, consumer fetches,
ListOffsets and OffsetForLeaderEpoch (NOT_LEADER_OR_FOLLOWER).

The role and epoch are the partition log's C{isLeader} and C{leaderEpoch},
which the replica manager publishes; a single broker leads everything in
epoch 0.  So the check costs two attribute reads.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode

__all__ = ["NO_EPOCH", "checkReplica"]

#: a request that does not name the epoch it expects
NO_EPOCH = -1


def checkReplica(log, currentLeaderEpoch: int, requireLeader: bool = True) -> ErrorCode | None:
    """
    @return: the error the partition answers, or C{None} to serve it.
    """
    if currentLeaderEpoch != NO_EPOCH:
        local = log.leaderEpoch
        if currentLeaderEpoch < local:
            return ErrorCode.fenced_leader_epoch
        if currentLeaderEpoch > local:
            return ErrorCode.unknown_leader_epoch
    if requireLeader and not log.isLeader:
        return ErrorCode.not_leader_or_follower
    return None
