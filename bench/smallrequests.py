"""
Broker CPU per small request (issue 29), side by side in one run: the C
load generator (L{bench.loadgen}, C{loadgen -m}) ping-pongs one
pre-encoded request on each of C{--connections} connections, and each
broker's CPU over the measuring window is divided by the requests answered.

    python -m bench smallrequests [--reference kafkatwist:PATH] [--tansu]
        [--request produce|fetch|apiversions|metadata] [--connections 32]
        [--partitions 8] [--seconds 8] [--warmup 2] [--rounds 3]

The requests (L{bench.instructions}): C{produce}, one record of 100 bytes
in a v2 batch, Produce v9, acks=1, connection k to partition k mod
C{--partitions} (every response's error code is checked); C{fetch}, Fetch
v12 of one partition from offset 0, which holds one such batch; C{apiversions}
(v3) and C{metadata} (v12, the topic by name).  The brokers run at once and
take turns, in a different order each round, so the machine's drift falls
on all of them alike; the ratios to the first broker are per round.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

from bench import loadgen
from bench.brokers import processCpuSeconds, startBroker
from bench.instructions import _sendOnce, apiVersionsFrame, fetchFrame, metadataFrame, produceFrame
from bench.throughput import createTopic

TOPIC = "small"


def frameFiles(directory: str, request: str, connections: int, partitions: int) -> list[str]:
    paths = []
    for k in range(connections):
        p = k % partitions
        if request == "produce":
            frame = produceFrame(1, TOPIC, p)
        elif request == "fetch":
            frame = fetchFrame(1, TOPIC, p)
        elif request == "apiversions":
            frame = apiVersionsFrame()
        else:
            frame = metadataFrame(TOPIC)
        path = os.path.join(directory, f"{request}-{k}.frame")
        with open(path, "wb") as f:
            f.write(frame)
        paths.append(path)
    return paths


def measure(generator, port: int, pid: int, paths: list[str], warmup: float, seconds: float,
            checkProduce: bool) -> tuple[float, float]:
    """
    @return: (broker CPU µs per request, requests/s) over the window.
    """
    process = loadgen.startTargets(generator, "127.0.0.1", [(port, p) for p in paths], warmup, seconds,
                                   checkProduce=checkProduce)
    try:
        time.sleep(warmup)
        before = processCpuSeconds(pid)
        time.sleep(seconds)
        after = processCpuSeconds(pid)
        result = loadgen.finish(process, timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    failed = result.get("failed_responses", 0) + result.get("unparsed_responses", 0)
    if failed:
        raise RuntimeError(f"{failed} responses failed or did not parse")
    responses = result["responses"]
    return (after - before) / max(responses, 1) * 1e6, responses / result["seconds"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench smallrequests", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", action="append", default=[], help="kafkatwist:PATH (another source tree)")
    parser.add_argument("--tansu", action="store_true", help="Tansu (in memory) beside them")
    parser.add_argument("--request", choices=("produce", "fetch", "apiversions", "metadata"), default="produce")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    generator = None
    names = ["kafkatwist"] + args.reference + (["tansu"] if args.tansu else [])
    with tempfile.TemporaryDirectory(prefix="kt-smallreq-") as directory, contextlib.ExitStack() as stack:
        generator = loadgen.compiled(directory)
        if generator is None:
            parser.error("needs a C compiler for bench/loadgen.c")
        brokers = []
        for name in names:
            broker = stack.enter_context(startBroker(name, directory))
            createTopic(f"127.0.0.1:{broker.port}", TOPIC, args.partitions)
            if args.request == "fetch":
                for p in range(args.partitions):
                    _sendOnce(broker.port, produceFrame(1, TOPIC, p))
            brokers.append(broker)
        paths = frameFiles(directory, args.request, args.connections, args.partitions)
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = brokers[r % len(brokers):] + brokers[: r % len(brokers)]
            for broker in order:
                cpu, rate = measure(generator, broker.port, broker.process.pid, paths, args.warmup,
                                    args.seconds, args.request == "produce")
                rows[broker.name].append((cpu, rate))
                print(f"round {r + 1} {broker.name}: {cpu:.1f} µs broker CPU per {args.request} request, "
                      f"{rate:,.0f} requests/s", flush=True)
    first = names[0]
    print(f"\n{args.request}, {args.connections} connections, {args.partitions} partitions, "
          f"{args.rounds} rounds of {args.seconds:g} s; load {os.getloadavg()[0]:.1f}")
    for name in names:
        cpus = [c for c, _ in rows[name]]
        ratios = [c / f for (c, _), (f, _) in zip(rows[name], rows[first])]
        print(f"  {name}: median {statistics.median(cpus):.1f} µs/request (rounds: "
              + ", ".join(f"{c:.1f}" for c in cpus) + f"); {name}/{first} per round: "
              + ", ".join(f"{x:.2f}" for x in ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
