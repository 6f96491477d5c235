"""
OffsetForLeaderEpoch (23), v0-4: where a leader epoch ended in this
leader's log (KIP-101).  Followers ask it after a leader change to find
where their log diverges from the leader's and truncate there (KIP-279);
consumers ask it with their C{current_leader_epoch} to check, after a
leader change, that their position was not truncated away (KIP-320).

The answer is the leader-epoch cache's (L{kafkatwist.log.epochs}): the
largest epoch at or below the one asked for and the offset where it ended
(the log end for the current epoch); an epoch newer than any known, or an
empty cache, answers epoch -1 and offset -1.  Only the leader answers
(NOT_LEADER_OR_FOLLOWER elsewhere), after the KIP-320 fencing of
L{kafkatwist.replication.fencing}.

Authorization as Kafka's: CLUSTER_ACTION on the cluster (brokers), else
DESCRIBE on each topic (consumers).
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.log.epochs import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from kafkatwist.protocol.apis import OFFSET_FOR_LEADER_EPOCH, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.replication.fencing import checkReplica
from kafkatwist.security.acl import AclOperation, ResourceType
from kafkatwist.security.checks import authorizeCluster, filterAuthorized


def endOffsetFor(log, currentLeaderEpoch: int, leaderEpoch: int) -> tuple[ErrorCode, int, int]:
    """
    @return: C{(error, epoch, endOffset)} as one partition is answered.
    """
    error = checkReplica(log, currentLeaderEpoch)
    if error is not None:
        return error, UNDEFINED_EPOCH, UNDEFINED_OFFSET
    # The log end first: an append may add an epoch after it, never before.
    end = log.logEndOffset
    epoch, offset = log.epochs.endOffsetFor(leaderEpoch, end)
    return ErrorCode.none, epoch, offset


class OffsetForLeaderEpochHandler(Handler):
    apiKey = OFFSET_FOR_LEADER_EPOCH
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        cls = responseType(OFFSET_FOR_LEADER_EPOCH, context.apiVersion)
        Topic = nested(cls, "OffsetForLeaderTopicResult")
        Partition = nested(cls, "EpochEndOffset")
        logManager = self.broker.logManager
        authorizer = self.authorizer
        names = [t.topic for t in request.topics]
        if authorizer is None or authorizeCluster(
            authorizer, context, AclOperation.CLUSTER_ACTION
        ):
            allowed = set(names)
        else:
            allowed = filterAuthorized(
                authorizer, context, AclOperation.DESCRIBE, ResourceType.TOPIC, names
            )
        topics = []
        for topic in request.topics:
            partitions = []
            for p in topic.partitions:
                log = (
                    logManager.getLog(topic.topic, p.partition)
                    if logManager is not None and topic.topic in allowed
                    else None
                )
                if topic.topic not in allowed:
                    error, epoch, offset = (
                        ErrorCode.topic_authorization_failed, UNDEFINED_EPOCH, UNDEFINED_OFFSET
                    )
                elif log is None:
                    error, epoch, offset = (
                        ErrorCode.unknown_topic_or_partition, UNDEFINED_EPOCH, UNDEFINED_OFFSET
                    )
                else:
                    error, epoch, offset = endOffsetFor(
                        log, p.current_leader_epoch, p.leader_epoch
                    )
                partitions.append(
                    make(
                        Partition,
                        error_code=error,
                        partition=p.partition,
                        leader_epoch=epoch,
                        end_offset=offset,
                    )
                )
            topics.append(make(Topic, topic=topic.topic, partitions=tuple(partitions)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


offsetForLeaderEpoch = HandlerPlugin(
    "builtin.offset_for_leader_epoch",
    OFFSET_FOR_LEADER_EPOCH,
    OffsetForLeaderEpochHandler,
    priority=0,
)
