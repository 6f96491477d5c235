"""
Instructions per request, counted (issue 12's A/B): the broker runs under
valgrind's callgrind, one connection ping-pongs one pre-encoded Produce
request (v9, one partition, one batch of N 100-byte records, as a producer
batches them), and the user-space instructions every broker thread executed
while it did are divided by the requests answered.

    python -m bench instructions [--reference kafkatwist:PATH] [--records 840]
        [--seconds 30] [--request produce|fetch|apiversions|metadata|connect]
        [--idempotent] [--python-driver]

C{--request} chooses the frame (issue 29's small requests): C{produce} (the
default, above), C{fetch} (Fetch v12 of one partition from offset 0, which
holds one batch of C{--records} records: the same small batch each time),
C{apiversions} (v3), C{metadata} (v12, the one topic by name), or
C{connect}: the pair a client sends on every connect, ApiVersions and
Metadata, each counted on its own and added.  C{--idempotent}: the Produce
batches are an idempotent producer's, each the next in order (its sequence
follows the last), as a producer sends them; since the C generator resends
one frame (a retry, answered as a duplicate), these are sent by this process
over one connection (C{--python-driver} sends a plain run the same way, for
a like-for-like comparison).

Unlike CPU seconds, the count does not move with the load other processes
put on the machine (two runs of one tree agree within ~1 %), so a change of a
few percent shows.  What it cannot see: the kernel's share (about half of a
Produce's CPU here; count syscalls with C{strace -c -f} for that) and how fast
the instructions run (a memcpy's wide moves count like any other instruction).
Each tree takes about a minute; callgrind slows the broker ~50 times.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench import loadgen
from bench.brokers import TWISTD, _waitForPort, freePort, terminate
from bench.throughput import createTopic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TOTAL = re.compile(r"([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS")


def produceFrame(records: int, topic: str = "t", partition: int = 0, sequence: int | None = None) -> bytes:
    """
    A Produce v9 request, acks=1, of one batch of C{records} 100-byte
    records, not idempotent (producer id -1): resent as is, it appends again.
    With C{sequence}: the batch of an idempotent producer (id
    L{IDEMPOTENT_PRODUCER}, epoch 0) starting at that sequence.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested
    from kafkatwist.protocol.records import Record, buildBatch

    now = int(time.time() * 1000)
    # A linger of a few milliseconds: timestamp deltas of one byte.
    idempotent = {} if sequence is None else dict(
        producerId=IDEMPOTENT_PRODUCER, producerEpoch=0, baseSequence=sequence
    )
    batch = buildBatch(
        [Record(timestamp=now + i * 5 // records, value=b"x" * 100) for i in range(records)], **idempotent
    )
    cls = requestType(0, 9)
    Topic, Partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    request = make(
        cls, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(make(Topic, name=topic, partition_data=(make(Partition, index=partition, records=batch),)),),
    )
    return encodeRequestFrame(0, 9, 1, "bench", request)


#: the producer id of C{--idempotent}'s batches
IDEMPOTENT_PRODUCER = 4242


def idempotentFrames(records: int):
    """
    Produce frames of one idempotent producer, each the next batch in order
    (sequences 0, N, 2N, ...): the common case of an idempotent append.
    One frame is built; each next one patches its batch's base sequence and
    CRC (so the client sends as fast as it does a plain frame).
    """
    import struct

    from crc32c import crc32c

    template = bytearray(produceFrame(records, sequence=0))
    # The batch ends before the partition's, the topic's and the request's
    # tagged fields; its length field (at 8) gives where it starts.
    end = len(template) - 3
    start = end - 12
    while struct.unpack_from(">i", template, start + 8)[0] != end - start - 12 or template[start + 16] != 2:
        start -= 1
    sequence = 0
    while True:
        frame = bytearray(template)
        struct.pack_into(">i", frame, start + 53, sequence)  # baseSequence
        struct.pack_into(">I", frame, start + 17, crc32c(frame[start + 21:end]))
        yield bytes(frame)
        sequence += records


def pingPong(port: int, frames, warmup: float, seconds: float, counting) -> dict:
    """
    The load from this process (C{--idempotent}, C{--python-driver}): one
    connection sends the next of C{frames} once the last one is answered,
    for C{warmup} seconds, then calls C{counting()} (the count starts) and
    goes on for C{seconds}.  Slower than the C generator, which resends one
    frame, but what is counted is the broker's work per request.  A Produce
    answered with an error stops the run.

    @return: C{{"responses": requests answered while counted}}.
    """
    import socket
    import struct

    def answer(sock):
        got = b""
        while len(got) < 4 or len(got) < 4 + struct.unpack(">i", got[:4])[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the broker closed the connection")
            got += chunk
        return got

    counted = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for phase, length in (("warm", warmup), ("counted", seconds)):
            if phase == "counted":
                counting()
            end = time.monotonic() + length
            while time.monotonic() < end:
                frame = next(frames)
                sock.sendall(frame)
                out = answer(sock)
                if frame[4:6] == b"\x00\x00":  # a Produce: its one partition's error code
                    # size, correlation id, tagged fields, one topic, its name, one partition, its index
                    at = 4 + 4 + 1 + 1 + 1 + 1 + 1 + 4
                    error = struct.unpack_from(">h", out, at)[0]
                    if error:
                        raise RuntimeError(f"Produce answered error {error}")
                counted += phase == "counted"
    return {"responses": counted}


def fetchFrame(records: int, topic: str = "t", partition: int = 0) -> bytes:
    """
    A Fetch v12 request of one partition from offset 0, min_bytes 1 (never
    parked: the partition holds C{records} records).
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(1, 12)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(Topic(topic=topic, partitions=(
            make(Partition, partition=partition, current_leader_epoch=-1, fetch_offset=0,
                 log_start_offset=-1, partition_max_bytes=1 << 20),
        )),),
        forgotten_topics_data=(), rack_id="",
    )
    return encodeRequestFrame(1, 12, 1, "bench", request)


def apiVersionsFrame() -> bytes:
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame

    cls = requestType(18, 3)
    return encodeRequestFrame(18, 3, 1, "bench", cls(client_software_name="bench", client_software_version="1"))


def metadataFrame(topic: str = "t") -> bytes:
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(3, 12)
    Topic = nested(cls, "MetadataRequestTopic")
    request = make(cls, topics=(make(Topic, name=topic, topic_id=None),), allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)
    return encodeRequestFrame(3, 12, 1, "bench", request)


#: --request -> the frames counted (each on its own, the counts added)
REQUESTS = {
    "produce": ("produce",),
    "fetch": ("fetch",),
    "apiversions": ("apiversions",),
    "metadata": ("metadata",),
    "connect": ("apiversions", "metadata"),
}


def frameFor(kind: str, records: int) -> bytes:
    if kind == "produce":
        return produceFrame(records)
    if kind == "fetch":
        return fetchFrame(records)
    if kind == "apiversions":
        return apiVersionsFrame()
    return metadataFrame()


def _threadTotals(prefix: str) -> list[int]:
    totals = []
    for path in sorted(glob.glob(prefix + ".*-*")):
        out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
        match = _TOTAL.search(out)
        totals.append(int(match.group(1).replace(",", "")) if match else 0)
    return totals


def _sendOnce(port: int, frame: bytes) -> None:
    """
    Send one request frame and read its response.
    """
    import socket
    import struct

    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(frame)
        want, got = 4, b""
        while len(got) < want:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the broker closed the connection")
            got += chunk
            if len(got) >= 4:
                want = 4 + struct.unpack(">i", got[:4])[0]


def count(tree: str, frameFile: str, seconds: float, directory: str, generator: list[str],
          fill: bytes | None = None, frames=None) -> dict:
    """
    Run C{tree}'s broker under callgrind, counting only while the load runs.

    @param fill: a frame sent once before the load (the records a Fetch
        reads).
    @param frames: an iterator of frames sent by this process instead
        (L{pingPong}), in place of the C generator's one frame.
    @return: requests answered and instructions per request, in all and for
        each thread that did any work (largest first).
    """
    port = freePort()
    data = os.path.join(directory, f"data-{port}")
    out = os.path.join(directory, f"callgrind-{port}")
    logPath = os.path.join(directory, f"broker-{port}.log")
    env = dict(os.environ)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    args = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
        f"--callgrind-out-file={out}.%p", sys.executable, TWISTD, "-n", "--pidfile=",
        "--logfile", logPath + ".twistd", "kafkatwist",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dir={data}",
    ]
    with open(logPath, "wb") as log:
        process = subprocess.Popen(args, cwd=directory, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _waitForPort(port, process, 600, logPath)
        createTopic(f"127.0.0.1:{port}", "t", 1)
        if fill is not None:
            _sendOnce(port, fill)
        if frames is not None:
            result = pingPong(port, frames, 3.5, seconds, lambda: subprocess.run(
                ["callgrind_control", "-i", "on", str(process.pid)], capture_output=True, check=True))
        else:
            loadgen.run(generator, "127.0.0.1", port, 1, 0.5, 3, frameFile)  # warm, uncounted
            subprocess.run(["callgrind_control", "-i", "on", str(process.pid)], capture_output=True, check=True)
            result = loadgen.run(generator, "127.0.0.1", port, 1, 0.0, seconds, frameFile)
        subprocess.run(["callgrind_control", "-i", "off", str(process.pid)], capture_output=True, check=True)
        subprocess.run(["callgrind_control", "-d", str(process.pid)], capture_output=True, check=True)
    finally:
        terminate(process)  # the counts are dumped already
    requests = result["responses"]
    threads = sorted((t / requests for t in _threadTotals(f"{out}.{process.pid}") if t), reverse=True)
    return {"requests": requests, "total": sum(threads), "threads": threads}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench instructions", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=None, help="kafkatwist:PATH, another source tree (before/after)")
    parser.add_argument("--records", type=int, default=840, help="records in the request's one batch")
    parser.add_argument("--seconds", type=float, default=30.0, help="counted load per tree")
    parser.add_argument("--request", choices=sorted(REQUESTS), default="produce", help="the request counted")
    parser.add_argument("--idempotent", action="store_true",
                        help="produce: an idempotent producer's batches, each the next in order (sent "
                        "from this process, as with --python-driver)")
    parser.add_argument("--python-driver", action="store_true",
                        help="send the load from this process (one connection, ping-pong) instead of the C "
                        "generator: --idempotent's driver, for a like-for-like plain run")
    args = parser.parse_args(argv)
    if args.idempotent and args.request != "produce":
        parser.error("--idempotent is for --request produce")
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        parser.error("valgrind (callgrind) is needed")
    trees = [("kafkatwist", ROOT)]
    if args.reference:
        if not args.reference.startswith("kafkatwist:"):
            parser.error("reference: kafkatwist:PATH")
        trees.append((args.reference, os.path.abspath(args.reference.split(":", 1)[1])))
    generator, kind = loadgen.command()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kt-instructions-") as directory:
        fill = None
        if args.request == "fetch":
            # The one batch every Fetch reads: produced once, before the load.
            fill = produceFrame(args.records)
        for name, tree in trees:
            total, requests, threads = 0.0, 0, []
            for kind in REQUESTS[args.request]:
                frameFile = os.path.join(directory, f"frame-{kind}")
                with open(frameFile, "wb") as f:
                    f.write(frameFor(kind, args.records))
                frames = None
                if args.idempotent:
                    frames = idempotentFrames(args.records)
                elif args.python_driver:
                    frames = itertools.repeat(frameFor(kind, args.records))
                result = count(tree, frameFile, args.seconds, directory, generator, fill, frames)
                total += result["total"]
                requests += result["requests"]
                threads.append(f"{kind}: " + ", ".join(f"{t / 1000:,.1f}k" for t in result["threads"]))
            rows.append((name, {"total": total}))
            print(f"{name}: {requests} {args.request} requests, {total / 1000:,.1f}k instructions each; "
                  "by thread: " + "; ".join(threads), flush=True)
    if len(rows) == 2:
        print(f"ratio: {rows[0][1]['total'] / rows[1][1]['total']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
