"""
The coordinator's runtime: who runs what, on which thread.  Interleavings
are forced with events, not sleeps.
"""

from __future__ import annotations

import threading

import pytest
from twisted.internet import task
from twisted.internet.defer import Deferred
from zope.interface import implementer

from kafkatwist.coordinator import CommitRequest, GroupCoordinatorService, OffsetAndMetadata
from kafkatwist.coordinator.effects import SetTimer
from kafkatwist.coordinator.reply import Reply
from kafkatwist.util.executor import SerialExecutor, isRunningHere, runHere
from kafkatwist.util.timers import TimerThread
from kafkatwist.interfaces import ICoordinatorLog

from .helpers import E, Harness, memoryLog

WAIT = 10.0


def test_serial_executor_runs_in_order_without_nesting():
    executor = SerialExecutor()
    seen = []
    depth = []

    def work(n):
        depth.append(len(seen))
        seen.append(n)
        if n < 3:
            # Submitted from inside: runs after this, not inside it.
            executor.submit(work, n + 1)
            seen.append(f"after {n}")

    executor.submit(work, 0)
    assert seen == [0, "after 0", 1, "after 1", 2, "after 2", 3]
    assert not isRunningHere()


def test_run_here_defers_to_the_end_of_the_current_work():
    seen = []

    def outer():
        runHere(lambda: seen.append("inner"))
        seen.append("outer done")

    runHere(outer)
    assert seen == ["outer done", "inner"]


def test_serial_executor_from_threads_is_serial():
    executor = SerialExecutor()
    inside = []
    overlaps = []
    done = threading.Barrier(5)

    def work():
        if inside:
            overlaps.append(True)
        inside.append(1)
        inside.pop()

    def submitter():
        for _ in range(2000):
            executor.submit(work)
        done.wait(WAIT)

    threads = [threading.Thread(target=submitter) for _ in range(4)]
    for t in threads:
        t.start()
    done.wait(WAIT)
    for t in threads:
        t.join(WAIT)
    assert overlaps == []


@implementer(ICoordinatorLog)
class BlockingLog:
    """
    An L{ICoordinatorLog} whose appends wait until released, recording the
    thread they ran on.
    """

    def __init__(self) -> None:
        self._inner = memoryLog()
        self.topic = self._inner.topic
        self.numPartitions = self._inner.numPartitions
        self.entered = threading.Event()
        self.release = threading.Event()
        self.threads: list[str] = []

    def append(self, partition, records):
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        assert self.release.wait(WAIT)
        self._inner.append(partition, records)

    def replay(self, partition):
        return self._inner.replay(partition)


def test_a_disk_write_holds_no_other_group():
    """
    While one group's commit waits for the disk, another group's
    heartbeat, a describe and the metrics snapshot are all served.
    """
    log = BlockingLog()
    h = Harness(log=log)
    log.release.set()
    (member,), gen = h.stableGroup(1)
    log.release.clear()
    log.entered.clear()
    committed = []
    writer = threading.Thread(
        target=h.service.commitOffsets,
        args=(committed.append, CommitRequest("s", -1, "", None, {("t", 0): OffsetAndMetadata(1)})),
        name="writer",
    )
    writer.start()
    assert log.entered.wait(WAIT)
    # The writer thread is inside the append now.
    assert h.heartbeat(member, gen) == E.none
    assert h.state() == "Stable"
    assert "s" in h.service.publishedGroups() and committed == []
    log.release.set()
    writer.join(WAIT)
    assert committed == [{("t", 0): E.none}]
    assert log.threads[-1] == "writer"
    assert dict(h.service.publishedGroups()["s"].offsets) == {("t", 0): 1}


class FakeContext:
    def __init__(self) -> None:
        self.pending = None

    def respondLater(self):
        assert self.pending is None
        self.pending = PendingResponse()
        return self.pending


class PendingResponse:
    def __init__(self) -> None:
        self.deferred = Deferred()
        self.completions = []

    def complete(self, result) -> None:
        self.completions.append(result)


def test_reply_answers_at_once_when_decided_here():
    context = FakeContext()
    reply = Reply(context, lambda r: ("built", r))
    reply(E.none)
    assert reply.response() == ("built", E.none)
    assert context.pending is None


def test_reply_uses_a_pending_response_when_answered_later():
    context = FakeContext()
    reply = Reply(context, lambda r: ("built", r))
    d = reply.response()
    assert d is context.pending.deferred
    answerer = threading.Thread(target=reply, args=(E.none,))
    answerer.start()
    answerer.join(WAIT)
    reply(E.unknown_member_id)  # a second answer is ignored
    assert context.pending.completions == [("built", E.none)]


def test_reply_raises_a_coordinator_failure():
    from twisted.python.failure import Failure

    reply = Reply(FakeContext(), lambda r: r)
    try:
        raise ZeroDivisionError()
    except ZeroDivisionError:
        reply(Failure())
    with pytest.raises(ZeroDivisionError):
        reply.response()


def test_entry_point_failure_answers_with_a_failure():
    h = Harness()
    box = []
    # Not a CommitRequest: the machine raises; the caller is still answered.
    h.service.commitOffsets(box.append, None)
    (failure,) = box
    assert failure.check(AttributeError)


def test_timer_thread_runs_calls_in_order_on_its_thread():
    clock = TimerThread("test-timers")
    clock.start()
    try:
        ran = []
        done = threading.Event()

        def record(name):
            ran.append((name, threading.current_thread().name))
            if name == "last":
                done.set()

        clock.callLater(0.02, record, "second")
        clock.callLater(0.01, record, "first")
        cancelled = clock.callLater(0.015, record, "cancelled")
        clock.callLater(0.03, record, "last")
        cancelled.cancel()
        assert done.wait(WAIT)
        assert ran == [(n, "kafkatwist-test-timers") for n in ("first", "second", "last")]
        cancelled.cancel()  # harmless
    finally:
        clock.stop()


def test_stale_timer_firing_is_dropped():
    """
    A timer re-armed while its old firing is on its way to the owner: the
    old one does nothing.
    """
    clock = task.Clock()
    service = GroupCoordinatorService(clock, memoryLog(), initialRebalanceDelayMs=0)
    runtime = service.runtime
    fired = []
    service.machine.timerFired = lambda nowMs, key: fired.append((nowMs, key)) or []
    runtime.call(lambda nowMs: [SetTimer(("x",), 1000)])
    ((_, _, firstToken),) = runtime._timers.values()
    runtime.call(lambda nowMs: [SetTimer(("x",), 5000)])
    runtime._fire(("x",), firstToken)  # the first timer's late hand-off
    assert fired == []
    clock.advance(5)
    assert fired == [(5000, ("x",))]


def test_timer_thread_survives_fork():
    """
    twistd daemonizes (forks) after BrokerService.prepare() started the
    coordinators' timer threads: the child must have one too.
    """
    import os
    import threading

    from kafkatwist.util.timers import TimerThread

    timer = TimerThread("fork-test")
    timer.start()
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            fired = threading.Event()
            timer.callLater(0.01, fired.set)
            os.write(write, b"1" if fired.wait(5) else b"0")
            os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.waitpid(pid, 0)
        assert answer == b"1"
    finally:
        timer.stop()
