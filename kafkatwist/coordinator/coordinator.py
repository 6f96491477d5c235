"""
Kafka's classic group coordinator (C{GroupCoordinator.scala}) as a sans-io
state machine: group membership (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and administration (DescribeGroups, ListGroups, DeleteGroups).
Committed offsets are L{kafkatwist.coordinator.offsetmanager}'s.

Inputs and outputs
==================

Every entry point takes the current time (milliseconds, wall clock) first
and returns the L{effects<kafkatwist.coordinator.effects>} it produced:
answers (L{Respond}, to the C{replyTo} the request came with), records for
C{__consumer_offsets} (L{Append}), and timers (L{SetTimer},
L{CancelTimer}).  What happens to those comes back as inputs:
L{GroupCoordinator.appendCompleted} and L{GroupCoordinator.timerFired}.
Nothing here blocks, locks, reads a clock or touches a log;
L{kafkatwist.coordinator.runtime} is the shell that does, and it calls in
from one thread at a time (the machine's owner).

As in Kafka, a write's effect on the group waits for the append: a leader's
assignment becomes the group's (and Stable) only once its group record is
in the log, a commit is visible to OffsetFetch only once its records are.
Removals (DeleteGroups, OffsetDelete, expiry) change memory at once and
answer once their tombstones are appended; appends to one partition happen
in the order emitted, so the log replays to the same state.

Timers are Kafka's purgatories: a member's session, a pending member's
join deadline, the group's rebalance (join) deadline and its pending-sync
deadline, and the periodic offset expiry.  A member's session timer is not
moved by each heartbeat: the heartbeat moves the deadline, and a timer that
fires early re-arms itself for the rest, so a heartbeat costs no timer
effect at all.

Differences from Kafka
======================

  - No group size limit (C{group.max.size}).  Transactional offset
    commits are L{kafkatwist.coordinator.txnoffsets}'.
  - JoinGroup v9's C{skipAssignment} is never set: a static member that
    rejoins a Stable group with unchanged metadata is answered as before
    v9, with the previous leader id, so it never runs the assignor.
  - A JoinGroup or SyncGroup parked for a member that sends another one is
    answered with REBALANCE_IN_PROGRESS (Kafka silently drops the older
    callback) so no request is left unanswered.
  - DeleteGroups answers once the tombstones are appended, with the append's
    error if any (Kafka only logs it).
"""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from twisted.logger import Logger

from kafkatwist.coordinator.consumer_group import ConsumerGroupManager, HeartbeatRequest, TopicImage
from kafkatwist.coordinator.effects import Append, CancelTimer, Respond, SetTimer
from kafkatwist.coordinator.formats import (
    APPEND_ERRORS_FOR_GROUP,
    groupRecord,
    groupTombstone,
    offsetTombstones,
    partitionFor,
)
from kafkatwist.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from kafkatwist.coordinator.offsetmanager import OffsetMetadataManager
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.requests import CommitRequest, JoinRequest, SyncRequest
from kafkatwist.coordinator.results import (
    GroupDescription,
    GroupOverview,
    JoinGroupResult,
    LeaveGroupResult,
    LeaveMemberResult,
    ListGroupsResult,
    OffsetFetchResult,
    SyncGroupResult,
)
from kafkatwist.coordinator.store import GroupSnapshot
from kafkatwist.coordinator.txnoffsets import TransactionalOffsets, TxnCommitRequest
from kafkatwist.errors import ErrorCode

__all__ = ["GroupCoordinator", "PublishedGroup"]

log = Logger()

E = ErrorCode
S = GroupState


# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member cannot
# heartbeat while its first JoinGroup is parked, so it gets this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# Timer keys: (kind, group id[, member id]).
HEARTBEAT = "heartbeat"
PENDING_MEMBER = "pending-member"
JOIN = "join"
SYNC = "sync"


class PublishedGroup:
    """
    What other threads (metrics) may read of one group: the owner replaces
    C{offsets}, an immutable mapping C{(topic, partition)} -> committed
    offset, whenever the group's offsets change; a reader reads the
    attribute once and gets one consistent version.
    """

    __slots__ = ("groupId", "offsets")

    def __init__(self, groupId: str) -> None:
        self.groupId = groupId
        self.offsets: Mapping[TopicPartition, int] = MappingProxyType({})


def _entry(method):
    """
    An entry point: set the time, collect and return the effects, publish
    what changed for other threads.
    """

    @functools.wraps(method)
    def run(self, nowMs: int, *args, **kw):
        self.nowMs = nowMs
        self._fx = fx = []
        try:
            method(self, *args, **kw)
        finally:
            self._fx = None
            self._publish()
        return fx

    return run


class GroupCoordinator:
    """
    Classic consumer groups and their committed offsets for every group of
    this broker, as a pure state machine (see the module docs).

    @param numPartitions: C{__consumer_offsets}' partition count, which
        places each group's records.
    @param initialRebalanceDelayMs: C{group.initial.rebalance.delay.ms}.
    @param minSessionTimeoutMs: C{group.min.session.timeout.ms}.
    @param maxSessionTimeoutMs: C{group.max.session.timeout.ms}.
    @param offsetsRetentionMinutes: C{offsets.retention.minutes}.
    @param offsetsRetentionCheckIntervalMs:
        C{offsets.retention.check.interval.ms}; 0 disables the periodic
        check armed by L{load}.
    @param offsetMetadataMaxBytes: C{offset.metadata.max.bytes}.
    @param newMemberId: makes the unique part of a new member id.
    @param ownsAllPartitions: one broker coordinates every group; in a
        cluster (C{False}) only those of the C{__consumer_offsets}
        partitions this broker leads, each loaded by L{loadPartition} and
        dropped by L{unloadPartition} (others are NOT_COORDINATOR).

    @ivar nowMs: the time of the current input.
    """

    def __init__(
        self,
        *,
        numPartitions: int = 1,
        initialRebalanceDelayMs: int = 3000,
        minSessionTimeoutMs: int = 6000,
        maxSessionTimeoutMs: int = 1800000,
        offsetsRetentionMinutes: int = 10080,
        offsetsRetentionCheckIntervalMs: int = 600000,
        offsetMetadataMaxBytes: int = 4096,
        newMemberJoinTimeoutMs: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        newMemberId: Callable[[], str] = lambda: str(uuid.uuid4()),
        consumerGroups: Mapping | None = None,
        ownsAllPartitions: bool = True,
    ) -> None:
        self._numPartitions = numPartitions
        #: the partitions whose groups are loaded here (None: all)
        self._owned: set[int] | None = None if ownsAllPartitions else set()
        self._loading: set[int] = set()
        self._initialRebalanceDelayMs = initialRebalanceDelayMs
        self._minSessionTimeoutMs = minSessionTimeoutMs
        self._maxSessionTimeoutMs = maxSessionTimeoutMs
        self._newMemberJoinTimeoutMs = newMemberJoinTimeoutMs
        self._newMemberId = newMemberId
        self._groups: dict[str, GroupMetadata] = {}
        self._active = True
        self.nowMs = 0
        self._fx: list | None = None
        self._continuations: dict[int, Callable[[ErrorCode], None]] = {}
        self._tokens = itertools.count(1)
        # Java's String.hashCode in Python is slow: once per group.
        self._partitionOf: dict[str, int] = {}
        self._changed: set[str] = set()
        self._published: Mapping[str, PublishedGroup] = MappingProxyType({})
        self.offsets = OffsetMetadataManager(
            self,
            retentionMs=offsetsRetentionMinutes * 60 * 1000,
            checkIntervalMs=offsetsRetentionCheckIntervalMs,
            metadataMaxBytes=offsetMetadataMaxBytes,
        )
        self.txnOffsets = TransactionalOffsets(self, offsetMetadataMaxBytes)
        # KIP-848 groups, sharing the id namespace, offsets and effects.
        self.consumerGroups = ConsumerGroupManager(self, **(consumerGroups or {}))

    # ------------------------------------------------------------------
    # Effects (also used by the offset manager)

    def respond(self, replyTo, result) -> None:
        if replyTo is not None:
            self._fx.append(Respond(replyTo, result))

    def setTimer(self, key, delayMs: int) -> None:
        self._fx.append(SetTimer(key, max(int(delayMs), 0)))

    def cancelTimer(self, key) -> None:
        self._fx.append(CancelTimer(key))

    def append(
        self,
        groupId: str,
        records: Iterable[tuple[bytes, bytes | None]],
        onDone: Callable[[ErrorCode], None] | None = None,
        producer: tuple[int, int] | None = None,
    ) -> None:
        """
        Append C{records} to the partition of C{groupId}; C{onDone(error)}
        runs when the append finished (error NONE on success).

        @param producer: C{(producerId, epoch)} of a transaction the
            records belong to.
        """
        if onDone is None:
            onDone = functools.partial(self._logAppendFailure, groupId)
        self.appendTo(self.partitionOf(groupId), records, onDone, producer=producer)

    def appendTo(
        self,
        partition: int,
        records: Iterable[tuple[bytes, bytes | None]],
        onDone: Callable[[ErrorCode], None],
        producer: tuple[int, int] | None = None,
        marker: tuple | None = None,
    ) -> None:
        """
        Append to C{partition} (see L{Append} for C{producer} and
        C{marker}).
        """
        token = next(self._tokens)
        self._continuations[token] = onDone
        self._fx.append(Append(partition, tuple(records), token, producer, marker))

    def partitionOf(self, groupId: str) -> int:
        """
        The C{__consumer_offsets} partition of C{groupId}.
        """
        partition = self._partitionOf.get(groupId)
        if partition is None:
            if len(self._partitionOf) > 100_000:
                self._partitionOf.clear()
            partition = self._partitionOf[groupId] = partitionFor(groupId, self._numPartitions)
        return partition

    @staticmethod
    def _logAppendFailure(groupId: str, error: ErrorCode) -> None:
        if error != E.none:
            log.warn("group {group}: a write to __consumer_offsets failed: {error}",
                     group=groupId, error=error.name)

    # ------------------------------------------------------------------
    # Groups (also used by the offset manager)

    def group(self, groupId: str) -> GroupMetadata | None:
        return self._groups.get(groupId)

    def groupOrCreate(self, groupId: str) -> GroupMetadata:
        group = self._groups.get(groupId)
        if group is None:
            group = self._groups[groupId] = GroupMetadata(groupId, S.EMPTY, self.nowMs)
            self.changed(group)
        return group

    def groups(self) -> list[GroupMetadata]:
        return list(self._groups.values())

    def changed(self, group: GroupMetadata) -> None:
        """
        Note that C{group}'s published view (offsets, existence) is stale.
        """
        self._changed.add(group.groupId)

    def statusError(self, groupId: str | None, allowEmpty: bool) -> ErrorCode | None:
        """
        Kafka's C{validateGroupStatus}: offset APIs, DescribeGroups and
        DeleteGroups accept the empty group id for compatibility; the
        membership APIs do not.
        """
        if groupId is None or (not allowEmpty and groupId == ""):
            return E.invalid_group_id
        if not self._active:
            return E.coordinator_not_available
        if self._owned is not None:
            partition = self.partitionOf(groupId)
            if partition not in self._owned:
                return E.coordinator_load_in_progress if partition in self._loading else E.not_coordinator
        return None

    def validateCurrentMember(
        self, group: GroupMetadata, memberId: str, groupInstanceId: str | None
    ) -> ErrorCode | None:
        """
        Kafka's C{validateCurrentMember}: a static member's instance id must
        map to this member id (another id means this one was replaced:
        FENCED_INSTANCE_ID); the member id must be known.
        """
        if groupInstanceId is not None:
            current = group.staticMembers.get(groupInstanceId)
            if current is None:
                return E.unknown_member_id
            if current != memberId:
                return E.fenced_instance_id
        if not group.has(memberId):
            return E.unknown_member_id
        return None

    def retire(self, group: GroupMetadata) -> None:
        """
        Mark a group Dead: stop its timers and forget it.
        """
        group.transitionTo(S.DEAD, self.nowMs)
        self._cancelJoinTimer(group)
        self._removeSyncExpiration(group)
        for memberId in group.pendingMembers:
            self.cancelTimer((PENDING_MEMBER, group.groupId, memberId))
        group.pendingMembers.clear()
        for member in group.allMembers():
            self._cancelHeartbeat(group, member)
        group.offsets.clear()
        group.pendingOffsets.clear()
        if self._groups.get(group.groupId) is group:
            del self._groups[group.groupId]
        self.changed(group)

    # ------------------------------------------------------------------
    # For other threads

    def publishedGroups(self) -> Mapping[str, PublishedGroup]:
        """
        The live groups as other threads may read them: an immutable
        mapping, replaced (never changed) by the owner when groups come and
        go.  Safe to call from any thread.
        """
        return self._published

    def _publish(self) -> None:
        if not self._changed:
            return
        changed, self._changed = self._changed, set()
        published = self._published
        added: dict[str, PublishedGroup] = {}
        removed = []
        for groupId in changed:
            group = self._groups.get(groupId)
            if group is None:
                if groupId in published:
                    removed.append(groupId)
                continue
            cell = published.get(groupId) or added.setdefault(groupId, PublishedGroup(groupId))
            cell.offsets = MappingProxyType({tp: om.offset for tp, om in group.offsets.items()})
        if added or removed:
            table = dict(published)
            table.update(added)
            for groupId in removed:
                del table[groupId]
            self._published = MappingProxyType(table)

    # ------------------------------------------------------------------
    # Inputs: the shell's

    @_entry
    def appendCompleted(self, token: int, error: ErrorCode) -> None:
        """
        An L{Append} finished.

        @param error: NONE, or the code of the failure (a storage error is
            KAFKA_STORAGE_ERROR).
        """
        onDone = self._continuations.pop(token, None)
        if onDone is not None:
            onDone(error)

    @_entry
    def timerFired(self, key) -> None:
        """
        The timer C{key} (of a L{SetTimer}) fired and was not cancelled
        since it was set.
        """
        kind = key[0]
        if kind == HEARTBEAT:
            self._onHeartbeatTimer(key[1], key[2])
        elif kind == PENDING_MEMBER:
            self._onPendingMemberExpired(key[1], key[2])
        elif kind == JOIN:
            self._onJoinTimer(key[1])
        elif kind == SYNC:
            self._onSyncExpired(key[1])
        elif self.consumerGroups.timerFired(key):
            pass
        else:
            self.offsets.timerFired(key)

    # ------------------------------------------------------------------
    # JoinGroup

    @_entry
    def joinGroup(self, replyTo, request: JoinRequest) -> None:
        """
        Join (or rejoin) a group.  The answer, a L{JoinGroupResult}, may
        come much later (when the rebalance completes).
        """
        memberId = request.memberId
        error = self.statusError(request.groupId, allowEmpty=False)
        if error is None and not (
            self._minSessionTimeoutMs <= request.sessionTimeoutMs <= self._maxSessionTimeoutMs
        ):
            error = E.invalid_session_timeout
        if error is not None:
            self.respond(replyTo, JoinGroupResult.failed(memberId, error))
            return
        isUnknown = memberId == ""
        # A group comes into being when a member without an id joins; a
        # member id for a group we do not know is stale.
        group = self.groupOrCreate(request.groupId) if isUnknown else self.group(request.groupId)
        if group is None:
            self.respond(replyTo, JoinGroupResult.failed(memberId, E.unknown_member_id))
            return
        if self.consumerGroups.isNonEmpty(request.groupId):
            # The id is a consumer-protocol group's (no online migration).
            self.respond(replyTo, JoinGroupResult.failed(memberId, E.inconsistent_group_protocol))
            return
        tombstones = self.consumerGroups.delete(request.groupId)
        if tombstones:
            # An empty consumer-protocol group gives way to the classic one.
            self.append(request.groupId, tombstones)
        if not group.supportsProtocols(request.protocolType, (n for n, _ in request.protocols)):
            self.respond(replyTo, JoinGroupResult.failed(memberId, E.inconsistent_group_protocol))
        elif isUnknown:
            self._doNewMemberJoin(group, replyTo, request)
        else:
            self._doCurrentMemberJoin(group, replyTo, request)
        if group.state is S.PREPARING_REBALANCE:
            self._tryCompleteJoin(group)

    def _doNewMemberJoin(self, group: GroupMetadata, replyTo, request: JoinRequest) -> None:
        instanceId = request.groupInstanceId
        prefix = instanceId if instanceId is not None else request.clientId
        newMemberId = f"{prefix}-{self._newMemberId()}"
        if instanceId is not None:
            oldMemberId = group.staticMembers.get(instanceId)
            if oldMemberId is not None:
                self._updateStaticMemberAndRebalance(
                    group, replyTo, oldMemberId, newMemberId, request
                )
            else:
                self._addMemberAndRebalance(group, replyTo, newMemberId, request)
        elif request.requireKnownMemberId:
            # KIP-394: remember the id we hand out; until it comes back (or
            # its session timeout passes) the rebalance waits for it.
            group.pendingMembers.add(newMemberId)
            self.setTimer((PENDING_MEMBER, group.groupId, newMemberId), request.sessionTimeoutMs)
            self.respond(replyTo, JoinGroupResult.failed(newMemberId, E.member_id_required))
        else:
            self._addMemberAndRebalance(group, replyTo, newMemberId, request)

    def _currentGenerationResult(
        self,
        group: GroupMetadata,
        member: MemberMetadata,
        leaderId: str | None = None,
        includeMembers: bool | None = None,
    ) -> JoinGroupResult:
        """
        A successful JoinGroup answer for the current generation.

        @param leaderId: the leader id to report; by default the group's.
        @param includeMembers: whether to list the members' metadata; by
            default only for the leader (who runs the assignor).
        """
        if includeMembers is None:
            includeMembers = group.isLeader(member.memberId)
        return JoinGroupResult(
            errorCode=E.none,
            generationId=group.generationId,
            protocolType=group.protocolType,
            protocolName=group.protocolName,
            leaderId=leaderId if leaderId is not None else (group.leaderId or ""),
            memberId=member.memberId,
            members=group.currentMemberMetadata() if includeMembers else (),
        )

    def _doCurrentMemberJoin(self, group: GroupMetadata, replyTo, request: JoinRequest) -> None:
        memberId = request.memberId
        if memberId in group.pendingMembers:
            # The second half of the MEMBER_ID_REQUIRED handshake.
            self.cancelTimer((PENDING_MEMBER, group.groupId, memberId))
            self._addMemberAndRebalance(group, replyTo, memberId, request, static=False)
            return
        error = self.validateCurrentMember(group, memberId, request.groupInstanceId)
        if error is not None:
            self.respond(replyTo, JoinGroupResult.failed(memberId, error))
            return
        member = group.members[memberId]
        protocols = list(request.protocols)
        if group.state is S.PREPARING_REBALANCE:
            self._updateMemberAndRebalance(group, member, request, replyTo)
        elif group.state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # Probably lost its JoinGroup response: answer it again.
                self.respond(replyTo, self._currentGenerationResult(group, member))
            else:
                self._updateMemberAndRebalance(group, member, request, replyTo)
        elif group.state is S.STABLE:
            if group.isLeader(memberId) or not member.matches(protocols):
                # The leader rejoining is how a consumer asks for a
                # rebalance after a metadata change that its subscription
                # bytes do not show (e.g. new partitions).
                self._updateMemberAndRebalance(group, member, request, replyTo)
            else:
                self.respond(
                    replyTo, self._currentGenerationResult(group, member, includeMembers=False)
                )
        else:
            self.respond(replyTo, JoinGroupResult.failed(memberId, E.unknown_member_id))

    def _addMemberAndRebalance(
        self, group: GroupMetadata, replyTo, memberId: str, request: JoinRequest, static=True
    ) -> None:
        member = MemberMetadata.fromJoin(
            memberId, request.groupInstanceId if static else None, request
        )
        member.isNew = True
        if group.state is S.PREPARING_REBALANCE and group.generationId == 0:
            # Extends the initial rebalance delay (InitialDelayedJoin).
            group.newMemberAdded = True
        group.add(member, replyTo)
        self.changed(group)
        self._scheduleHeartbeat(group, member, self._newMemberJoinTimeoutMs)
        self._maybePrepareRebalance(group)

    def _invokeJoin(self, group: GroupMetadata, member: MemberMetadata, result) -> bool:
        replyTo = group.takeJoin(member)
        self.respond(replyTo, result)
        return replyTo is not None

    def _invokeSync(self, group: GroupMetadata, member: MemberMetadata, result) -> bool:
        replyTo = group.takeSync(member)
        self.respond(replyTo, result)
        return replyTo is not None

    def _updateMemberAndRebalance(
        self, group: GroupMetadata, member: MemberMetadata, request: JoinRequest, replyTo
    ) -> None:
        self._invokeJoin(
            group, member, JoinGroupResult.failed(member.memberId, E.rebalance_in_progress)
        )
        group.updateMember(
            member,
            list(request.protocols),
            request.rebalanceTimeoutMs,
            request.sessionTimeoutMs,
            replyTo,
        )
        self._maybePrepareRebalance(group)

    def _replaceStaticMember(
        self, group: GroupMetadata, instanceId: str, oldMemberId: str, newMemberId: str
    ) -> MemberMetadata:
        """
        Move a static member to a new member id, fencing what still waits
        under the old one, with a fresh session under the new one.
        """
        member = group.members[oldMemberId]
        self._invokeJoin(group, member, JoinGroupResult.failed(oldMemberId, E.fenced_instance_id))
        self._invokeSync(group, member, SyncGroupResult(E.fenced_instance_id))
        self._cancelHeartbeat(group, member)
        group.replaceStaticMember(instanceId, oldMemberId, newMemberId)
        self._scheduleHeartbeat(group, member)
        self.changed(group)
        return member

    def _updateStaticMemberAndRebalance(
        self,
        group: GroupMetadata,
        replyTo,
        oldMemberId: str,
        newMemberId: str,
        request: JoinRequest,
    ) -> None:
        instanceId = request.groupInstanceId
        currentLeader = group.leaderId or ""
        member = self._replaceStaticMember(group, instanceId, oldMemberId, newMemberId)
        oldProtocols = member.supportedProtocols
        oldTimeouts = (member.rebalanceTimeoutMs, member.sessionTimeoutMs)
        group.updateMember(
            member,
            list(request.protocols),
            request.rebalanceTimeoutMs,
            request.sessionTimeoutMs,
            replyTo,
        )
        if group.state is S.STABLE:
            if group.protocolName == group.selectProtocol():
                # Same assignor next generation: no rebalance, just persist
                # the new member id.
                generation = group.generationId

                def stored(error: ErrorCode) -> None:
                    current = (
                        group.state is S.STABLE
                        and group.generationId == generation
                        and group.members.get(newMemberId) is member
                        and member.awaitingJoin is replyTo
                    )
                    if not current:
                        # Replaced, removed or rebalancing meanwhile: that
                        # path answered (or will answer) the request.
                        return
                    if error != E.none:
                        log.warn(
                            "group {group}: failed to persist static member {instance}'s"
                            " new id: {error}",
                            group=group.groupId, instance=instanceId, error=error.name,
                        )
                        group.updateMember(member, oldProtocols, *oldTimeouts, None)
                        self._replaceStaticMember(group, instanceId, newMemberId, oldMemberId)
                        self.respond(
                            replyTo,
                            JoinGroupResult(
                                errorCode=APPEND_ERRORS_FOR_GROUP.get(error, error),
                                generationId=group.generationId,
                                protocolType=group.protocolType,
                                protocolName=group.protocolName,
                                leaderId=currentLeader,
                                memberId="",
                            ),
                        )
                    else:
                        # The previous leader id, so that a replaced leader
                        # does not run the assignor in a Stable group (pre-v9).
                        self._invokeJoin(
                            group,
                            member,
                            self._currentGenerationResult(group, member, currentLeader, False),
                        )

                self.append(group.groupId, [groupRecord(group.snapshot())], stored)
            else:
                self._maybePrepareRebalance(group)
        elif group.state is S.COMPLETING_REBALANCE:
            # The leader may already be assigning to the old id: start over.
            self._prepareRebalance(group)
        # PreparingRebalance: the member simply waits with the others.

    # ------------------------------------------------------------------
    # Rebalance

    def _maybePrepareRebalance(self, group: GroupMetadata) -> None:
        if group.canRebalance():
            self._prepareRebalance(group)

    def _prepareRebalance(self, group: GroupMetadata) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            # Members parked in SyncGroup must rejoin.
            self._resetAndPropagateAssignmentError(group, E.rebalance_in_progress)
        self._removeSyncExpiration(group)
        self._cancelJoinTimer(group)
        wasEmpty = group.state is S.EMPTY
        group.transitionTo(S.PREPARING_REBALANCE, self.nowMs)
        log.info(
            "group {group}: preparing to rebalance (generation {generation}, {members} members)",
            group=group.groupId, generation=group.generationId, members=len(group.members),
        )
        if wasEmpty and self._initialRebalanceDelayMs > 0:
            # Give the other members of a starting application a moment to
            # arrive, so the first generation is not immediately redone.
            group.initialDelayActive = True
            delay = self._initialRebalanceDelayMs
            self._armJoinTimer(group, delay, True, delay, max(group.rebalanceTimeoutMs - delay, 0))
        else:
            group.initialDelayActive = False
            self._armJoinTimer(group, group.rebalanceTimeoutMs, False, 0, 0)
            self._tryCompleteJoin(group)

    def _armJoinTimer(self, group, delayMs, initial, initialDelayMs, remainingMs) -> None:
        group.joinTimer = (initial, initialDelayMs, remainingMs)
        self.setTimer((JOIN, group.groupId), delayMs)

    def _cancelJoinTimer(self, group: GroupMetadata) -> None:
        if group.joinTimer is not None:
            group.joinTimer = None
            self.cancelTimer((JOIN, group.groupId))

    def _onJoinTimer(self, groupId: str) -> None:
        group = self.group(groupId)
        if group is None or group.joinTimer is None:
            return
        initial, delayMs, remainingMs = group.joinTimer
        group.joinTimer = None
        if group.state is not S.PREPARING_REBALANCE:
            return
        if initial and group.newMemberAdded and remainingMs != 0:
            # InitialDelayedJoin: someone new arrived, wait another delay,
            # but never longer than the rebalance timeout overall.
            group.newMemberAdded = False
            nextDelay = min(self._initialRebalanceDelayMs, remainingMs)
            self._armJoinTimer(group, nextDelay, True, nextDelay, max(remainingMs - delayMs, 0))
        else:
            group.initialDelayActive = False
            self._onCompleteJoin(group)

    def _tryCompleteJoin(self, group: GroupMetadata) -> None:
        """
        DelayedJoin.tryComplete: finish the join phase early once every
        member (and every pending member id) has joined.  The initial delay
        never finishes early.
        """
        if (
            group.state is S.PREPARING_REBALANCE
            and not group.initialDelayActive
            and group.joinTimer is not None
            and group.hasAllMembersJoined()
        ):
            self._cancelJoinTimer(group)
            self._onCompleteJoin(group)

    def _onCompleteJoin(self, group: GroupMetadata) -> None:
        """
        The join phase is over: drop dynamic members that did not rejoin,
        start the next generation and answer everyone's JoinGroup.
        """
        for member in group.notYetRejoinedMembers():
            # Static members are kept: they may be restarting and will be
            # given the chance to sync (or time out) like the others.
            if not member.isStatic:
                log.info(
                    "group {group}: removing member {member}, which did not rejoin in time",
                    group=group.groupId, member=member.memberId,
                )
                self._cancelHeartbeat(group, member)
                group.remove(member.memberId)
        if group.members and not group.maybeElectNewJoinedLeader():
            # Only static members that did not rejoin remain: wait another
            # round for them to rejoin or time out.
            log.warn(
                "group {group}: no member rejoined, postponing the rebalance", group=group.groupId
            )
            self._armJoinTimer(group, group.rebalanceTimeoutMs, False, 0, 0)
            return
        group.initNextGeneration(self.nowMs)
        self.changed(group)
        if group.state is S.EMPTY:
            log.info(
                "group {group} is now empty (generation {generation})",
                group=group.groupId, generation=group.generationId,
            )
            # No active members: a failure only leaves the previous snapshot.
            self.append(group.groupId, [groupRecord(group.snapshot({}))])
            return
        log.info(
            "group {group}: generation {generation} with {members} members (protocol {protocol})",
            group=group.groupId, generation=group.generationId,
            members=len(group.members), protocol=group.protocolName,
        )
        for member in group.allMembers():
            self._invokeJoin(group, member, self._currentGenerationResult(group, member))
            self._scheduleHeartbeat(group, member)
            member.isNew = False
            group.pendingSyncMembers.add(member.memberId)
        self._schedulePendingSync(group)

    # -- pending sync (DelayedSync) ----------------------------------------

    def _schedulePendingSync(self, group: GroupMetadata) -> None:
        group.syncTimerGeneration = group.generationId
        self.setTimer((SYNC, group.groupId), group.rebalanceTimeoutMs)

    def _removeSyncExpiration(self, group: GroupMetadata, clear: bool = True) -> None:
        if clear:
            group.pendingSyncMembers.clear()
        if group.syncTimerGeneration is not None:
            group.syncTimerGeneration = None
            self.cancelTimer((SYNC, group.groupId))

    def _removePendingSyncMember(self, group: GroupMetadata, memberId: str) -> None:
        group.pendingSyncMembers.discard(memberId)
        if not group.pendingSyncMembers:
            self._removeSyncExpiration(group)

    def _onSyncExpired(self, groupId: str) -> None:
        group = self.group(groupId)
        if group is None or group.syncTimerGeneration is None:
            return
        generation, group.syncTimerGeneration = group.syncTimerGeneration, None
        if (
            generation != group.generationId
            or group.state not in (S.COMPLETING_REBALANCE, S.STABLE)
            or not group.pendingSyncMembers
        ):
            return
        pending = sorted(group.pendingSyncMembers)
        log.info(
            "group {group}: removing members that never sent SyncGroup: {members}",
            group=group.groupId, members=pending,
        )
        for memberId in pending:
            member = group.members.get(memberId)
            if member is not None:
                self._cancelHeartbeat(group, member)
            group.remove(memberId)
        self.changed(group)
        self._prepareRebalance(group)

    # -- assignment ----------------------------------------------------------

    def _propagateAssignment(self, group: GroupMetadata, error: ErrorCode) -> None:
        ok = error == E.none
        for member in group.allMembers():
            result = SyncGroupResult(
                error,
                group.protocolType if ok else None,
                group.protocolName if ok else None,
                member.assignment,
            )
            if self._invokeSync(group, member, result):
                # Its session may have lapsed while it waited for the
                # leader; the timer ignored it then, so start a new one.
                self._scheduleHeartbeat(group, member)

    def _resetAndPropagateAssignmentError(self, group: GroupMetadata, error: ErrorCode) -> None:
        for member in group.allMembers():
            member.assignment = b""
        self._propagateAssignment(group, error)

    # ------------------------------------------------------------------
    # Session timeouts

    def _scheduleHeartbeat(
        self, group: GroupMetadata, member: MemberMetadata, timeoutMs: int | None = None
    ) -> None:
        """
        Kafka's C{completeAndScheduleNextHeartbeatExpiration}: the member
        showed signs of life; it must do so again within its session
        timeout (or C{timeoutMs}).  Only moves the deadline unless it comes
        before the armed timer.
        """
        deadline = self.nowMs + (member.sessionTimeoutMs if timeoutMs is None else timeoutMs)
        member.heartbeatDeadlineMs = deadline
        due = member.heartbeatTimerDueMs
        if due is None or deadline < due:
            member.heartbeatTimerDueMs = deadline
            self.setTimer((HEARTBEAT, group.groupId, member.memberId), deadline - self.nowMs)

    def _cancelHeartbeat(self, group: GroupMetadata, member: MemberMetadata) -> None:
        member.heartbeatDeadlineMs = None
        if member.heartbeatTimerDueMs is not None:
            member.heartbeatTimerDueMs = None
            self.cancelTimer((HEARTBEAT, group.groupId, member.memberId))

    def _onHeartbeatTimer(self, groupId: str, memberId: str) -> None:
        group = self.group(groupId)
        member = group.members.get(memberId) if group is not None else None
        if member is None:
            return
        member.heartbeatTimerDueMs = None
        deadline = member.heartbeatDeadlineMs
        if deadline is None:
            return
        if self.nowMs < deadline:
            # Heartbeats moved the deadline since the timer was armed.
            member.heartbeatTimerDueMs = deadline
            self.setTimer((HEARTBEAT, groupId, memberId), deadline - self.nowMs)
            return
        member.heartbeatDeadlineMs = None
        if member.hasSatisfiedHeartbeat():
            # Parked in JoinGroup/SyncGroup: alive.  The end of the
            # rebalance starts a new session.
            return
        log.info("group {group}: member {member}'s session expired", group=groupId, member=memberId)
        self._removeMemberAndUpdateGroup(group, member)

    def _onPendingMemberExpired(self, groupId: str, memberId: str) -> None:
        group = self.group(groupId)
        if group is None or memberId not in group.pendingMembers:
            return
        log.info(
            "group {group}: pending member {member} never joined", group=groupId, member=memberId
        )
        group.pendingMembers.discard(memberId)
        self._tryCompleteJoin(group)

    def _removeMemberAndUpdateGroup(self, group: GroupMetadata, member: MemberMetadata) -> None:
        # A parked request of the removed member must not hang: tell it to
        # start over.
        self._invokeJoin(group, member, JoinGroupResult.failed("", E.unknown_member_id))
        self._invokeSync(group, member, SyncGroupResult(E.unknown_member_id))
        self._cancelHeartbeat(group, member)
        group.remove(member.memberId)
        self.changed(group)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybePrepareRebalance(group)
        elif group.state is S.PREPARING_REBALANCE:
            self._tryCompleteJoin(group)

    # ------------------------------------------------------------------
    # SyncGroup

    @_entry
    def syncGroup(self, replyTo, request: SyncRequest) -> None:
        """
        Receive (and, for the leader, hand out) the assignment of the
        current generation.  The answer, a L{SyncGroupResult}, comes when
        the leader's assignment is stored.
        """
        error = self.statusError(request.groupId, allowEmpty=False)
        group = self.group(request.groupId) if error is None else None
        if error is None and group is None:
            error = E.unknown_member_id
        if error is None:
            error = self._validateSyncGroup(group, request)
        if error is not None:
            self.respond(replyTo, SyncGroupResult(error))
            return
        memberId = request.memberId
        if group.state is S.EMPTY:
            self.respond(replyTo, SyncGroupResult(E.unknown_member_id))
        elif group.state is S.PREPARING_REBALANCE:
            self.respond(replyTo, SyncGroupResult(E.rebalance_in_progress))
        elif group.state is S.COMPLETING_REBALANCE:
            member = group.members[memberId]
            self._invokeSync(group, member, SyncGroupResult(E.rebalance_in_progress))
            member.awaitingSync = replyTo
            self._removePendingSyncMember(group, memberId)
            if group.isLeader(memberId):
                self._completeSyncWithAssignment(group, request.assignments)
        elif group.state is S.STABLE:
            # A follower that syncs after the leader, or a rejoin that
            # changed nothing: hand out what it was assigned.
            member = group.members[memberId]
            self._removePendingSyncMember(group, memberId)
            self.respond(
                replyTo,
                SyncGroupResult(E.none, group.protocolType, group.protocolName, member.assignment),
            )
            self._scheduleHeartbeat(group, member)

    def _validateSyncGroup(self, group: GroupMetadata, request: SyncRequest) -> ErrorCode | None:
        error = self.validateCurrentMember(group, request.memberId, request.groupInstanceId)
        if error is not None:
            return error
        if request.generationId != group.generationId:
            return E.illegal_generation
        if request.protocolType is not None and request.protocolType != group.protocolType:
            return E.inconsistent_group_protocol
        if request.protocolName is not None and request.protocolName != group.protocolName:
            return E.inconsistent_group_protocol
        return None

    def _completeSyncWithAssignment(
        self, group: GroupMetadata, assignments: Mapping[str, bytes]
    ) -> None:
        # Members the leader left out get an empty assignment; ids it
        # invented are ignored.
        assignment = {mid: assignments.get(mid, b"") for mid in group.members}
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            log.warn(
                "group {group}: no assignment for {members}, assigning nothing",
                group=group.groupId, members=missing,
            )
        generation = group.generationId

        def stored(error: ErrorCode) -> None:
            if group.state is not S.COMPLETING_REBALANCE or group.generationId != generation:
                # Another rebalance (or a deletion) overtook this one.
                return
            if error != E.none:
                log.warn(
                    "group {group}: failed to store the assignment of generation"
                    " {generation}: {error}",
                    group=group.groupId, generation=generation, error=error.name,
                )
                self._resetAndPropagateAssignmentError(
                    group, APPEND_ERRORS_FOR_GROUP.get(error, error)
                )
                self._maybePrepareRebalance(group)
                return
            for member in group.allMembers():
                member.assignment = assignment.get(member.memberId, b"")
            self._propagateAssignment(group, E.none)
            group.transitionTo(S.STABLE, self.nowMs)
            log.info(
                "group {group}: generation {generation} is stable",
                group=group.groupId,
                generation=generation,
            )

        self.append(group.groupId, [groupRecord(group.snapshot(assignment))], stored)

    # ------------------------------------------------------------------
    # Heartbeat

    @_entry
    def heartbeat(
        self,
        replyTo,
        groupId: str,
        generationId: int,
        memberId: str,
        groupInstanceId: str | None = None,
    ) -> None:
        """
        Keep a member's session alive and tell it whether to rejoin.

        Answers an L{ErrorCode}: NONE, REBALANCE_IN_PROGRESS (rejoin),
        ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...
        """
        self.respond(replyTo, self._heartbeat(groupId, generationId, memberId, groupInstanceId))

    def _heartbeat(self, groupId, generationId, memberId, groupInstanceId) -> ErrorCode:
        error = self.statusError(groupId, allowEmpty=False)
        if error is not None:
            return error
        group = self.group(groupId)
        if group is None:
            return E.unknown_member_id
        error = self.validateCurrentMember(group, memberId, groupInstanceId)
        if error is None and generationId != group.generationId:
            error = E.illegal_generation
        if error is not None:
            return error
        if group.state is S.EMPTY:
            return E.unknown_member_id
        self._scheduleHeartbeat(group, group.members[memberId])
        if group.state is S.PREPARING_REBALANCE:
            return E.rebalance_in_progress
        # CompletingRebalance: heartbeats before SyncGroup are normal.
        return E.none

    def keepAlive(self, group: GroupMetadata, memberId: str) -> None:
        """
        A sign of life from a current member other than a heartbeat (an
        offset commit).
        """
        self._scheduleHeartbeat(group, group.members[memberId])

    # ------------------------------------------------------------------
    # LeaveGroup

    @_entry
    def leaveGroup(self, replyTo, groupId: str, members: Iterable[tuple]) -> None:
        """
        Remove members (LeaveGroup v3+ batches them; earlier versions send
        one).  Answers a L{LeaveGroupResult}.

        @param members: C{(memberId, groupInstanceId)} pairs (a third
            element, the reason, is accepted and ignored).  A C{memberId} of
            C{""} with an instance id removes the static member by instance
            id (administrative removal).
        """
        members = [(m[0] or "", m[1]) for m in members]
        error = self.statusError(groupId, allowEmpty=False)
        if error is not None:
            self.respond(replyTo, LeaveGroupResult(error))
            return
        group = self.group(groupId)
        if group is None:
            self.respond(
                replyTo,
                LeaveGroupResult(
                    E.none,
                    tuple(LeaveMemberResult(mid, iid, E.unknown_member_id) for mid, iid in members),
                ),
            )
            return
        results = []
        for memberId, instanceId in members:
            if memberId == "":
                current = group.staticMembers.get(instanceId) if instanceId is not None else None
                if current is None:
                    results.append(LeaveMemberResult(memberId, instanceId, E.unknown_member_id))
                    continue
                log.info(
                    "group {group}: static member {instance} removed",
                    group=groupId,
                    instance=instanceId,
                )
                self._removeMemberAndUpdateGroup(group, group.members[current])
                results.append(LeaveMemberResult(memberId, instanceId, E.none))
            elif memberId in group.pendingMembers:
                group.pendingMembers.discard(memberId)
                self.cancelTimer((PENDING_MEMBER, groupId, memberId))
                self._tryCompleteJoin(group)
                results.append(LeaveMemberResult(memberId, instanceId, E.none))
            else:
                error = self.validateCurrentMember(group, memberId, instanceId)
                if error is None:
                    log.info("group {group}: member {member} left", group=groupId, member=memberId)
                    self._removeMemberAndUpdateGroup(group, group.members[memberId])
                results.append(LeaveMemberResult(memberId, instanceId, error or E.none))
        self.respond(replyTo, LeaveGroupResult(E.none, tuple(results)))

    # ------------------------------------------------------------------
    # Describe / List / Delete

    @_entry
    def describeGroups(self, replyTo, groupIds: Iterable[str]) -> None:
        """
        Answers one L{GroupDescription} per id, in order; unknown groups are
        state C{"Dead"} with no error (as Kafka before KIP-1043).
        """
        out = []
        for groupId in groupIds:
            error = self.statusError(groupId, allowEmpty=True)
            if error is not None:
                out.append(GroupDescription(error, groupId or "", "", "", ""))
                continue
            group = self.group(groupId)
            if group is None or self.consumerGroups.group(groupId) is not None:
                # A KIP-848 group is not a classic one (ConsumerGroupDescribe
                # describes it).
                out.append(GroupDescription(E.none, groupId, S.DEAD.value, "", ""))
                continue
            stable = group.state is S.STABLE
            out.append(
                GroupDescription(
                    E.none,
                    groupId,
                    group.state.value,
                    group.protocolType or "",
                    (group.protocolName or "") if stable else "",
                    group.describeMembers(),
                )
            )
        self.respond(replyTo, out)

    @_entry
    def listGroups(self, replyTo, statesFilter: Iterable[str] | None = None) -> None:
        """
        Answers a L{ListGroupsResult} of L{GroupOverview}s.

        @param statesFilter: state names (ListGroups v4+; compared without
            regard to case); empty or C{None} lists all.
        """
        if not self._active:
            self.respond(replyTo, ListGroupsResult(E.coordinator_not_available))
            return
        wanted = {s.lower() for s in statesFilter or ()}
        consumer = self.consumerGroups.overviews()
        out = tuple(
            GroupOverview(group.groupId, group.protocolType or "", group.state.value)
            for group in self._groups.values()
            # An empty classic group of a consumer group's id only holds
            # its offsets.
            if group.groupId not in consumer
            and (not wanted or group.state.value.lower() in wanted)
        ) + tuple(o for o in consumer.values() if not wanted or o.state.lower() in wanted)
        self.respond(replyTo, ListGroupsResult(E.none, out))

    @_entry
    def deleteGroups(self, replyTo, groupIds: Iterable[str]) -> None:
        """
        Delete empty groups with their offsets.  Answers a C{dict} group id
        -> NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ... once the
        tombstones are written.
        """
        out: dict[str, ErrorCode] = {}
        deleting: list[GroupMetadata] = []
        for groupId in groupIds:
            error = self.statusError(groupId, allowEmpty=True)
            group = self.group(groupId) if error is None else None
            if error is None and self.consumerGroups.group(groupId) is not None:
                if self.consumerGroups.isNonEmpty(groupId):
                    error = E.non_empty_group
                elif group is None:
                    group = self.groupOrCreate(groupId)
            if error is None and group is None:
                error = E.group_id_not_found
            if error is None and group.state is not S.EMPTY:
                error = E.non_empty_group
            out[groupId] = error or E.none
            if error is None:
                deleting.append(group)
        remaining = len(deleting)

        def deleted(groupId: str, error: ErrorCode) -> None:
            nonlocal remaining
            if error != E.none:
                out[groupId] = APPEND_ERRORS_FOR_GROUP.get(error, error)
            remaining -= 1
            if remaining == 0:
                self.respond(replyTo, out)

        if not deleting:
            self.respond(replyTo, out)
        for group in deleting:
            records = offsetTombstones(
                group.groupId, sorted(set(group.offsets) | set(group.pendingOffsets))
            )
            # The group's tombstone goes last, as Kafka's cleanupGroupMetadata
            # writes it after the offsets' ones.
            records.extend(self.consumerGroups.delete(group.groupId))
            records.append(groupTombstone(group.groupId))
            log.info("group {group} deleted", group=group.groupId)
            self.retire(group)
            self.append(group.groupId, records, functools.partial(deleted, group.groupId))

    # ------------------------------------------------------------------
    # KIP-848 consumer groups: see ConsumerGroupManager

    @_entry
    def consumerGroupHeartbeat(self, replyTo, request: HeartbeatRequest) -> None:
        """
        ConsumerGroupHeartbeat; answers a L{HeartbeatResult}.
        """
        self.consumerGroups.heartbeat(replyTo, request)

    @_entry
    def consumerGroupDescribe(self, replyTo, groupIds: Iterable[str]) -> None:
        """
        ConsumerGroupDescribe; answers a C{list} of
        L{DescribedConsumerGroup}, in order.
        """
        self.respond(replyTo, [self.consumerGroups.describe(g) for g in groupIds])

    # ------------------------------------------------------------------
    # Offsets: see OffsetMetadataManager

    @_entry
    def commitOffsets(self, replyTo, request: CommitRequest) -> None:
        """
        OffsetCommit; answers C{dict} C{(topic, partition)} -> L{ErrorCode}
        once the commit is in the log.
        """
        self.offsets.commit(replyTo, request)

    @_entry
    def fetchOffsets(
        self,
        replyTo,
        groupId: str,
        partitions: Iterable[TopicPartition] | None = None,
        requireStable: bool = False,
    ) -> None:
        """
        OffsetFetch for one group; answers an L{OffsetFetchResult}.

        @param partitions: the partitions wanted, or C{None} for all
            committed ones.
        @param requireStable: UNSTABLE_OFFSET_COMMIT for partitions with
            offsets pending in a transaction.
        """
        self.respond(replyTo, self.offsets.fetch(groupId, partitions, requireStable))

    @_entry
    def fetchOffsetsOfGroups(
        self, replyTo, wanted: Iterable[tuple], requireStable: bool = False
    ) -> None:
        """
        OffsetFetch v8+ (KIP-709): C{(groupId, partitions)} pairs, or
        C{(groupId, partitions, memberId, memberEpoch)} (v9, checked against
        a KIP-848 group's member); answers a C{list} of L{OffsetFetchResult},
        in order.
        """
        out = []
        for groupId, partitions, *member in wanted:
            error = self.consumerGroups.validateFetch(groupId, *member) if member else None
            if error is None:
                out.append(self.offsets.fetch(groupId, partitions, requireStable))
            else:
                out.append(OffsetFetchResult(error))
        self.respond(replyTo, out)

    @_entry
    def commitTransactionalOffsets(self, replyTo, request: TxnCommitRequest) -> None:
        """
        TxnOffsetCommit; answers C{dict} C{(topic, partition)} ->
        L{ErrorCode} once the records are in the log (pending until the
        transaction's marker).
        """
        self.txnOffsets.commit(replyTo, request)

    @_entry
    def completeTransaction(
        self, replyTo, partition: int, producerId: int, producerEpoch: int, commit: bool,
        coordinatorEpoch: int,
    ) -> None:
        """
        The marker of a transaction for C{__consumer_offsets} partition
        C{partition} (WriteTxnMarkers); answers the append's error code.
        """
        if not self._active:
            self.respond(replyTo, E.coordinator_not_available)
            return
        self.txnOffsets.complete(
            replyTo, partition, producerId, producerEpoch, commit, coordinatorEpoch
        )

    @_entry
    def deleteOffsets(self, replyTo, groupId: str, partitions: Iterable[TopicPartition]) -> None:
        """
        OffsetDelete; answers an L{OffsetDeleteResult}.
        """
        self.offsets.delete(replyTo, groupId, partitions)

    @_entry
    def expireOffsets(self, replyTo=None) -> None:
        """
        Remove expired offsets now (the periodic check does it every
        C{offsets.retention.check.interval.ms}); answers how many went.
        """
        self.respond(replyTo, self.offsets.expire())

    # ------------------------------------------------------------------
    # Lifecycle

    @_entry
    def load(
        self,
        snapshots: Iterable[GroupSnapshot],
        offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]],
        consumerGroups: Mapping | None = None,
        topics: TopicImage | None = None,
        pendingTxnOffsets: Mapping | None = None,
    ) -> None:
        """
        Take the groups and offsets read back from C{__consumer_offsets}
        (before serving) and start the periodic offset expiry.  Loaded
        groups are Stable (or Empty); their members must heartbeat within
        their session timeout.

        @param pendingTxnOffsets: offsets of open transactions (see
            L{TransactionalOffsets.load}).
        """
        self._take(snapshots, offsets, consumerGroups, topics, pendingTxnOffsets)

    @_entry
    def beginLoading(self, partition: int) -> None:
        """
        This broker leads C{partition} and is reading it back: its groups
        are COORDINATOR_LOAD_IN_PROGRESS until L{loadPartition}.
        """
        if self._owned is not None and partition not in self._owned:
            self._loading.add(partition)

    @_entry
    def loadPartition(
        self,
        partition: int,
        snapshots: Iterable[GroupSnapshot],
        offsets: Mapping[str, Mapping[TopicPartition, OffsetAndMetadata]],
        consumerGroups: Mapping | None = None,
        topics: TopicImage | None = None,
        pendingTxnOffsets: Mapping | None = None,
    ) -> None:
        """
        Take the groups of one C{__consumer_offsets} partition this broker
        now leads (Kafka's C{onElection}): as L{load}, for that partition.
        """
        if self._owned is None:
            return
        self._loading.discard(partition)
        if partition in self._owned:
            return
        self._owned.add(partition)
        self._take(snapshots, offsets, consumerGroups, topics, pendingTxnOffsets)

    @_entry
    def unloadPartition(self, partition: int) -> None:
        """
        This broker no longer leads C{partition} (Kafka's C{onResignation}):
        its groups are dropped, parked JoinGroup/SyncGroup requests
        answered NOT_COORDINATOR; the new leader's coordinator loads them.
        """
        if self._owned is None:
            return
        self._loading.discard(partition)
        if partition not in self._owned:
            return
        self._owned.discard(partition)
        for group in [g for g in self._groups.values() if self.partitionOf(g.groupId) == partition]:
            for member in group.allMembers():
                self._invokeJoin(group, member, JoinGroupResult.failed(member.memberId, E.not_coordinator))
                self._invokeSync(group, member, SyncGroupResult(E.not_coordinator))
            self.retire(group)
        self.consumerGroups.unload(lambda groupId: self.partitionOf(groupId) == partition)
        self.txnOffsets.unload(lambda groupId: self.partitionOf(groupId) == partition)
        log.info("unloaded the groups of {topic}-{partition}", topic="__consumer_offsets", partition=partition)

    def _take(self, snapshots, offsets, consumerGroups, topics, pendingTxnOffsets) -> None:
        if pendingTxnOffsets:
            self.txnOffsets.load(pendingTxnOffsets)
        loaded: dict[str, GroupMetadata] = {}
        for snap in snapshots:
            try:
                loaded[snap.groupId] = GroupMetadata.fromSnapshot(snap, self.nowMs)
            except Exception:
                # One group's odd record must not stop start-up: it starts
                # over empty (its offsets, if any, still load below).
                log.failure("group {group}: cannot load its metadata, starting it empty",
                            group=snap.groupId)
        for groupId, groupOffsets in offsets.items():
            group = loaded.get(groupId)
            if group is None:
                # Offsets without group metadata: a simple consumer's group.
                group = loaded[groupId] = GroupMetadata(groupId, S.EMPTY, self.nowMs)
            group.offsets.update(groupOffsets)
        for groups in (pendingTxnOffsets or {}).values():
            for groupId in groups:
                if groupId not in loaded:
                    # Only a transaction's offsets so far.
                    loaded[groupId] = GroupMetadata(groupId, S.EMPTY, self.nowMs)
        self._groups.update(loaded)
        for group in loaded.values():
            self.changed(group)
            for member in group.allMembers():
                self._scheduleHeartbeat(group, member)
        log.info(
            "loaded {groups} groups and {offsets} committed offsets",
            groups=len(loaded), offsets=sum(len(g.offsets) for g in loaded.values()),
        )
        self.consumerGroups.load(consumerGroups or {}, topics or TopicImage({}))
        self.offsets.scheduleExpiry()

    @_entry
    def shutdown(self) -> None:
        """
        Stop: cancel every timer, answer parked requests with
        NOT_COORDINATOR (as Kafka does when it unloads a group) and refuse
        further requests with COORDINATOR_NOT_AVAILABLE.  Appends already
        emitted are still answered when they complete.
        """
        self._active = False
        self.offsets.cancelExpiry()
        self.consumerGroups.cancelTimers()
        for group in list(self._groups.values()):
            for member in group.allMembers():
                self._invokeJoin(
                    group, member, JoinGroupResult.failed(member.memberId, E.not_coordinator)
                )
                self._invokeSync(group, member, SyncGroupResult(E.not_coordinator))
            self.retire(group)
