"""
Delayed operations on a fake clock.
"""

from twisted.internet.task import Clock

from kafkatwist.clock import ThreadSafeClock
from kafkatwist.purgatory import DelayedOperation, Purgatory


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
