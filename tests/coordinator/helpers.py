"""
Helpers for the group coordinator tests: a coordinator on a C{task.Clock}
with an in-memory store, and small functions to drive it.
"""

from __future__ import annotations

from twisted.internet import task

from kafkatwist.coordinator import (
    GroupCoordinator,
    InMemoryGroupStore,
    OffsetAndMetadata,
    encodeSubscription,
)
from kafkatwist.errors import ErrorCode

E = ErrorCode


def sub(*topics: str) -> bytes:
    return encodeSubscription(list(topics))


class Pending:
    """
    The outcome of a Deferred, for asserting whether and how it fired.
    """

    def __init__(self, d) -> None:
        self.results: list = []
        d.addBoth(self.results.append)

    @property
    def fired(self) -> bool:
        return bool(self.results)

    @property
    def value(self):
        assert self.results, "deferred has not fired"
        return self.results[0]


class Harness:
    """
    A coordinator on a fake clock; times in milliseconds.
    """

    def __init__(self, **kw) -> None:
        kw.setdefault("initialRebalanceDelayMs", 0)
        self.clock = task.Clock()
        self.store = kw.pop("store", None) or InMemoryGroupStore()
        self.coord = GroupCoordinator(self.clock, self.store, **kw)

    def advance(self, ms: float) -> None:
        self.clock.advance(ms / 1000.0)

    def join(
        self,
        member: str = "",
        group: str = "g",
        instance: str | None = None,
        protocols=None,
        session: int = 10000,
        rebalance: int = 30000,
        requireKnown: bool = False,
        ptype: str = "consumer",
        clientId: str = "client",
    ) -> Pending:
        if protocols is None:
            protocols = [("range", sub("t1"))]
        return Pending(
            self.coord.joinGroup(
                group,
                member,
                instance,
                clientId,
                "/127.0.0.1",
                rebalance,
                session,
                ptype,
                protocols,
                requireKnown,
                None,
            )
        )

    def sync(
        self, member, generation, assignments=None, group="g", instance=None, ptype=None, pname=None
    ) -> Pending:
        return Pending(
            self.coord.syncGroup(
                group, generation, member, instance, ptype, pname, assignments or {}
            )
        )

    def heartbeat(self, member, generation, group="g", instance=None):
        return self.coord.heartbeat(group, generation, member, instance)

    def commit(self, offsets, member="", generation=-1, group="g", instance=None, now=None):
        return self.coord.commitOffsets(
            group,
            generation,
            member,
            instance,
            {
                tp: (om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om))
                for tp, om in offsets.items()
            },
            now,
        )

    def state(self, group="g") -> str:
        return self.coord.describeGroups([group])[0].state

    def stableGroup(self, n: int = 1, group: str = "g", **joinKw):
        """
        Bring C{n} members to a Stable generation.

        @return: the list of member ids (leader first) and the generation.
        """
        pendings = [self.join(group=group, **joinKw) for _ in range(n)]
        # With n > 1 the later joins trigger/extend the same rebalance; with
        # no initial delay the first join completes alone, so rejoin.
        if n > 1 and pendings[0].fired and pendings[0].value.generationId == 1:
            first = pendings[0].value
            pendings[0] = self.join(member=first.memberId, group=group, **joinKw)
        self.advance(0)
        results = [p.value for p in pendings]
        assert all(r.errorCode == E.none for r in results), results
        gen = results[0].generationId
        leader = results[0].leaderId
        ids = [r.memberId for r in results]
        syncs = [
            self.sync(m, gen, {m2: m2.encode() for m2 in ids} if m == leader else {}, group=group)
            for m in ids
        ]
        assert all(s.value.errorCode == E.none for s in syncs), [s.value for s in syncs]
        assert self.state(group) == "Stable"
        return sorted(ids, key=lambda m: m != leader), gen
