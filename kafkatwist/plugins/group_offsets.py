"""
Committed offsets: OffsetCommit, OffsetFetch and OffsetDelete.

The handlers check what only the broker knows (whether a topic-partition
exists in the log, as Kafka checks its metadata cache) and leave group
rules to the group coordinator, which answers through a L{Reply} once the
commit (or the tombstones) are in C{__consumer_offsets}.

With an authorizer (Kafka's checks): committing needs READ on the group and
on each topic, fetching DESCRIBE on the group and on each topic, deleting
DELETE on the group and READ on each topic; refusals are
GROUP_AUTHORIZATION_FAILED for the group, TOPIC_AUTHORIZATION_FAILED for a
topic's partitions.
"""

from __future__ import annotations

from kafkatwist.coordinator.offsets import OffsetAndMetadata
from kafkatwist.coordinator.reply import Reply
from kafkatwist.coordinator.requests import CommitRequest
from kafkatwist.coordinator.results import FetchedOffset, OffsetDeleteResult, OffsetFetchResult
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import (
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    responseType,
)
from kafkatwist.protocol.entities import NO_THROTTLE, durationMs, has, make, nested
from kafkatwist.security.acl import AclOperation, ResourceType
from kafkatwist.security.checks import filterAuthorized

__all__ = ["OffsetCommitHandler", "OffsetDeleteHandler", "OffsetFetchHandler"]

E = ErrorCode

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


#: OffsetCommit v2-4's "use the broker's retention" (Kafka's
#: C{OffsetCommitRequest.DEFAULT_RETENTION_TIME})
DEFAULT_RETENTION_TIME = -1


def _partitionExists(broker, topic: str, partition: int) -> bool:
    """
    Kafka's C{metadataCache.contains(topicPartition)}.
    """
    logManager = broker.logManager
    if logManager is None or topic is None or partition is None:
        return False
    return logManager.getLog(topic, partition) is not None


def _groupByTopic(pairs):
    """
    @param pairs: C{((topic, partition), value)} in response order.
    @return: C{list} of C{(topic, [(partition, value), ...])}, topics in
        order of first appearance.
    """
    byTopic: dict[str, list] = {}
    for (topic, partition), value in pairs:
        byTopic.setdefault(topic, []).append((partition, value))
    return list(byTopic.items())


def _errorTopics(Topic, Partition, errors) -> tuple:
    """
    The C{topics} of an OffsetCommit or OffsetDelete response.

    @param errors: C{((topic, partition), error code)} in response order.
    """
    return tuple(
        Topic(
            name=name,
            partitions=tuple(
                Partition(partition_index=partition, error_code=code) for partition, code in parts
            ),
        )
        for name, parts in _groupByTopic(errors)
    )


class OffsetCommitHandler(Handler):
    """
    OffsetCommit v0-9 (v1 adds the generation, member and a per-partition
    commit timestamp, v2-4 carry a retention time, v6 a leader epoch, v7 a
    group instance id).  Partitions that do not exist are refused with
    UNKNOWN_TOPIC_OR_PARTITION before the group is consulted; the others get
    the coordinator's verdict.

    v0 commits went to ZooKeeper in Kafka, apart from the group
    coordinator's offsets; Kafka without ZooKeeper answers them with
    UNSUPPORTED_VERSION in every partition, and so does this broker: the
    client sees its commit fail instead of believing it stored.
    """

    apiKey = OFFSET_COMMIT
    minVersion = 0
    maxVersion = 9

    def handle(self, context, request):
        cls = responseType(OFFSET_COMMIT, context.apiVersion)
        Topic = nested(cls, "OffsetCommitResponseTopic")
        Partition = nested(cls, "OffsetCommitResponsePartition")
        if context.apiVersion == 0:
            allowed = self.allowed(context, READ, GROUP, request.group_id)
            code = E.unsupported_version if allowed else E.group_authorization_failed
            return _everyPartition(cls, Topic, Partition, request, code)
        broker = self.broker
        coordinator = broker.groupCoordinator
        nowMs = int(broker.clock.seconds() * 1000)
        retention = getattr(request, "retention_time", None)
        retentionMs = DEFAULT_RETENTION_TIME if retention is None else durationMs(retention)
        # Kafka: an explicit retention sets an expiry (and the offset is
        # stored as OffsetCommitValue v1); the default follows
        # offsets.retention.minutes.
        expireMs = None if retentionMs == DEFAULT_RETENTION_TIME else nowMs + retentionMs

        order = []
        errors: dict = {}
        offsets: dict = {}
        # Kafka: READ on the group, then READ on each topic.
        groupRefused = not self.allowed(context, READ, GROUP, request.group_id)
        readable = filterAuthorized(self.authorizer, context, READ, TOPIC, {t.name for t in request.topics})
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                order.append(tp)
                if groupRefused:
                    errors[tp] = E.group_authorization_failed
                elif topic.name not in readable:
                    errors[tp] = E.topic_authorization_failed
                elif coordinator is None:
                    errors[tp] = E.coordinator_not_available
                elif not _partitionExists(broker, *tp):
                    errors[tp] = E.unknown_topic_or_partition
                else:
                    errors.pop(tp, None)
                    offsets[tp] = OffsetAndMetadata(
                        offset=p.committed_offset,
                        leaderEpoch=getattr(p, "committed_leader_epoch", -1),
                        metadata=p.committed_metadata or "",
                        commitTimestampMs=_commitTimestamp(p, nowMs),
                        expireTimestampMs=expireMs,
                    )
        # One answer per partition even if the request repeated one.
        unique = dict.fromkeys(order)

        def response(committed):
            errors.update(committed)
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                topics=_errorTopics(Topic, Partition, ((tp, errors[tp]) for tp in unique)),
            )

        reply = Reply(context, response)
        if offsets:
            coordinator.commitOffsets(
                reply,
                CommitRequest(
                    groupId=request.group_id,
                    generationId=request.generation_id_or_member_epoch,
                    memberId=request.member_id or "",
                    groupInstanceId=getattr(request, "group_instance_id", None),
                    offsets=offsets,
                    apiVersion=context.apiVersion,
                ),
            )
        else:
            reply({})
        return reply.response()


def _commitTimestamp(partition, nowMs: int) -> int:
    """
    OffsetCommit v1's per-partition timestamp, which offsets expire from
    (-1: now), as Kafka's C{OffsetAndMetadata.fromRequest}; later versions
    have none.
    """
    timestamp = getattr(partition, "commit_timestamp", -1)
    return nowMs if timestamp == -1 else timestamp


def _everyPartition(cls, Topic, Partition, request, code):
    """
    An OffsetCommit response with C{code} for every partition requested.
    """
    pairs = ((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    return make(
        cls,
        throttle_time=NO_THROTTLE,
        topics=_errorTopics(Topic, Partition, ((tp, code) for tp in dict.fromkeys(pairs))),
    )


class OffsetFetchHandler(Handler):
    """
    OffsetFetch v0-9: v2+ may ask for all of a group's offsets (topics
    null) and report group errors at the top level; v8+ fetch several
    groups at once (KIP-709).  v1 reports a group error in every partition.
    v0 read Kafka's ZooKeeper offsets, which v0 commits wrote: answered,
    like those commits, with UNSUPPORTED_VERSION in every partition.
    With C{require_stable} (v7+, sent by read_committed consumers) a
    partition whose offsets are pending in an open transaction answers
    UNSTABLE_OFFSET_COMMIT, and the client asks again.
    """

    apiKey = OFFSET_FETCH
    minVersion = 0
    maxVersion = 9

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(OFFSET_FETCH, version)
        if version == 0:
            allowed = self.allowed(context, DESCRIBE, GROUP, request.group_id)
            code = E.unsupported_version if allowed else E.group_authorization_failed
            return self._response(cls, request, OffsetFetchResult(code))
        coordinator = self.broker.groupCoordinator
        requireStable = bool(getattr(request, "require_stable", False))
        if has(cls, "groups"):
            wanted = [(g.group_id, self._partitions(g.topics)) for g in request.groups]
            access = [_FetchAccess(self, context, groupId, partitions) for groupId, partitions in wanted]
            # v9: a KIP-848 member's id and epoch, checked by the coordinator.
            members = [(getattr(g, "member_id", None), getattr(g, "member_epoch", -1)) for g in request.groups]
            asked = [
                (groupId, a.partitions, *member)
                for (groupId, _), a, member in zip(wanted, access, members)
                if a.allowed
            ]

            def respond(results):
                results = iter(results)
                return self._groupsResponse(cls, wanted, [a.finish(next(results) if a.allowed else None) for a in access])

            reply = Reply(context, respond)
            if coordinator is None:
                reply([OffsetFetchResult(E.coordinator_not_available)] * len(asked))
            elif asked:
                coordinator.fetchOffsetsOfGroups(reply, asked, requireStable)
            else:
                reply([])
            return reply.response()
        access = _FetchAccess(self, context, request.group_id, self._partitions(request.topics))
        reply = Reply(context, lambda result: self._response(cls, request, access.finish(result)))
        if not access.allowed:
            reply(None)
        elif coordinator is None:
            reply(OffsetFetchResult(E.coordinator_not_available))
        else:
            coordinator.fetchOffsets(reply, request.group_id, access.partitions, requireStable)
        return reply.response()

    @staticmethod
    def _partitions(topics):
        if topics is None:
            return None
        return list(dict.fromkeys((t.name, i) for t in topics for i in t.partition_indexes))

    def _groupsResponse(self, cls, wanted, results):
        Group = nested(cls, "OffsetFetchResponseGroup")
        Topic = nested(cls, "OffsetFetchResponseTopics")
        Partition = nested(cls, "OffsetFetchResponsePartitions")
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            groups=tuple(
                make(
                    Group,
                    group_id=groupId,
                    topics=(
                        self._topics(Topic, Partition, result)
                        if result.errorCode == E.none
                        else ()
                    ),
                    error_code=result.errorCode,
                )
                for (groupId, _), result in zip(wanted, results)
            ),
        )

    def _response(self, cls, request, result: OffsetFetchResult):
        Topic = nested(cls, "OffsetFetchResponseTopic")
        Partition = nested(cls, "OffsetFetchResponsePartition")
        if result.errorCode != E.none:
            if not has(cls, "error_code"):
                # v0-1 (Kafka's getErrorResponse): the group error in each
                # requested partition.
                return make(
                    cls,
                    throttle_time=NO_THROTTLE,
                    topics=tuple(
                        Topic(
                            name=t.name,
                            partitions=tuple(
                                make(
                                    Partition,
                                    partition_index=i,
                                    committed_offset=-1,
                                    committed_leader_epoch=-1,
                                    metadata="",
                                    error_code=result.errorCode,
                                )
                                for i in t.partition_indexes
                            ),
                        )
                        for t in request.topics or ()
                    ),
                )
            return make(cls, throttle_time=NO_THROTTLE, error_code=result.errorCode, topics=())
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=E.none,
            topics=self._topics(Topic, Partition, result),
        )

    @staticmethod
    def _topics(Topic, Partition, result: OffsetFetchResult):
        return tuple(
            Topic(
                name=name,
                partitions=tuple(
                    make(
                        Partition,
                        partition_index=partition,
                        committed_offset=fetched.offset,
                        committed_leader_epoch=fetched.leaderEpoch,
                        metadata=fetched.metadata,
                        error_code=fetched.errorCode,
                    )
                    for partition, fetched in parts
                ),
            )
            for name, parts in _groupByTopic(result.offsets.items())
        )


class _FetchAccess:
    """
    What OffsetFetch may show of one group (Kafka's checks): nothing without
    DESCRIBE on the group; offsets of topics the principal may not DESCRIBE
    are left out of an all-topics answer, and refused with
    TOPIC_AUTHORIZATION_FAILED when asked for by name.

    @ivar allowed: whether the coordinator is to be asked at all.
    @ivar partitions: what to ask it for (C{None}: every committed one).
    """

    def __init__(self, handler, context, groupId: str, partitions) -> None:
        self.authorizer = handler.authorizer
        self.context = context
        self.requested = partitions
        self.partitions = partitions
        self.allowed = handler.allowed(context, DESCRIBE, GROUP, groupId)
        if self.allowed and self.authorizer is not None and partitions is not None:
            names = {topic for topic, _ in partitions}
            describable = filterAuthorized(self.authorizer, context, DESCRIBE, TOPIC, names)
            self.partitions = [tp for tp in partitions if tp[0] in describable]

    def finish(self, result: OffsetFetchResult | None) -> OffsetFetchResult:
        """
        @param result: the coordinator's answer, C{None} if not asked.
        """
        if not self.allowed:
            return OffsetFetchResult(E.group_authorization_failed)
        if self.authorizer is None or result.errorCode != E.none:
            return result
        if self.requested is None:
            visible = filterAuthorized(
                self.authorizer, self.context, DESCRIBE, TOPIC, {t for t, _ in result.offsets}, logIfDenied=False
            )
            return OffsetFetchResult(E.none, {tp: o for tp, o in result.offsets.items() if tp[0] in visible})
        if len(self.partitions) == len(self.requested):
            return result
        refused = FetchedOffset(-1, -1, "", E.topic_authorization_failed)
        return OffsetFetchResult(E.none, {tp: result.offsets.get(tp, refused) for tp in self.requested})


class OffsetDeleteHandler(Handler):
    """
    OffsetDelete v0 (KIP-496).  Unknown partitions are refused with
    UNKNOWN_TOPIC_OR_PARTITION; a group error (GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP...) is answered at the top level with no partitions, as
    Kafka's C{getErrorResponse}.
    """

    apiKey = OFFSET_DELETE
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(OFFSET_DELETE, context.apiVersion)
        Topic = nested(cls, "OffsetDeleteResponseTopic")
        Partition = nested(cls, "OffsetDeleteResponsePartition")
        broker = self.broker
        coordinator = broker.groupCoordinator
        if not self.allowed(context, DELETE, GROUP, request.group_id):
            return make(cls, error_code=E.group_authorization_failed, throttle_time=NO_THROTTLE, topics=())
        readable = filterAuthorized(self.authorizer, context, READ, TOPIC, {t.name for t in request.topics})
        order = []
        known = []
        errors: dict = {}
        for topic in request.topics:
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                order.append(tp)
                if topic.name not in readable:
                    errors[tp] = E.topic_authorization_failed
                elif _partitionExists(broker, *tp):
                    known.append(tp)
                else:
                    errors[tp] = E.unknown_topic_or_partition

        def response(result: OffsetDeleteResult):
            if result.errorCode != E.none:
                return make(cls, error_code=result.errorCode, throttle_time=NO_THROTTLE, topics=())
            errors.update(result.partitions)
            return make(
                cls,
                error_code=E.none,
                throttle_time=NO_THROTTLE,
                topics=_errorTopics(
                    Topic, Partition, ((tp, errors.get(tp, E.none)) for tp in dict.fromkeys(order))
                ),
            )

        reply = Reply(context, response)
        if coordinator is None:
            reply(OffsetDeleteResult(E.coordinator_not_available))
        else:
            # Called even with nothing known, so group errors still show.
            coordinator.deleteOffsets(reply, request.group_id, list(dict.fromkeys(known)))
        return reply.response()


offsetCommit = HandlerPlugin("builtin.offset_commit", OFFSET_COMMIT, OffsetCommitHandler, priority=0)
offsetFetch = HandlerPlugin("builtin.offset_fetch", OFFSET_FETCH, OffsetFetchHandler, priority=0)
offsetDelete = HandlerPlugin("builtin.offset_delete", OFFSET_DELETE, OffsetDeleteHandler, priority=0)
