"""
KIP-848's consumer group APIs: ConsumerGroupHeartbeat (68, v0-1) and
ConsumerGroupDescribe (69, v0).

The handlers turn the C{kio} request into the coordinator's plain request
(topic ids resolved against the log manager's topics, which are passed in
as the heartbeat's topic image) and its result back into the response; the
group logic is L{kafkatwist.coordinator.consumer_group}.

Authorization as Kafka's C{KafkaApis}: READ on the group for a heartbeat,
and DESCRIBE on every topic it subscribes to by name (a regex matches only
topics the principal may DESCRIBE); DESCRIBE on the group for a
description, and on every topic of its members' assignments.  Refusals are
GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations


from kafkatwist.coordinator.consumer_group import (
    DescribedConsumerGroup,
    HeartbeatRequest,
    HeartbeatResult,
    TopicImage,
)
from kafkatwist.coordinator.reply import Reply
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.plugins.groups import clientHost
from kafkatwist.protocol.apis import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    responseType,
)
from kafkatwist.protocol.entities import (
    NO_THROTTLE,
    OPERATIONS_OMITTED,
    durationMs,
    make,
    ms,
    nested,
)
from kafkatwist.security.acl import AclOperation, ResourceType
from kafkatwist.security.checks import authorizedOperations, filterAuthorized

__all__ = ["ConsumerGroupDescribeHandler", "ConsumerGroupHeartbeatHandler"]

E = ErrorCode
READ, DESCRIBE = AclOperation.READ, AclOperation.DESCRIBE
GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC


def _image(broker) -> TopicImage:
    logManager = broker.logManager
    known = logManager.topics() if logManager is not None else {}
    return TopicImage({name: (info.topicId, info.numPartitions) for name, info in known.items()})


class ConsumerGroupHeartbeatHandler(Handler):
    """
    ConsumerGroupHeartbeat v0-1 (v1: regex subscriptions, and the client
    chooses its member id).
    """

    apiKey = CONSUMER_GROUP_HEARTBEAT
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(CONSUMER_GROUP_HEARTBEAT, version)
        Assignment = nested(cls, "Assignment")
        TopicPartitions = nested(cls, "TopicPartitions")
        image = _image(self.broker)

        def response(result):
            assignment = None
            if result.assignment is not None:
                assignment = make(
                    Assignment,
                    topic_partitions=tuple(
                        make(TopicPartitions, topic_id=image.idOf(topic), partitions=tuple(sorted(ps)))
                        for topic, ps in sorted(result.assignment.items())
                        if image.idOf(topic) is not None
                    ),
                )
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=result.errorCode,
                error_message=result.errorMessage,
                member_id=result.memberId,
                member_epoch=result.memberEpoch,
                heartbeat_interval=ms(result.heartbeatIntervalMs),
                assignment=assignment,
            )

        def failed(code):
            return HeartbeatResult(code, memberId=request.member_id or None, memberEpoch=request.member_epoch)

        reply = Reply(context, response)
        coordinator = self.broker.groupCoordinator
        if not self.allowed(context, READ, GROUP, request.group_id):
            reply(failed(E.group_authorization_failed))
            return reply.response()
        if coordinator is None:
            reply(failed(E.coordinator_not_available))
            return reply.response()
        names = request.subscribed_topic_names
        if names and self.authorizer is not None:
            if len(filterAuthorized(self.authorizer, context, DESCRIBE, TOPIC, names)) < len(set(names)):
                reply(failed(E.topic_authorization_failed))
                return reply.response()
        owned = None
        if request.topic_partitions is not None:
            byId = {tid: name for name, (tid, _) in image.topics.items()}
            owned = frozenset(
                (byId[tp.topic_id], p)
                for tp in request.topic_partitions
                if tp.topic_id in byId
                for p in tp.partitions
            )
        regex = getattr(request, "subscribed_topic_regex", None)
        if regex and self.authorizer is not None:
            image = TopicImage(
                image.topics,
                frozenset(filterAuthorized(self.authorizer, context, DESCRIBE, TOPIC, image.topics, False)),
            )
        coordinator.consumerGroupHeartbeat(
            reply,
            HeartbeatRequest(
                groupId=request.group_id,
                memberId=request.member_id,
                memberEpoch=request.member_epoch,
                instanceId=request.instance_id,
                rackId=request.rack_id,
                rebalanceTimeoutMs=durationMs(request.rebalance_timeout),
                subscribedTopicNames=None if names is None else tuple(names),
                subscribedTopicRegex=regex,
                serverAssignor=request.server_assignor,
                owned=owned,
                clientId=getattr(context, "clientId", None) or "",
                clientHost=clientHost(context),
                version=version,
                image=image,
            ),
        )
        return reply.response()


#: ConsumerGroupDescribe v1's member_type of a consumer-protocol member
CONSUMER_MEMBER = 1


class ConsumerGroupDescribeHandler(Handler):
    """
    ConsumerGroupDescribe v0-1.  v1 (Kafka 4.x) adds each member's
    C{member_type}: always 1 (the consumer protocol) here, as a consumer
    group takes no members of the classic protocol (Kafka's 0 is a classic
    member of an upgraded group).
    """

    apiKey = CONSUMER_GROUP_DESCRIBE
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(CONSUMER_GROUP_DESCRIBE, context.apiVersion)
        Group = nested(cls, "DescribedGroup")
        Member = nested(cls, "Member")
        Assignment = nested(cls, "Assignment")
        TopicPartitions = nested(cls, "TopicPartitions")
        image = _image(self.broker)
        groupIds = list(request.group_ids)
        allowed = [self.allowed(context, DESCRIBE, GROUP, g) for g in groupIds]

        def assignment(parts):
            return make(
                Assignment,
                topic_partitions=tuple(
                    make(
                        TopicPartitions,
                        topic_id=image.idOf(topic),
                        topic_name=topic,
                        partitions=tuple(sorted(ps)),
                    )
                    for topic, ps in sorted(parts.items())
                    if image.idOf(topic) is not None
                ),
            )

        def describe(groupId, ok, d):
            if not ok:
                return make(
                    Group, error_code=E.group_authorization_failed, error_message=None,
                    group_id=groupId, group_state="", group_epoch=-1, assignment_epoch=-1,
                    assignor_name="", members=(), authorized_operations=OPERATIONS_OMITTED,
                )
            topics = {t for m in d.members for t in (*m.assignment, *m.targetAssignment)}
            if topics and self.authorizer is not None:
                if len(filterAuthorized(self.authorizer, context, DESCRIBE, TOPIC, topics)) < len(topics):
                    d = DescribedConsumerGroup(
                        groupId, E.topic_authorization_failed,
                        "The group has described topic(s) that the client is not authorized to describe.",
                    )
            operations = OPERATIONS_OMITTED
            if request.include_authorized_operations and d.errorCode == E.none:
                operations = authorizedOperations(self.authorizer, context, GROUP, groupId)
            return make(
                Group,
                error_code=d.errorCode,
                error_message=d.errorMessage,
                group_id=groupId,
                group_state=d.state,
                group_epoch=d.groupEpoch,
                assignment_epoch=d.assignmentEpoch,
                assignor_name=d.assignorName,
                members=tuple(
                    make(
                        Member,
                        member_id=m.memberId,
                        instance_id=m.instanceId,
                        rack_id=m.rackId,
                        member_epoch=m.memberEpoch,
                        client_id=m.clientId,
                        client_host=m.clientHost,
                        subscribed_topic_names=m.subscribedTopicNames,
                        subscribed_topic_regex=m.subscribedTopicRegex,
                        assignment=assignment(m.assignment),
                        target_assignment=assignment(m.targetAssignment),
                        member_type=CONSUMER_MEMBER,
                    )
                    for m in d.members
                ),
                authorized_operations=operations,
            )

        def response(described):
            answers = iter(described)
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                groups=tuple(
                    describe(g, ok, next(answers) if ok else None) for g, ok in zip(groupIds, allowed)
                ),
            )

        reply = Reply(context, response)
        coordinator = self.broker.groupCoordinator
        if coordinator is None:
            reply([DescribedConsumerGroup(g, E.coordinator_not_available) for g, ok in zip(groupIds, allowed) if ok])
        else:
            coordinator.consumerGroupDescribe(reply, [g for g, ok in zip(groupIds, allowed) if ok])
        return reply.response()


consumerGroupHeartbeat = HandlerPlugin(
    "builtin.consumer_group_heartbeat",
    CONSUMER_GROUP_HEARTBEAT,
    ConsumerGroupHeartbeatHandler,
    priority=0,
)
consumerGroupDescribe = HandlerPlugin(
    "builtin.consumer_group_describe",
    CONSUMER_GROUP_DESCRIBE,
    ConsumerGroupDescribeHandler,
    priority=0,
)
