"""
The classic group membership protocol of the sans-io group coordinator:
JoinGroup, the rebalance (join and sync phases, their timers), session
timeouts, SyncGroup, Heartbeat and LeaveGroup (Kafka's
C{GroupCoordinator}/C{GroupMetadataManager} classic-group paths).

A part of L{GroupCoordinator<kafkatwist.coordinator.coordinator.GroupCoordinator>},
which combines the parts; they share its state and effects (see its
C{__init__}).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from twisted.logger import Logger

from kafkatwist.coordinator.formats import (
    APPEND_ERRORS_FOR_GROUP,
    groupRecord,
)
from kafkatwist.coordinator.group import GroupMetadata, GroupState, MemberMetadata
from kafkatwist.coordinator.requests import JoinRequest, SyncRequest
from kafkatwist.coordinator.runtime import machineEntry
from kafkatwist.coordinator.results import (
    JoinGroupResult,
    LeaveGroupResult,
    LeaveMemberResult,
    SyncGroupResult,
)
from kafkatwist.errors import ErrorCode

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


#: an entry point: set the time, collect and return the effects, publish
#: what changed for other threads
_entry = machineEntry(publish=True)


class ClassicGroupMembership:
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
