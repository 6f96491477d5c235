"""
The load generator: N connections, each ping-ponging one pre-encoded request
frame, counting whole responses and their latency.

The real one is C (C{loadgen.c}, compiled at run time with C{cc}) so that it
is never the bottleneck; without a C compiler this module's Python
fallback (one process, C{selectors}, same arguments, same JSON output) runs
in its own process instead -- slower, and the table says so.

    python -m bench.loadgen HOST PORT CONNECTIONS WARMUP_SECONDS SECONDS FRAME_FILE

The C one also drives several brokers with a frame per connection and checks
Produce answers' error codes (L{startTargets}); the fallback does not.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loadgen.c")

_HIST_US = 2_000_000


def compiled(workdir: str) -> list[str] | None:
    """
    Compile C{loadgen.c} into C{workdir}.

    @return: the command prefix to run it, or C{None} if there is no C
        compiler (or it failed).
    """
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    binary = os.path.join(workdir, "loadgen")
    result = subprocess.run(
        [cc, "-O2", "-o", binary, SOURCE], capture_output=True, text=True, timeout=120
    )
    if result.returncode != 0:
        sys.stderr.write(f"bench: cc failed, using the Python load generator:\n{result.stderr}\n")
        return None
    return [binary]


def command() -> tuple[list[str], str]:
    """
    @return: (command prefix, kind) -- the C generator if it compiles, else
        the Python fallback.  The binary lives in a temporary directory kept
        for the life of the process.
    """
    workdir = tempfile.mkdtemp(prefix="kafkatwist-bench-")
    prefix = compiled(workdir)
    if prefix is not None:
        return prefix, "C/epoll"
    return [sys.executable, "-m", "bench.loadgen"], "Python/selectors"


def run(prefix: list[str], host: str, port: int, connections: int, warmup: float,
        seconds: float, frameFile: str) -> dict:
    """
    Run one load and return its JSON result, plus C{cpu_seconds} the
    generator used.
    """
    args = prefix + [host, str(port), str(connections), str(warmup), str(seconds), frameFile]
    before = os.times()
    result = subprocess.run(args, capture_output=True, text=True, timeout=warmup + seconds + 60)
    after = os.times()
    if result.returncode != 0:
        raise RuntimeError(f"load generator failed ({result.returncode}): {result.stderr.strip()}")
    data = json.loads(result.stdout)
    data["cpu_seconds"] = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return data


def startTargets(binary: list[str], host: str, targets: list[tuple[int, str]], warmup: float,
                 seconds: float, checkProduce: bool = False, options: list[str] = ()) -> subprocess.Popen:
    """
    Start the C generator with one connection per C{(port, frameFile)} of
    C{targets} (C{loadgen -m}); with C{checkProduce}, responses are read as
    Produce responses and one whose error code is not 0 is counted apart
    (C{failed_responses}, C{error_codes}), never as an answer.  The Python
    fallback has no such mode.  C{options}: the C generator's others
    (C{-u}: io_uring; C{-w N}: woken once N answers are ready).  L{finish}
    collects the result.
    """
    args = binary + ["-m"] + (["-p"] if checkProduce else []) + list(options) + [host, str(warmup), str(seconds)]
    args += [f"{port}:{frameFile}" for port, frameFile in targets]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float) -> dict:
    """
    @return: the JSON result of a generator started by L{startTargets}.
    """
    out, err = process.communicate(timeout=timeout)
    if process.returncode != 0:
        raise RuntimeError(f"load generator failed ({process.returncode}): {err.strip()}")
    return json.loads(out)


# -- the Python fallback -------------------------------------------------------


class _Conn:
    __slots__ = ("sock", "out", "head", "left", "sentAt", "answered", "dead")

    def __init__(self, sock) -> None:
        self.sock = sock
        self.out = None
        self.head = b""
        self.left = -1
        self.sentAt = 0
        self.answered = 0
        self.dead = False


def _main(argv: list[str]) -> int:
    if len(argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    host, port, nconn, warmup, seconds, frameFile = argv
    port, nconn, warmup, seconds = int(port), int(nconn), float(warmup), float(seconds)
    if not host.startswith("127."):
        sys.stderr.write("loopback only\n")
        return 2
    with open(frameFile, "rb") as f:
        frame = f.read()
    hist: dict[int, int] = {}
    counted = errors = closed = connectFailures = 0
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(nconn):
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.connect((host, port))
        except OSError:
            connectFailures += 1
            s.close()
            continue
        s.setblocking(False)
        c = _Conn(s)
        conns.append(c)
    now = time.monotonic_ns
    start = now()
    windowStart = start + int(warmup * 1e9)
    windowEnd = windowStart + int(seconds * 1e9)
    hardEnd = windowEnd + 2_000_000_000

    def send(c: _Conn) -> None:
        try:
            n = c.sock.send(c.out)
        except BlockingIOError:
            n = 0
        except OSError:
            fail(c, False)
            return
        c.out = c.out[n:] if n < len(c.out) else None
        sel.modify(c.sock, selectors.EVENT_WRITE if c.out else selectors.EVENT_READ, c)

    def fail(c: _Conn, peer: bool) -> None:
        nonlocal errors, closed
        if c.dead:
            return
        c.dead = True
        if peer:
            closed += 1
        else:
            errors += 1
        sel.unregister(c.sock)
        c.sock.close()

    def begin(c: _Conn, t: int) -> None:
        c.out = memoryview(frame)
        c.head = b""
        c.left = -1
        c.sentAt = t
        send(c)

    for c in conns:
        sel.register(c.sock, selectors.EVENT_WRITE, c)
        begin(c, start)
    while True:
        t = now()
        if t >= hardEnd:
            break
        if t >= windowEnd and not any(
            not c.dead and (c.out is not None or c.left != -1 or c.head) for c in conns
        ):
            break
        for key, events in sel.select(0.05):
            c = key.data
            if c.dead:
                continue
            if c.out is not None:
                send(c)
                continue
            try:
                data = c.sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                fail(c, False)
                continue
            if not data:
                fail(c, True)
                continue
            i = 0
            while i < len(data):
                if c.left < 0:
                    need = 4 - len(c.head)
                    c.head += data[i : i + need]
                    i += need
                    if len(c.head) == 4:
                        c.left = struct.unpack(">i", c.head)[0]
                    continue
                take = min(c.left, len(data) - i)
                c.left -= take
                i += take
                if c.left == 0:
                    t = now()
                    c.answered += 1
                    if windowStart <= t < windowEnd:
                        us = (t - c.sentAt) // 1000
                        hist[us] = hist.get(us, 0) + 1
                        counted += 1
                    if t < windowEnd:
                        begin(c, t)
                    else:
                        c.head, c.left = b"", -1
                    break
    total = counted
    pct = {}
    seen = 0
    for us in sorted(hist):
        seen += hist[us]
        for name, q in (("p50_us", 0.50), ("p99_us", 0.99), ("p999_us", 0.999)):
            if name not in pct and seen >= total * q:
                pct[name] = us
    print(
        json.dumps(
            {
                "responses": counted,
                "seconds": seconds,
                "p50_us": pct.get("p50_us", 0),
                "p99_us": pct.get("p99_us", 0),
                "p999_us": pct.get("p999_us", 0),
                "over_2s": sum(v for k, v in hist.items() if k >= _HIST_US),
                "errors": errors,
                "closed_by_peer": closed,
                "connect_failures": connectFailures,
                "connections": nconn,
                "answered_connections": sum(1 for c in conns if c.answered),
                "frame_bytes": len(frame),
            }
        )
    )
    for c in conns:
        if not c.dead:
            c.sock.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
