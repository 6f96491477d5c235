"""
Instructions per request, counted (issue 12's A/B): the broker runs under
valgrind's callgrind, one connection ping-pongs one pre-encoded Produce
request (v9, one partition, one batch of N 100-byte records, as a producer
batches them), and the user-space instructions every broker thread executed
while it did are divided by the requests answered.

    python -m bench instructions [--reference kafkatwist:PATH] [--records 840]
        [--seconds 30] [--api produce|fetch]

With C{--api fetch} the request is a consumer's Fetch (v11, as librdkafka
sends it, no session) of one partition from offset 0, max_wait 0,
C{--partition-max-bytes} (1 MiB, librdkafka's default): the partition holds
a few MB of the Produce batches above, appended before counting starts, so
every Fetch answers with the same ~1 MB of whole batches (sent with
C{sendfile}: the kernel's copy is not counted).

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


def produceFrame(records: int, topic: str = "t", partition: int = 0) -> bytes:
    """
    A Produce v9 request, acks=1, of one batch of C{records} 100-byte
    records, not idempotent (producer id -1): resent as is, it appends again.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested
    from kafkatwist.protocol.records import Record, buildBatch

    now = int(time.time() * 1000)
    # A linger of a few milliseconds: timestamp deltas of one byte.
    batch = buildBatch([Record(timestamp=now + i * 5 // records, value=b"x" * 100) for i in range(records)])
    cls = requestType(0, 9)
    Topic, Partition = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    request = make(
        cls, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
        topic_data=(make(Topic, name=topic, partition_data=(make(Partition, index=partition, records=batch),)),),
    )
    return encodeRequestFrame(0, 9, 1, "bench", request)


def fetchFrame(topic: str = "t", partition: int = 0, partitionMaxBytes: int = 1 << 20,
               maxBytes: int = 52_428_800) -> bytes:
    """
    A consumer's sessionless Fetch v11 of one partition from offset 0,
    max_wait 0, min_bytes 1, read_uncommitted: the request librdkafka sends.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(1, 11)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=maxBytes, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(Topic, topic=topic, partitions=(make(
            Partition, partition=partition, current_leader_epoch=-1, fetch_offset=0,
            log_start_offset=-1, partition_max_bytes=partitionMaxBytes,
        ),)),),
        forgotten_topics_data=(), rack_id="",
    )
    return encodeRequestFrame(1, 11, 1, "bench", request)


def _threadTotals(prefix: str) -> list[int]:
    totals = []
    for path in sorted(glob.glob(prefix + ".*-*")):
        out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True).stdout
        match = _TOTAL.search(out)
        totals.append(int(match.group(1).replace(",", "")) if match else 0)
    return totals


def count(tree: str, frameFile: str, seconds: float, directory: str, generator: list[str],
          fillFile: str | None = None) -> dict:
    """
    Run C{tree}'s broker under callgrind, counting only while the load runs.

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
        if fillFile is not None:
            # The records the counted Fetches read (uncounted).
            loadgen.run(generator, "127.0.0.1", port, 1, 0.0, 3, fillFile)
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
    parser.add_argument("--api", choices=("produce", "fetch"), default="produce",
                        help="the request counted: a Produce (default) or a consumer's Fetch")
    parser.add_argument("--partition-max-bytes", type=int, default=1 << 20,
                        help="--api fetch: the Fetch's partition_max_bytes")
    args = parser.parse_args(argv)
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
        frameFile = os.path.join(directory, "frame")
        fillFile = None
        with open(frameFile, "wb") as f:
            f.write(produceFrame(args.records))
        if args.api == "fetch":
            fillFile = os.path.join(directory, "fill")
            os.rename(frameFile, fillFile)
            with open(frameFile, "wb") as f:
                f.write(fetchFrame(partitionMaxBytes=args.partition_max_bytes))
        for name, tree in trees:
            result = count(tree, frameFile, args.seconds, directory, generator, fillFile)
            rows.append((name, result))
            print(f"{name}: {result['requests']} {args.api} requests, {result['total'] / 1000:,.1f}k instructions each; "
                  "by thread: " + ", ".join(f"{t / 1000:,.1f}k" for t in result["threads"]), flush=True)
    if len(rows) == 2:
        print(f"ratio: {rows[0][1]['total'] / rows[1][1]['total']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
