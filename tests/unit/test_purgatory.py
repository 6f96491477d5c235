"""
Delayed operations on a fake clock.
"""

import pytest
from twisted.internet.task import Clock

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.util.purgatory import DelayedOperation, Purgatory


class Waiting(DelayedOperation):
    def __init__(self, clock, ready):
        super().__init__(clock)
        self.ready = ready
        self.completions = []

    def tryComplete(self):
        return self.forceComplete() if self.ready() else False

    def onComplete(self):
        self.completions.append("complete")

    def onExpiration(self):
        self.completions.append("expired")


def test_completes_when_key_checked():
    clock = Clock()
    state = {"ready": False}
    op = Waiting(ThreadSafeClock(clock), lambda: state["ready"])
    purgatory = Purgatory("test")
    assert not purgatory.tryCompleteElseWatch(op, ["k1", "k2"], 5)
    assert purgatory.checkAndComplete("k1") == 0
    state["ready"] = True
    assert purgatory.checkAndComplete("k2") == 1
    assert op.completions == ["complete"]
    assert purgatory.watched("k1") == 0
    clock.advance(10)
    assert op.completions == ["complete"]


def test_expires_on_the_clock():
    clock = Clock()
    op = Waiting(ThreadSafeClock(clock), lambda: False)
    purgatory = Purgatory("test")
    purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    clock.advance(0.4)
    assert op.completions == []
    clock.advance(0.2)
    assert op.completions == ["complete", "expired"]
    assert len(purgatory) == 0


def test_completes_at_once_when_ready():
    op = Waiting(ThreadSafeClock(Clock()), lambda: True)
    assert Purgatory("t").tryCompleteElseWatch(op, ["k"], 1)
    assert op.completions == ["complete"]


class InterleavingClock(ThreadSafeClock):
    """
    Runs C{meanwhile()} inside C{callLater}, before or after the timer is
    armed: what another thread completing the operation between the
    purgatory's last check and its arming of the timer would do.
    """

    def __init__(self, clock, meanwhile, after):
        super().__init__(clock)
        self.meanwhile = meanwhile
        self.after = after

    def callLater(self, delay, f, *args, **kw):
        if not self.after:
            self.meanwhile()
        handle = super().callLater(delay, f, *args, **kw)
        if self.after:
            self.meanwhile()
        return handle


@pytest.mark.parametrize("after", [False, True])
def test_completion_while_the_timer_is_armed_cancels_it(after):
    """
    A completion landing between the second check and the arming of the
    timer used to find no timer to cancel, leaving it armed for the whole
    wait (weeks, with a large max_wait_ms) holding the operation.
    """
    clock = Clock()
    state = {"ready": False}
    purgatory = Purgatory("test")
    op = None

    def competitor():
        state["ready"] = True
        purgatory.checkAndComplete("k")

    op = Waiting(InterleavingClock(clock, competitor, after), lambda: state["ready"])
    assert not purgatory.tryCompleteElseWatch(op, ["k"], 3600)
    assert op.completions == ["complete"]
    assert clock.getDelayedCalls() == []
    assert len(purgatory) == 0


def test_expiry_goes_to_the_reaper():
    clock = Clock()
    reaped = []
    op = Waiting(ThreadSafeClock(clock), lambda: False)
    purgatory = Purgatory("test", reaper=reaped.append)
    purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    clock.advance(1)
    assert op.completions == []
    [expire] = reaped
    expire()
    assert op.completions == ["complete", "expired"]
    # A completion that wins the race with the reaper leaves it nothing.
    op2 = Waiting(ThreadSafeClock(clock), lambda: False)
    purgatory.tryCompleteElseWatch(op2, ["k"], 0.5)
    clock.advance(1)
    op2.forceComplete()
    reaped[-1]()
    assert op2.completions == ["complete"]
