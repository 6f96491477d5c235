"""
The C load generator's several-brokers mode (C{loadgen -m -p}): answers
whose Produce error code is not 0 are counted apart, never as throughput,
and each port's answers are counted on their own.
"""

from __future__ import annotations

import datetime
import socket
import struct
import threading

import pytest

from bench import loadgen
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import responseType
from kafkatwist.protocol.codec import encodeResponseFrame
from kafkatwist.protocol.entities import make, nested


def produceResponse(errorCode: ErrorCode) -> bytes:
    cls = responseType(0, 9)
    Topic, Partition = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    partition = make(Partition, index=3, error_code=errorCode, base_offset=-1, record_errors=())
    body = make(cls, throttle_time=datetime.timedelta(0),
                responses=(make(Topic, name="topic", partition_responses=(partition,)),))
    return b"".join(encodeResponseFrame(0, 9, 1, body))


class Answering:
    """
    A loopback server answering every whole request frame with C{answer}.
    """

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.threads = []
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self.serve, args=(sock,), daemon=True)
            thread.start()

    def serve(self, sock) -> None:
        buffer = b""
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
                    sock.sendall(self.answer)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def generator(tmp_path):
    binary = loadgen.compiled(str(tmp_path))
    if binary is None:
        pytest.skip("no C compiler")
    return binary


def test_failed_produce_answers_are_counted_apart(generator, tmp_path):
    ok = Answering(produceResponse(ErrorCode.none))
    notLeader = Answering(produceResponse(ErrorCode.not_leader_or_follower))
    garbage = Answering(b"\x00\x00\x00\x05\x00\x00\x00\x01\x00")
    frame = tmp_path / "frame"
    frame.write_bytes(b"\x00\x00\x00\x04abcd")
    try:
        targets = [(ok.port, str(frame))] * 2 + [(notLeader.port, str(frame)), (garbage.port, str(frame))]
        process = loadgen.startTargets(generator, "127.0.0.1", targets, 0.2, 0.5, checkProduce=True)
        result = loadgen.finish(process, timeout=30)
    finally:
        for server in (ok, notLeader, garbage):
            server.close()
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
    assert result["cpu_window_s"] >= 0


def test_one_port_form_counts_every_whole_answer(generator, tmp_path):
    """
    The original form (one port, one frame, no check) that bench network
    and bench instructions use.
    """
    server = Answering(produceResponse(ErrorCode.not_leader_or_follower))
    frame = tmp_path / "frame"
    frame.write_bytes(b"\x00\x00\x00\x04abcd")
    try:
        result = loadgen.run(generator, "127.0.0.1", server.port, 3, 0.2, 0.5, str(frame))
    finally:
        server.close()
    assert result["responses"] > 0
    assert result["answered_connections"] == 3
    assert result["errors"] == result["closed_by_peer"] == 0
