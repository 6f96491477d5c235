"""
Kafka's classic group coordinator (C{GroupCoordinator.scala}) as pure logic
on an injected clock.

Threading
=========

Request handlers call in from several threads; timers fire on the clock's
thread.  Each group has its own lock, taken once per operation by
L{GroupCoordinator._locked}; the coordinator's own lock only guards the
dictionary of groups and is never held while taking a group lock (the order
is always group lock, then coordinator lock).  JoinGroup and SyncGroup park
their Deferreds on the member; whoever completes them (another member's
request, or a timer) only queues the result on the group's outbox, and the
queue is fired after the group lock is released, so a Deferred callback may
call straight back into the coordinator.

Timers are Kafka's purgatories reduced to one C{clock.callLater} each: a
member's session timeout, a pending member's join deadline, the group's
rebalance (join) deadline, and the group's pending-sync deadline.  Each
armed timer has a token stored next to it; cancelling clears the token, and
a timer that fires with a stale token does nothing, so a cancel racing with
a firing on another thread is harmless.

Differences from Kafka
======================

  - Storage is synchronous (L{IGroupStore} is called under the group lock);
    Kafka appends to C{__consumer_offsets} and completes in a callback.
  - No group size limit (C{group.max.size}), no transactional offset
    commits, no C{requireStable}.
  - JoinGroup v9's C{skipAssignment} is never set: a static member that
    rejoins a Stable group with unchanged metadata is answered as before
    v9, with the previous leader id, so it never runs the assignor.
  - A JoinGroup or SyncGroup parked for a member that sends another one is
    answered with REBALANCE_IN_PROGRESS (Kafka silently drops the older
    callback) so no Deferred is left unfired.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from twisted.internet.defer import Deferred

from kafkatwist.threaddefer import ThreadSafeDeferred
from twisted.internet.error import AlreadyCalled, AlreadyCancelled

from kafkatwist.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.results import (
    FetchedOffset,
    GroupDescription,
    GroupOverview,
    JoinGroupResult,
    LeaveGroupResult,
    LeaveMemberResult,
    ListGroupsResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    SyncGroupResult,
)
from kafkatwist.errors import ErrorCode, KafkaError

__all__ = ["GroupCoordinator", "ThreadSafeDeferred"]

log = logging.getLogger(__name__)

E = ErrorCode
S = GroupState


# Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member cannot
# heartbeat while its first JoinGroup is parked, so it gets this long.
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000


class GroupCoordinator:
    """
    Classic consumer group membership and committed offsets for every
    group of this broker.

    @param clock: an L{kafkatwist.interfaces.IThreadSafeClock} (a
        C{twisted.internet.task.Clock} in tests).
    @param store: an L{kafkatwist.coordinator.store.IGroupStore}.
    @param initialRebalanceDelayMs: C{group.initial.rebalance.delay.ms}.
    @param minSessionTimeoutMs: C{group.min.session.timeout.ms}.
    @param maxSessionTimeoutMs: C{group.max.session.timeout.ms}.
    @param offsetsRetentionMinutes: C{offsets.retention.minutes}.
    @param offsetsRetentionCheckIntervalMs:
        C{offsets.retention.check.interval.ms}; 0 disables the periodic
        check armed by L{load}.
    @param offsetMetadataMaxBytes: C{offset.metadata.max.bytes}.
    """

    def __init__(
        self,
        clock,
        store,
        *,
        initialRebalanceDelayMs: int = 3000,
        minSessionTimeoutMs: int = 6000,
        maxSessionTimeoutMs: int = 1800000,
        offsetsRetentionMinutes: int = 10080,
        offsetsRetentionCheckIntervalMs: int = 600000,
        offsetMetadataMaxBytes: int = 4096,
        newMemberJoinTimeoutMs: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
    ) -> None:
        self._clock = clock
        self._store = store
        self._initialRebalanceDelayMs = initialRebalanceDelayMs
        self._minSessionTimeoutMs = minSessionTimeoutMs
        self._maxSessionTimeoutMs = maxSessionTimeoutMs
        self._offsetsRetentionMs = offsetsRetentionMinutes * 60 * 1000
        self._offsetsRetentionCheckIntervalMs = offsetsRetentionCheckIntervalMs
        self._offsetMetadataMaxBytes = offsetMetadataMaxBytes
        self._newMemberJoinTimeoutMs = newMemberJoinTimeoutMs
        self._lock = threading.Lock()
        self._groups: dict[str, GroupMetadata] = {}
        self._active = True
        self._expiryTimer = None

    # ------------------------------------------------------------------
    # Plumbing

    def _nowMs(self) -> int:
        return int(self._clock.seconds() * 1000)

    def _callLater(self, delayMs: int, f, *args):
        return self._clock.callLater(max(delayMs, 0) / 1000.0, f, *args)

    @staticmethod
    def _cancel(handle) -> None:
        if handle is None:
            return
        try:
            handle.cancel()
        except (AlreadyCalled, AlreadyCancelled):
            # task.Clock complains about cancelling a call that ran; the
            # token check already made it harmless.
            pass

    @contextmanager
    def _locked(self, group: GroupMetadata) -> Iterator[None]:
        """
        Hold C{group}'s lock, then fire the results queued meanwhile once it
        is released.
        """
        group.lock.acquire()
        try:
            yield
        finally:
            outbox, group.outbox = group.outbox, []
            group.lock.release()
            for d, result in outbox:
                # The caller may have cancelled (connection gone);
                # ThreadSafeDeferred.callback then does nothing.
                d.callback(result)

    def _getGroup(self, groupId: str) -> GroupMetadata | None:
        with self._lock:
            return self._groups.get(groupId)

    def _getOrMaybeCreateGroup(self, groupId: str, create: bool) -> GroupMetadata | None:
        with self._lock:
            group = self._groups.get(groupId)
            if group is None and create:
                group = GroupMetadata(groupId, S.EMPTY, self._nowMs())
                self._groups[groupId] = group
            return group

    def _forgetGroup(self, group: GroupMetadata) -> None:
        """
        Drop a Dead group from the dictionary (group lock held).
        """
        with self._lock:
            if self._groups.get(group.groupId) is group:
                del self._groups[group.groupId]

    def _groupStatusError(self, groupId: str | None, allowEmpty: bool) -> ErrorCode | None:
        """
        Kafka's C{validateGroupStatus}: offset APIs, DescribeGroups and
        DeleteGroups accept the empty group id for compatibility; the
        membership APIs do not.
        """
        if groupId is None or (not allowEmpty and groupId == ""):
            return E.invalid_group_id
        if not self._active:
            return E.coordinator_not_available
        return None

    # ------------------------------------------------------------------
    # JoinGroup

    def joinGroup(
        self,
        groupId: str,
        memberId: str,
        groupInstanceId: str | None,
        clientId: str,
        clientHost: str,
        rebalanceTimeoutMs: int,
        sessionTimeoutMs: int,
        protocolType: str,
        protocols: list[tuple[str, bytes]],
        requireKnownMemberId: bool,
        reason: str | None = None,
    ) -> Deferred:
        """
        Join (or rejoin) a group.

        @param memberId: C{""} for a member without an id yet.
        @param rebalanceTimeoutMs: JoinGroup v0 has none: pass the session
            timeout (a negative value is taken to mean that too).
        @param protocols: C{(name, metadata)} in order of preference.
        @param requireKnownMemberId: C{True} for JoinGroup v4+ without a
            group instance id: a new member is given an id with
            MEMBER_ID_REQUIRED and must join again with it.
        @return: a Deferred firing with a L{JoinGroupResult}, possibly much
            later (when the rebalance completes), from any thread.
        """
        d: Deferred = ThreadSafeDeferred()
        memberId = memberId or ""
        if rebalanceTimeoutMs is None or rebalanceTimeoutMs < 0:
            rebalanceTimeoutMs = sessionTimeoutMs
        error = self._groupStatusError(groupId, allowEmpty=False)
        if error is None and not (
            self._minSessionTimeoutMs <= sessionTimeoutMs <= self._maxSessionTimeoutMs
        ):
            error = E.invalid_session_timeout
        if error is not None:
            d.callback(JoinGroupResult.failed(memberId, error))
            return d
        isUnknown = memberId == ""
        # A group comes into being when a member without an id joins; a
        # member id for a group we do not know is stale.
        group = self._getOrMaybeCreateGroup(groupId, create=isUnknown)
        if group is None:
            d.callback(JoinGroupResult.failed(memberId, E.unknown_member_id))
            return d
        protocols = [(name, bytes(meta)) for name, meta in protocols]
        with self._locked(group):
            if group.state is S.DEAD:
                # Deleted meanwhile; the client rediscovers and retries.
                group.respond(d, JoinGroupResult.failed(memberId, E.coordinator_not_available))
            elif not group.supportsProtocols(protocolType, (n for n, _ in protocols)):
                group.respond(d, JoinGroupResult.failed(memberId, E.inconsistent_group_protocol))
            elif isUnknown:
                self._doNewMemberJoin(
                    group,
                    d,
                    groupInstanceId,
                    requireKnownMemberId,
                    clientId,
                    clientHost,
                    rebalanceTimeoutMs,
                    sessionTimeoutMs,
                    protocolType,
                    protocols,
                )
            else:
                self._doCurrentMemberJoin(
                    group,
                    d,
                    memberId,
                    groupInstanceId,
                    clientId,
                    clientHost,
                    rebalanceTimeoutMs,
                    sessionTimeoutMs,
                    protocolType,
                    protocols,
                )
            if group.state is S.PREPARING_REBALANCE:
                self._tryCompleteJoin(group)
        return d

    def _doNewMemberJoin(
        self,
        group,
        d,
        groupInstanceId,
        requireKnownMemberId,
        clientId,
        clientHost,
        rebalanceTimeoutMs,
        sessionTimeoutMs,
        protocolType,
        protocols,
    ) -> None:
        newMemberId = (
            f"{groupInstanceId if groupInstanceId is not None else clientId}-{uuid.uuid4()}"
        )
        if groupInstanceId is not None:
            oldMemberId = group.staticMembers.get(groupInstanceId)
            if oldMemberId is not None:
                self._updateStaticMemberAndRebalance(
                    group,
                    d,
                    oldMemberId,
                    newMemberId,
                    groupInstanceId,
                    protocols,
                    rebalanceTimeoutMs,
                    sessionTimeoutMs,
                )
            else:
                self._addMemberAndRebalance(
                    group,
                    d,
                    newMemberId,
                    groupInstanceId,
                    clientId,
                    clientHost,
                    rebalanceTimeoutMs,
                    sessionTimeoutMs,
                    protocolType,
                    protocols,
                )
        elif requireKnownMemberId:
            # KIP-394: remember the id we hand out; until it comes back (or
            # its session timeout passes) the rebalance waits for it.
            group.pendingMembers[newMemberId] = self._callLater(
                sessionTimeoutMs, self._onPendingMemberExpired, group, newMemberId
            )
            group.respond(d, JoinGroupResult.failed(newMemberId, E.member_id_required))
        else:
            self._addMemberAndRebalance(
                group,
                d,
                newMemberId,
                None,
                clientId,
                clientHost,
                rebalanceTimeoutMs,
                sessionTimeoutMs,
                protocolType,
                protocols,
            )

    def _validateCurrentMember(
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

    def _doCurrentMemberJoin(
        self,
        group,
        d,
        memberId,
        groupInstanceId,
        clientId,
        clientHost,
        rebalanceTimeoutMs,
        sessionTimeoutMs,
        protocolType,
        protocols,
    ) -> None:
        if memberId in group.pendingMembers:
            # The second half of the MEMBER_ID_REQUIRED handshake.
            self._cancel(group.pendingMembers[memberId])
            self._addMemberAndRebalance(
                group,
                d,
                memberId,
                None,
                clientId,
                clientHost,
                rebalanceTimeoutMs,
                sessionTimeoutMs,
                protocolType,
                protocols,
            )
            return
        error = self._validateCurrentMember(group, memberId, groupInstanceId)
        if error is not None:
            group.respond(d, JoinGroupResult.failed(memberId, error))
            return
        member = group.members[memberId]
        if group.state is S.PREPARING_REBALANCE:
            self._updateMemberAndRebalance(
                group, member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d
            )
        elif group.state is S.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # Probably lost its JoinGroup response: answer it again.
                group.respond(d, self._currentGenerationResult(group, member))
            else:
                self._updateMemberAndRebalance(
                    group, member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d
                )
        elif group.state is S.STABLE:
            if group.isLeader(memberId) or not member.matches(protocols):
                # The leader rejoining is how a consumer asks for a
                # rebalance after a metadata change that its subscription
                # bytes do not show (e.g. new partitions).
                self._updateMemberAndRebalance(
                    group, member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d
                )
            else:
                group.respond(d, self._currentGenerationResult(group, member, includeMembers=False))
        else:
            group.respond(d, JoinGroupResult.failed(memberId, E.unknown_member_id))

    def _addMemberAndRebalance(
        self,
        group,
        d,
        memberId,
        groupInstanceId,
        clientId,
        clientHost,
        rebalanceTimeoutMs,
        sessionTimeoutMs,
        protocolType,
        protocols,
    ) -> None:
        member = MemberMetadata(
            memberId,
            groupInstanceId,
            clientId,
            clientHost,
            rebalanceTimeoutMs,
            sessionTimeoutMs,
            protocolType,
            protocols,
        )
        member.isNew = True
        if group.state is S.PREPARING_REBALANCE and group.generationId == 0:
            # Extends the initial rebalance delay (InitialDelayedJoin).
            group.newMemberAdded = True
        group.add(member, d)
        self._scheduleHeartbeat(group, member, self._newMemberJoinTimeoutMs)
        self._maybePrepareRebalance(group)

    def _updateMemberAndRebalance(
        self, group, member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d
    ) -> None:
        group.maybeInvokeJoin(
            member, JoinGroupResult.failed(member.memberId, E.rebalance_in_progress)
        )
        group.updateMember(member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d)
        self._maybePrepareRebalance(group)

    def _updateStaticMemberAndRebalance(
        self,
        group,
        d,
        oldMemberId,
        newMemberId,
        groupInstanceId,
        protocols,
        rebalanceTimeoutMs,
        sessionTimeoutMs,
    ) -> None:
        currentLeader = group.leaderId or ""
        member = group.replaceStaticMember(groupInstanceId, oldMemberId, newMemberId)
        # The old id's session timer is void; the new id gets a fresh one.
        self._scheduleHeartbeat(group, member)
        oldProtocols = member.supportedProtocols
        oldTimeouts = (member.rebalanceTimeoutMs, member.sessionTimeoutMs)
        group.updateMember(member, protocols, rebalanceTimeoutMs, sessionTimeoutMs, d)
        if group.state is S.STABLE:
            if group.protocolName == group.selectProtocol():
                # Same assignor next generation: no rebalance, just persist
                # the new member id.
                try:
                    self._store.storeGroup(group.snapshot())
                except KafkaError as e:
                    log.warning("failed to persist group %s: %s", group.groupId, e)
                    group.updateMember(member, oldProtocols, *oldTimeouts, None)
                    group.replaceStaticMember(groupInstanceId, newMemberId, oldMemberId)
                    self._scheduleHeartbeat(group, member)
                    group.respond(
                        d,
                        JoinGroupResult(
                            errorCode=e.code,
                            generationId=group.generationId,
                            protocolType=group.protocolType,
                            protocolName=group.protocolName,
                            leaderId=currentLeader,
                            memberId="",
                        ),
                    )
                else:
                    # The previous leader id, so that a replaced leader does
                    # not run the assignor in a Stable group (pre-v9).
                    group.maybeInvokeJoin(
                        member, self._currentGenerationResult(group, member, currentLeader, False)
                    )
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
        group.transitionTo(S.PREPARING_REBALANCE, self._nowMs())
        log.info(
            "preparing to rebalance group %s (generation %d)", group.groupId, group.generationId
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
        token = object()
        group.joinToken = token
        group.joinTimer = self._callLater(
            delayMs, self._onJoinTimer, group, token, initial, initialDelayMs, remainingMs
        )

    def _cancelJoinTimer(self, group: GroupMetadata) -> None:
        group.joinToken = None
        self._cancel(group.joinTimer)
        group.joinTimer = None

    def _onJoinTimer(self, group, token, initial, delayMs, remainingMs) -> None:
        with self._locked(group):
            if group.joinToken is not token or group.state is not S.PREPARING_REBALANCE:
                return
            group.joinToken = group.joinTimer = None
            if initial and group.newMemberAdded and remainingMs != 0:
                # InitialDelayedJoin: someone new arrived, wait another
                # delay, but never longer than the rebalance timeout overall.
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
            and group.joinToken is not None
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
                    "group %s: removing member %s, which did not rejoin",
                    group.groupId,
                    member.memberId,
                )
                self._cancelHeartbeat(member)
                group.remove(member.memberId)
        if group.state is S.DEAD:
            return
        if group.members and not group.maybeElectNewJoinedLeader():
            # Only static members that did not rejoin remain: wait another
            # round for them to rejoin or time out.
            log.warning("group %s: no member rejoined, postponing the rebalance", group.groupId)
            self._armJoinTimer(group, group.rebalanceTimeoutMs, False, 0, 0)
            return
        nowMs = self._nowMs()
        group.initNextGeneration(nowMs)
        if group.state is S.EMPTY:
            log.info("group %s is now empty (generation %d)", group.groupId, group.generationId)
            try:
                self._store.storeGroup(group.snapshot({}))
            except KafkaError as e:
                # No active members; the previous snapshot is harmless.
                log.warning("failed to persist empty group %s: %s", group.groupId, e)
            return
        log.info(
            "group %s stabilized generation %d with %d members (protocol %s)",
            group.groupId,
            group.generationId,
            len(group.members),
            group.protocolName,
        )
        for member in group.allMembers():
            group.maybeInvokeJoin(member, self._currentGenerationResult(group, member))
            self._scheduleHeartbeat(group, member)
            member.isNew = False
            group.pendingSyncMembers.add(member.memberId)
        self._schedulePendingSync(group)

    # -- pending sync (DelayedSync) ----------------------------------------

    def _schedulePendingSync(self, group: GroupMetadata) -> None:
        self._removeSyncExpiration(group, clear=False)
        token = object()
        group.syncToken = token
        group.syncTimer = self._callLater(
            group.rebalanceTimeoutMs, self._onSyncExpired, group, token, group.generationId
        )

    def _removeSyncExpiration(self, group: GroupMetadata, clear: bool = True) -> None:
        if clear:
            group.pendingSyncMembers.clear()
        group.syncToken = None
        self._cancel(group.syncTimer)
        group.syncTimer = None

    def _removePendingSyncMember(self, group: GroupMetadata, memberId: str) -> None:
        group.pendingSyncMembers.discard(memberId)
        if not group.pendingSyncMembers:
            self._removeSyncExpiration(group)

    def _onSyncExpired(self, group, token, generationId) -> None:
        with self._locked(group):
            if group.syncToken is not token or generationId != group.generationId:
                return
            group.syncToken = group.syncTimer = None
            if (
                group.state not in (S.COMPLETING_REBALANCE, S.STABLE)
                or not group.pendingSyncMembers
            ):
                return
            pending = sorted(group.pendingSyncMembers)
            log.info(
                "group %s: removing members that never sent SyncGroup: %s", group.groupId, pending
            )
            for memberId in pending:
                member = group.members.get(memberId)
                if member is not None:
                    self._cancelHeartbeat(member)
                group.remove(memberId)
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
            if group.maybeInvokeSync(member, result):
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
        timeout (or C{timeoutMs}).
        """
        self._cancel(member.heartbeatTimer)
        token = object()
        member.heartbeatToken = token
        member.heartbeatTimer = self._callLater(
            member.sessionTimeoutMs if timeoutMs is None else timeoutMs,
            self._onHeartbeatExpired,
            group,
            member,
            token,
        )

    def _cancelHeartbeat(self, member: MemberMetadata) -> None:
        member.heartbeatToken = None
        self._cancel(member.heartbeatTimer)
        member.heartbeatTimer = None

    def _onHeartbeatExpired(self, group, member, token) -> None:
        with self._locked(group):
            if (
                group.state is S.DEAD
                or member.heartbeatToken is not token
                or group.members.get(member.memberId) is not member
            ):
                return
            member.heartbeatToken = member.heartbeatTimer = None
            if member.hasSatisfiedHeartbeat():
                # Parked in JoinGroup/SyncGroup: alive.  The end of the
                # rebalance arms a new timer.
                return
            log.info("group %s: member %s session expired", group.groupId, member.memberId)
            self._removeMemberAndUpdateGroup(group, member)

    def _onPendingMemberExpired(self, group, memberId) -> None:
        with self._locked(group):
            if group.state is S.DEAD or memberId not in group.pendingMembers:
                return
            log.info("group %s: pending member %s never joined", group.groupId, memberId)
            del group.pendingMembers[memberId]
            self._tryCompleteJoin(group)

    def _removeMemberAndUpdateGroup(self, group: GroupMetadata, member: MemberMetadata) -> None:
        # A parked request of the removed member must not hang: tell it to
        # start over.
        group.maybeInvokeJoin(member, JoinGroupResult.failed("", E.unknown_member_id))
        group.maybeInvokeSync(member, SyncGroupResult(E.unknown_member_id))
        self._cancelHeartbeat(member)
        group.remove(member.memberId)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybePrepareRebalance(group)
        elif group.state is S.PREPARING_REBALANCE:
            self._tryCompleteJoin(group)

    # ------------------------------------------------------------------
    # SyncGroup

    def syncGroup(
        self,
        groupId: str,
        generationId: int,
        memberId: str,
        groupInstanceId: str | None,
        protocolType: str | None,
        protocolName: str | None,
        assignments: Mapping[str, bytes],
    ) -> Deferred:
        """
        Receive (and, for the leader, hand out) the assignment of the
        current generation.

        @param protocolType: SyncGroup v5+, else C{None} (not checked).
        @param protocolName: SyncGroup v5+, else C{None} (not checked).
        @param assignments: the leader's assignment, member id -> bytes;
            empty for followers.
        @return: a Deferred firing with a L{SyncGroupResult}; a follower's
            fires when the leader's assignment arrives.
        """
        d: Deferred = ThreadSafeDeferred()
        error = self._groupStatusError(groupId, allowEmpty=False)
        group = self._getGroup(groupId) if error is None else None
        if error is None and group is None:
            error = E.unknown_member_id
        if error is not None:
            d.callback(SyncGroupResult(error))
            return d
        with self._locked(group):
            error = self._validateSyncGroup(
                group, generationId, memberId, groupInstanceId, protocolType, protocolName
            )
            if error is not None:
                group.respond(d, SyncGroupResult(error))
            elif group.state is S.EMPTY:
                group.respond(d, SyncGroupResult(E.unknown_member_id))
            elif group.state is S.PREPARING_REBALANCE:
                group.respond(d, SyncGroupResult(E.rebalance_in_progress))
            elif group.state is S.COMPLETING_REBALANCE:
                member = group.members[memberId]
                group.maybeInvokeSync(member, SyncGroupResult(E.rebalance_in_progress))
                member.awaitingSync = d
                self._removePendingSyncMember(group, memberId)
                if group.isLeader(memberId):
                    self._completeSyncWithAssignment(group, dict(assignments))
            elif group.state is S.STABLE:
                # A follower that syncs after the leader, or a rejoin that
                # changed nothing: hand out what it was assigned.
                member = group.members[memberId]
                self._removePendingSyncMember(group, memberId)
                group.respond(
                    d,
                    SyncGroupResult(
                        E.none, group.protocolType, group.protocolName, member.assignment
                    ),
                )
                self._scheduleHeartbeat(group, member)
        return d

    def _validateSyncGroup(
        self, group, generationId, memberId, groupInstanceId, protocolType, protocolName
    ):
        if group.state is S.DEAD:
            return E.coordinator_not_available
        error = self._validateCurrentMember(group, memberId, groupInstanceId)
        if error is not None:
            return error
        if generationId != group.generationId:
            return E.illegal_generation
        if protocolType is not None and protocolType != group.protocolType:
            return E.inconsistent_group_protocol
        if protocolName is not None and protocolName != group.protocolName:
            return E.inconsistent_group_protocol
        return None

    def _completeSyncWithAssignment(
        self, group: GroupMetadata, assignments: dict[str, bytes]
    ) -> None:
        # Members the leader left out get an empty assignment; ids it
        # invented are ignored.
        assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
        missing = [mid for mid in group.members if mid not in assignments]
        if missing:
            log.warning("group %s: no assignment for %s, assigning nothing", group.groupId, missing)
        try:
            self._store.storeGroup(group.snapshot(assignment))
        except KafkaError as e:
            self._resetAndPropagateAssignmentError(group, e.code)
            self._maybePrepareRebalance(group)
            return
        for member in group.allMembers():
            member.assignment = assignment[member.memberId]
        self._propagateAssignment(group, E.none)
        group.transitionTo(S.STABLE, self._nowMs())

    # ------------------------------------------------------------------
    # Heartbeat

    def heartbeat(
        self, groupId: str, generationId: int, memberId: str, groupInstanceId: str | None = None
    ) -> ErrorCode:
        """
        Keep a member's session alive and tell it whether to rejoin.

        @return: NONE, REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION,
            UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ...
        """
        error = self._groupStatusError(groupId, allowEmpty=False)
        if error is not None:
            return error
        group = self._getGroup(groupId)
        if group is None:
            return E.unknown_member_id
        with self._locked(group):
            if group.state is S.DEAD:
                return E.coordinator_not_available
            error = self._validateCurrentMember(group, memberId, groupInstanceId)
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

    # ------------------------------------------------------------------
    # LeaveGroup

    def leaveGroup(self, groupId: str, members: Iterable[tuple]) -> LeaveGroupResult:
        """
        Remove members (LeaveGroup v3+ batches them; earlier versions send
        one).

        @param members: C{(memberId, groupInstanceId)} pairs (a third
            element, the reason, is accepted and ignored).  A C{memberId} of
            C{""} with an instance id removes the static member by instance
            id (administrative removal).
        @return: L{LeaveGroupResult}.
        """
        members = [(m[0] or "", m[1]) for m in members]
        error = self._groupStatusError(groupId, allowEmpty=False)
        if error is not None:
            return LeaveGroupResult(error)
        group = self._getGroup(groupId)
        if group is None:
            return LeaveGroupResult(
                E.none,
                tuple(LeaveMemberResult(mid, iid, E.unknown_member_id) for mid, iid in members),
            )
        results = []
        with self._locked(group):
            if group.state is S.DEAD:
                return LeaveGroupResult(E.coordinator_not_available)
            for memberId, instanceId in members:
                if memberId == "":
                    current = (
                        group.staticMembers.get(instanceId) if instanceId is not None else None
                    )
                    if current is None:
                        results.append(LeaveMemberResult(memberId, instanceId, E.unknown_member_id))
                        continue
                    self._removeMemberAndUpdateGroup(group, group.members[current])
                    results.append(LeaveMemberResult(memberId, instanceId, E.none))
                elif memberId in group.pendingMembers:
                    self._cancel(group.pendingMembers.pop(memberId))
                    self._tryCompleteJoin(group)
                    results.append(LeaveMemberResult(memberId, instanceId, E.none))
                else:
                    error = self._validateCurrentMember(group, memberId, instanceId)
                    if error is None:
                        log.info("group %s: member %s left", groupId, memberId)
                        self._removeMemberAndUpdateGroup(group, group.members[memberId])
                    results.append(LeaveMemberResult(memberId, instanceId, error or E.none))
        return LeaveGroupResult(E.none, tuple(results))

    # ------------------------------------------------------------------
    # Describe / List / Delete

    def describeGroups(self, groupIds: Iterable[str]) -> list[GroupDescription]:
        """
        @return: one L{GroupDescription} per id, in order; unknown groups
            are state C{"Dead"} with no error (as Kafka before KIP-1043).
        """
        out = []
        for groupId in groupIds:
            error = self._groupStatusError(groupId, allowEmpty=True)
            if error is not None:
                out.append(GroupDescription(error, groupId or "", "", "", ""))
                continue
            group = self._getGroup(groupId)
            if group is None:
                out.append(GroupDescription(E.none, groupId, S.DEAD.value, "", ""))
                continue
            with self._locked(group):
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
        return out

    def listGroups(self, statesFilter: Iterable[str] | None = None) -> ListGroupsResult:
        """
        @param statesFilter: state names (ListGroups v4+; compared without
            regard to case); empty or C{None} lists all.
        @return: L{ListGroupsResult} of L{GroupOverview}s.
        """
        if not self._active:
            return ListGroupsResult(E.coordinator_not_available)
        wanted = {s.lower() for s in statesFilter or ()}
        with self._lock:
            groups = list(self._groups.values())
        out = []
        for group in groups:
            with self._locked(group):
                if group.state is S.DEAD:
                    continue
                if wanted and group.state.value.lower() not in wanted:
                    continue
                out.append(
                    GroupOverview(group.groupId, group.protocolType or "", group.state.value)
                )
        return ListGroupsResult(E.none, tuple(out))

    def deleteGroups(self, groupIds: Iterable[str]) -> dict[str, ErrorCode]:
        """
        Delete empty groups with their offsets.

        @return: group id -> NONE, GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, ...
        """
        out: dict[str, ErrorCode] = {}
        for groupId in groupIds:
            error = self._groupStatusError(groupId, allowEmpty=True)
            if error is not None:
                out[groupId] = error
                continue
            group = self._getGroup(groupId)
            if group is None:
                out[groupId] = E.group_id_not_found
                continue
            with self._locked(group):
                if group.state is S.DEAD:
                    out[groupId] = E.group_id_not_found
                elif group.state is not S.EMPTY:
                    out[groupId] = E.non_empty_group
                else:
                    try:
                        self._store.deleteGroup(groupId)
                    except KafkaError as e:
                        out[groupId] = e.code
                        continue
                    self._markDead(group)
                    out[groupId] = E.none
        return out

    def _markDead(self, group: GroupMetadata) -> None:
        """
        Retire a group (lock held): stop its timers and forget it.
        """
        group.transitionTo(S.DEAD, self._nowMs())
        self._cancelJoinTimer(group)
        self._removeSyncExpiration(group)
        for handle in group.pendingMembers.values():
            self._cancel(handle)
        group.pendingMembers.clear()
        for member in group.allMembers():
            self._cancelHeartbeat(member)
        group.offsets.clear()
        self._forgetGroup(group)

    # ------------------------------------------------------------------
    # Offsets

    def commitOffsets(
        self,
        groupId: str,
        generationId: int,
        memberId: str,
        groupInstanceId: str | None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        now_ms: int | None = None,
    ) -> dict[TopicPartition, ErrorCode]:
        """
        OffsetCommit.

        A member of a group (generation >= 0, or a member id or instance id
        given) must be current; a commit with generation -1 and no member id
        comes from a consumer managing its own partitions and is only
        accepted while the group has no members (it creates the group if
        needed).

        @param offsets: C{(topic, partition)} -> L{OffsetAndMetadata}; a
            C{commitTimestampMs} of -1 is filled in with C{now_ms}.
        @param now_ms: the commit time; by default the clock's.  Must be on
            the same time line as the clock (both are wall time in the
            broker) since expiry compares the two.
        @return: C{(topic, partition)} -> L{ErrorCode}.
        """
        offsets = dict(offsets)
        nowMs = self._nowMs() if now_ms is None else now_ms

        def everyone(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: error for tp in offsets}

        error = self._groupStatusError(groupId, allowEmpty=True)
        if error is not None:
            return everyone(error)
        group = self._getGroup(groupId)
        if group is None:
            if generationId >= 0:
                # A generation of a group we do not know: a stale member.
                return everyone(E.illegal_generation)
            group = self._getOrMaybeCreateGroup(groupId, create=True)
        with self._locked(group):
            error = self._validateOffsetCommit(group, generationId, memberId, groupInstanceId)
            if error is not None:
                return everyone(error)
            if group.state is S.COMPLETING_REBALANCE:
                # A valid member that has not received its assignment yet.
                return everyone(E.rebalance_in_progress)
            if group.state in (S.STABLE, S.PREPARING_REBALANCE):
                # Committing is a sign of life; the rebalance is signalled
                # by the next heartbeat.
                self._scheduleHeartbeat(group, group.members[memberId])
            return self._storeOffsets(group, offsets, nowMs)

    def _validateOffsetCommit(self, group, generationId, memberId, groupInstanceId):
        if group.state is S.DEAD:
            return E.coordinator_not_available
        if generationId >= 0 or memberId or groupInstanceId is not None:
            error = self._validateCurrentMember(group, memberId or "", groupInstanceId)
            if error is None and generationId != group.generationId:
                error = E.illegal_generation
            return error
        if group.state is not S.EMPTY:
            # Only members may commit for a group with members.
            return E.unknown_member_id
        return None

    def _storeOffsets(self, group, offsets, nowMs) -> dict[TopicPartition, ErrorCode]:
        results: dict[TopicPartition, ErrorCode] = {}
        valid: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, om in offsets.items():
            metadata = om.metadata or ""
            if len(metadata.encode("utf-8")) > self._offsetMetadataMaxBytes:
                results[tp] = E.offset_metadata_too_large
                continue
            valid[tp] = OffsetAndMetadata(
                offset=om.offset,
                leaderEpoch=om.leaderEpoch,
                metadata=metadata,
                commitTimestampMs=nowMs if om.commitTimestampMs < 0 else om.commitTimestampMs,
                expireTimestampMs=om.expireTimestampMs,
            )
        if valid:
            try:
                self._store.storeOffsets(group.groupId, valid)
            except KafkaError as e:
                results.update({tp: e.code for tp in valid})
                return results
            group.offsets.update(valid)
            results.update({tp: E.none for tp in valid})
        return results

    def fetchOffsets(
        self, groupId: str, partitions: Iterable[TopicPartition] | None = None
    ) -> OffsetFetchResult:
        """
        OffsetFetch for one group, whatever its state (a group may use
        Kafka only to store offsets).

        @param partitions: the partitions wanted, or C{None} for all
            committed ones.
        @return: L{OffsetFetchResult}; partitions without a commit have
            offset -1.
        """
        error = self._groupStatusError(groupId, allowEmpty=True)
        if error is not None:
            return OffsetFetchResult(error)
        group = self._getGroup(groupId)
        stored: dict[TopicPartition, OffsetAndMetadata] = {}
        if group is not None:
            with self._locked(group):
                if group.state is not S.DEAD:
                    stored = dict(group.offsets)
        wanted = sorted(stored) if partitions is None else [tuple(tp) for tp in partitions]
        out = {}
        for tp in wanted:
            om = stored.get(tp)
            out[tp] = (
                FetchedOffset(-1, -1, "", E.none)
                if om is None
                else FetchedOffset(om.offset, om.leaderEpoch, om.metadata, E.none)
            )
        return OffsetFetchResult(E.none, out)

    def deleteOffsets(
        self, groupId: str, partitions: Iterable[TopicPartition]
    ) -> OffsetDeleteResult:
        """
        OffsetDelete.  All offsets of an Empty group may go; a consumer
        group with members keeps those of topics it is subscribed to
        (GROUP_SUBSCRIBED_TO_TOPIC, decided by parsing the members'
        subscriptions); any other group with members refuses
        (NON_EMPTY_GROUP).

        @return: L{OffsetDeleteResult}.
        """
        partitions = [tuple(tp) for tp in partitions]
        error = self._groupStatusError(groupId, allowEmpty=False)
        if error is not None:
            return OffsetDeleteResult(error)
        group = self._getGroup(groupId)
        if group is None:
            return OffsetDeleteResult(E.group_id_not_found)
        with self._locked(group):
            if group.state is S.DEAD:
                return OffsetDeleteResult(E.group_id_not_found)
            results: dict[TopicPartition, ErrorCode] = {}
            if group.state is S.EMPTY:
                eligible = partitions
            elif group.isConsumerGroup():
                eligible = []
                for tp in partitions:
                    if group.isSubscribedToTopic(tp[0]):
                        results[tp] = E.group_subscribed_to_topic
                    else:
                        eligible.append(tp)
            else:
                return OffsetDeleteResult(E.non_empty_group)
            if eligible:
                try:
                    self._removeOffsets(group, eligible)
                except KafkaError as e:
                    return OffsetDeleteResult(e.code)
                results.update({tp: E.none for tp in eligible})
            return OffsetDeleteResult(E.none, results)

    def _removeOffsets(self, group: GroupMetadata, partitions) -> int:
        """
        Kafka's C{cleanupGroupMetadata} for one group (lock held): remove
        offsets, and retire the group if it is left empty with none.

        @return: how many offsets were removed.
        """
        present = [tp for tp in partitions if tp in group.offsets]
        if present:
            self._store.deleteOffsets(group.groupId, present)
            for tp in present:
                del group.offsets[tp]
        if group.state is S.EMPTY and not group.offsets:
            self._store.deleteGroup(group.groupId)
            self._markDead(group)
        return len(present)

    def expireOffsets(self, now_ms: int | None = None) -> int:
        """
        Remove expired offsets (C{offsets.retention.minutes}) and the empty
        groups left without any.  Run every
        C{offsets.retention.check.interval.ms} once L{load} was called.

        @param now_ms: the time to expire against; by default the clock's.
        @return: how many offsets were removed.
        """
        nowMs = self._nowMs() if now_ms is None else now_ms
        with self._lock:
            groups = list(self._groups.values())
        removed = 0
        for group in groups:
            with self._locked(group):
                if group.state is S.DEAD:
                    continue
                expired = group.expiredOffsets(nowMs, self._offsetsRetentionMs)
                try:
                    removed += self._removeOffsets(group, expired)
                except KafkaError as e:
                    log.warning("group %s: failed to expire offsets: %s", group.groupId, e)
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed

    def _periodicExpiry(self) -> None:
        self._expiryTimer = None
        if not self._active:
            return
        try:
            self.expireOffsets()
        finally:
            self._scheduleExpiry()

    def _scheduleExpiry(self) -> None:
        if self._active and self._offsetsRetentionCheckIntervalMs > 0 and self._expiryTimer is None:
            self._expiryTimer = self._callLater(
                self._offsetsRetentionCheckIntervalMs, self._periodicExpiry
            )

    # ------------------------------------------------------------------
    # Lifecycle

    def load(self) -> None:
        """
        Load groups and offsets from the store (at startup, before serving)
        and start the periodic offset expiry.  Loaded groups are Stable (or
        Empty); their members must heartbeat within their session timeout.
        """
        snapshots, offsets = self._store.load()
        nowMs = self._nowMs()
        loaded: dict[str, GroupMetadata] = {}
        for snap in snapshots:
            loaded[snap.groupId] = GroupMetadata.fromSnapshot(snap, nowMs)
        for groupId, groupOffsets in offsets.items():
            group = loaded.get(groupId)
            if group is None:
                # Offsets without group metadata: a simple consumer's group.
                group = loaded[groupId] = GroupMetadata(groupId, S.EMPTY, nowMs)
            group.offsets.update(groupOffsets)
        with self._lock:
            self._groups.update(loaded)
        for group in loaded.values():
            with self._locked(group):
                for member in group.allMembers():
                    self._scheduleHeartbeat(group, member)
        self._scheduleExpiry()

    def shutdown(self) -> None:
        """
        Stop: cancel every timer, answer parked requests with
        NOT_COORDINATOR (as Kafka does when it unloads a group) and refuse
        further requests with COORDINATOR_NOT_AVAILABLE.
        """
        self._active = False
        self._cancel(self._expiryTimer)
        self._expiryTimer = None
        with self._lock:
            groups = list(self._groups.values())
        for group in groups:
            with self._locked(group):
                for member in group.allMembers():
                    group.maybeInvokeJoin(
                        member, JoinGroupResult.failed(member.memberId, E.not_coordinator)
                    )
                    group.maybeInvokeSync(member, SyncGroupResult(E.not_coordinator))
                if group.state is not S.DEAD:
                    self._markDead(group)
