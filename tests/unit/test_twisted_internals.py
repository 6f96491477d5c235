"""
The Twisted internals the network layer relies on, checked on the installed
Twisted so an upgrade that changes them fails here, by name, rather than as
a hang or a lost write under load.  setup.cfg pins Twisted to the range
these were checked on; widen it only with this file green.

Who relies on what:
  - kafkatwist/network/transport.py (PlaintextTransportLayer) writes to the
    socket itself only while Twisted's write buffer is empty:
    C{FileDescriptor.dataBuffer}, C{.offset}, C{._tempDataLen}; and learns
    that the buffer drained from C{doWrite} resuming a non-streaming
    producer.
  - kafkatwist/network/connection.py grows C{tcp.Connection.bufferSize},
    which C{doRead} passes to C{recv}.
  - kafkatwist/network/reactor.py (ProcessorReactor) replaces
    C{EPollReactor.doPoll}, using C{_poller}, C{_selectables} and
    C{_doReadOrWrite}; kafkatwist/network/processor.py and metrics.py wrap
    C{_poller}.
  - kafkatwist/network/processor.py sets C{_registerAsIOThread = False} so a
    Processor's reactor does not claim Twisted's I/O thread.
"""

import inspect
import socket

import pytest
import twisted
from twisted.internet import abstract, base, epollreactor, tcp
from twisted.internet.protocol import Factory, Protocol

from kafkatwist.network.reactor import ProcessorReactor

VERSION = twisted.__version__


def changed(what: str, user: str) -> str:
    return (
        f"Twisted {VERSION} changed {what}, which {user} relies on: "
        "check that code and widen the pin in setup.cfg only once it is fixed"
    )


def uses(function, text: str) -> bool:
    return text in inspect.getsource(function)


@pytest.fixture
def tcpTransport():
    """
    A real C{tcp.Server}, adopted as a Processor adopts one.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    reactor = ProcessorReactor()
    factory = Factory.forProtocol(Protocol)
    reactor.adoptStreamConnection(server.fileno(), server.family, factory)
    server.close()
    [transport] = [s for s in reactor.getReaders() if isinstance(s, tcp.Server)]
    yield transport
    reactor.removeAll()
    transport.socket.close()
    client.close()


@pytest.mark.parametrize(
    "name, kind",
    [("dataBuffer", bytes), ("offset", int), ("_tempDataLen", int), ("bufferSize", int)],
)
def test_tcp_transport_buffer_attributes(tcpTransport, name, kind):
    assert isinstance(getattr(tcpTransport, name, None), kind), changed(
        f"tcp.Server.{name} (expected {kind.__name__})",
        "kafkatwist/network/transport.py and connection.py",
    )


def test_write_buffer_accounting():
    # _buffered() = len(dataBuffer) - offset + _tempDataLen must count every
    # byte written and not yet sent.
    assert uses(abstract.FileDescriptor.write, "self._tempDataLen +="), changed(
        "FileDescriptor.write's use of _tempDataLen", "PlaintextTransportLayer._buffered"
    )
    assert uses(abstract.FileDescriptor.doWrite, "self.offset"), changed(
        "FileDescriptor.doWrite's use of offset", "PlaintextTransportLayer._buffered"
    )


def test_drained_buffer_resumes_a_pull_producer():
    assert uses(abstract.FileDescriptor.doWrite, "self.producer.resumeProducing()"), changed(
        "FileDescriptor.doWrite resuming a non-streaming producer once drained",
        "PlaintextTransportLayer.whenFlushed (_FlushWaiter)",
    )


def test_reads_use_buffer_size():
    assert uses(tcp.Connection.doRead, "recv(self.bufferSize)"), changed(
        "tcp.Connection.doRead's recv(self.bufferSize)", "KafkaConnection._growReads"
    )


@pytest.mark.parametrize("name", ["_poller", "_selectables"])
def test_epoll_reactor_attributes(name):
    reactor = ProcessorReactor()
    try:
        assert hasattr(reactor, name), changed(f"EPollReactor.{name}", "ProcessorReactor.doPoll")
        assert callable(getattr(reactor._poller, "poll", None)), changed(
            "EPollReactor._poller.poll", "ProcessorReactor.doPoll and metrics.IdleClock"
        )
        assert isinstance(reactor._selectables, dict), changed(
            "EPollReactor._selectables (a dict fd -> selectable)", "ProcessorReactor.doPoll"
        )
    finally:
        reactor._poller.close()


def test_epoll_dispatch_and_iteration():
    assert callable(getattr(epollreactor.EPollReactor, "_doReadOrWrite", None)), changed(
        "EPollReactor._doReadOrWrite", "ProcessorReactor.doPoll"
    )
    assert uses(base.ReactorBase.mainLoop, "self.doIteration("), changed(
        "the main loop calling doIteration", "ProcessorReactor (doIteration = doPoll)"
    )


def test_register_as_io_thread_flag():
    assert hasattr(base.ReactorBase, "_registerAsIOThread"), changed(
        "ReactorBase._registerAsIOThread", "Processor.__init__"
    )
    assert "self._registerAsIOThread" in inspect.getsource(base.ReactorBase), changed(
        "ReactorBase's use of _registerAsIOThread", "Processor.__init__"
    )


def test_processor_waker():
    """
    kafkatwist/network/reactor.py gives a Processor's reactor its own waker
    (a subclass of C{_signals._UnixWaker}, built by C{_wakerFactory}, the
    pipe's write end in C{o}): a call from another thread wakes it, and a
    full pipe is not an error.
    """
    from twisted.internet import _signals, posixbase

    from kafkatwist.network.reactor import ProcessorWaker

    assert hasattr(posixbase.PosixReactorBase, "_wakerFactory"), changed(
        "PosixReactorBase._wakerFactory", "ProcessorReactor"
    )
    assert uses(posixbase.PosixReactorBase.installWaker, "_wakerFactory()"), changed(
        "installWaker", "ProcessorReactor's waker"
    )
    assert issubclass(ProcessorWaker, _signals._UnixWaker)
    reactor = ProcessorReactor()
    reactor.installWaker()
    waker = reactor.waker
    try:
        assert isinstance(waker, ProcessorWaker)
        called = []
        reactor.callFromThread(called.append, 1)
        reactor.iterate(0)
        assert called == [1]
        for _ in range(100_000):  # fills the pipe: EAGAIN is swallowed
            waker.wakeUp()
        waker.doRead()
    finally:
        reactor.removeReader(waker)
        waker.connectionLost(None)
