"""
Concurrency: members in several threads join, sync, heartbeat, commit and
leave at once while another thread drives a thread-safe fake clock (timers
fire on that thread, as they do on the coordinator's timer thread); and the
runtime's ownership rules, deterministically.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from kafkatwist.coordinator import (
    CommitRequest,
    GroupCoordinatorService,
    JoinRequest,
    OffsetAndMetadata,
    SyncRequest,
)
from kafkatwist.coordinator.replay import loadGroups

from .helpers import E, answer, memoryLog, sub


class _Call:
    def __init__(self, clock, when, f, args, kw):
        self._clock, self.when, self.f, self.args, self.kw = clock, when, f, args, kw
        self.cancelled = False

    def cancel(self):
        # Harmless after the call ran, as IThreadSafeClock promises.
        with self._clock._lock:
            self.cancelled = True


class ThreadSafeFakeClock:
    """
    A manual clock usable from any thread.  Due calls run in the thread
    calling L{advance}, without the clock's lock held.
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._now = 0.0
        self._heap = []
        self._seq = itertools.count()

    def seconds(self):
        with self._lock:
            return self._now

    def callLater(self, delay, f, *args, **kw):
        with self._lock:
            call = _Call(self, self._now + delay, f, args, kw)
            heapq.heappush(self._heap, (call.when, next(self._seq), call))
            return call

    def advance(self, amount):
        with self._lock:
            self._now += amount
        while True:
            with self._lock:
                if not self._heap or self._heap[0][0] > self._now:
                    return
                _, _, call = heapq.heappop(self._heap)
                if call.cancelled:
                    continue
                call.cancelled = True
            call.f(*call.args, **call.kw)


def test_threads_join_sync_heartbeat_commit_leave():
    clock = ThreadSafeFakeClock()
    log = memoryLog()
    coord = GroupCoordinatorService(clock, log, initialRebalanceDelayMs=500)
    stop = threading.Event()
    errors: list[BaseException] = []
    codes: dict[str, set] = {"join": set(), "sync": set(), "hb": set(), "commit": set()}
    allowed = {
        "join": {E.none, E.member_id_required, E.rebalance_in_progress, E.unknown_member_id},
        "sync": {E.none, E.rebalance_in_progress, E.illegal_generation, E.unknown_member_id},
        "hb": {E.none, E.rebalance_in_progress, E.illegal_generation, E.unknown_member_id},
        "commit": {E.none, E.rebalance_in_progress, E.illegal_generation, E.unknown_member_id},
    }

    def ticker():
        # 100 ms of broker time per real millisecond.
        while not stop.is_set():
            clock.advance(0.1)
            time.sleep(0.001)

    def member(i):
        try:
            memberId, rounds = "", 0
            while rounds < 5:
                # A changing subscription forces a rebalance per round.
                r = answer(
                    coord.joinGroup,
                    JoinRequest(
                        "g", memberId, None, f"c{i}", "h", 30000, 30000, "consumer",
                        (("range", sub("t", f"r{rounds}")),), True,
                    ),
                )
                codes["join"].add(r.errorCode)
                if r.errorCode == E.member_id_required:
                    memberId = r.memberId
                    continue
                if r.errorCode == E.unknown_member_id:
                    memberId = ""
                    continue
                if r.errorCode != E.none:
                    continue
                memberId, gen = r.memberId, r.generationId
                assignments = {m.memberId: m.memberId.encode() for m in r.members}
                s = answer(
                    coord.syncGroup,
                    SyncRequest("g", gen, memberId, None, "consumer", "range", assignments),
                )
                codes["sync"].add(s.errorCode)
                if s.errorCode != E.none:
                    continue
                assert s.assignment in (memberId.encode(), b"")
                for n in range(3):
                    hb = answer(coord.heartbeat, "g", gen, memberId, None)
                    codes["hb"].add(hb)
                    c = answer(
                        coord.commitOffsets,
                        CommitRequest(
                            "g", gen, memberId, None, {("t", i): OffsetAndMetadata(n, metadata=str(i))}
                        ),
                    )
                    codes["commit"].add(c[("t", i)])
                    if hb != E.none:
                        break
                    time.sleep(0.001)
                rounds += 1
            answer(coord.leaveGroup, "g", [(memberId, None)])
        except BaseException as e:  # noqa: BLE001 - report anything from the thread
            errors.append(e)

    tick = threading.Thread(target=ticker, daemon=True)
    tick.start()
    workers = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    stop.set()
    tick.join(5)
    assert not any(w.is_alive() for w in workers), "a member thread hung"
    assert not errors, errors
    for api, seen in codes.items():
        assert seen <= allowed[api], (api, seen)
    assert E.none in codes["sync"] and E.none in codes["commit"]
    # Everyone left: the group is empty (or already expired) and consistent.
    desc = answer(coord.describeGroups, ["g"])[0]
    assert desc.state in ("Empty", "Dead") and desc.members == ()
    stored = loadGroups(log)[1].get("g", {})
    assert all(om.metadata == str(p) for (t, p), om in stored.items())
    assert {p: om.offset for (t, p), om in stored.items()} == {
        p: om.offset for (t, p), om in answer(coord.fetchOffsets, "g", None).offsets.items()
    }
    coord.shutdown()
