"""
Fetch from the closest replica (KIP-392): which replica a consumer should
read a partition from, as the leader tells it in Fetch v11+'s
C{preferred_read_replica} (Kafka's C{ReplicaSelector}s and
C{ReplicaManager.findPreferredReadReplica}).

  - C{RackAwareReplicaSelector}: a consumer whose C{client.rack} is the
    leader's rack reads from the leader; otherwise from the most caught-up
    replica in its rack (the largest log end, then the most recently caught
    up, then the largest broker id); the leader if its rack has none.
  - C{LeaderSelector}: always the leader (so never a preferred replica).

The candidates are the leader and the followers in the ISR whose log holds
the fetch offset (log start <= offset <= log end) and whose broker is
alive with an endpoint on the consumer's listener.  The leader itself is
never sent as the preferred replica.  No I/O, no threads: the replica
manager hands in what its owner published.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RACK_AWARE", "LEADER", "ReplicaView", "selectReplica"]

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER = "org.apache.kafka.common.replica.LeaderSelector"


@dataclass(frozen=True)
class ReplicaView:
    """
    Kafka's C{ReplicaView}: a replica as the leader sees it.
    """

    brokerId: int
    rack: str | None
    logEndOffset: int
    timeSinceLastCaughtUpMs: int


def selectReplica(selector: str | None, clientRack: str | None, leader: ReplicaView, replicas) -> int | None:
    """
    @param replicas: every candidate, the leader among them.
    @return: the preferred read replica's id, or C{None} for the leader.
    """
    if selector != RACK_AWARE or not clientRack:
        return None
    sameRack = [r for r in replicas if r.rack == clientRack]
    if not sameRack or any(r.brokerId == leader.brokerId for r in sameRack):
        return None
    best = max(sameRack, key=lambda r: (r.logEndOffset, -r.timeSinceLastCaughtUpMs, r.brokerId))
    return None if best.brokerId == leader.brokerId else best.brokerId
