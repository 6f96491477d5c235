"""
The C load generator's engines (epoll, and io_uring with C{-u}) count
the same answers the same way -- whole ones only, a failed Produce apart
-- however the answer arrives (in pieces, longer than the part kept), and
its answer-only server (C{loadgen -s}, C{bench twobrokers --floor})
answers a Produce request with error code 0.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time

import pytest

from bench import loadgen
from bench.twobrokers import generatorOptions
from kafkatwist.errors import ErrorCode
from tests.unit.test_bench_loadgen import Answering, produceResponse

ENGINES = {"epoll": [], "uring": ["-u", "-w", "2"]}


@pytest.fixture
def generator(tmp_path):
    binary = loadgen.compiled(str(tmp_path))
    if binary is None:
        pytest.skip("no C compiler")
    return binary


@pytest.fixture
def frame(tmp_path):
    path = tmp_path / "frame"
    path.write_bytes(b"\x00\x00\x00\x08\x00\x00\x00\x09\x00\x00\x00\x07")
    return str(path)


class InPieces(Answering):
    """
    Answers with C{answer} split into C{pieces} sends, a moment apart (so
    each is a segment of its own).
    """

    def __init__(self, answer: bytes, pieces: int) -> None:
        self.pieces = pieces
        super().__init__(answer)

    def serve(self, sock) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buffer = b""
        step = max(1, len(self.answer) // self.pieces)
        with sock:
            while True:
                try:
                    data = sock.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack(">i", buffer[:4])[0]:
                    buffer = buffer[4 + struct.unpack(">i", buffer[:4])[0]:]
                    for at in range(0, len(self.answer), step):
                        sock.sendall(self.answer[at:at + step])
                        time.sleep(0.001)


def run(generator, engine: str, targets, seconds: float = 0.5) -> dict:
    process = loadgen.startTargets(generator, "127.0.0.1", targets, 0.2, seconds, checkProduce=True,
                                   options=ENGINES[engine])
    return loadgen.finish(process, timeout=30)


def engineRan(result: dict, engine: str) -> None:
    if engine == "uring" and result["engine"] != "io_uring":
        pytest.skip("the kernel refuses io_uring here (the generator fell back to epoll)")


@pytest.mark.parametrize("engine", ENGINES)
def test_failed_answers_are_counted_apart_by_either_engine(generator, frame, engine):
    ok = Answering(produceResponse(ErrorCode.none))
    notLeader = Answering(produceResponse(ErrorCode.not_leader_or_follower))
    garbage = Answering(b"\x00\x00\x00\x05\x00\x00\x00\x01\x00")
    try:
        result = run(generator, engine, [(ok.port, frame)] * 2 + [(notLeader.port, frame), (garbage.port, frame)])
    finally:
        for server in (ok, notLeader, garbage):
            server.close()
    engineRan(result, engine)
    ports = result["ports"]
    assert ports[str(ok.port)]["responses"] > 0
    assert ports[str(ok.port)]["failed"] == ports[str(ok.port)]["unparsed"] == 0
    assert ports[str(notLeader.port)]["responses"] == 0
    assert ports[str(notLeader.port)]["failed"] > 0
    assert ports[str(garbage.port)]["responses"] == 0
    assert ports[str(garbage.port)]["unparsed"] > 0
    assert result["responses"] == ports[str(ok.port)]["responses"]
    assert result["error_codes"] == {"6": ports[str(notLeader.port)]["failed"]}
    assert result["answered_connections"] == 4
    assert result["errors"] == result["closed_by_peer"] == 0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("padding", [0, 3000], ids=["short", "longer-than-kept"])
def test_an_answer_in_pieces_counts_once(generator, frame, engine, padding):
    """
    An answer arriving in several segments (the size prefix itself split),
    and one longer than the 512 bytes the generator keeps, is one answer,
    read to its end (the next one is not mistaken for it).
    """
    answer = produceResponse(ErrorCode.none)
    if padding:
        # trailing bytes past the Produce body: a longer answer whose error code is still read
        body = answer[4:] + b"\x00" * padding
        answer = struct.pack(">i", len(body)) + body
    server = InPieces(answer, pieces=len(answer) if not padding else 7)
    try:
        result = run(generator, engine, [(server.port, frame)] * 2, seconds=1.0)
    finally:
        server.close()
    engineRan(result, engine)
    assert result["responses"] > 0
    assert result["failed_responses"] == result["unparsed_responses"] == 0
    assert result["errors"] == result["closed_by_peer"] == 0
    assert result["answered_connections"] == 2


@pytest.mark.parametrize("engine", ENGINES)
def test_the_answer_only_server_answers_produce_with_no_error(generator, frame, engine):
    server = subprocess.Popen(generator + ["-s", "0", "30", "54"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        result = run(generator, engine, [(port, frame)] * 4)
    finally:
        server.kill()
        server.wait()
    engineRan(result, engine)
    assert result["responses"] > 0
    assert result["failed_responses"] == result["unparsed_responses"] == 0
    assert result["answered_connections"] == 4
    assert result["cpu_user_s"] >= 0 and result["cpu_sys_s"] >= 0


def test_generator_options():
    assert generatorOptions("epoll,uring,uring:8,epoll+batch") == {
        "epoll": [], "uring": ["-u", "-w", "1"], "uring:8": ["-u", "-w", "8"], "epoll+batch": ["-B"]}
    with pytest.raises(SystemExit):
        generatorOptions("kqueue")


def test_the_summary_gives_the_ceiling_and_flags_a_ratio_above_it():
    """
    2 b1/(b2 + g): one broker at 25 µs a record, two at 27.5 summed, the
    generator 6 -> 1.49x; a measured ratio well above it (one broker's
    runs short of CPU, the machine busy with other work) is said to be.
    """
    from bench.twobrokers import summarize

    def run(rate, b, g, others=0.0):
        return {"rate": rate, "b_us": b, "g_us": g, "others": others}

    quiet = summarize(("", ""), {"one": [run(40_000, 25.0, 7.0)], "two": [run(58_000, 27.5, 6.0)]})
    assert "**1.45x**" in quiet[0]
    assert "ceiling 2 b1/(b2 + g) = 1.49x" in quiet[1]
    assert len(quiet) == 2
    loaded = summarize(("", ""), {"one": [run(28_000, 25.0, 7.0, others=1.0)], "two": [run(50_000, 27.5, 6.0)]})
    assert "above the ceiling" in loaded[2] and "1.00 of a core" in loaded[2]


def test_the_answer_only_servers_get_no_ceiling():
    from bench.twobrokers import summarize

    def run(rate, b, g):
        return {"rate": rate, "b_us": b, "g_us": g, "others": 1.0}

    lines = summarize(("floor", ""), {"one": [run(60_000, 5.4, 5.5)], "two": [run(90_000, 6.4, 6.0)]}, bounded=False)
    assert len(lines) == 2 and "ceiling" not in lines[1] and "b1 5.4 µs" in lines[1]
