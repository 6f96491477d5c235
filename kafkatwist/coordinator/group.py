"""
Classic group state and member metadata (Kafka's C{GroupMetadata.scala} and
C{MemberMetadata.scala}).

These classes are bookkeeping only: they never arm timers, touch storage or
answer requests.  A member's parked JoinGroup/SyncGroup is kept as the
opaque C{replyTo} the request came with; the coordinator takes it back
(L{GroupMetadata.takeJoin}, L{GroupMetadata.takeSync}) to answer it.  They
belong to the coordinator's owner (see L{kafkatwist.coordinator.runtime}):
no locks.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable

from kafkatwist.coordinator.consumerprotocol import CONSUMER_PROTOCOL_TYPE, parseSubscription
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition, selectExpired
from kafkatwist.coordinator.requests import JoinRequest
from kafkatwist.coordinator.results import JoinGroupMember, MemberDescription
from kafkatwist.coordinator.store import GroupSnapshot, MemberSnapshot

__all__ = ["GroupMetadata", "GroupState", "MemberMetadata"]


class GroupState(enum.Enum):
    """
    The classic group states; values are the names Kafka reports in
    DescribeGroups and ListGroups.
    """

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# Kafka's GroupState.validPreviousStates.
_VALID_PREVIOUS = {
    _S.DEAD: {_S.STABLE, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD},
    _S.COMPLETING_REBALANCE: {_S.PREPARING_REBALANCE},
    _S.STABLE: {_S.COMPLETING_REBALANCE},
    _S.PREPARING_REBALANCE: {_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY},
    _S.EMPTY: {_S.PREPARING_REBALANCE},
}


class MemberMetadata:
    """
    One member of a group.

    @ivar supportedProtocols: C{list} of C{(name, metadata bytes)} in the
        member's order of preference.
    @ivar assignment: what the leader assigned it in the current generation.
    @ivar awaitingJoin: the C{replyTo} of its parked JoinGroup, or C{None}.
    @ivar awaitingSync: the C{replyTo} of its parked SyncGroup, or C{None}.
    @ivar isNew: joined as a new member in the current rebalance; such a
        member cannot heartbeat yet, so it expires on the (long) new-member
        join timeout rather than being kept alive by waiting.
    @ivar heartbeatDeadlineMs: when its session expires unless it shows
        signs of life; C{None} when no session timer runs.
    @ivar heartbeatTimerDueMs: when the armed session timer fires (it may
        be earlier than the deadline: a heartbeat only moves the deadline,
        and the timer re-arms itself for the rest), C{None} if unarmed.
    """

    def __init__(
        self,
        memberId: str,
        groupInstanceId: str | None,
        clientId: str,
        clientHost: str,
        rebalanceTimeoutMs: int,
        sessionTimeoutMs: int,
        protocolType: str,
        supportedProtocols: list[tuple[str, bytes]],
    ) -> None:
        self.memberId = memberId
        self.groupInstanceId = groupInstanceId
        self.clientId = clientId
        self.clientHost = clientHost
        self.rebalanceTimeoutMs = rebalanceTimeoutMs
        self.sessionTimeoutMs = sessionTimeoutMs
        self.protocolType = protocolType
        self.supportedProtocols = list(supportedProtocols)
        self.assignment = b""
        self.awaitingJoin: Callable | None = None
        self.awaitingSync: Callable | None = None
        self.isNew = False
        self.heartbeatDeadlineMs: int | None = None
        self.heartbeatTimerDueMs: int | None = None

    @classmethod
    def fromJoin(cls, memberId: str, groupInstanceId: str | None, request: JoinRequest):
        """
        A new member as its JoinGroup describes it.
        """
        return cls(
            memberId,
            groupInstanceId,
            request.clientId,
            request.clientHost,
            request.rebalanceTimeoutMs,
            request.sessionTimeoutMs,
            request.protocolType,
            list(request.protocols),
        )

    @property
    def isStatic(self) -> bool:
        return self.groupInstanceId is not None

    @property
    def isAwaitingJoin(self) -> bool:
        return self.awaitingJoin is not None

    @property
    def isAwaitingSync(self) -> bool:
        return self.awaitingSync is not None

    def protocols(self) -> set[str]:
        return {name for name, _ in self.supportedProtocols}

    def metadata(self, protocol: str) -> bytes:
        """
        @return: the member's metadata for C{protocol}.
        @raise KeyError: the member does not support it.
        """
        for name, data in self.supportedProtocols:
            if name == protocol:
                return data
        raise KeyError(protocol)

    def vote(self, candidates: set[str]) -> str:
        """
        Kafka's C{MemberMetadata.vote}: the member's most preferred protocol
        among C{candidates}.
        """
        for name, _ in self.supportedProtocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.memberId} does not support any of {candidates}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """
        Same protocols, same order, same metadata: a rejoin that changes
        nothing (and need not trigger a rebalance).
        """
        return [(n, bytes(m)) for n, m in protocols] == [
            (n, bytes(m)) for n, m in self.supportedProtocols
        ]

    def hasSatisfiedHeartbeat(self) -> bool:
        """
        Kafka's C{hasSatisfiedHeartbeat}, asked when the session timer fires
        without a heartbeat: a member parked in JoinGroup/SyncGroup is alive
        (it cannot heartbeat while waiting), unless it is new.
        """
        if self.isNew:
            return False
        return self.isAwaitingJoin or self.isAwaitingSync

    def __repr__(self) -> str:
        return f"<MemberMetadata {self.memberId} instance={self.groupInstanceId}>"


class GroupMetadata:
    """
    One group's state.

    @ivar pendingMembers: member ids handed out with MEMBER_ID_REQUIRED that
        have not joined yet (each has a timer).
    @ivar pendingSyncMembers: members of the new generation that have not
        sent SyncGroup yet.
    @ivar newMemberAdded: a new member joined during the initial rebalance
        delay, so the delay is extended (Kafka's InitialDelayedJoin).
    @ivar subscribedTopics: topics a consumer group consumes, C{None} when
        unknown (not a consumer group, or unparseable metadata).
    @ivar offsets: committed offsets, C{(topic, partition)} ->
        L{OffsetAndMetadata}.
    @ivar pendingOffsets: commits being appended, C{(topic, partition)} ->
        the latest L{OffsetAndMetadata} staged (Kafka's
        C{pendingOffsetCommits}).
    @ivar joinTimer: C{(initial, delayMs, remainingMs)} of the armed
        rebalance timer (Kafka's DelayedJoin / InitialDelayedJoin), or
        C{None}.
    @ivar syncTimerGeneration: the generation whose pending-sync timer is
        armed, or C{None}.
    """

    def __init__(self, groupId: str, state: GroupState, nowMs: int) -> None:
        self.groupId = groupId
        self.state = state
        self.currentStateTimestampMs: int | None = nowMs
        self.protocolType: str | None = None
        self.protocolName: str | None = None
        self.generationId = 0
        self.leaderId: str | None = None
        self.members: dict[str, MemberMetadata] = {}
        self.staticMembers: dict[str, str] = {}
        self.pendingMembers: set[str] = set()
        self.pendingSyncMembers: set[str] = set()
        self._supportedProtocols: Counter[str] = Counter()
        self._numMembersAwaitingJoin = 0
        self.newMemberAdded = False
        self.subscribedTopics: set[str] | None = None
        self.offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.pendingOffsets: dict[TopicPartition, OffsetAndMetadata] = {}
        self.joinTimer: tuple[bool, int, int] | None = None
        self.initialDelayActive = False
        self.syncTimerGeneration: int | None = None

    # -- state ---------------------------------------------------------------

    def transitionTo(self, state: GroupState, nowMs: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(
                f"group {self.groupId} cannot go from {self.state.value} to {state.value}"
            )
        self.state = state
        self.currentStateTimestampMs = nowMs

    def canRebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def isConsumerGroup(self) -> bool:
        return self.protocolType == CONSUMER_PROTOCOL_TYPE

    # -- parked requests -----------------------------------------------------

    def takeJoin(self, member: MemberMetadata) -> Callable | None:
        """
        @return: the C{replyTo} of the member's parked JoinGroup (now no
            longer parked), or C{None}.
        """
        replyTo = member.awaitingJoin
        if replyTo is not None:
            member.awaitingJoin = None
            self._numMembersAwaitingJoin -= 1
        return replyTo

    def takeSync(self, member: MemberMetadata) -> Callable | None:
        """
        @return: the C{replyTo} of the member's parked SyncGroup, or C{None}.
        """
        replyTo, member.awaitingSync = member.awaitingSync, None
        return replyTo

    # -- membership ----------------------------------------------------------

    def has(self, memberId: str) -> bool:
        return memberId in self.members

    def isLeader(self, memberId: str) -> bool:
        return self.leaderId == memberId

    @property
    def rebalanceTimeoutMs(self) -> int:
        """
        The longest rebalance timeout of the members: how long a rebalance
        waits for everyone to rejoin.
        """
        return max((m.rebalanceTimeoutMs for m in self.members.values()), default=0)

    def supportsProtocols(self, protocolType: str, protocols: Iterable[str]) -> bool:
        """
        Kafka's C{supportsProtocols}: an empty group accepts any non-empty
        protocol list; otherwise the type must match and at least one
        protocol must be supported by every current member.
        """
        protocols = set(protocols)
        if not self.members:
            return bool(protocolType) and bool(protocols)
        return protocolType == self.protocolType and any(
            self._supportedProtocols[p] == len(self.members) for p in protocols
        )

    def add(self, member: MemberMetadata, replyTo: Callable | None) -> None:
        if not self.members:
            self.protocolType = member.protocolType
        if self.leaderId is None:
            # The first member to join leads (until it leaves or fails to
            # rejoin a rebalance).
            self.leaderId = member.memberId
        self.members[member.memberId] = member
        if member.groupInstanceId is not None:
            self.staticMembers[member.groupInstanceId] = member.memberId
        self._supportedProtocols.update(member.protocols())
        member.awaitingJoin = replyTo
        if replyTo is not None:
            self._numMembersAwaitingJoin += 1
        self.pendingMembers.discard(member.memberId)

    def updateMember(
        self,
        member: MemberMetadata,
        protocols: list[tuple[str, bytes]],
        rebalanceTimeoutMs: int,
        sessionTimeoutMs: int,
        replyTo: Callable | None,
    ) -> None:
        self._supportedProtocols.subtract(member.protocols())
        member.supportedProtocols = list(protocols)
        self._supportedProtocols.update(member.protocols())
        member.rebalanceTimeoutMs = rebalanceTimeoutMs
        member.sessionTimeoutMs = sessionTimeoutMs
        if replyTo is not None and member.awaitingJoin is None:
            self._numMembersAwaitingJoin += 1
        elif replyTo is None and member.awaitingJoin is not None:
            self._numMembersAwaitingJoin -= 1
        member.awaitingJoin = replyTo

    def remove(self, memberId: str) -> MemberMetadata | None:
        member = self.members.pop(memberId, None)
        if member is not None:
            self._supportedProtocols.subtract(member.protocols())
            if member.awaitingJoin is not None:
                self._numMembersAwaitingJoin -= 1
            if member.groupInstanceId is not None:
                self.staticMembers.pop(member.groupInstanceId, None)
            if self.isLeader(memberId):
                # Kafka picks the next member in join order.
                self.leaderId = next(iter(self.members), None)
        self.pendingMembers.discard(memberId)
        self.pendingSyncMembers.discard(memberId)
        return member

    def replaceStaticMember(
        self, groupInstanceId: str, oldMemberId: str, newMemberId: str
    ) -> MemberMetadata:
        """
        Give a static member a new member id.  Whoever still waits under
        the old id must have been answered (fenced) by the caller.
        """
        member = self.members.pop(oldMemberId)
        member.memberId = newMemberId
        self.members[newMemberId] = member
        if self.isLeader(oldMemberId):
            self.leaderId = newMemberId
        self.staticMembers[groupInstanceId] = newMemberId
        if oldMemberId in self.pendingSyncMembers:
            self.pendingSyncMembers.discard(oldMemberId)
            self.pendingSyncMembers.add(newMemberId)
        return member

    def hasAllMembersJoined(self) -> bool:
        return len(self.members) == self._numMembersAwaitingJoin and not self.pendingMembers

    def notYetRejoinedMembers(self) -> list[MemberMetadata]:
        return [m for m in self.members.values() if not m.isAwaitingJoin]

    def maybeElectNewJoinedLeader(self) -> bool:
        """
        Kafka's C{maybeElectNewJoinedLeader}: keep the leader if it rejoined,
        else hand leadership to any member that did.

        @return: C{False} if no member rejoined.
        """
        if self.leaderId is None:
            return False
        leader = self.members.get(self.leaderId)
        if leader is not None and leader.isAwaitingJoin:
            return True
        for member in self.members.values():
            if member.isAwaitingJoin:
                self.leaderId = member.memberId
                return True
        return False

    # -- protocol selection --------------------------------------------------

    def candidateProtocols(self) -> set[str]:
        n = len(self.members)
        return {p for p, count in self._supportedProtocols.items() if count == n and n}

    def selectProtocol(self) -> str:
        """
        Kafka's C{selectProtocol}: among protocols every member supports,
        each member votes for its most preferred; most votes wins.  Ties go
        to the protocol voted for first in join order (Kafka leaves ties to
        hash order; a stable rule is kinder to tests).
        """
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.groupId}")
        candidates = self.candidateProtocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        return max(votes, key=lambda p: votes[p])

    # -- generations ---------------------------------------------------------

    def initNextGeneration(self, nowMs: int) -> None:
        self.generationId += 1
        if self.members:
            self.protocolName = self.selectProtocol()
            self.subscribedTopics = self.computeSubscribedTopics()
            self.transitionTo(GroupState.COMPLETING_REBALANCE, nowMs)
        else:
            self.protocolName = None
            self.subscribedTopics = self.computeSubscribedTopics()
            self.transitionTo(GroupState.EMPTY, nowMs)
        self.pendingSyncMembers.clear()

    def computeSubscribedTopics(self) -> set[str] | None:
        """
        The union of the members' subscriptions for a consumer group, parsed
        from the consumer protocol metadata; C{None} when that is not
        possible, which callers treat as "might be subscribed to anything".
        """
        if not self.isConsumerGroup():
            return None
        if not self.members:
            return set()
        if self.protocolName is None:
            return None
        topics: set[str] = set()
        try:
            for member in self.members.values():
                topics.update(parseSubscription(member.metadata(self.protocolName)).topics)
        except (ValueError, KeyError, UnicodeDecodeError):
            return None
        return topics

    def isSubscribedToTopic(self, topic: str) -> bool:
        if self.subscribedTopics is None:
            return True
        return topic in self.subscribedTopics

    def currentMemberMetadata(self) -> tuple[JoinGroupMember, ...]:
        """
        What the leader receives: every member's metadata for the selected
        protocol.
        """
        assert self.protocolName is not None
        return tuple(
            JoinGroupMember(m.memberId, m.groupInstanceId, m.metadata(self.protocolName))
            for m in self.members.values()
        )

    # -- offsets -------------------------------------------------------------

    def expiredOffsets(self, nowMs: int, retentionMs: int) -> list[TopicPartition]:
        """
        Kafka's C{removeExpiredOffsets} selection:

          - a group with a protocol type that is Empty: everything, counting
            retention from when the group became empty (or the commit);
          - a Stable consumer group with a known subscription: offsets of
            topics it no longer consumes, by commit time;
          - a group that never had members (simple consumers): by commit
            time;
          - otherwise nothing (members are active and may need them).
        """
        if self.protocolType is not None and self.state is GroupState.EMPTY:
            stateTs = self.currentStateTimestampMs
            return selectExpired(
                self.offsets,
                nowMs,
                retentionMs,
                lambda om: stateTs if stateTs is not None else om.commitTimestampMs,
            )
        if (
            self.isConsumerGroup()
            and self.subscribedTopics is not None
            and self.state is GroupState.STABLE
        ):
            return selectExpired(
                self.offsets,
                nowMs,
                retentionMs,
                lambda om: om.commitTimestampMs,
                self.subscribedTopics,
            )
        if self.protocolType is None:
            return selectExpired(self.offsets, nowMs, retentionMs, lambda om: om.commitTimestampMs)
        return []

    # -- snapshots -----------------------------------------------------------

    def snapshot(self, assignment: dict[str, bytes] | None = None) -> GroupSnapshot:
        """
        The group as stored, with C{assignment} (member id -> bytes) in place
        of the members' current assignments if given.
        """
        members = []
        if self.protocolName is not None:
            for m in self.members.values():
                members.append(
                    MemberSnapshot(
                        memberId=m.memberId,
                        groupInstanceId=m.groupInstanceId,
                        clientId=m.clientId,
                        clientHost=m.clientHost,
                        rebalanceTimeoutMs=m.rebalanceTimeoutMs,
                        sessionTimeoutMs=m.sessionTimeoutMs,
                        subscription=m.metadata(self.protocolName),
                        assignment=(
                            assignment.get(m.memberId, b"")
                            if assignment is not None
                            else m.assignment
                        ),
                    )
                )
        return GroupSnapshot(
            groupId=self.groupId,
            protocolType=self.protocolType,
            generationId=self.generationId,
            protocolName=self.protocolName,
            leaderId=self.leaderId,
            currentStateTimestampMs=self.currentStateTimestampMs,
            members=tuple(members),
        )

    @classmethod
    def fromSnapshot(cls, snap: GroupSnapshot, nowMs: int) -> GroupMetadata:
        """
        Rebuild a loaded group: Stable if it has members, else Empty (as
        Kafka's C{GroupMetadata.loadGroup}).
        """
        state = GroupState.STABLE if snap.members else GroupState.EMPTY
        group = cls(snap.groupId, state, nowMs)
        group.currentStateTimestampMs = snap.currentStateTimestampMs
        group.protocolType = snap.protocolType
        group.generationId = snap.generationId
        group.protocolName = snap.protocolName if snap.members else None
        for ms in snap.members:
            member = MemberMetadata(
                ms.memberId,
                ms.groupInstanceId,
                ms.clientId,
                ms.clientHost,
                ms.rebalanceTimeoutMs,
                ms.sessionTimeoutMs,
                snap.protocolType or "",
                [(snap.protocolName or "", ms.subscription)],
            )
            member.assignment = ms.assignment
            group.add(member, None)
        group.leaderId = snap.leaderId if snap.leaderId in group.members else group.leaderId
        group.subscribedTopics = group.computeSubscribedTopics()
        return group

    # -- descriptions --------------------------------------------------------

    def describeMembers(self) -> tuple[MemberDescription, ...]:
        stable = self.state is GroupState.STABLE and self.protocolName is not None
        return tuple(
            MemberDescription(
                m.memberId,
                m.groupInstanceId,
                m.clientId,
                m.clientHost,
                m.metadata(self.protocolName) if stable else b"",  # type: ignore[arg-type]
                m.assignment if stable else b"",
            )
            for m in self.members.values()
        )

    def allMembers(self) -> list[MemberMetadata]:
        return list(self.members.values())
