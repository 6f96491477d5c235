"""
The leader's view of one partition's replicas (Kafka's C{Partition} and
C{Replica}): the ISR, each follower's log end offset and when it last
caught up, and the decisions made from them -- the high watermark, ISR
shrink and expansion.  No I/O and no threads: the replica manager's owner
feeds it and acts on what it returns.
"""

from __future__ import annotations

LEADER = "leader"
FOLLOWER = "follower"

#: a follower's log end offset before its first fetch in this epoch
UNKNOWN = -1


class FollowerState:
    """
    What the leader knows of one follower (Kafka's C{ReplicaState}).
    """

    __slots__ = ("logEndOffset", "logStartOffset", "lastCaughtUpMs", "lastFetchLeaderEndOffset",
                 "lastFetchMs", "brokerEpoch")

    def __init__(self, lastCaughtUpMs: int) -> None:
        #: the broker epoch (registration) of the follower whose fetches
        #: made this state, as its fetches said (Fetch v15, KIP-903); -1:
        #: not known
        self.brokerEpoch = UNKNOWN
        self.logEndOffset = UNKNOWN
        #: the follower's log start offset as its last fetch said (Fetch v5+)
        self.logStartOffset = UNKNOWN
        self.lastCaughtUpMs = lastCaughtUpMs
        self.lastFetchLeaderEndOffset = UNKNOWN
        self.lastFetchMs = 0

    def newLife(self, brokerEpoch: int) -> bool:
        """
        Whether a fetch under C{brokerEpoch} comes from a later
        registration of the follower than the fetches this state was made
        from: it restarted since (and may have lost its log's tail), so
        nothing known of it holds any more -- it starts again as one that
        never caught up.
        """
        if brokerEpoch <= self.brokerEpoch or self.brokerEpoch < 0:
            return False
        self.logEndOffset = UNKNOWN
        self.logStartOffset = UNKNOWN
        self.lastCaughtUpMs = 0
        self.lastFetchLeaderEndOffset = UNKNOWN
        self.lastFetchMs = 0
        return True

    def onFetch(self, fetchOffset: int, leaderEndOffset: int, nowMs: int) -> None:
        """
        Kafka's C{updateFetchState}: a fetch at the leader's end means
        caught up now; one reaching what the leader's end was at the
        previous fetch means caught up as of that fetch.
        """
        if fetchOffset >= leaderEndOffset:
            self.lastCaughtUpMs = max(self.lastCaughtUpMs, nowMs)
        elif fetchOffset >= self.lastFetchLeaderEndOffset >= 0:
            self.lastCaughtUpMs = max(self.lastCaughtUpMs, self.lastFetchMs)
        self.logEndOffset = fetchOffset
        self.lastFetchLeaderEndOffset = leaderEndOffset
        self.lastFetchMs = nowMs


class PartitionReplicas:
    """
    One partition this broker hosts, as the controller last described it.

    @ivar pendingIsr: the ISR asked for from L{IAlterIsr} and not yet
        answered (C{None}: none in flight).  Until the answer, the high
        watermark counts the larger of the two (Kafka's maximal ISR).
    """

    def __init__(self, topic: str, partition: int, log, brokerId: int) -> None:
        self.topic = topic
        self.partition = partition
        self.log = log
        self.brokerId = brokerId
        self.role: str | None = None
        self.leaderId = -1
        self.leaderEpoch = -1
        self.partitionEpoch = -1
        self.replicas: tuple = ()
        self.isr: frozenset = frozenset()
        self.pendingIsr: frozenset | None = None
        self.followers: dict[int, FollowerState] = {}
        #: where this leader's epoch began in its log (a follower joins the
        #: ISR only once it has fetched past it)
        self.epochStartOffset = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @property
    def maximalIsr(self) -> frozenset:
        pending = self.pendingIsr
        return self.isr if pending is None else self.isr | pending

    def makeLeader(self, leaderEpoch, isr, replicas, partitionEpoch, epochStartOffset, nowMs):
        self.role = LEADER
        self.leaderId = self.brokerId
        self.leaderEpoch = leaderEpoch
        self.partitionEpoch = partitionEpoch
        self.replicas = tuple(replicas)
        self.isr = frozenset(isr)
        self.pendingIsr = None
        self.epochStartOffset = epochStartOffset
        # Kafka resets every follower: those in the ISR count as caught up
        # now, so none leaves it before it had a chance to fetch.
        self.followers = {
            r: FollowerState(nowMs if r in self.isr else 0)
            for r in self.replicas
            if r != self.brokerId
        }

    def makeFollower(self, leaderId, leaderEpoch, replicas, partitionEpoch) -> None:
        self.role = FOLLOWER
        self.leaderId = leaderId
        self.leaderEpoch = leaderEpoch
        self.partitionEpoch = partitionEpoch
        self.replicas = tuple(replicas)
        self.isr = frozenset()
        self.pendingIsr = None
        self.followers = {}

    def followersLogStart(self, alive) -> int | None:
        """
        The smallest log start offset over the followers on live brokers
        (Kafka's C{lowWatermarkIfLeader} without the leader's own): UNKNOWN
        while one has not said it yet, C{None} without live followers.
        """
        starts = [f.logStartOffset for r, f in self.followers.items() if r in alive]
        return min(starts) if starts else None

    def highWatermark(self, leaderEndOffset: int) -> int | None:
        """
        The minimum log end offset over the (maximal) ISR; C{None} when the
        leader is alone in it (the high watermark is then its log end).
        """
        hw = leaderEndOffset
        alone = True
        for replica in self.maximalIsr:
            if replica == self.brokerId:
                continue
            alone = False
            follower = self.followers.get(replica)
            if follower is None or follower.logEndOffset < 0:
                return UNKNOWN
            hw = min(hw, follower.logEndOffset)
        return None if alone else hw

    def outOfSync(self, nowMs: int, lagMaxMs: int) -> frozenset:
        """
        The followers in the ISR that have not caught up for C{lagMaxMs}.
        """
        return frozenset(
            r for r in self.isr
            if r != self.brokerId
            and (r not in self.followers or nowMs - self.followers[r].lastCaughtUpMs > lagMaxMs)
        )

    def canJoinIsr(self, replica: int, highWatermark: int) -> bool:
        """
        Kafka's C{isFollowerInSync}: a replica outside the ISR that has
        reached the high watermark, within this leader's epoch.
        """
        follower = self.followers.get(replica)
        return (
            follower is not None
            and replica not in self.isr
            and follower.logEndOffset >= highWatermark
            and follower.logEndOffset >= self.epochStartOffset
        )
