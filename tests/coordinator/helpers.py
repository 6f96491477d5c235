"""
Helpers for the group coordinator tests: the coordinator service on a
C{task.Clock} over an in-memory C{__consumer_offsets}, a synchronous view
of it, and small functions to drive it.
"""

from __future__ import annotations

from twisted.internet import task
from zope.interface import implementer

from kafkatwist.coordinator import (
    GroupCoordinatorService,
    JoinRequest,
    OffsetAndMetadata,
    SyncRequest,
    encodeSubscription,
)
from kafkatwist.coordinator.logstore import OffsetsTopicLog
from kafkatwist.coordinator.replay import loadGroups
from kafkatwist.coordinator.requests import CommitRequest
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.interfaces import ICoordinatorLog
from kafkatwist.log import MemoryLogManager

E = ErrorCode


def sub(*topics: str) -> bytes:
    return encodeSubscription(list(topics))


class Pending:
    """
    A C{replyTo} that keeps the answer, for asserting whether and how the
    coordinator answered.
    """

    def __init__(self) -> None:
        self.results: list = []

    def __call__(self, result) -> None:
        assert not self.results, f"answered twice: {self.results[0]!r}, then {result!r}"
        self.results.append(result)

    @property
    def fired(self) -> bool:
        return bool(self.results)

    @property
    def value(self):
        assert self.results, "not answered"
        return self.results[0]


class Synchronous:
    """
    The service's request methods without the C{replyTo}: each returns the
    answer, which must come at once (everything runs on the test's thread).
    Other attributes pass through.
    """

    def __init__(self, service) -> None:
        self._service = service

    def __getattr__(self, name):
        method = getattr(self._service, name)
        if name in ("load", "shutdown", "publishedGroups"):
            return method

        def call(*args, **kw):
            pending = Pending()
            method(pending, *args, **kw)
            return pending.value

        return call


@implementer(ICoordinatorLog)
class FailingLog:
    """
    An L{ICoordinatorLog} that refuses appends C{failOn(records)} picks,
    with C{error}.
    """

    def __init__(self, inner, failOn, error=E.not_coordinator) -> None:
        self._inner = inner
        self._failOn = failOn
        self._error = error
        self.topic = inner.topic
        self.numPartitions = inner.numPartitions

    def append(self, partition, records):
        records = list(records)
        if self._failOn(records):
            raise KafkaError(self._error)
        self._inner.append(partition, records)

    def replay(self, partition):
        return self._inner.replay(partition)


def memoryLog(numPartitions: int = 3) -> OffsetsTopicLog:
    return OffsetsTopicLog(MemoryLogManager(), numPartitions, clock=lambda: 0)


class Harness:
    """
    A coordinator on a fake clock; times in milliseconds.
    """

    def __init__(self, **kw) -> None:
        kw.setdefault("initialRebalanceDelayMs", 0)
        self.clock = task.Clock()
        self.log = kw.pop("log", None) or memoryLog()
        self.service = GroupCoordinatorService(self.clock, self.log, **kw)
        self.coord = Synchronous(self.service)

    def advance(self, ms: float) -> None:
        self.clock.advance(ms / 1000.0)

    def stored(self):
        """
        @return: C{(groups, offsets)} as a restart would read them back:
            group id -> L{GroupSnapshot}, group id -> offsets.
        """
        groups, offsets = loadGroups(self.log)
        return {g.groupId: g for g in groups}, offsets

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
        pending = Pending()
        self.service.joinGroup(
            pending,
            JoinRequest(
                group, member, instance, clientId, "/127.0.0.1", rebalance, session, ptype,
                tuple(protocols), requireKnown,
            ),
        )
        return pending

    def sync(
        self, member, generation, assignments=None, group="g", instance=None, ptype=None, pname=None
    ) -> Pending:
        pending = Pending()
        self.service.syncGroup(
            pending, SyncRequest(group, generation, member, instance, ptype, pname, assignments or {})
        )
        return pending

    def heartbeat(self, member, generation, group="g", instance=None):
        return self.coord.heartbeat(group, generation, member, instance)

    def commit(self, offsets, member="", generation=-1, group="g", instance=None, now=None):
        return self.coord.commitOffsets(
            CommitRequest(
                group,
                generation,
                member,
                instance,
                {
                    tp: _withTimestamp(
                        om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(om), now
                    )
                    for tp, om in offsets.items()
                },
            )
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


def _withTimestamp(om: OffsetAndMetadata, now):
    if now is None:
        return om
    return OffsetAndMetadata(om.offset, om.leaderEpoch, om.metadata, now, om.expireTimestampMs)


def answer(method, *args, timeout=20.0):
    """
    Call a coordinator method and wait for its answer (from any thread: the
    coordinator's timer thread answers some).
    """
    import threading

    done = threading.Event()
    box = []

    def replyTo(result):
        box.append(result)
        done.set()

    method(replyTo, *args)
    assert done.wait(timeout), "never answered"
    assert len(box) == 1
    return box[0]
