"""
Connection scale: N idle PLAINTEXT connections held open (RSS per
connection), and a burst of N connections each doing ApiVersions +
Metadata (all answered, no errors).

    python -m bench connections [--idle 10000] [--burst 1000] [--broker kafkatwist|tansu]
"""

from __future__ import annotations

import argparse
import resource
import selectors
import socket
import struct
import sys
import tempfile
import time

from bench.brokers import startBroker
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import encodeRequestFrame
from kafkatwist.protocol.entities import make


def _frames() -> bytes:
    apiVersions = encodeRequestFrame(18, 3, 1, "bench", make(requestType(18, 3), client_software_name="b", client_software_version="1"))
    metadata = encodeRequestFrame(
        3, 9, 2, "bench",
        make(requestType(3, 9), topics=None, allow_auto_topic_creation=False,
             include_cluster_authorized_operations=False, include_topic_authorized_operations=False),
    )
    return apiVersions + metadata


def raiseLimit(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n + 1000)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def holdIdle(broker, n: int, settle: float = 2.0) -> dict:
    raiseLimit(n)
    before = broker.rssBytes()
    sockets = []
    started = time.monotonic()
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", broker.port))
        sockets.append(s)
        if i % 500 == 499:
            time.sleep(0.05)
    time.sleep(settle)
    # Prove they are all alive: one ApiVersions on a sample.
    after = broker.rssBytes()
    alive = 0
    for s in sockets[:: max(1, n // 50)]:
        s.setblocking(True)
        s.settimeout(10)
        s.sendall(_frames()[: struct.unpack(">i", _frames()[:4])[0] + 4])
        size = struct.unpack(">i", _recvExactly(s, 4))[0]
        _recvExactly(s, size)
        alive += 1
    for s in sockets:
        s.close()
    return {
        "connections": n,
        "rss_before_mb": before / 1e6,
        "rss_after_mb": after / 1e6,
        "bytes_per_connection": (after - before) / n,
        "sample_answered": alive,
        "seconds": time.monotonic() - started,
    }


def _recvExactly(s, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def burst(broker, n: int, timeout: float = 60.0) -> dict:
    raiseLimit(n)
    frames = _frames()
    selector = selectors.DefaultSelector()
    pending, received, done, errors = {}, {}, set(), 0
    started = time.monotonic()
    for i in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", broker.port))
        selector.register(s, selectors.EVENT_WRITE, i)
        pending[i] = frames
        received[i] = b""
    deadline = started + timeout
    latencies = []
    while len(done) + errors < n and time.monotonic() < deadline:
        for key, events in selector.select(timeout=1):
            i, s = key.data, key.fileobj
            try:
                if events & selectors.EVENT_WRITE:
                    sent = s.send(pending[i])
                    pending[i] = pending[i][sent:]
                    if not pending[i]:
                        selector.modify(s, selectors.EVENT_READ, i)
                    continue
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                errors += 1
                selector.unregister(s)
                s.close()
                continue
            received[i] += data
            buf = received[i]
            # two responses expected
            if len(buf) >= 4:
                first = 4 + struct.unpack(">i", buf[:4])[0]
                if len(buf) >= first + 4 and len(buf) >= first + 4 + struct.unpack(">i", buf[first:first + 4])[0]:
                    done.add(i)
                    latencies.append(time.monotonic() - started)
                    selector.unregister(s)
                    s.close()
    latencies.sort()
    return {
        "connections": n,
        "answered": len(done),
        "errors": errors + (n - len(done) - errors),
        "seconds": time.monotonic() - started,
        "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else None,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else None,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench connections")
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=1_000)
    parser.add_argument("--broker", default="kafkatwist")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kt-conn-") as directory:
        for name in args.broker.split(","):
            with startBroker(name, directory) as broker:
                idle = holdIdle(broker, args.idle)
                print(f"{name}: {idle['connections']} idle connections: "
                      f"{idle['bytes_per_connection']:.0f} bytes RSS each "
                      f"({idle['rss_before_mb']:.1f} -> {idle['rss_after_mb']:.1f} MB), "
                      f"{idle['sample_answered']} sampled still answered")
                time.sleep(1)
                b = burst(broker, args.burst)
                print(f"{name}: burst of {b['connections']} ApiVersions+Metadata: "
                      f"{b['answered']} answered, {b['errors']} errors, "
                      f"p50 {b['p50_ms']:.0f} ms, p99 {b['p99_ms']:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
