"""
1,000 concurrent connections across 4 Processors, every one answered.
"""

import resource
import selectors
import socket
import struct
import time

import pytest

from tests.unit.fakes import apiVersionsFrame

pytestmark = pytest.mark.integration

CONNECTIONS = 1000


def test_thousand_connections_four_processors(brokerFactory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    b = brokerFactory({"num.network.threads": "4", "num.io.threads": "2"}).start()
    selector = selectors.DefaultSelector()
    sockets = []
    for i in range(CONNECTIONS):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", b.port))
        sockets.append(s)
        selector.register(s, selectors.EVENT_WRITE, i)
    pending = {i: apiVersionsFrame(i + 1) for i in range(CONNECTIONS)}
    received = {i: b"" for i in range(CONNECTIONS)}
    answered = set()
    deadline = time.monotonic() + 60
    while len(answered) < CONNECTIONS and time.monotonic() < deadline:
        for key, events in selector.select(timeout=1):
            i = key.data
            s = key.fileobj
            if events & selectors.EVENT_WRITE and pending.get(i):
                sent = s.send(pending[i])
                pending[i] = pending[i][sent:]
                if not pending[i]:
                    selector.modify(s, selectors.EVENT_READ, i)
            elif events & selectors.EVENT_READ:
                data = s.recv(65536)
                assert data, f"connection {i} closed"
                received[i] += data
                buf = received[i]
                if len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">i", buf[:4])[0]:
                    assert struct.unpack(">i", buf[4:8])[0] == i + 1
                    answered.add(i)
                    selector.unregister(s)
    for s in sockets:
        s.close()
    assert len(answered) == CONNECTIONS
    assert "Refused" not in b.output()
