"""
Server-side assignors of KIP-848 consumer groups (C{group.consumer.assignors}):
C{uniform} and C{range}, as Kafka names them.

An assignor is a pure function from the group's members (their
subscriptions and current target assignment) and the subscribed topics'
partition counts to a new target assignment; the consumer-group machine
(L{kafkatwist.coordinator.consumer_group}) runs it on the coordinator's
owner whenever the group epoch moves past the assignment epoch.

Assignments are C{dict} topic name -> C{frozenset} of partitions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["ASSIGNORS", "AssignmentMember", "rangeAssign", "uniformAssign"]

Assignment = dict[str, frozenset[int]]


@dataclass(frozen=True)
class AssignmentMember:
    """
    What an assignor knows of a member.

    @ivar topics: the topic names it is subscribed to (names and resolved
        regexes together).
    @ivar current: its current target assignment (for stickiness).
    """

    memberId: str
    instanceId: str | None
    topics: frozenset[str]
    current: Mapping[str, frozenset[int]] = field(default_factory=dict)


def _result(members) -> dict[str, dict[str, set[int]]]:
    return {m.memberId: {} for m in members}


def _freeze(result) -> dict[str, Assignment]:
    return {
        memberId: {t: frozenset(ps) for t, ps in topics.items() if ps}
        for memberId, topics in result.items()
    }


def uniformAssign(
    members: list[AssignmentMember], partitionCounts: Mapping[str, int]
) -> dict[str, Assignment]:
    """
    Kafka's C{UniformAssignor}: balance first, then stickiness.

    With identical subscriptions (Kafka's homogeneous builder) the group's
    P partitions are spread over its M members so that every member gets
    P // M, the first P % M (by member id) one more; each member keeps as
    many of its current partitions as its quota allows, and the free ones
    go, in topic and partition order, to the members below quota.  With
    differing subscriptions the same is done topic by topic among the
    members subscribed to each topic (simpler than Kafka's heterogeneous
    builder, which balances the totals across topics).
    """
    members = sorted(members, key=lambda m: m.memberId)
    if not members:
        return {}
    subscriptions = {m.topics for m in members}
    if len(subscriptions) == 1:
        topics = sorted(t for t in next(iter(subscriptions)) if partitionCounts.get(t, 0) > 0)
        return _freeze(_uniformOver(members, topics, partitionCounts))
    result = _result(members)
    for topic in sorted(partitionCounts):
        subscribed = [m for m in members if topic in m.topics]
        if subscribed and partitionCounts[topic] > 0:
            for memberId, assigned in _uniformOver(subscribed, [topic], partitionCounts).items():
                result[memberId].update(assigned)
    return _freeze(result)


def _uniformOver(members, topics, partitionCounts) -> dict[str, dict[str, set[int]]]:
    every = [(t, p) for t in topics for p in range(partitionCounts[t])]
    valid = set(every)
    quota = len(every) // len(members)
    extra = len(every) % len(members)
    # The members that get one more: the first ones by member id (Kafka:
    # iteration order), but a member already holding more than its quota
    # keeps its extra one if any is left, for stickiness.
    result = _result(members)
    taken: set[tuple[str, int]] = set()
    owned: dict[str, list[tuple[str, int]]] = {}
    for m in members:
        mine = sorted(
            (t, p) for t, ps in m.current.items() for p in ps if (t, p) in valid
        )
        owned[m.memberId] = mine
    quotas: dict[str, int] = {}
    for m in members:
        keep = quota
        if len(owned[m.memberId]) > quota and extra > 0:
            keep += 1
            extra -= 1
        quotas[m.memberId] = keep
    for m in members:
        if len(owned[m.memberId]) <= quota and extra > 0 and quotas[m.memberId] == quota:
            quotas[m.memberId] += 1
            extra -= 1
    for m in members:
        for tp in owned[m.memberId][: quotas[m.memberId]]:
            result[m.memberId].setdefault(tp[0], set()).add(tp[1])
            taken.add(tp)
    free = [tp for tp in every if tp not in taken]
    for m in members:
        have = sum(len(ps) for ps in result[m.memberId].values())
        while have < quotas[m.memberId] and free:
            t, p = free.pop(0)
            result[m.memberId].setdefault(t, set()).add(p)
            have += 1
    return result


def rangeAssign(
    members: list[AssignmentMember], partitionCounts: Mapping[str, int]
) -> dict[str, Assignment]:
    """
    Kafka's C{RangeAssignor} (server side): per topic, the members
    subscribed to it sorted by instance id (static members first) then
    member id get contiguous ranges, P // n each and one more for the first
    P % n; with equal partition counts and subscriptions this
    co-partitions.
    """
    ordered = sorted(
        members, key=lambda m: (m.instanceId is None, m.instanceId or "", m.memberId)
    )
    result = _result(ordered)
    for topic in sorted(partitionCounts):
        subscribed = [m for m in ordered if topic in m.topics]
        count = partitionCounts[topic]
        if not subscribed or count <= 0:
            continue
        quota, extra = divmod(count, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            n = quota + (1 if i < extra else 0)
            if n:
                result[m.memberId][topic] = set(range(start, start + n))
            start += n
    return _freeze(result)


#: C{group.consumer.assignors}, the first being the default
ASSIGNORS = {"uniform": uniformAssign, "range": rangeAssign}
