"""
Network limits against a real broker: queued.max.request.bytes cannot be
held hostage by one slow sender, and a frame that can never fit is refused
at once.
"""

import struct

import pytest

from tests.rawclient import RawConnection

pytestmark = pytest.mark.integration

POOL = 1 << 20


def test_slow_large_sender_does_not_stall_others(brokerFactory):
    b = brokerFactory({"queued.max.request.bytes": str(POOL)}).start()
    slow = RawConnection(b.port)
    # A frame as large as the whole pool, announced and barely started.
    slow.send(struct.pack(">i", POOL) + b"\x00\x12\x00\x00")
    others = [RawConnection(b.port) for _ in range(3)]
    for _ in range(3):
        for connection in others:
            assert connection.apiVersions().error_code == 0
    # Too large to ever be queued: closed at once, with one line.
    huge = RawConnection(b.port)
    huge.send(struct.pack(">i", POOL + 1) + b"\x00" * 16)
    assert huge.isClosedByPeer()
    assert f"can never fit in queued.max.request.bytes={POOL}" in b.output()
    # The slow sender is still connected, still allowed to finish.
    assert not slow.isClosedByPeer(timeout=0.2)
    assert "Traceback" not in b.output()
