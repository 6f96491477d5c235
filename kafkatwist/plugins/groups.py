"""
The classic group membership APIs: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, DescribeGroups, ListGroups and DeleteGroups.

Each handler translates its C{kio} request into the plain arguments of
the group coordinator (L{kafkatwist.coordinator.service}, found as
C{broker.groupCoordinator}) and the coordinator's result back into the
response entity of the request's version.  The coordinator answers through
a L{Reply}: at once when the handler thread could decide (nearly always),
else later through the request's pending response -- a member parked in
JoinGroup or SyncGroup holds no handler thread.

Before the broker has a coordinator (or after it was shut down) every API
answers COORDINATOR_NOT_AVAILABLE, which clients treat as "look the
coordinator up again later", as Kafka does while C{__consumer_offsets} is
being created or loaded.

With an authorizer, each checks what Kafka's C{KafkaApis} checks: READ on
the group to join, sync, heartbeat or leave; DESCRIBE to find its
coordinator or describe it; DELETE to delete it; ListGroups lists the groups
the principal may describe (all of them with DESCRIBE on the cluster).
Refusals are GROUP_AUTHORIZATION_FAILED (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
for a transactional id's coordinator).

Version ranges cover librdkafka 2.x, kafka-python 3.x and aiokafka 0.14
(see the client-compat notes) within what C{kio} has schemas for.
"""

from __future__ import annotations


from kafkatwist.cluster.answers import coordinatorFor
from kafkatwist.coordinator.reply import Reply
from kafkatwist.coordinator.requests import JoinRequest, SyncRequest
from kafkatwist.coordinator.results import (
    GroupDescription,
    JoinGroupResult,
    LeaveGroupResult,
    ListGroupsResult,
    SyncGroupResult,
)
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    SYNC_GROUP,
    responseType,
)
from kafkatwist.protocol.entities import (
    NO_THROTTLE,
    OPERATIONS_OMITTED,
    durationMs,
    has,
    make,
    nested,
)
from kafkatwist.security.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operationsBitfield,
)
from kafkatwist.security.checks import authorizedOperations, filterAuthorized

__all__ = [
    "DeleteGroupsHandler",
    "DescribeGroupsHandler",
    "FindCoordinatorHandler",
    "HeartbeatHandler",
    "JoinGroupHandler",
    "LeaveGroupHandler",
    "ListGroupsHandler",
    "SyncGroupHandler",
]

E = ErrorCode


#: FindCoordinator key types (Kafka's C{CoordinatorType})
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

#: the operations a group resource supports, as Kafka's C{AclOperation} bit
#: positions: what DescribeGroups reports without an authorizer
ALL_GROUP_OPERATIONS = operationsBitfield(SUPPORTED_OPERATIONS[ResourceType.GROUP])

READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP = ResourceType.GROUP

def clientHost(context) -> str:
    """
    The client host as Kafka reports it in DescribeGroups: the address with
    a leading slash (Java's C{InetAddress.toString()} of an unresolved
    host).
    """
    address = getattr(context, "clientAddress", None)
    host = address[0] if address else ""
    return f"/{host}"


class FindCoordinatorHandler(Handler):
    """
    FindCoordinator v0-6: this broker coordinates every group and
    transactional id.  v4+ batches keys (KIP-699) and answers one entry per
    key.
    """

    apiKey = FIND_COORDINATOR
    minVersion = 0
    maxVersion = 6

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(FIND_COORDINATOR, version)
        keyType = getattr(request, "key_type", KEY_TYPE_GROUP)
        if has(type(request), "coordinator_keys"):
            keys = tuple(request.coordinator_keys)
        else:
            keys = (request.key,)
        endpoint = self.broker.advertisedListenerFor(context.listenerName)
        answers = [(key, *(self._refusal(context, keyType, key) or self._lookup(keyType, endpoint, key, context.listenerName))) for key in keys]
        if has(cls, "coordinators"):
            Coordinator = nested(cls, "Coordinator")
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                coordinators=tuple(
                    make(
                        Coordinator,
                        key=key,
                        node_id=nodeId,
                        host=host,
                        port=port,
                        error_code=code,
                        error_message=None,
                    )
                    for key, code, nodeId, host, port in answers
                ),
            )
        _, code, nodeId, host, port = answers[0]
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=code,
            error_message=None,
            node_id=nodeId,
            host=host,
            port=port,
        )

    def _refusal(self, context, keyType: int, key: str):
        """
        DESCRIBE on the group or transactional id, or its refusal as a
        C{_lookup} answer.
        """
        if keyType == KEY_TYPE_GROUP and not self.allowed(context, DESCRIBE, GROUP, key):
            return (E.group_authorization_failed, -1, "", -1)
        if keyType == KEY_TYPE_TRANSACTION and not self.allowed(
            context, DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
        ):
            return (E.transactional_id_authorization_failed, -1, "", -1)
        return None

    def _lookup(self, keyType: int, endpoint, key: str = "", listenerName: str = "") -> tuple[ErrorCode, int, str, int]:
        """
        @return: C{(error, nodeId, host, port)}; on error the node is
            Kafka's C{Node.noNode()} (-1, "", -1).  In a cluster: the leader
            of the internal topic's partition that holds C{key}.
        """
        cluster = self.broker.cluster
        if cluster is not None and keyType in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            return coordinatorFor(cluster, self.broker.config, keyType, key, listenerName)
        if keyType == KEY_TYPE_GROUP:
            if self.broker.groupCoordinator is None:
                return (E.coordinator_not_available, -1, "", -1)
        elif keyType == KEY_TYPE_TRANSACTION:
            if self.broker.transactionCoordinator is None:
                return (E.coordinator_not_available, -1, "", -1)
        else:
            # Kafka's CoordinatorType.forId refuses unknown types.
            return (E.invalid_request, -1, "", -1)
        return (E.none, self.broker.nodeId, endpoint.host, endpoint.port)


class _GroupHandler(Handler):
    """
    Base of the handlers that need the group coordinator.
    """

    @property
    def coordinator(self):
        return self.broker.groupCoordinator


class JoinGroupHandler(_GroupHandler):
    """
    JoinGroup v0-9.  v0 has no rebalance timeout (the session timeout
    serves); from v4 a member without an id and without a group instance id
    is first given one with MEMBER_ID_REQUIRED (KIP-394).  v0 and v1 stay
    listed because librdkafka before 2.11 needs them.
    """

    apiKey = JOIN_GROUP
    minVersion = 0
    maxVersion = 9

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(JOIN_GROUP, version)
        memberId = request.member_id or ""
        if not self.allowed(context, READ, GROUP, request.group_id):
            return self.response(cls, version, JoinGroupResult.failed(memberId, E.group_authorization_failed))
        coordinator = self.coordinator
        if coordinator is None:
            return self.response(cls, version, JoinGroupResult.failed(memberId, E.coordinator_not_available))
        sessionTimeoutMs = durationMs(request.session_timeout)
        rebalance = getattr(request, "rebalance_timeout", None)
        rebalanceTimeoutMs = sessionTimeoutMs if rebalance is None else durationMs(rebalance)
        groupInstanceId = getattr(request, "group_instance_id", None)
        reply = Reply(context, lambda result: self.response(cls, version, result))
        coordinator.joinGroup(
            reply,
            JoinRequest(
                groupId=request.group_id,
                memberId=memberId,
                groupInstanceId=groupInstanceId,
                clientId=context.clientId or "",
                clientHost=clientHost(context),
                rebalanceTimeoutMs=rebalanceTimeoutMs,
                sessionTimeoutMs=sessionTimeoutMs,
                protocolType=request.protocol_type,
                protocols=tuple((p.name, p.metadata) for p in request.protocols),
                requireKnownMemberId=version >= 4 and groupInstanceId is None,
                reason=getattr(request, "reason", None),
            ),
        )
        return reply.response()

    @staticmethod
    def response(cls, version: int, result: JoinGroupResult):
        """
        @return: the JoinGroup response entity for C{result}.
        """
        Member = nested(cls, "JoinGroupResponseMember")
        protocolName = result.protocolName
        if protocolName is None and version < 7:
            # Not nullable before v7: Kafka's JoinGroupResponse sends "".
            protocolName = ""
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.errorCode,
            generation_id=result.generationId,
            protocol_type=result.protocolType,
            protocol_name=protocolName,
            leader=result.leaderId,
            skip_assignment=result.skipAssignment,
            member_id=result.memberId,
            members=tuple(
                make(
                    Member,
                    member_id=m.memberId,
                    group_instance_id=m.groupInstanceId,
                    metadata=m.metadata,
                )
                for m in result.members
            ),
        )


class SyncGroupHandler(_GroupHandler):
    """
    SyncGroup v0-5.  From v5 the protocol type and name are mandatory
    (INCONSISTENT_GROUP_PROTOCOL without them, as Kafka's
    C{areMandatoryProtocolTypeAndNamePresent}).
    """

    apiKey = SYNC_GROUP
    minVersion = 0
    maxVersion = 5

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(SYNC_GROUP, version)
        if not self.allowed(context, READ, GROUP, request.group_id):
            return self.response(cls, SyncGroupResult(E.group_authorization_failed))
        coordinator = self.coordinator
        if coordinator is None:
            return self.response(cls, SyncGroupResult(E.coordinator_not_available))
        protocolType = getattr(request, "protocol_type", None)
        protocolName = getattr(request, "protocol_name", None)
        if version >= 5 and (protocolType is None or protocolName is None):
            return self.response(cls, SyncGroupResult(E.inconsistent_group_protocol))
        reply = Reply(context, lambda result: self.response(cls, result))
        coordinator.syncGroup(
            reply,
            SyncRequest(
                groupId=request.group_id,
                generationId=request.generation_id,
                memberId=request.member_id,
                groupInstanceId=getattr(request, "group_instance_id", None),
                protocolType=protocolType,
                protocolName=protocolName,
                assignments={a.member_id: a.assignment for a in request.assignments},
            ),
        )
        return reply.response()

    @staticmethod
    def response(cls, result: SyncGroupResult):
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.errorCode,
            protocol_type=result.protocolType,
            protocol_name=result.protocolName,
            assignment=result.assignment or b"",
        )


class HeartbeatHandler(_GroupHandler):
    """
    Heartbeat v0-4 (v3 adds the group instance id).
    """

    apiKey = HEARTBEAT
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        cls = responseType(HEARTBEAT, context.apiVersion)
        reply = Reply(context, lambda code: make(cls, throttle_time=NO_THROTTLE, error_code=code))
        coordinator = self.coordinator
        if not self.allowed(context, READ, GROUP, request.group_id):
            reply(E.group_authorization_failed)
        elif coordinator is None:
            reply(E.coordinator_not_available)
        else:
            coordinator.heartbeat(
                reply,
                request.group_id,
                request.generation_id,
                request.member_id,
                getattr(request, "group_instance_id", None),
            )
        return reply.response()


class LeaveGroupHandler(_GroupHandler):
    """
    LeaveGroup v0-5.  v0-2 name one member and answer with one error (the
    top-level one, else that member's); v3+ batch members (KIP-345) and
    answer per member.
    """

    apiKey = LEAVE_GROUP
    minVersion = 0
    maxVersion = 5

    def handle(self, context, request):
        cls = responseType(LEAVE_GROUP, context.apiVersion)
        if has(type(request), "members"):
            members = [
                (m.member_id, m.group_instance_id, getattr(m, "reason", None))
                for m in request.members
            ]
        else:
            members = [(request.member_id, None)]
        reply = Reply(context, lambda result: self.response(cls, result))
        coordinator = self.coordinator
        if not self.allowed(context, READ, GROUP, request.group_id):
            reply(LeaveGroupResult(E.group_authorization_failed))
        elif coordinator is None:
            reply(LeaveGroupResult(E.coordinator_not_available))
        else:
            coordinator.leaveGroup(reply, request.group_id, members)
        return reply.response()

    @staticmethod
    def response(cls, result: LeaveGroupResult):
        if not has(cls, "members"):
            # Kafka's LeaveGroupResponse for v0-2: the top-level error, or
            # the first member error.
            code = result.errorCode
            if code == E.none:
                code = next((m.errorCode for m in result.members if m.errorCode != E.none), E.none)
            return make(cls, throttle_time=NO_THROTTLE, error_code=code)
        Member = nested(cls, "MemberResponse")
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.errorCode,
            members=tuple(
                make(
                    Member,
                    member_id=m.memberId,
                    group_instance_id=m.groupInstanceId,
                    error_code=m.errorCode,
                )
                for m in result.members
            ),
        )


class DescribeGroupsHandler(_GroupHandler):
    """
    DescribeGroups v0-5.  An unknown group is described as Dead without an
    error (Kafka before KIP-1043).
    """

    apiKey = DESCRIBE_GROUPS
    minVersion = 0
    maxVersion = 5

    def handle(self, context, request):
        cls = responseType(DESCRIBE_GROUPS, context.apiVersion)
        includeOps = getattr(request, "include_authorized_operations", False)
        authorizer = self.authorizer
        # Kafka answers the groups the principal may describe, then the
        # refused ones.
        describable = filterAuthorized(authorizer, context, DESCRIBE, GROUP, request.groups)
        wanted = [g for g in request.groups if g in describable]
        refused = [
            GroupDescription(E.group_authorization_failed, groupId, "", "", "")
            for groupId in request.groups
            if groupId not in describable
        ]

        def operations(groupId):
            if not includeOps:
                return OPERATIONS_OMITTED
            return authorizedOperations(authorizer, context, GROUP, groupId)

        reply = Reply(context, lambda descriptions: self.response(cls, operations, [*descriptions, *refused]))
        coordinator = self.coordinator
        if coordinator is None:
            reply([GroupDescription(E.coordinator_not_available, groupId, "", "", "") for groupId in wanted])
        elif wanted:
            coordinator.describeGroups(reply, wanted)
        else:
            reply([])
        return reply.response()

    @staticmethod
    def response(cls, operations, descriptions):
        Group = nested(cls, "DescribedGroup")
        Member = nested(cls, "DescribedGroupMember")
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            groups=tuple(
                make(
                    Group,
                    error_code=desc.errorCode,
                    group_id=desc.groupId,
                    group_state=desc.state,
                    protocol_type=desc.protocolType,
                    protocol_data=desc.protocolData,
                    members=tuple(
                        make(
                            Member,
                            member_id=m.memberId,
                            group_instance_id=m.groupInstanceId,
                            client_id=m.clientId,
                            client_host=m.clientHost,
                            member_metadata=m.metadata,
                            member_assignment=m.assignment,
                        )
                        for m in desc.members
                    ),
                    authorized_operations=(
                        operations(desc.groupId) if desc.errorCode == E.none else OPERATIONS_OMITTED
                    ),
                )
                for desc in descriptions
            ),
        )


class ListGroupsHandler(_GroupHandler):
    """
    ListGroups v0-5: v4 filters by state, v5 by type (C{classic} or
    C{consumer}, KIP-848's).
    """

    apiKey = LIST_GROUPS
    minVersion = 0
    maxVersion = 5

    def handle(self, context, request):
        cls = responseType(LIST_GROUPS, context.apiVersion)
        types = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
        visible = None
        if not self.allowed(context, DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, logIfDenied=False):
            # Only the groups the principal may describe, silently.
            authorizer = self.authorizer

            def visible(groupIds):
                return filterAuthorized(authorizer, context, DESCRIBE, GROUP, groupIds, logIfDenied=False)

        reply = Reply(context, lambda result: self.response(cls, result, types, visible))
        coordinator = self.coordinator
        if coordinator is None:
            reply(ListGroupsResult(E.coordinator_not_available))
        else:
            coordinator.listGroups(reply, tuple(getattr(request, "states_filter", ()) or ()))
        return reply.response()

    @staticmethod
    def response(cls, result: ListGroupsResult, types, visible=None):
        Listed = nested(cls, "ListedGroup")
        groups = [g for g in result.groups if not types or g.groupType in types]
        if visible is not None:
            allowed = visible([g.groupId for g in groups])
            groups = [g for g in groups if g.groupId in allowed]
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            error_code=result.errorCode,
            groups=tuple(
                make(
                    Listed,
                    group_id=g.groupId,
                    protocol_type=g.protocolType,
                    group_state=g.state,
                    group_type=g.groupType,
                )
                for g in groups
            ),
        )


class DeleteGroupsHandler(_GroupHandler):
    """
    DeleteGroups v0-2: only Empty groups go (NON_EMPTY_GROUP otherwise),
    with their offsets.
    """

    apiKey = DELETE_GROUPS
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        cls = responseType(DELETE_GROUPS, context.apiVersion)
        # Kafka answers from a map keyed by group: a repeated name is
        # deleted (and reported) once.
        names = list(dict.fromkeys(request.groups_names))
        deletable = filterAuthorized(self.authorizer, context, DELETE, GROUP, names)
        refused = {name: E.group_authorization_failed for name in names if name not in deletable}
        allowed = [name for name in names if name in deletable]
        reply = Reply(context, lambda codes: self.response(cls, names, {**codes, **refused}))
        coordinator = self.coordinator
        if coordinator is None:
            reply({name: E.coordinator_not_available for name in allowed})
        elif allowed:
            coordinator.deleteGroups(reply, allowed)
        else:
            reply({})
        return reply.response()

    @staticmethod
    def response(cls, names, codes):
        Result = nested(cls, "DeletableGroupResult")
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            results=tuple(make(Result, group_id=name, error_code=codes[name]) for name in names),
        )


findCoordinator = HandlerPlugin(
    "builtin.find_coordinator", FIND_COORDINATOR, FindCoordinatorHandler, priority=0
)
joinGroup = HandlerPlugin("builtin.join_group", JOIN_GROUP, JoinGroupHandler, priority=0)
syncGroup = HandlerPlugin("builtin.sync_group", SYNC_GROUP, SyncGroupHandler, priority=0)
heartbeat = HandlerPlugin("builtin.heartbeat", HEARTBEAT, HeartbeatHandler, priority=0)
leaveGroup = HandlerPlugin("builtin.leave_group", LEAVE_GROUP, LeaveGroupHandler, priority=0)
describeGroups = HandlerPlugin(
    "builtin.describe_groups", DESCRIBE_GROUPS, DescribeGroupsHandler, priority=0
)
listGroups = HandlerPlugin("builtin.list_groups", LIST_GROUPS, ListGroupsHandler, priority=0)
deleteGroups = HandlerPlugin(
    "builtin.delete_groups", DELETE_GROUPS, DeleteGroupsHandler, priority=0
)
