"""
Offsets committed inside transactions (TxnOffsetCommit), as part of the
sans-io L{kafkatwist.coordinator.coordinator.GroupCoordinator} (Kafka's
C{OffsetMetadataManager} pending transactional offsets).

A transactional commit is written to the group's C{__consumer_offsets}
partition as a transactional batch of the committing producer (its epoch
checked by the log), and then stays pending for that producer: OffsetFetch
does not return it, and with C{require_stable} answers
UNSTABLE_OFFSET_COMMIT for its partition.  The transaction's end-marker in
that partition (written through L{TransactionalOffsets.complete}, the
WriteTxnMarkers path) makes its offsets the group's committed offsets
(commit) or drops them (abort).

An offset is only made visible if no newer commit of the partition was
written after it -- a plain commit, or another transaction's commit of the
same partition that completed first -- as Kafka's rule (by record offset)
decides; emission order stands for record order, since appends to one
partition keep the order they were emitted in.  Replaying the log at start
applies the same rule (L{kafkatwist.coordinator.replay}).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from twisted.logger import Logger

from kafkatwist.coordinator.formats import APPEND_ERRORS_FOR_COMMIT, offsetRecords
from kafkatwist.coordinator.group import GroupState
from kafkatwist.coordinator.offsets import OffsetAndMetadata, TopicPartition, acceptCommits
from kafkatwist.errors import ErrorCode

__all__ = ["PendingTxnOffset", "TransactionalOffsets", "TxnCommitRequest"]

log = Logger()
E = ErrorCode
S = GroupState


@dataclass(frozen=True)
class TxnCommitRequest:
    """
    One TxnOffsetCommit, as the group coordinator takes it.

    @ivar generationId: -1 when the client sent no group metadata (v0-2,
        or a producer without the consumer's group metadata): no member
        checks then.
    """

    groupId: str
    producerId: int
    producerEpoch: int
    offsets: dict
    generationId: int = -1
    memberId: str = ""
    groupInstanceId: str | None = None


class PendingTxnOffset:
    """
    One offset of an open transaction.

    @ivar seq: where its record stands among the partition's appends.
    @ivar superseded: a newer commit of its partition was written after
        it: it must not become visible.
    """

    __slots__ = ("offset", "seq", "superseded")

    def __init__(self, offset: OffsetAndMetadata, seq: int, superseded: bool = False) -> None:
        self.offset = offset
        self.seq = seq
        self.superseded = superseded


class TransactionalOffsets:
    """
    @param coordinator: the L{GroupCoordinator} (its groups, effects,
        clock, member checks).
    @param metadataMaxBytes: C{offset.metadata.max.bytes}.
    """

    def __init__(self, coordinator, metadataMaxBytes: int) -> None:
        self._c = coordinator
        self._metadataMaxBytes = metadataMaxBytes
        # producer id -> group id -> (topic, partition) -> PendingTxnOffset
        self._pending: dict[int, dict[str, dict[TopicPartition, PendingTxnOffset]]] = {}
        # group id -> producer ids with offsets pending in it
        self._byGroup: dict[str, set[int]] = {}
        self._top = 0
        self._seq = itertools.count(1)

    # ------------------------------------------------------------------
    # Queries

    def hasPending(self, groupId: str, tp: TopicPartition | None = None) -> bool:
        """
        Whether a transaction has offsets pending in the group (for
        C{tp}, or for any partition).
        """
        producers = self._byGroup.get(groupId)
        if not producers:
            return False
        if tp is None:
            return True
        return any(tp in self._pending[pid][groupId] for pid in producers)

    # ------------------------------------------------------------------
    # Loading

    def load(self, pending) -> None:
        """
        @param pending: producer id -> group id -> (topic, partition) ->
            C{(OffsetAndMetadata, record offset, superseded)}, as replayed.
        """
        top = self._top
        for producerId, groups in pending.items():
            for groupId, offsets in groups.items():
                for tp, (offset, recordOffset, superseded) in offsets.items():
                    self._add(
                        producerId, groupId, tp,
                        PendingTxnOffset(offset, recordOffset, superseded),
                    )
                    top = max(top, recordOffset)
        # Loaded a partition at a time in a cluster: never count back.
        self._top = top
        self._seq = itertools.count(top + 1)

    def unload(self, belongs) -> None:
        """
        Forget the open transactions' offsets of the groups C{belongs}
        selects (their partition moved to another broker).
        """
        for groupId in [g for g in self._byGroup if belongs(g)]:
            for producerId in list(self._byGroup.get(groupId, ())):
                self._drop(producerId, groupId)

    def _add(self, producerId: int, groupId: str, tp, entry: PendingTxnOffset) -> None:
        self._pending.setdefault(producerId, {}).setdefault(groupId, {})[tp] = entry
        self._byGroup.setdefault(groupId, set()).add(producerId)

    # ------------------------------------------------------------------
    # TxnOffsetCommit

    def commit(self, replyTo, request: TxnCommitRequest) -> None:
        """
        Answers C{{(topic, partition): error}} once the records are
        written.
        """
        c = self._c
        offsets = dict(request.offsets)

        def everyone(error: ErrorCode) -> None:
            c.respond(replyTo, {tp: error for tp in offsets})

        error = c.statusError(request.groupId, allowEmpty=False)
        if error is not None:
            return everyone(error)
        # A KIP-848 group checks the member and its epoch (the request's
        # generation); a transactional commit needs no v9.
        consumer = c.consumerGroups.validateCommit(
            request.groupId, request.memberId, request.generationId, 9
        )
        if consumer is not None:
            if consumer != E.none:
                return everyone(consumer)
            group = c.groupOrCreate(request.groupId)
        else:
            group = c.group(request.groupId)
            if group is None:
                if request.generationId >= 0:
                    return everyone(E.illegal_generation)
                group = c.groupOrCreate(request.groupId)
            error = self._validate(group, request)
            if error is not None:
                return everyone(error)
        results, valid = acceptCommits(offsets, self._metadataMaxBytes, c.nowMs)
        if not valid:
            return c.respond(replyTo, results)
        seq = next(self._seq)
        groupId, producerId = group.groupId, request.producerId

        def appended(error: ErrorCode) -> None:
            if error == E.none:
                for tp, om in valid.items():
                    self._add(producerId, groupId, tp, PendingTxnOffset(om, seq))
            else:
                log.warn(
                    "group {group}: failed to store the offsets of producer {pid}'s"
                    " transaction: {error}",
                    group=groupId, pid=producerId, error=error.name,
                )
            code = APPEND_ERRORS_FOR_COMMIT.get(error, error)
            results.update({tp: code for tp in valid})
            c.respond(replyTo, results)

        c.append(
            groupId, offsetRecords(groupId, valid), appended,
            producer=(producerId, request.producerEpoch),
        )

    def _validate(self, group, request: TxnCommitRequest) -> ErrorCode | None:
        """
        Kafka's C{ClassicGroup.validateOffsetCommit} for a transactional
        commit: without a generation nothing is checked; with one the
        member must be the group's and the generation current.
        """
        if group.state is S.DEAD:
            return E.coordinator_not_available
        if request.generationId < 0:
            return None
        c = self._c
        error = c.validateCurrentMember(
            group, request.memberId or "", request.groupInstanceId
        )
        if error is None and request.generationId != group.generationId:
            error = E.illegal_generation
        return error

    # ------------------------------------------------------------------
    # Plain commits and removals (from the offset manager)

    def superseded(self, groupId: str, partitions) -> None:
        """
        A plain commit of C{partitions} was written: pending transactional
        offsets written before it must not become visible.
        """
        for producerId in self._byGroup.get(groupId, ()):
            pending = self._pending[producerId][groupId]
            for tp in partitions:
                entry = pending.get(tp)
                if entry is not None:
                    entry.superseded = True

    def removed(self, groupId: str, partitions) -> None:
        """
        The partitions' offsets were deleted (OffsetDelete, expiry): so
        are pending transactional ones, as Kafka's tombstone replay does.
        """
        for producerId in list(self._byGroup.get(groupId, ())):
            pending = self._pending[producerId][groupId]
            for tp in partitions:
                pending.pop(tp, None)
            if not pending:
                self._drop(producerId, groupId)

    def _drop(self, producerId: int, groupId: str) -> None:
        groups = self._pending.get(producerId)
        if groups is not None:
            groups.pop(groupId, None)
            if not groups:
                del self._pending[producerId]
        producers = self._byGroup.get(groupId)
        if producers is not None:
            producers.discard(producerId)
            if not producers:
                del self._byGroup[groupId]

    # ------------------------------------------------------------------
    # The marker

    def complete(
        self,
        replyTo,
        partition: int,
        producerId: int,
        producerEpoch: int,
        commit: bool,
        coordinatorEpoch: int,
    ) -> None:
        """
        Write the end-transaction marker into C{__consumer_offsets}
        partition C{partition}, then make the producer's pending offsets
        of the groups there visible (commit) or drop them (abort).
        Answers the append's error code.
        """
        c = self._c

        def appended(error: ErrorCode) -> None:
            if error == E.none:
                self._apply(partition, producerId, commit)
            c.respond(replyTo, error)

        c.appendTo(
            partition, (), appended,
            marker=(producerId, producerEpoch, commit, coordinatorEpoch),
        )

    def _apply(self, partition: int, producerId: int, commit: bool) -> None:
        c = self._c
        for groupId in list(self._pending.get(producerId, {})):
            if c.partitionOf(groupId) != partition:
                continue
            offsets = self._pending[producerId][groupId]
            self._drop(producerId, groupId)
            group = c.group(groupId)
            if not commit or group is None:
                continue
            applied = False
            for tp, entry in offsets.items():
                if entry.superseded:
                    continue
                group.offsets[tp] = entry.offset
                applied = True
                # Other transactions' older writes of the partition lose.
                for other in self._byGroup.get(groupId, ()):
                    rival = self._pending[other][groupId].get(tp)
                    if rival is not None and rival.seq < entry.seq:
                        rival.superseded = True
            if applied:
                c.changed(group)
