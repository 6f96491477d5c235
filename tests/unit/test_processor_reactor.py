"""
The Processor's reactor: one iteration dispatches ready sockets and calls
the Processor's hooks before waiting and after dispatching.
"""

import socket
import threading

from twisted.internet.protocol import Protocol

from kafkatwist.metrics.stats import IdleClock
from kafkatwist.network.reactor import ProcessorReactor

#: the most a main-loop test waits before it gives up (never, when the loop
#: works)
GIVE_UP = 30.0


class Recorder(Protocol):
    def __init__(self, calls, fail=False):
        self.calls = calls
        self.fail = fail

    def dataReceived(self, data):
        self.calls.append(("data", data))
        if self.fail:
            raise RuntimeError("boom")

    def connectionLost(self, reason):
        self.calls.append(("lost", reason.type.__name__))


def adopt(reactor, protocol):
    ours, theirs = socket.socketpair()
    ours.setblocking(False)

    class Factory:
        def doStart(self):
            pass

        def doStop(self):
            pass

        def buildProtocol(self, addr):
            return protocol

    reactor.adoptStreamConnection(ours.fileno(), socket.AF_UNIX, Factory())
    ours.close()
    return theirs


def test_one_iteration_calls_hooks_around_the_dispatch():
    reactor = ProcessorReactor()
    calls = []
    reactor.beforeWait = lambda: calls.append("before")
    reactor.afterEvents = lambda: calls.append("after")
    peer = adopt(reactor, Recorder(calls))
    peer.sendall(b"hello")
    try:
        reactor.doIteration(1.0)
        assert calls == ["before", ("data", b"hello"), "after"]
        # Nothing ready: both hooks still run, nothing is dispatched.
        del calls[:]
        reactor.doIteration(0)
        assert calls == ["before", "after"]
    finally:
        peer.close()
        reactor.removeAll()


def test_a_failing_protocol_loses_its_connection_and_the_loop_goes_on():
    reactor = ProcessorReactor()
    calls = []
    peer = adopt(reactor, Recorder(calls, fail=True))
    peer.sendall(b"x")
    try:
        reactor.doIteration(1.0)
        assert calls[0] == ("data", b"x")
        assert calls[1][0] == "lost"
        reactor.doIteration(0)
    finally:
        peer.close()
        reactor.removeAll()


class Stopping(Protocol):
    def __init__(self, reactor, calls):
        self.reactor = reactor
        self.calls = calls

    def dataReceived(self, data):
        self.calls.append(("data", data))
        self.reactor.stop()


def test_timers_thread_calls_and_reads_run_then_the_loop_stops():
    reactor = ProcessorReactor()
    reactor._registerAsIOThread = False
    reactor.idleClock = IdleClock(None)
    calls = []
    peer = adopt(reactor, Stopping(reactor, calls))

    def fromThread():
        calls.append("thread")
        peer.sendall(b"hi")

    def timer():
        calls.append("timer")
        threading.Thread(target=reactor.callFromThread, args=(fromThread,)).start()

    reactor.callLater(0.01, timer)
    gaveUp = reactor.callLater(GIVE_UP, reactor.stop)
    try:
        reactor.run(installSignalHandlers=False)
    finally:
        peer.close()
    assert gaveUp.active(), "the loop never got there"
    assert calls == ["timer", "thread", ("data", b"hi")]
    # It waited in epoll for the timer at least.
    assert reactor.idleClock.idle > 0.0


def test_an_error_escaping_an_iteration_is_logged_and_the_loop_goes_on():
    reactor = ProcessorReactor()
    reactor._registerAsIOThread = False
    failures = []

    def failOnce():
        failures.append(1)
        if len(failures) == 1:
            raise RuntimeError("boom")

    reactor.afterEvents = failOnce
    gaveUp = reactor.callLater(GIVE_UP, reactor.stop)

    def stopOnceFailed():
        if len(failures) > 1:
            reactor.stop()
        else:
            reactor.callLater(0.01, stopOnceFailed)

    reactor.callLater(0.01, stopOnceFailed)
    reactor.run(installSignalHandlers=False)
    assert gaveUp.active()
    assert len(failures) > 1


class LosingBadly(Protocol):
    def connectionLost(self, reason):
        raise RuntimeError("boom in connectionLost")


def test_a_raising_connection_lost_still_ends_the_iteration():
    """
    The main loop's inline read of a lone readable socket: a peer's hang-up
    whose connectionLost raises is logged, and the iteration still runs
    afterEvents (the requests and calls it hands on) -- as any other
    dispatch does.
    """
    reactor = ProcessorReactor()
    reactor._registerAsIOThread = False
    after = []
    peer = adopt(reactor, LosingBadly())
    armed = []

    def afterEvents():
        if armed:
            after.append(1)
            reactor.stop()

    def hangUp():
        armed.append(1)
        peer.shutdown(socket.SHUT_WR)  # the only event: EPOLLIN, then EOF

    reactor.afterEvents = afterEvents
    reactor.callLater(0.01, hangUp)
    gaveUp = reactor.callLater(GIVE_UP, reactor.stop)
    try:
        reactor.run(installSignalHandlers=False)
    finally:
        peer.close()
        reactor.removeAll()
    assert gaveUp.active(), "afterEvents never ran after the hang-up"
    assert after


def test_the_waker_reports_each_wake_up_once_and_is_never_read(monkeypatch):
    # An eventfd polled edge-triggered: a wake-up is reported once, without
    # a read on the Processor, and nothing is reported until the next one
    # (a waker left unread but polled level-triggered would spin the loop).
    import os

    from kafkatwist.network import reactor as reactorModule
    from kafkatwist.network.reactor import ProcessorReactor

    reactor = ProcessorReactor()
    try:
        waker = reactor.waker
        reads = []
        realRead = os.read
        monkeypatch.setattr(reactorModule.os, "read", lambda fd, n: reads.append(fd) or realRead(fd, n))
        monkeypatch.setattr(reactorModule.os, "eventfd_read", lambda fd: reads.append(fd))
        poll = reactor._poller.poll
        fd = waker.fileno()
        for _ in range(3):
            waker.wakeUp()
            waker.wakeUp()
            assert [f for f, _ in poll(0)] == [fd]
            waker.doRead()
            assert poll(0) == []
        assert reads == []
        # A wake-up from another thread ends a wait.
        import threading

        threading.Timer(0.05, waker.wakeUp).start()
        assert [f for f, _ in poll(5)] == [fd]
    finally:
        reactor.removeAll()
        waker.connectionLost(None)
        waker.connectionLost(None)


def _eventfds():
    import os

    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == "anon_inode:[eventfd]":
                found.add(int(name))
        except OSError:
            pass
    return found


def test_the_waker_is_closed_when_the_reactor_ends():
    # Twisted never closes a reactor's waker: each Processor (a reactor of
    # its own) stopped leaked its eventfd.
    before = _eventfds()
    reactor = ProcessorReactor()
    reactor._registerAsIOThread = False
    waker = reactor.waker
    assert waker.fileno() in _eventfds() - before
    reactor.callWhenRunning(reactor.stop)
    thread = threading.Thread(target=reactor.run, kwargs={"installSignalHandlers": False})
    thread.start()
    thread.join(GIVE_UP)
    assert not thread.is_alive()
    assert waker.o is None
    assert _eventfds() - before == set()
    # A late wake-up (a handler thread answering as the Processor stopped)
    # does nothing.
    waker.wakeUp()
    reactor.callFromThread(lambda: None)
