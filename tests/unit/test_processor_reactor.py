"""
The Processor's reactor: one iteration dispatches ready sockets and calls
the Processor's hooks before waiting and after dispatching.
"""

import socket

from twisted.internet.protocol import Protocol

from kafkatwist.network.reactor import ProcessorReactor


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
