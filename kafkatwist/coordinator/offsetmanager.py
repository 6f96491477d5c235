"""
Committed offsets of classic groups (Kafka's C{OffsetMetadataManager}):
OffsetCommit, OffsetFetch, OffsetDelete and the periodic expiry, as part
of the sans-io L{kafkatwist.coordinator.coordinator.GroupCoordinator}.

A commit is staged in the group's C{pendingOffsets} while its records are
appended and becomes visible (OffsetFetch, expiry, metrics) only once the
append succeeded, as Kafka's C{pendingOffsetCommits}.  Removals (OffsetDelete,
expiry) drop committed and staged offsets at once and append tombstones; a
staged commit that completes after its partition was removed is not
applied, and the log agrees since its records precede the tombstone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from twisted.logger import Logger

from kafkatwist.coordinator.formats import (
    APPEND_ERRORS_FOR_COMMIT,
    APPEND_ERRORS_FOR_GROUP,
    groupTombstone,
    offsetRecords,
    offsetTombstones,
)
from kafkatwist.coordinator.group import GroupMetadata, GroupState
from kafkatwist.coordinator.offsets import TopicPartition, acceptCommits
from kafkatwist.coordinator.requests import CommitRequest
from kafkatwist.coordinator.results import FetchedOffset, OffsetDeleteResult, OffsetFetchResult
from kafkatwist.errors import ErrorCode

__all__ = ["OffsetMetadataManager"]

log = Logger()

E = ErrorCode
S = GroupState

#: timer key of the periodic expiry
EXPIRY = ("offsets-expiry",)


class OffsetMetadataManager:
    """
    @param coordinator: the L{GroupCoordinator} whose groups, effects and
        clock this uses (it owns this manager, and calls it from its entry
        points only).
    @param retentionMs: C{offsets.retention.minutes}, in milliseconds.
    @param checkIntervalMs: C{offsets.retention.check.interval.ms}; 0
        disables the periodic expiry.
    @param metadataMaxBytes: C{offset.metadata.max.bytes}.
    """

    def __init__(
        self, coordinator, *, retentionMs: int, checkIntervalMs: int, metadataMaxBytes: int
    ) -> None:
        self._c = coordinator
        self._retentionMs = retentionMs
        self._checkIntervalMs = checkIntervalMs
        self._metadataMaxBytes = metadataMaxBytes
        self._expiryArmed = False

    # ------------------------------------------------------------------
    # OffsetCommit

    def commit(self, replyTo, request: CommitRequest) -> None:
        c = self._c
        offsets = dict(request.offsets)

        def everyone(error: ErrorCode) -> None:
            c.respond(replyTo, {tp: error for tp in offsets})

        error = c.statusError(request.groupId, allowEmpty=True)
        if error is not None:
            return everyone(error)
        consumer = c.consumerGroups.validateCommit(
            request.groupId, request.memberId, request.generationId, request.apiVersion
        )
        if consumer is not None:
            # A KIP-848 group: its offsets are kept as any group's.
            if consumer != E.none:
                return everyone(consumer)
            return self._store(replyTo, c.groupOrCreate(request.groupId), offsets)
        group = c.group(request.groupId)
        if group is None:
            if request.generationId >= 0:
                # A generation of a group we do not know: a stale member.
                return everyone(E.illegal_generation)
            group = c.groupOrCreate(request.groupId)
        error = self._validateCommit(group, request)
        if error is not None:
            return everyone(error)
        if group.state is S.COMPLETING_REBALANCE:
            # A valid member that has not received its assignment yet.
            return everyone(E.rebalance_in_progress)
        if group.state in (S.STABLE, S.PREPARING_REBALANCE):
            # Committing is a sign of life; the rebalance is signalled by
            # the next heartbeat.
            c.keepAlive(group, request.memberId)
        self._store(replyTo, group, offsets)

    def _validateCommit(self, group: GroupMetadata, request: CommitRequest) -> ErrorCode | None:
        if request.generationId >= 0 or request.memberId or request.groupInstanceId is not None:
            error = self._c.validateCurrentMember(
                group, request.memberId or "", request.groupInstanceId
            )
            if error is None and request.generationId != group.generationId:
                error = E.illegal_generation
            return error
        if group.state is not S.EMPTY:
            # Only members may commit for a group with members.
            return E.unknown_member_id
        return None

    def _store(self, replyTo, group: GroupMetadata, offsets) -> None:
        c = self._c
        results, valid = acceptCommits(offsets, self._metadataMaxBytes, c.nowMs)
        if not valid:
            c.respond(replyTo, results)
            return
        group.pendingOffsets.update(valid)

        def appended(error: ErrorCode) -> None:
            if error == E.none:
                for tp, om in valid.items():
                    # Not if the partition (or the group) was removed since.
                    if tp in group.pendingOffsets:
                        group.offsets[tp] = om
                c.changed(group)
                c.txnOffsets.superseded(group.groupId, valid)
            else:
                log.warn(
                    "group {group}: failed to store committed offsets: {error}",
                    group=group.groupId, error=error.name,
                )
            for tp, om in valid.items():
                if group.pendingOffsets.get(tp) is om:
                    del group.pendingOffsets[tp]
            code = APPEND_ERRORS_FOR_COMMIT.get(error, error)
            results.update({tp: code for tp in valid})
            c.respond(replyTo, results)

        c.append(group.groupId, offsetRecords(group.groupId, valid), appended)

    # ------------------------------------------------------------------
    # OffsetFetch

    def fetch(
        self,
        groupId: str,
        partitions: Iterable[TopicPartition] | None,
        requireStable: bool = False,
    ) -> OffsetFetchResult:
        """
        OffsetFetch for one group, whatever its state (a group may use
        Kafka only to store offsets).

        @param partitions: the partitions wanted, or C{None} for all
            committed ones; partitions without a commit have offset -1.
        @param requireStable: a partition with offsets pending in an open
            transaction answers UNSTABLE_OFFSET_COMMIT (the client asks
            again).
        """
        c = self._c
        error = c.statusError(groupId, allowEmpty=True)
        if error is not None:
            return OffsetFetchResult(error)
        group = c.group(groupId)
        stored = group.offsets if group is not None else {}
        wanted = sorted(stored) if partitions is None else [tuple(tp) for tp in partitions]
        out = {}
        unstable = requireStable and c.txnOffsets.hasPending(groupId)
        for tp in wanted:
            om = stored.get(tp)
            if unstable and c.txnOffsets.hasPending(groupId, tp):
                out[tp] = FetchedOffset(-1, -1, "", E.unstable_offset_commit)
            elif om is None:
                out[tp] = FetchedOffset(-1, -1, "", E.none)
            else:
                out[tp] = FetchedOffset(om.offset, om.leaderEpoch, om.metadata, E.none)
        return OffsetFetchResult(E.none, out)

    # ------------------------------------------------------------------
    # OffsetDelete

    def delete(self, replyTo, groupId: str, partitions: Iterable[TopicPartition]) -> None:
        """
        OffsetDelete.  All offsets of an Empty group may go; a consumer
        group with members keeps those of topics it is subscribed to
        (GROUP_SUBSCRIBED_TO_TOPIC, decided by parsing the members'
        subscriptions); any other group with members refuses
        (NON_EMPTY_GROUP).
        """
        c = self._c
        partitions = [tuple(tp) for tp in partitions]
        error = c.statusError(groupId, allowEmpty=False)
        group = c.group(groupId) if error is None else None
        if error is None and group is None:
            error = E.group_id_not_found
        if error is None and group.state is not S.EMPTY and not group.isConsumerGroup():
            error = E.non_empty_group
        if error is not None:
            c.respond(replyTo, OffsetDeleteResult(error))
            return
        results: dict[TopicPartition, ErrorCode] = {}
        eligible = []
        for tp in partitions:
            if group.state is not S.EMPTY and group.isSubscribedToTopic(tp[0]):
                results[tp] = E.group_subscribed_to_topic
            else:
                eligible.append(tp)
                results[tp] = E.none

        def removed(error: ErrorCode) -> None:
            if error != E.none:
                c.respond(replyTo, OffsetDeleteResult(APPEND_ERRORS_FOR_GROUP.get(error, error)))
            else:
                c.respond(replyTo, OffsetDeleteResult(E.none, results))

        self.remove(group, eligible, removed)

    def remove(
        self,
        group: GroupMetadata,
        partitions: Iterable[TopicPartition],
        onDone: Callable[[ErrorCode], None] | None = None,
    ) -> int:
        """
        Kafka's C{cleanupGroupMetadata} for one group: remove offsets
        (committed or staged), and retire the group if it is left Empty
        without any; append the tombstones.

        @param onDone: called with the append's outcome (at once with NONE
            if there was nothing to append).
        @return: how many offsets were removed.
        """
        c = self._c
        txnOffsets = c.txnOffsets
        present = [
            tp for tp in partitions
            if tp in group.offsets or tp in group.pendingOffsets
            or txnOffsets.hasPending(group.groupId, tp)
        ]
        for tp in present:
            group.offsets.pop(tp, None)
            group.pendingOffsets.pop(tp, None)
        txnOffsets.removed(group.groupId, present)
        records = offsetTombstones(group.groupId, present)
        if (
            group.state is S.EMPTY and not group.offsets and not group.pendingOffsets
            and not txnOffsets.hasPending(group.groupId)
        ):
            records.append(groupTombstone(group.groupId))
            log.info("group {group}: removed, empty and without offsets", group=group.groupId)
            c.retire(group)
        if present:
            c.changed(group)
        if records:
            c.append(group.groupId, records, onDone)
        elif onDone is not None:
            onDone(E.none)
        return len(present)

    # ------------------------------------------------------------------
    # Expiry

    def expire(self) -> int:
        """
        Remove expired offsets (C{offsets.retention.minutes}) and the empty
        groups left without any.

        @return: how many offsets were removed.
        """
        c = self._c
        removed = 0
        for group in c.groups():
            expired = group.expiredOffsets(c.nowMs, self._retentionMs)
            # Not one with a newer commit on its way (Kafka's
            # getExpiredOffsets leaves pending commits alone too).
            expired = [
                tp for tp in expired
                if tp not in group.pendingOffsets and not c.txnOffsets.hasPending(group.groupId, tp)
            ]
            # A KIP-848 group keeps the offsets of the topics its members
            # subscribe to (Kafka's isSubscribedToTopic).
            subscribed = c.consumerGroups.subscribedTopics(group.groupId)
            if subscribed:
                expired = [tp for tp in expired if tp[0] not in subscribed]
            removed += self.remove(group, expired)
        if removed:
            log.info("removed {count} expired offsets", count=removed)
        return removed

    def scheduleExpiry(self) -> None:
        if self._checkIntervalMs > 0 and not self._expiryArmed:
            self._expiryArmed = True
            self._c.setTimer(EXPIRY, self._checkIntervalMs)

    def cancelExpiry(self) -> None:
        if self._expiryArmed:
            self._expiryArmed = False
            self._c.cancelTimer(EXPIRY)

    def timerFired(self, key) -> None:
        if key != EXPIRY or not self._expiryArmed:
            return
        self._expiryArmed = False
        self.expire()
        self.scheduleExpiry()
