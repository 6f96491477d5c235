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
    groupTombstone,
    offsetTombstones,
    partitionFor,
)
from kafkatwist.coordinator.group import GroupMetadata, GroupState
from kafkatwist.coordinator.membership import (
    HEARTBEAT,
    JOIN,
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    PENDING_MEMBER,
    SYNC,
    ClassicGroupMembership,
    _entry,
)
from kafkatwist.coordinator.offsetmanager import OffsetMetadataManager
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition
from kafkatwist.coordinator.requests import CommitRequest
from kafkatwist.coordinator.results import (
    GroupDescription,
    GroupOverview,
    JoinGroupResult,
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


class GroupCoordinator(ClassicGroupMembership):
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
