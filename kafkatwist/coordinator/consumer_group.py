"""
KIP-848 consumer groups (ConsumerGroupHeartbeat, ConsumerGroupDescribe) as
part of the sans-io L{kafkatwist.coordinator.coordinator.GroupCoordinator}:
the classic coordinator owns this manager as it owns its offset manager,
calls it from its entry points only (so on the runtime's owner), and lends
it its effects (answers, timers).

The model is Kafka's C{GroupMetadataManager.consumerGroupHeartbeat}:

  - the group epoch moves when membership, a subscription, or the
    subscribed topics' partition counts change;
  - when it is ahead of the assignment epoch, the group's server-side
    assignor (L{kafkatwist.coordinator.assignors}) computes a new target
    assignment for every member;
  - each member reconciles towards its target on its own heartbeats
    (Kafka's C{CurrentAssignmentBuilder}): partitions to revoke are taken
    away first, with the member's epoch unchanged, and a partition is handed
    to a member only once no other member holds it (its partition epoch is
    free), so no partition is ever assigned to two members at once.

Offsets of a consumer group are kept where the classic coordinator keeps
every group's offsets (an empty classic group record of the same id, which
holds no members); commits are validated against the member epoch here.

Every change is written to C{__consumer_offsets} in Kafka's record types
(L{kafkatwist.coordinator.consumer_group_records}) and a heartbeat is
answered once its records are in the log; at start-up the groups are read
back (members keep their epochs and partitions and must heartbeat within
the session timeout).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from twisted.logger import Logger

from kafkatwist.coordinator.assignors import ASSIGNORS, AssignmentMember
from kafkatwist.coordinator.consumer_group_records import (
    GROUP_METADATA,
    TARGET_METADATA,
    LoadedConsumerGroup,
    groupTombstone,
    currentAssignmentRecord,
    groupEpochRecord,
    memberMetadataRecord,
    memberTombstones,
    targetEpochRecord,
    targetMemberRecord,
)
from kafkatwist.coordinator.formats import APPEND_ERRORS_FOR_GROUP
from kafkatwist.coordinator.results import GroupOverview
from kafkatwist.errors import ErrorCode

__all__ = [
    "ConsumerGroupManager",
    "HeartbeatRequest",
    "HeartbeatResult",
    "TopicImage",
]

log = Logger()
E = ErrorCode

# Timer keys: (kind, group id, member id).
SESSION = "cg-session"
REBALANCE = "cg-rebalance"

# Member states (Kafka's MemberState).
STABLE = "stable"
UNREVOKED_PARTITIONS = "unrevoked_partitions"
UNRELEASED_PARTITIONS = "unreleased_partitions"

LEAVE_EPOCH = -1
TEMPORARY_LEAVE_EPOCH = -2

TP = tuple[str, int]


@dataclass(frozen=True)
class TopicImage:
    """
    The topics a heartbeat is decided against: name -> (topic id, partition
    count), and the names the member may describe (what a regex may match).
    """

    topics: Mapping[str, tuple[uuid.UUID, int]]
    describable: frozenset[str] | None = None

    def idOf(self, name: str) -> uuid.UUID | None:
        info = self.topics.get(name)
        return None if info is None else info[0]


@dataclass(frozen=True)
class HeartbeatRequest:
    """
    A ConsumerGroupHeartbeat.  C{None} fields are "unchanged"; C{owned} is
    C{(topic name, partition)} pairs (topic ids already resolved by the
    handler; unknown ids dropped).
    """

    groupId: str
    memberId: str
    memberEpoch: int
    instanceId: str | None = None
    rackId: str | None = None
    rebalanceTimeoutMs: int = -1
    subscribedTopicNames: tuple[str, ...] | None = None
    subscribedTopicRegex: str | None = None
    serverAssignor: str | None = None
    owned: frozenset[TP] | None = None
    clientId: str = ""
    clientHost: str = ""
    version: int = 1
    image: TopicImage = field(default_factory=lambda: TopicImage({}))


@dataclass(frozen=True)
class HeartbeatResult:
    errorCode: ErrorCode
    errorMessage: str | None = None
    memberId: str | None = None
    memberEpoch: int = 0
    heartbeatIntervalMs: int = 0
    #: topic name -> partitions, or C{None} when unchanged
    assignment: Mapping[str, frozenset[int]] | None = None


@dataclass(frozen=True)
class DescribedMember:
    memberId: str
    instanceId: str | None
    rackId: str | None
    memberEpoch: int
    clientId: str
    clientHost: str
    subscribedTopicNames: tuple[str, ...]
    subscribedTopicRegex: str | None
    assignment: Mapping[str, frozenset[int]]
    targetAssignment: Mapping[str, frozenset[int]]


@dataclass(frozen=True)
class DescribedConsumerGroup:
    groupId: str
    errorCode: ErrorCode
    errorMessage: str | None = None
    state: str = "Dead"
    groupEpoch: int = -1
    assignmentEpoch: int = -1
    assignorName: str = ""
    members: tuple[DescribedMember, ...] = ()


class Member:
    def __init__(self, memberId: str) -> None:
        self.memberId = memberId
        self.instanceId: str | None = None
        self.rackId: str | None = None
        self.clientId = ""
        self.clientHost = ""
        self.subscribedTopicNames: tuple[str, ...] = ()
        self.subscribedTopicRegex: str | None = None
        self.serverAssignor: str | None = None
        self.rebalanceTimeoutMs = 0
        self.memberEpoch = 0
        self.previousMemberEpoch = 0
        self.state = STABLE
        self.assigned: dict[str, frozenset[int]] = {}
        self.pendingRevocation: dict[str, frozenset[int]] = {}


class ConsumerGroup:
    def __init__(self, groupId: str) -> None:
        self.groupId = groupId
        self.groupEpoch = 0
        self.assignmentEpoch = 0
        self.assignorName = ""
        self.members: dict[str, Member] = {}
        self.target: dict[str, dict[str, frozenset[int]]] = {}
        #: (topic, partition) -> epoch of the member holding it
        self.partitionEpochs: dict[TP, int] = {}
        #: subscribed topic -> partition count, as of the last epoch bump
        self.subscribedMetadata: dict[str, int] = {}
        #: regex -> the topics it matched last
        self.resolvedRegexes: dict[str, frozenset[str]] = {}

    def state(self) -> str:
        if not self.members:
            return "Empty"
        if self.groupEpoch > self.assignmentEpoch:
            return "Assigning"
        for m in self.members.values():
            if m.state != STABLE or m.memberEpoch != self.assignmentEpoch:
                return "Reconciling"
        return "Stable"

    def subscribedTopics(self, member: Member) -> frozenset[str]:
        topics = set(member.subscribedTopicNames)
        if member.subscribedTopicRegex:
            topics |= self.resolvedRegexes.get(member.subscribedTopicRegex, frozenset())
        return frozenset(topics)


def _tps(assignment: Mapping[str, frozenset[int]]) -> set[TP]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def _byTopic(tps) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for t, p in tps:
        out.setdefault(t, set()).add(p)
    return {t: frozenset(ps) for t, ps in out.items()}


class ConsumerGroupManager:
    """
    @param coordinator: the owning L{GroupCoordinator} (effects, clock,
        the classic groups sharing the id namespace).
    @param heartbeatIntervalMs: C{group.consumer.heartbeat.interval.ms}.
    @param sessionTimeoutMs: C{group.consumer.session.timeout.ms}.
    @param assignors: C{group.consumer.assignors}, the first the default.
    @param maxSize: C{group.consumer.max.size}.
    """

    def __init__(
        self,
        coordinator,
        *,
        heartbeatIntervalMs: int = 5000,
        sessionTimeoutMs: int = 45000,
        assignors: tuple[str, ...] = ("uniform", "range"),
        maxSize: int = 2**31 - 1,
        newMemberId=lambda: str(uuid.uuid4()),
    ) -> None:
        self._c = coordinator
        self._heartbeatIntervalMs = heartbeatIntervalMs
        self._sessionTimeoutMs = sessionTimeoutMs
        self._assignors = tuple(assignors)
        self._maxSize = maxSize
        self._newMemberId = newMemberId
        self._groups: dict[str, ConsumerGroup] = {}
        #: topic name -> id, as of the last topic image seen
        self._topicIds: dict[str, uuid.UUID] = {}

    # ------------------------------------------------------------------
    # Queries for the classic side

    def group(self, groupId: str) -> ConsumerGroup | None:
        return self._groups.get(groupId)

    def isNonEmpty(self, groupId: str) -> bool:
        group = self._groups.get(groupId)
        return group is not None and bool(group.members)

    def delete(self, groupId: str) -> list:
        """
        Drop an empty consumer group (DeleteGroups).

        @return: its tombstones (none if it is not a consumer group).
        """
        group = self._groups.get(groupId)
        if group is None or group.members:
            return []
        del self._groups[groupId]
        return [groupTombstone(groupId, TARGET_METADATA), groupTombstone(groupId, GROUP_METADATA)]

    def overviews(self) -> dict[str, GroupOverview]:
        """
        ListGroups' view of the consumer groups.
        """
        return {
            g.groupId: GroupOverview(g.groupId, "consumer", g.state(), "consumer")
            for g in self._groups.values()
        }

    def validateCommit(
        self, groupId: str, memberId: str, memberEpoch: int, apiVersion: int = 9
    ) -> ErrorCode | None:
        """
        Kafka's C{ConsumerGroup.validateOffsetCommit}: C{None} when
        C{groupId} is not a consumer group (the classic rules apply), NONE
        when the commit may go ahead, else the error.
        """
        group = self._groups.get(groupId)
        if group is None:
            return None
        if memberEpoch < 0 and not memberId:
            return E.none if not group.members else E.unknown_member_id
        member = group.members.get(memberId)
        if member is None:
            return E.unknown_member_id
        if apiVersion < 9:
            # Before v9 the field is a generation, which such a member has not.
            return E.unsupported_version
        if memberEpoch != member.memberEpoch:
            return E.stale_member_epoch
        return E.none

    def subscribedTopics(self, groupId: str) -> frozenset[str]:
        """
        The topics the members of C{groupId} consume (none if it is not a
        consumer group).
        """
        group = self._groups.get(groupId)
        if group is None:
            return frozenset()
        return frozenset().union(*(group.subscribedTopics(m) for m in group.members.values()))

    def validateFetch(self, groupId: str, memberId: str | None, memberEpoch: int) -> ErrorCode | None:
        """
        Kafka's C{ConsumerGroup.validateOffsetFetch} (OffsetFetch v9):
        C{None} when the fetch may go ahead, else the error.  Without a
        member id (an admin) there is nothing to check.
        """
        group = self._groups.get(groupId)
        if group is None or memberId is None or (memberEpoch < 0 and not memberId):
            return None
        member = group.members.get(memberId)
        if member is None:
            return E.unknown_member_id
        if memberEpoch != member.memberEpoch:
            return E.stale_member_epoch
        return None

    def timerFired(self, key) -> bool:
        kind = key[0]
        if kind == SESSION:
            self._onSessionTimeout(key[1], key[2])
        elif kind == REBALANCE:
            self._onRebalanceTimeout(key[1], key[2], key[3])
        else:
            return False
        return True

    def cancelTimers(self) -> None:
        for group in self._groups.values():
            for memberId in group.members:
                self._c.cancelTimer((SESSION, group.groupId, memberId))

    def unload(self, belongs) -> None:
        """
        Forget the groups C{belongs(groupId)} selects (their partition moved
        to another broker's coordinator), with their timers.
        """
        for groupId in [g for g in self._groups if belongs(g)]:
            group = self._groups.pop(groupId)
            for memberId, member in group.members.items():
                self._c.cancelTimer((SESSION, groupId, memberId))
                self._c.cancelTimer((REBALANCE, groupId, memberId, member.memberEpoch))

    # ------------------------------------------------------------------
    # ConsumerGroupHeartbeat

    def heartbeat(self, replyTo, request: HeartbeatRequest) -> None:
        """
        Answer C{replyTo} with a L{HeartbeatResult}, once the records the
        heartbeat caused are in the log.
        """
        c = self._c
        records: list = []
        result = self._heartbeat(request, records)
        if not records:
            c.respond(replyTo, result)
            return

        def written(error: ErrorCode) -> None:
            if error == E.none:
                c.respond(replyTo, result)
            else:
                log.warn(
                    "consumer group {group}: a write to __consumer_offsets failed: {error}",
                    group=request.groupId, error=error.name,
                )
                c.respond(replyTo, HeartbeatResult(APPEND_ERRORS_FOR_GROUP.get(error, error)))

        c.append(request.groupId, records, written)

    def _heartbeat(self, request: HeartbeatRequest, records: list) -> HeartbeatResult:
        self._topicIds.update((name, info[0]) for name, info in request.image.topics.items())
        error = self._validate(request)
        if error is not None:
            return error
        c = self._c
        status = c.statusError(request.groupId, allowEmpty=False)
        if status is not None:
            return HeartbeatResult(status)
        groupId = request.groupId
        classic = c.group(groupId)
        if classic is not None and classic.allMembers():
            return HeartbeatResult(E.group_id_not_found, f"Group {groupId} is not a consumer group.")
        if request.serverAssignor is not None and request.serverAssignor not in self._assignors:
            return HeartbeatResult(
                E.unsupported_assignor,
                f"ServerAssignor {request.serverAssignor} is not supported. "
                f"Supported assignors: {', '.join(self._assignors)}.",
            )
        regex = request.subscribedTopicRegex
        if regex:
            try:
                re.compile(regex)
            except re.error as e:
                return HeartbeatResult(
                    E.invalid_regular_expression,
                    f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {e}.",
                )
        group = self._groups.get(groupId)
        epoch = request.memberEpoch
        if epoch in (LEAVE_EPOCH, TEMPORARY_LEAVE_EPOCH):
            member = group.members.get(request.memberId) if group is not None else None
            if member is not None and request.instanceId is not None and member.instanceId != request.instanceId:
                return HeartbeatResult(E.fenced_instance_id, f"Static member {request.memberId} with "
                                       f"instance id {request.instanceId} was replaced.")
            if member is not None and epoch == TEMPORARY_LEAVE_EPOCH:
                # A static member leaving for a while: it keeps its
                # partitions until its session ends or its instance joins
                # again.
                self._setEpoch(member, TEMPORARY_LEAVE_EPOCH)
                records.append(self._currentRecord(group, member))
                self._c.setTimer((SESSION, group.groupId, member.memberId), self._sessionTimeoutMs)
            elif member is not None:
                self._removeMember(group, request.memberId, "left the group", records)
            return HeartbeatResult(
                E.none, memberId=request.memberId, memberEpoch=epoch,
                heartbeatIntervalMs=0,
            )
        if group is None:
            if epoch != 0:
                return HeartbeatResult(E.unknown_member_id, f"Group {groupId} has no member {request.memberId}.")
            group = self._groups[groupId] = ConsumerGroup(groupId)
        member = group.members.get(request.memberId) if request.memberId else None
        before = self._current(member) if member is not None else None
        bump = False
        isNew = False
        static = None
        if request.instanceId is not None:
            static = next(
                (m for m in group.members.values() if m.instanceId == request.instanceId), None
            )
            if static is not None and static is not member:
                if epoch != 0:
                    return HeartbeatResult(
                        E.fenced_instance_id,
                        f"Static member {request.memberId} with instance id {request.instanceId} "
                        "was replaced.",
                    )
                if static.memberEpoch != TEMPORARY_LEAVE_EPOCH:
                    return HeartbeatResult(
                        E.unreleased_instance_id,
                        f"Static member {static.memberId} with instance id {request.instanceId} "
                        "is still active.",
                    )
        if epoch == 0 and static is not None and static is not member:
            # The instance is back under a new member id: it takes over the
            # old member, partitions and all.
            member = self._replaceStatic(group, static, request.memberId or self._newMemberId(), records)
            isNew = True
        elif epoch == 0:
            if member is None:
                if len(group.members) >= self._maxSize:
                    return HeartbeatResult(
                        E.group_max_size_reached,
                        f"The consumer group has reached its maximum capacity of {self._maxSize} members.",
                    )
                memberId = request.memberId or self._newMemberId()
                member = Member(memberId)
                group.members[memberId] = member
                bump = isNew = True
            else:
                # A member joining again with nothing: whatever it held is
                # given up.
                self._setAssignment(group, member, {}, {})
                member.memberEpoch = member.previousMemberEpoch = 0
                member.state = STABLE
        else:
            if member is None:
                return HeartbeatResult(
                    E.unknown_member_id,
                    f"Member {request.memberId} is not a member of group {groupId}.",
                )
            error = self._checkEpoch(member, request)
            if error is not None:
                return error
        full = epoch == 0 or (
            request.rebalanceTimeoutMs != -1
            and request.subscribedTopicNames is not None
            and request.owned is not None
        )
        metadataBefore = self._metadata(member)
        if self._update(member, request):
            bump = True
        if isNew or self._metadata(member) != metadataBefore:
            records.append(memberMetadataRecord(group.groupId, member))
        if self._refreshMetadata(group, request.image):
            bump = True
        if bump:
            group.groupEpoch += 1
            records.append(groupEpochRecord(group.groupId, group.groupEpoch))
        if group.groupEpoch > group.assignmentEpoch:
            self._computeTarget(group, records)
        wasUnrevoked = member.state == UNREVOKED_PARTITIONS
        self._reconcile(group, member, request.owned)
        if self._current(member) != before:
            records.append(self._currentRecord(group, member))
        self._armTimers(group, member, wasUnrevoked)
        changed = before is None or member.assigned != before[3]
        return HeartbeatResult(
            E.none,
            memberId=member.memberId,
            memberEpoch=member.memberEpoch,
            heartbeatIntervalMs=self._heartbeatIntervalMs,
            assignment=dict(member.assigned) if (full or changed) else None,
        )

    def _validate(self, r: HeartbeatRequest) -> HeartbeatResult | None:
        def invalid(message: str) -> HeartbeatResult:
            return HeartbeatResult(E.invalid_request, message)

        if (r.version >= 1 or r.memberEpoch > 0 or r.memberEpoch == LEAVE_EPOCH) and not r.memberId:
            return invalid("MemberId can't be empty.")
        if not r.groupId:
            return invalid("GroupId can't be empty.")
        if r.instanceId == "":
            return invalid("InstanceId can't be empty.")
        if r.rackId == "":
            return invalid("RackId can't be empty.")
        if r.memberEpoch == 0:
            if r.rebalanceTimeoutMs == -1:
                return invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.owned is None or r.owned:
                return invalid("TopicPartitions must be empty when (re-)joining.")
            if r.subscribedTopicNames is None and r.subscribedTopicRegex is None:
                return invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif r.memberEpoch == TEMPORARY_LEAVE_EPOCH and r.instanceId is None:
            return invalid("InstanceId can't be null.")
        elif r.memberEpoch < TEMPORARY_LEAVE_EPOCH:
            return invalid(f"MemberEpoch is invalid: {r.memberEpoch}")
        return None

    def _checkEpoch(self, member: Member, r: HeartbeatRequest) -> HeartbeatResult | None:
        # Kafka's throwIfConsumerGroupMemberEpochIsInvalid.
        if r.memberEpoch == member.memberEpoch:
            return None
        if (
            r.memberEpoch == member.previousMemberEpoch
            and r.memberEpoch < member.memberEpoch
            and r.owned is not None
            and r.owned <= _tps(member.assigned)
        ):
            # The answer that moved its epoch was lost.
            return None
        return HeartbeatResult(
            E.fenced_member_epoch,
            f"The consumer group member has a smaller member epoch ({r.memberEpoch}) than the one "
            f"known by the group coordinator ({member.memberEpoch}). The member must abandon all its "
            "partitions and rejoin." if r.memberEpoch < member.memberEpoch else
            f"The consumer group member has a greater member epoch ({r.memberEpoch}) than the one "
            f"known by the group coordinator ({member.memberEpoch}). The member must abandon all its "
            "partitions and rejoin.",
        )

    def _update(self, member: Member, r: HeartbeatRequest) -> bool:
        """
        Apply the request's non-null fields; whether the subscription changed.
        """
        changed = False
        if r.instanceId is not None:
            member.instanceId = r.instanceId
        if r.rackId is not None:
            member.rackId = r.rackId
        member.clientId = r.clientId
        member.clientHost = r.clientHost
        if r.rebalanceTimeoutMs != -1:
            member.rebalanceTimeoutMs = r.rebalanceTimeoutMs
        if r.serverAssignor is not None and r.serverAssignor != member.serverAssignor:
            member.serverAssignor = r.serverAssignor
            changed = True
        if r.subscribedTopicNames is not None:
            names = tuple(sorted(set(r.subscribedTopicNames)))
            if names != member.subscribedTopicNames:
                member.subscribedTopicNames = names
                changed = True
        if r.subscribedTopicRegex is not None:
            regex = r.subscribedTopicRegex or None
            if regex != member.subscribedTopicRegex:
                member.subscribedTopicRegex = regex
                changed = True
        return changed

    def _refreshMetadata(self, group: ConsumerGroup, image: TopicImage) -> bool:
        """
        Resolve the group's regexes and read the subscribed topics'
        partition counts; whether anything differs from the last epoch.
        """
        regexes = {m.subscribedTopicRegex for m in group.members.values() if m.subscribedTopicRegex}
        visible = image.describable if image.describable is not None else frozenset(image.topics)
        resolved: dict[str, frozenset[str]] = {}
        for regex in regexes:
            pattern = re.compile(regex)
            resolved[regex] = frozenset(
                t for t in image.topics if t in visible and pattern.fullmatch(t)
            )
        changed = resolved != group.resolvedRegexes
        group.resolvedRegexes = resolved
        subscribed: set[str] = set()
        for m in group.members.values():
            subscribed |= group.subscribedTopics(m)
        metadata = {t: image.topics[t][1] for t in subscribed if t in image.topics}
        if metadata != group.subscribedMetadata:
            group.subscribedMetadata = metadata
            changed = True
        return changed

    def _assignorFor(self, group: ConsumerGroup) -> str:
        # Kafka: the assignor most members asked for, else the default.
        votes: dict[str, int] = {}
        for m in group.members.values():
            if m.serverAssignor:
                votes[m.serverAssignor] = votes.get(m.serverAssignor, 0) + 1
        if votes:
            return max(sorted(votes), key=lambda name: votes[name])
        return self._assignors[0]

    def _replaceStatic(self, group: ConsumerGroup, old: Member, memberId: str, records: list) -> Member:
        new = Member(memberId)
        for name, value in vars(old).items():
            if name != "memberId":
                setattr(new, name, value)
        del group.members[old.memberId]
        group.members[memberId] = new
        target = group.target.pop(old.memberId, None)
        if target is not None:
            group.target[memberId] = target
            records.append(targetMemberRecord(group.groupId, memberId, self._ids(target)))
        records.extend(memberTombstones(group.groupId, old.memberId))
        records.append(self._currentRecord(group, new))
        c = self._c
        c.cancelTimer((SESSION, group.groupId, old.memberId))
        c.cancelTimer((REBALANCE, group.groupId, old.memberId, old.memberEpoch))
        log.info(
            "consumer group {group}: static member {instance} is back as {member} (was {old})",
            group=group.groupId, instance=old.instanceId, member=memberId, old=old.memberId,
        )
        return new

    @staticmethod
    def _current(member: Member) -> tuple:
        return (
            member.memberEpoch, member.previousMemberEpoch, member.state,
            member.assigned, member.pendingRevocation,
        )

    @staticmethod
    def _metadata(member: Member) -> tuple:
        return (
            member.instanceId, member.rackId, member.clientId, member.clientHost,
            member.subscribedTopicNames, member.subscribedTopicRegex,
            member.rebalanceTimeoutMs, member.serverAssignor,
        )

    def _ids(self, assignment) -> dict[uuid.UUID, frozenset[int]]:
        return {
            self._topicIds[t]: ps for t, ps in assignment.items() if t in self._topicIds and ps
        }

    def _currentRecord(self, group: ConsumerGroup, member: Member):
        return currentAssignmentRecord(
            group.groupId, member, self._ids(member.assigned), self._ids(member.pendingRevocation)
        )

    def _computeTarget(self, group: ConsumerGroup, records: list) -> None:
        name = self._assignorFor(group)
        members = [
            AssignmentMember(
                m.memberId, m.instanceId, group.subscribedTopics(m), group.target.get(m.memberId, {})
            )
            for m in group.members.values()
        ]
        old = group.target
        group.target = ASSIGNORS[name](members, group.subscribedMetadata)
        group.assignorName = name
        group.assignmentEpoch = group.groupEpoch
        for memberId, target in group.target.items():
            if old.get(memberId, {}) != target or memberId not in old:
                records.append(targetMemberRecord(group.groupId, memberId, self._ids(target)))
        records.append(targetEpochRecord(group.groupId, group.assignmentEpoch))

    # ------------------------------------------------------------------
    # Reconciliation (Kafka's CurrentAssignmentBuilder)

    def _reconcile(self, group: ConsumerGroup, member: Member, owned: frozenset[TP] | None) -> None:
        if member.state == STABLE:
            if member.memberEpoch != group.assignmentEpoch:
                self._next(group, member, member.memberEpoch, owned)
        elif member.state == UNREVOKED_PARTITIONS:
            if owned is None or owned & _tps(member.pendingRevocation):
                return
            self._next(group, member, min(member.memberEpoch + 1, group.assignmentEpoch), owned)
        else:
            self._next(group, member, member.memberEpoch, owned)

    def _next(self, group: ConsumerGroup, member: Member, epoch: int, owned) -> None:
        target = _tps(group.target.get(member.memberId, {}))
        current = _tps(member.assigned)
        kept = current & target
        revoke = current - kept
        wanted = target - kept
        free = {tp for tp in wanted if group.partitionEpochs.get(tp, -1) == -1}
        unreleased = bool(wanted - free)
        stillOwned = owned is None or bool(owned & revoke)
        if revoke and stillOwned:
            self._setAssignment(group, member, _byTopic(kept), _byTopic(revoke))
            self._setEpoch(member, epoch)
            member.state = UNREVOKED_PARTITIONS
            return
        self._setAssignment(group, member, _byTopic(kept | free), {})
        self._setEpoch(member, group.assignmentEpoch)
        member.state = UNRELEASED_PARTITIONS if unreleased else STABLE

    @staticmethod
    def _setEpoch(member: Member, epoch: int) -> None:
        if epoch != member.memberEpoch:
            member.previousMemberEpoch = member.memberEpoch
            member.memberEpoch = epoch

    def _setAssignment(self, group: ConsumerGroup, member: Member, assigned, pending) -> None:
        for tp in _tps(member.assigned) | _tps(member.pendingRevocation):
            group.partitionEpochs.pop(tp, None)
        member.assigned = assigned
        member.pendingRevocation = pending
        # The partition epochs are set after the member's epoch is known.
        for tp in _tps(assigned) | _tps(pending):
            group.partitionEpochs[tp] = max(member.memberEpoch, 0)

    # ------------------------------------------------------------------
    # Timers and leaving

    def _armTimers(self, group: ConsumerGroup, member: Member, wasUnrevoked: bool) -> None:
        c = self._c
        c.setTimer((SESSION, group.groupId, member.memberId), self._sessionTimeoutMs)
        key = (REBALANCE, group.groupId, member.memberId)
        if member.state == UNREVOKED_PARTITIONS:
            # Armed once, when the revocation is asked for.
            if not wasUnrevoked:
                c.setTimer(key + (member.memberEpoch,), member.rebalanceTimeoutMs)
        else:
            # Only the key of the current epoch can be armed.
            for e in {member.memberEpoch, member.previousMemberEpoch}:
                c.cancelTimer(key + (e,))

    def _onSessionTimeout(self, groupId: str, memberId: str) -> None:
        group = self._groups.get(groupId)
        if group is not None and memberId in group.members:
            self._removeMember(group, memberId, "session timed out")

    def _onRebalanceTimeout(self, groupId: str, memberId: str, epoch: int) -> None:
        group = self._groups.get(groupId)
        member = group.members.get(memberId) if group is not None else None
        if (
            member is not None
            and member.state == UNREVOKED_PARTITIONS
            and member.memberEpoch == epoch
        ):
            self._removeMember(group, memberId, "did not revoke its partitions in time")

    def _removeMember(
        self, group: ConsumerGroup, memberId: str, why: str, records: list | None = None
    ) -> None:
        """
        Remove a member and bump the group epoch; its records go to
        C{records}, or are appended now (a timer's removal).
        """
        member = group.members.pop(memberId)
        self._setAssignment(group, member, {}, {})
        group.target.pop(memberId, None)
        group.groupEpoch += 1
        removal = memberTombstones(group.groupId, memberId)
        removal.append(groupEpochRecord(group.groupId, group.groupEpoch))
        c = self._c
        if records is None:
            c.append(group.groupId, removal)
        else:
            records.extend(removal)
        c.cancelTimer((SESSION, group.groupId, memberId))
        c.cancelTimer((REBALANCE, group.groupId, memberId, member.memberEpoch))
        log.info(
            "consumer group {group}: member {member} removed ({why}); group epoch {epoch}",
            group=group.groupId, member=memberId, why=why, epoch=group.groupEpoch,
        )

    # ------------------------------------------------------------------
    # Loading

    def load(self, loaded: Mapping[str, LoadedConsumerGroup], image: TopicImage) -> None:
        """
        Take the groups read back from the log (before serving).  Topic ids
        no longer in C{image} (deleted topics) are dropped; each member's
        session starts now.
        """
        self._topicIds.update((name, info[0]) for name, info in image.topics.items())
        names = {info[0]: name for name, info in image.topics.items()}

        def byName(assignment) -> dict[str, frozenset[int]]:
            return {names[t]: ps for t, ps in (assignment or {}).items() if t in names and ps}

        for groupId, stored in loaded.items():
            if stored.epoch is None:
                log.warn(
                    "consumer group {group}: no group metadata record; its {count} members "
                    "are not loaded", group=groupId, count=len(stored.members),
                )
                continue
            group = ConsumerGroup(groupId)
            group.groupEpoch = stored.epoch
            group.assignmentEpoch = min(stored.assignmentEpoch, stored.epoch)
            for memberId, m in stored.members.items():
                if m.metadata is None:
                    continue
                member = Member(memberId)
                for name, value in m.metadata.items():
                    setattr(member, name, value)
                if m.current is not None:
                    member.memberEpoch = m.current["memberEpoch"]
                    member.previousMemberEpoch = m.current["previousMemberEpoch"]
                    member.state = m.current["state"]
                group.members[memberId] = member
                self._setAssignment(
                    group, member,
                    byName(m.current and m.current["assigned"]),
                    byName(m.current and m.current["pending"]),
                )
                if m.target is not None:
                    group.target[memberId] = byName(m.target)
            # The subscribed topics as they are now: a change while the
            # broker was down is not noticed until the next change.
            self._refreshMetadata(group, image)
            self._groups[groupId] = group
            for memberId in group.members:
                self._c.setTimer((SESSION, groupId, memberId), self._sessionTimeoutMs)
        if loaded:
            log.info("loaded {count} consumer groups", count=len(self._groups))

    # ------------------------------------------------------------------
    # ConsumerGroupDescribe

    def describe(self, groupId: str) -> DescribedConsumerGroup:
        c = self._c
        status = c.statusError(groupId, allowEmpty=False)
        if status is not None:
            return DescribedConsumerGroup(groupId, status)
        group = self._groups.get(groupId)
        if group is None:
            message = (
                f"Group {groupId} is not a consumer group." if c.group(groupId) is not None
                and c.group(groupId).allMembers() else f"Group {groupId} not found."
            )
            return DescribedConsumerGroup(groupId, E.group_id_not_found, message)
        return DescribedConsumerGroup(
            groupId,
            E.none,
            state=group.state(),
            groupEpoch=group.groupEpoch,
            assignmentEpoch=group.assignmentEpoch,
            assignorName=group.assignorName or self._assignors[0],
            members=tuple(
                DescribedMember(
                    m.memberId, m.instanceId, m.rackId, m.memberEpoch, m.clientId, m.clientHost,
                    m.subscribedTopicNames, m.subscribedTopicRegex, dict(m.assigned),
                    dict(group.target.get(m.memberId, {})),
                )
                for m in group.members.values()
            ),
        )
