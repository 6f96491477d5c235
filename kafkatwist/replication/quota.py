"""
Replication throttles (Kafka's C{ReplicationQuotaManager}, KIP-73): a
byte rate per side of replication, each broker's own.

  - The leader side (C{leader.replication.throttled.rate}): the bytes this
    broker sends to followers for the partitions a topic's
    C{leader.replication.throttled.replicas} names on it are counted; while
    they are over the rate, a fetch from a follower out of the ISR gets no
    data for those partitions (followers in the ISR are never held back,
    so the ISR does not shrink because of a throttle).
  - The follower side (C{follower.replication.throttled.rate}): the bytes
    this broker fetches for the partitions a topic's
    C{follower.replication.throttled.replicas} names on it are counted;
    while they are over the rate, a fetcher leaves those partitions out of
    its fetches unless they are caught up with the leader.

A topic's list is C{partition:broker} items, or C{*} for every replica of
the topic; a partition is throttled on broker B when C{partition:B} is
listed.  Usage is Kafka's simple rate over C{replication.quota.window.num}
samples of C{replication.quota.window.size.seconds}.

Threads: recorded and checked by request handler threads (leader side)
and replica fetcher threads (follower side); one lock per side.  The bound
changes from the handler thread applying a dynamic config.
"""

from __future__ import annotations

import threading
import time

from kafkatwist.quota.rate import SimpleRate

__all__ = ["UNLIMITED", "LeaderThrottle", "ReplicationQuota", "ReplicationQuotas", "throttles"]

#: Kafka's "no throttle" (Long.MaxValue bytes per second)
UNLIMITED = 2**63 - 1


def throttles(replicas: tuple[str, ...], partition: int, brokerId: int) -> bool:
    """
    Whether a topic's C{*.replication.throttled.replicas} names the
    replica of C{partition} on C{brokerId}.
    """
    return bool(replicas) and (replicas == ("*",) or f"{partition}:{brokerId}" in replicas)


class ReplicationQuota:
    """
    One side's rate (Kafka's C{ReplicationQuotaManager} of the leader or
    the follower).

    @param clock: milliseconds.
    """

    def __init__(self, side: str, brokerId: int, bound: int = UNLIMITED, samples: int = 11,
                 windowSeconds: int = 1, clock=None) -> None:
        self.side = side
        self.brokerId = brokerId
        self.bound = bound
        self.clock = clock or (lambda: int(time.monotonic() * 1000))
        self._lock = threading.Lock()
        self._rate = SimpleRate(samples, windowSeconds * 1000)
        #: the two throttles a leader hands its plan (in the ISR or not)
        self.inSync = LeaderThrottle(self, True)
        self.outOfSync = LeaderThrottle(self, False)

    def throttles(self, replicas: tuple[str, ...], partition: int) -> bool:
        return throttles(replicas, partition, self.brokerId)

    def exceeded(self) -> bool:
        """
        Whether the bytes counted are over the bound now (Kafka's
        C{isQuotaExceeded}).
        """
        if self.bound >= UNLIMITED:
            return False
        nowMs = self.clock()
        with self._lock:
            return self._rate.measure(nowMs) > self.bound

    def record(self, size: int) -> None:
        """
        Count C{size} bytes of throttled partitions, over the bound or not
        (in the ISR too: the total is what the bound limits).
        """
        nowMs = self.clock()
        with self._lock:
            self._rate.record(float(size), nowMs)

    def rate(self) -> float:
        with self._lock:
            return self._rate.measure(self.clock())


class LeaderThrottle:
    """
    What a leader's fetch plan keeps for a throttled partition: whether the
    fetching follower is in the ISR, and where its bytes are counted.
    """

    __slots__ = ("quota", "inSync")

    def __init__(self, quota: ReplicationQuota, inSync: bool) -> None:
        self.quota = quota
        self.inSync = inSync

    def holdsBack(self) -> bool:
        """
        Kafka's C{shouldLeaderThrottle}: out of the ISR and over the rate.
        """
        return not self.inSync and self.quota.exceeded()

    def record(self, size: int) -> None:
        self.quota.record(size)


class ReplicationQuotas:
    """
    A broker's two replication throttles.
    """

    def __init__(self, config, clock=None) -> None:
        brokerId = config["node.id"]
        samples, window = config["replication.quota.window.num"], config["replication.quota.window.size.seconds"]
        self.leader = ReplicationQuota("leader", brokerId, config["leader.replication.throttled.rate"],
                                       samples, window, clock)
        self.follower = ReplicationQuota("follower", brokerId, config["follower.replication.throttled.rate"],
                                         samples, window, clock)

    def leaderThrottle(self, partitionLog, partition: int, replicaId: int) -> LeaderThrottle | None:
        """
        For a follower's fetch of C{partitionLog}: its throttle, or C{None}
        when the partition is not throttled on this leader.
        """
        if not self.leader.throttles(partitionLog.config.leaderThrottledReplicas, partition):
            return None
        inSync = replicaId in (partitionLog.inSyncReplicas or ())
        return self.leader.inSync if inSync else self.leader.outOfSync

    def update(self, config) -> None:
        self.leader.bound = config["leader.replication.throttled.rate"]
        self.follower.bound = config["follower.replication.throttled.rate"]
