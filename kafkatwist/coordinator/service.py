"""
The group coordinator as the broker and its request handlers see it
(C{broker.groupCoordinator}): the sans-io
L{kafkatwist.coordinator.coordinator.GroupCoordinator} in a
L{CoordinatorRuntime}, over C{__consumer_offsets}.

Every request method takes a C{replyTo} callable first and returns nothing:
C{replyTo(result)} is called once, with the result documented on the
machine's entry point of the same name, or with a
L{twisted.python.failure.Failure} if the coordinator failed.  It may be
called before the method returns (on the calling thread), or later on
another thread (a handler's or the coordinator's timer thread); see
L{kafkatwist.coordinator.reply.Reply} for turning that into a request's
answer.  Safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kafkatwist.coordinator.consumer_group_records import ConsumerGroupRecords
from kafkatwist.coordinator.coordinator import GroupCoordinator, PublishedGroup
from kafkatwist.coordinator.offsets import TopicPartition
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.coordinator.requests import CommitRequest, JoinRequest, SyncRequest
from kafkatwist.coordinator.runtime import CoordinatorRuntime
from kafkatwist.coordinator.txnoffsets import TxnCommitRequest

__all__ = ["GroupCoordinatorService"]


class GroupCoordinatorService:
    """
    @param clock: the runtime's clock (see L{CoordinatorRuntime}).
    @param coordinatorLog: C{__consumer_offsets}, an
        L{kafkatwist.interfaces.ICoordinatorLog}.
    @param settings: the L{GroupCoordinator}'s keyword arguments (session
        timeouts, retention, ...).
    @ivar machine: the state machine; only the runtime's owner may touch it.
    """

    def __init__(self, clock, coordinatorLog, **settings) -> None:
        self.clock = clock
        self.log = coordinatorLog
        self.machine = GroupCoordinator(numPartitions=coordinatorLog.numPartitions, **settings)
        self.runtime = CoordinatorRuntime(self.machine, clock, coordinatorLog)

    # -- lifecycle ---------------------------------------------------------------

    def load(self, topics=None, partitions=None) -> None:
        """
        Read the groups and offsets back from the log and hand them to the
        machine (at start-up, before serving; blocking).

        @param topics: the broker's topics as a
            L{kafkatwist.coordinator.consumer_group.TopicImage}, which maps
            the topic ids of KIP-848 groups' records to names.
        @param partitions: the partitions to read (default: all; none in a
            cluster, where they are loaded one by one, L{loadPartition}).
        """
        consumerGroups = ConsumerGroupRecords()
        pending: dict = {}
        snapshots, offsets = loadGroups(self.log, consumerGroups, pending, partitions=partitions)
        self.runtime.call(
            self.machine.load, snapshots, offsets, consumerGroups.groups, topics, pending
        )

    def loadPartition(self, partition: int, topics=None) -> None:
        """
        Become the coordinator of C{partition}'s groups (this broker now
        leads that C{__consumer_offsets} partition): read them back, then
        serve them.  Blocking: a loader thread's, never a reactor's.
        """
        self.runtime.call(self.machine.beginLoading, partition)
        consumerGroups = ConsumerGroupRecords()
        pending: dict = {}
        snapshots, offsets = loadGroups(self.log, consumerGroups, pending, partitions=(partition,))
        self.runtime.call(
            self.machine.loadPartition, partition, snapshots, offsets, consumerGroups.groups, topics, pending
        )

    def unloadPartition(self, partition: int) -> None:
        """
        Stop coordinating C{partition}'s groups (another broker leads it).
        """
        self.runtime.call(self.machine.unloadPartition, partition)

    def shutdown(self) -> None:
        """
        Answer parked requests with NOT_COORDINATOR, refuse new ones, and
        wait for the appends under way (blocking; harmless twice).
        """
        self.runtime.stop(self.machine.shutdown)

    # -- membership ----------------------------------------------------------------

    def joinGroup(self, replyTo, request: JoinRequest) -> None:
        self.runtime.request(self.machine.joinGroup, replyTo, request)

    def syncGroup(self, replyTo, request: SyncRequest) -> None:
        self.runtime.request(self.machine.syncGroup, replyTo, request)

    def heartbeat(
        self, replyTo, groupId: str, generationId: int, memberId: str, groupInstanceId=None
    ) -> None:
        self.runtime.request(
            self.machine.heartbeat, replyTo, groupId, generationId, memberId, groupInstanceId
        )

    def leaveGroup(self, replyTo, groupId: str, members: Iterable[tuple]) -> None:
        self.runtime.request(self.machine.leaveGroup, replyTo, groupId, list(members))

    # -- KIP-848 consumer groups -------------------------------------------

    def consumerGroupHeartbeat(self, replyTo, request) -> None:
        self.runtime.request(self.machine.consumerGroupHeartbeat, replyTo, request)

    def consumerGroupDescribe(self, replyTo, groupIds: Iterable[str]) -> None:
        self.runtime.request(self.machine.consumerGroupDescribe, replyTo, list(groupIds))

    # -- administration ----------------------------------------------------------

    def describeGroups(self, replyTo, groupIds: Iterable[str]) -> None:
        self.runtime.request(self.machine.describeGroups, replyTo, list(groupIds))

    def listGroups(self, replyTo, statesFilter: Iterable[str] | None = None) -> None:
        self.runtime.request(self.machine.listGroups, replyTo, tuple(statesFilter or ()))

    def deleteGroups(self, replyTo, groupIds: Iterable[str]) -> None:
        self.runtime.request(self.machine.deleteGroups, replyTo, list(groupIds))

    # -- offsets -----------------------------------------------------------------

    def commitOffsets(self, replyTo, request: CommitRequest) -> None:
        self.runtime.request(self.machine.commitOffsets, replyTo, request)

    def fetchOffsets(
        self,
        replyTo,
        groupId: str,
        partitions: Iterable[TopicPartition] | None = None,
        requireStable: bool = False,
    ) -> None:
        wanted = None if partitions is None else list(partitions)
        self.runtime.request(
            self.machine.fetchOffsets, replyTo, groupId, wanted, requireStable
        )

    def fetchOffsetsOfGroups(
        self, replyTo, wanted: Iterable[tuple], requireStable: bool = False
    ) -> None:
        self.runtime.request(
            self.machine.fetchOffsetsOfGroups, replyTo, list(wanted), requireStable
        )

    # -- transactions --------------------------------------------------------------

    def commitTransactionalOffsets(self, replyTo, request: TxnCommitRequest) -> None:
        self.runtime.request(self.machine.commitTransactionalOffsets, replyTo, request)

    def completeTransaction(
        self, replyTo, partition: int, producerId: int, producerEpoch: int, commit: bool,
        coordinatorEpoch: int,
    ) -> None:
        self.runtime.request(
            self.machine.completeTransaction, replyTo, partition, producerId, producerEpoch,
            commit, coordinatorEpoch,
        )

    def deleteOffsets(self, replyTo, groupId: str, partitions: Iterable[TopicPartition]) -> None:
        self.runtime.request(self.machine.deleteOffsets, replyTo, groupId, list(partitions))

    def expireOffsets(self, replyTo) -> None:
        self.runtime.request(self.machine.expireOffsets, replyTo)

    # -- for other threads -------------------------------------------------------

    def publishedGroups(self) -> Mapping[str, PublishedGroup]:
        """
        The groups' committed offsets as last published by the owner (for
        metrics); never blocks, takes no lock.
        """
        return self.machine.publishedGroups()
