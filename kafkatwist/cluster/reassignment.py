"""
A partition's replica assignment while it is reassigned (KIP-455, Kafka's
C{ReplicaAssignment}): the replicas listed are the target ones followed by
the original ones not in the target; those being added and those being
removed are kept beside them in the topic's znode, so a controller that
takes over resumes from ZooKeeper alone.  Pure functions of tuples.
"""

from __future__ import annotations


def origin(replicas, adding) -> tuple:
    """
    The replicas before the reassignment (Kafka's C{originReplicas}).
    """
    return tuple(r for r in replicas if r not in adding)


def target(replicas, removing) -> tuple:
    """
    The replicas the reassignment ends with (Kafka's C{targetReplicas}).
    """
    return tuple(r for r in replicas if r not in removing)


def reassignTo(replicas, adding, wanted) -> tuple[tuple, tuple, tuple]:
    """
    Kafka's C{ReplicaAssignment.reassignTo}: a new target replaces any
    reassignment in progress; its replicas are the target's then the
    original ones (so a cancellation may not restore the original order).

    @return: (replicas, adding, removing).
    """
    original = origin(replicas, adding)
    full = tuple(dict.fromkeys(tuple(wanted) + original))
    return full, tuple(r for r in full if r not in original), tuple(r for r in full if r not in wanted)


def validate(wanted, adding, live) -> str | None:
    """
    Kafka's C{validateReplicas}: the message of INVALID_REPLICA_ASSIGNMENT,
    or C{None}.

    @param adding: the replicas the target adds.
    @param live: the live brokers' ids.
    """
    if not wanted:
        return "Empty replica list specified in partition reassignment."
    if len(set(wanted)) != len(wanted):
        return f"Duplicate replica ids in partition reassignment replica list: {list(wanted)}"
    if any(r < 0 for r in wanted):
        return f"Invalid broker id in replica list: {list(wanted)}"
    if not set(adding) <= set(live):
        return (f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                f"live broker list: {sorted(live)}")
    return None
