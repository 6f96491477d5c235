"""
Delayed operations on a fake clock.
"""

import queue
import threading

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


class ReactorThread:
    """
    A Processor reduced to what its clock needs, in a thread of its own: a
    C{task.Clock} and the calls other threads hand it (C{callInThread}),
    each step run in that thread only when the test says so, so the test
    chooses the interleaving with the handler thread (the test's own).
    """

    def __init__(self):
        self.clock = Clock()
        self.calls = []
        self._steps = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self.threadSafeClock = ThreadSafeClock(
            self.clock, threadId=self._thread.ident, callInThread=lambda f, *a: self.calls.append((f, a))
        )

    def _run(self):
        while True:
            step, box, done = self._steps.get()
            if step is None:
                return
            try:
                step()
            except BaseException as e:
                box.append(e)
            done.set()

    def step(self, f):
        box, done = [], threading.Event()
        self._steps.put((f, box, done))
        assert done.wait(10)
        if box:
            raise box[0]

    def runCalls(self):
        def run():
            while self.calls:
                f, args = self.calls.pop(0)
                f(*args)

        self.step(run)

    def advance(self, seconds):
        self.step(lambda: self.clock.advance(seconds))

    def stop(self):
        self._steps.put((None, None, None))
        self._thread.join(10)


@pytest.fixture
def reactorThread():
    thread = ReactorThread()
    yield thread
    thread.stop()


@pytest.mark.parametrize("canExpireHere", [False, True])
def test_completion_whose_cancel_arrives_after_the_timer_fired(reactorThread, canExpireHere):
    """
    The handler thread completes the operation and hands the timer's
    cancel to the reactor; the reactor, behind (a burst, a paused process),
    fires the timer before it runs that cancel.  The completion won: the
    expiry is a no-op, and so is the late cancel (it used to raise
    AlreadyCalled in the Processor, logged as a critical traceback).
    """
    state = {"ready": False}
    reaped = []
    op = Waiting(reactorThread.threadSafeClock, lambda: state["ready"])
    op.canExpireHere = lambda: canExpireHere
    purgatory = Purgatory("test", reaper=reaped.append)
    assert not purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    reactorThread.runCalls()  # the timer is armed
    state["ready"] = True
    assert purgatory.checkAndComplete("k") == 1  # the cancel is queued
    reactorThread.advance(1)  # the timer fires first
    reactorThread.runCalls()  # then the cancel
    assert op.completions == ["complete"]
    assert reaped == []
    assert reactorThread.clock.getDelayedCalls() == []
    assert len(purgatory) == 0


def test_completion_after_the_timer_fired_before_the_reaper_ran(reactorThread):
    """
    The timer fired and handed the expiry to the reaper; a completion comes
    on a handler thread before the reaper runs: the completion wins, the
    reaper's expiry is a no-op.
    """
    state = {"ready": False}
    reaped = []
    op = Waiting(reactorThread.threadSafeClock, lambda: state["ready"])
    purgatory = Purgatory("test", reaper=reaped.append)
    purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    reactorThread.runCalls()
    reactorThread.advance(1)
    [expire] = reaped
    state["ready"] = True
    assert purgatory.checkAndComplete("k") == 1
    expire()
    assert op.completions == ["complete"]
    assert not op.forceComplete()
    assert op.completions == ["complete"]


def test_expiry_in_the_reactor_then_a_completion(reactorThread):
    """
    The expiry wins in the reactor's thread; a later completion (or a
    forceComplete from a handler thread) finds nothing to do.
    """
    state = {"ready": False}
    op = Waiting(reactorThread.threadSafeClock, lambda: state["ready"])
    op.canExpireHere = lambda: True
    purgatory = Purgatory("test", reaper=lambda f: pytest.fail("expired here"))
    purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    reactorThread.runCalls()
    reactorThread.advance(1)
    assert op.completions == ["complete", "expired"]
    state["ready"] = True
    assert purgatory.checkAndComplete("k") == 0
    assert not op.forceComplete()
    reactorThread.runCalls()
    assert op.completions == ["complete", "expired"]


def test_expiry_waiting_on_a_completion_in_progress(reactorThread):
    """
    The timer fires while a handler thread holds the operation (it is in
    C{tryComplete}): the reactor waits for the lock, then finds the
    operation complete.
    """
    op = Waiting(reactorThread.threadSafeClock, lambda: False)
    op.canExpireHere = lambda: True
    purgatory = Purgatory("test")
    purgatory.tryCompleteElseWatch(op, ["k"], 0.5)
    reactorThread.runCalls()
    fired = threading.Event()
    with op._lock:
        # The reactor starts firing the timer and blocks on the lock held here.
        stepper = threading.Thread(target=lambda: (reactorThread.advance(1), fired.set()))
        stepper.start()
        assert not fired.wait(0.2)
        assert op.forceComplete()
    stepper.join(10)
    assert fired.is_set()
    reactorThread.runCalls()
    assert op.completions == ["complete"]
