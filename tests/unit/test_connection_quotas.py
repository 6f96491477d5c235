"""
Connection creation rates (KIP-612) and ip quotas: the quota arithmetic on
a fake clock, and an Acceptor on a fake reactor accepting real loopback
sockets -- delayed accepts and delayed closes are timers, never a wait.
"""

from __future__ import annotations

import socket

from twisted.internet.task import Clock

from kafkatwist.config import Listener
from kafkatwist.network.acceptor import Acceptor
from kafkatwist.network.connectionquotas import UNLIMITED_RATE, ConnectionQuotas, ipConnectionRates

IP_DEFAULT = (("ip", None),)


def quotas(**kwargs) -> ConnectionQuotas:
    kwargs.setdefault("samples", 2)
    kwargs.setdefault("windowSeconds", 1)
    return ConnectionQuotas(1000, 1000, clock=lambda: 0, **kwargs)


def test_broker_and_listener_rates():
    q = quotas(maxRate=10, listenerRates={"A": 10, "B": 2})
    # 2 samples of 1 s: the rate is measured over at least 1 s, so ten
    # connections at once are within 10/s, the eleventh is not.
    assert [q.acceptDelayMs("A", 0) for _ in range(10)] == [0] * 10
    delay = q.acceptDelayMs("A", 0)
    assert 0 < delay <= 1000
    # Listener B's own limit: its third connection waits, although the
    # broker's rate already is over too -- the longer delay wins.
    q2 = quotas(maxRate=UNLIMITED_RATE, listenerRates={"B": 2})
    assert [q2.acceptDelayMs("B", 0) for _ in range(2)] == [0, 0]
    assert q2.acceptDelayMs("B", 0) == 500  # (3 - 2) / 2 of the 1 s window
    # A listener without its own limit has the broker's.
    q3 = quotas(maxRate=1)
    assert q3.acceptDelayMs("C", 0) == 0
    assert q3.acceptDelayMs("C", 0) == 1000
    # Never more than one window (Kafka's maxThrottleTimeMs).
    assert max(q3.acceptDelayMs("C", 0) for _ in range(50)) == 1000
    q3.updateRates(UNLIMITED_RATE, {})
    assert q3.acceptDelayMs("C", 0) == 0


def test_ip_rates_from_client_quotas():
    snapshot = {
        (("ip", "127.0.0.2"),): {"connection_creation_rate": 1.0},
        IP_DEFAULT: {"connection_creation_rate": 5.0},
        (("user", "alice"),): {"producer_byte_rate": 10.0},
    }
    assert ipConnectionRates(snapshot) == ({"127.0.0.2": 1.0}, 5.0)
    assert ipConnectionRates({}) == ({}, float(UNLIMITED_RATE))

    q = quotas(maxRate=UNLIMITED_RATE)
    assert q.ipThrottleMs("A", "127.0.0.2", 0) == 0  # no ip quota: nothing measured
    q.quotasChanged(snapshot)
    assert q.ipThrottleMs("A", "127.0.0.2", 0) == 0
    assert q.ipThrottleMs("A", "127.0.0.2", 0) == 1000
    # A throttled connection is taken back: it does not count again.
    assert q.ipThrottleMs("A", "127.0.0.2", 0) == 1000
    assert q.ipThrottleMs("A", "127.0.0.2", 3000) == 0
    # The default ip entity for every other address.
    assert [q.ipThrottleMs("A", "127.0.0.9", 0) for _ in range(6)][-1] > 0


class FakeReactor(Clock):
    def __init__(self):
        super().__init__()
        self.readers = set()

    def addReader(self, reader):
        self.readers.add(reader)

    def removeReader(self, reader):
        self.readers.discard(reader)


class FakeProcessor:
    def __init__(self):
        self.accepted = []

    def accept(self, sock, listener, host):
        self.accepted.append(sock)


def connect(port, source="127.0.0.1"):
    s = socket.create_connection(("127.0.0.1", port), 5, source_address=(source, 0))
    return s


def test_acceptor_delays_accepts_with_a_timer():
    reactor = FakeReactor()
    q = ConnectionQuotas(1000, 1000, maxRate=2, samples=2, windowSeconds=1,
                         clock=lambda: int(reactor.seconds() * 1000))
    processor = FakeProcessor()
    acceptor = Acceptor(reactor, Listener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"), [processor], q)
    acceptor.startListening()
    clients = [connect(acceptor.port) for _ in range(4)]
    try:
        acceptor.doRead()
        # Two within the rate; the third is held, and nothing more is read.
        assert len(processor.accepted) == 2
        assert acceptor not in reactor.readers
        reactor.advance(0.49)
        assert len(processor.accepted) == 2
        reactor.advance(0.02)
        assert len(processor.accepted) == 3 and acceptor in reactor.readers
        acceptor.doRead()
        assert len(processor.accepted) == 3  # the fourth waits in its turn
        reactor.advance(1.0)
        assert len(processor.accepted) == 4
    finally:
        acceptor.stopListening()
        for s in clients + processor.accepted:
            s.close()


def test_acceptor_closes_ip_throttled_connections_after_the_throttle():
    reactor = FakeReactor()
    q = ConnectionQuotas(1000, 1000, samples=2, windowSeconds=1, clock=lambda: int(reactor.seconds() * 1000))
    q.quotasChanged({(("ip", "127.0.0.3"),): {"connection_creation_rate": 1.0}})
    processor = FakeProcessor()
    acceptor = Acceptor(reactor, Listener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"), [processor], q)
    acceptor.startListening()
    first, second = connect(acceptor.port, "127.0.0.3"), connect(acceptor.port, "127.0.0.3")
    other = connect(acceptor.port, "127.0.0.4")
    try:
        acceptor.doRead()
        assert len(processor.accepted) == 2  # 127.0.0.3's first, and 127.0.0.4's
        assert q.count("127.0.0.3") == 1 and q.count("127.0.0.4") == 1
        second.settimeout(0.2)
        try:
            assert second.recv(1) != b""
        except socket.timeout:
            pass  # still open: closed only once the throttle passed
        reactor.advance(1.0)
        second.settimeout(5)
        assert second.recv(1) == b""
        assert acceptor in reactor.readers  # accepting never stopped
    finally:
        acceptor.stopListening()
        for s in (first, second, other, *processor.accepted):
            s.close()
