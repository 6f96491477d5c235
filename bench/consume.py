"""
Consume throughput and broker CPU per record, two kafkatwist trees side by side.

    python -m bench consume [--reference kafkatwist:PATH] [--records 1000000]
        [--partitions 1,8] [--rounds 5]

Each broker gets the same records once (confluent-kafka, 100-byte records,
acks=1, as C{bench throughput} produces them); then fresh consumers read
them all from offset 0, the brokers alternated round by round (A B, B A,
...), so the machine's drift hits both alike.  The consumer only counts
what C{consume()} returns (no per-message Python work), so the broker's
fetch path, not the client's loop, sets the pace: about 1 M records/s here
against ~0.2 M/s for C{bench throughput}'s consumer.

C{--raw}: the broker alone sets the pace.  Each broker's partition is
filled with the same batches (840 records each, C{bench instructions}'s
Produce); the project's C load generator then ping-pongs one pre-encoded
consumer Fetch (v11, sessionless, max_wait 0,
1 MiB per partition, as librdkafka asks) of a partition holding the
records, over C{--connections} connections: every answer is the same
~1 MiB of whole batches, so Fetches answered per second times records per
answer is the rate a consumer that parses nothing would get.  Broker CPU
per record from /proc, as above.

Prints, per broker and layout, each round's msgs/s and broker CPU-seconds
per million records (user + system, from /proc), their medians, and the
median of the round-by-round ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid

from bench.brokers import startBroker
from bench.throughput import benchConsumer
from bench.throughput import confluentProduce, createTopic


def leanConsume(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    """
    Read C{records} from offset 0 of every partition, counting only.
    """
    consumer = benchConsumer(bootstrap, topic, partitions)
    seen = 0
    deadline = time.monotonic() + 300
    try:
        while seen < records and time.monotonic() < deadline:
            batch = consumer.consume(100_000, 1.0)
            if batch:
                seen += len(batch)
                last = batch[-1].error()
                if last is not None and not last.retriable() and last.code() != -191:
                    raise RuntimeError(f"consume: {last}")
    finally:
        consumer.close()
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records}")


def fetchFrame(topic: str, partitionMaxBytes: int = 1 << 20, maxBytes: int = 52_428_800) -> bytes:
    """
    A consumer's sessionless Fetch v11 of partition 0 from offset 0,
    max_wait 0, min_bytes 1, read_uncommitted, librdkafka's default limits.
    """
    import datetime

    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.codec import encodeRequestFrame
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(1, 11)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = make(
        cls, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
        max_bytes=maxBytes, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(make(Topic, topic=topic, partitions=(make(
            Partition, partition=0, current_leader_epoch=-1, fetch_offset=0,
            log_start_offset=-1, partition_max_bytes=partitionMaxBytes,
        ),)),),
        forgotten_topics_data=(), rack_id="",
    )
    return encodeRequestFrame(1, 11, 1, "bench", request)


def rawRun(generator, broker, frameFile: str, connections: int, seconds: float) -> tuple[float, float, dict]:
    """
    @return: Fetch responses per second, broker CPU-seconds per response,
        the generator's result.
    """
    from bench import loadgen

    cpu = broker.cpuSeconds()
    result = loadgen.run(generator, "127.0.0.1", broker.port, connections, 0.5, seconds, frameFile)
    cpu = broker.cpuSeconds() - cpu
    responses = result["responses"]
    window = result.get("seconds", seconds)
    return responses / window, cpu / max(1, responses), result


def recordsPerAnswer(bootstrap: str, topic: str, frame: bytes) -> int:
    """
    The records one answer to C{frame} carries (batch headers' counts).
    """
    import socket
    import struct

    from kafkatwist.protocol.batch import iterBatchHeaders

    with socket.create_connection(tuple(bootstrap.rsplit(":", 1)[:1]) + (int(bootstrap.rsplit(":", 1)[1]),)) as s:
        s.sendall(frame)

        def exactly(n):
            out = bytearray()
            while len(out) < n:
                chunk = s.recv(n - len(out))
                if not chunk:
                    raise ConnectionError("closed")
                out += chunk
            return bytes(out)

        body = exactly(struct.unpack(">i", exactly(4))[0])
    # v11 response: correlation id, throttle, error, session, [topic: name,
    # [partition: index, error, hw, lso, log start, aborted (null: -1),
    # preferred replica, records]]
    offset = 4 + 4 + 2 + 4 + 4
    (nameLength,) = struct.unpack_from(">h", body, offset)
    offset += 2 + nameLength + 4 + 4 + 2 + 8 + 8 + 8
    (aborted,) = struct.unpack_from(">i", body, offset)
    offset += 4 + max(0, aborted) * 16 + 4
    (size,) = struct.unpack_from(">i", body, offset)
    records = memoryview(body)[offset + 4:offset + 4 + size]
    return sum(header.lastOffsetDelta + 1 for _, header in iterBatchHeaders(records))


def rawMain(args, names) -> int:
    from bench import loadgen
    from bench.instructions import produceFrame

    generator, kind = loadgen.command()
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="kt-consume-") as directory:
        with contextlib.ExitStack() as stack:
            up = {n: stack.enter_context(startBroker(n, directory)) for n in names}
            perAnswer = {}
            fillFile = os.path.join(directory, "fill")
            for n in names:
                topic = f"raw-{uuid.uuid4().hex[:8]}"
                createTopic(up[n].bootstrap, topic, 1)
                # The same layout in both logs: batches of 840 records, as
                # bench instructions appends them (a real producer's batch
                # sizes follow the load, and so would the records an answer
                # of 1 MiB holds).
                with open(fillFile, "wb") as f:
                    f.write(produceFrame(840, topic))
                loadgen.run(generator, "127.0.0.1", up[n].port, 1, 0.0, 2.0, fillFile)
                frame = fetchFrame(topic)
                perAnswer[n] = recordsPerAnswer(up[n].bootstrap, topic, frame)
                with open(os.path.join(directory, f"fetch-{n.replace('/', '_')}"), "wb") as f:
                    f.write(frame)
            for round_ in range(args.rounds):
                order = names if round_ % 2 == 0 else names[::-1]
                for n in order:
                    rate, cpu, result = rawRun(
                        generator, up[n], os.path.join(directory, f"fetch-{n.replace('/', '_')}"),
                        args.connections, args.seconds,
                    )
                    records = rate * perAnswer[n]
                    perMillion = cpu / perAnswer[n] * 1e6
                    figures.setdefault(n, []).append((records, perMillion, rate))
                    print(f"round {round_ + 1} {n}: {rate:,.0f} fetches/s x {perAnswer[n]:,} records = "
                          f"{records:,.0f} records/s, {perMillion:.4f} CPU-s/M, latency p50 "
                          f"{result.get('p50_us', '?')} us p99 {result.get('p99_us', '?')} us",
                          file=sys.stderr, flush=True)
    print(f"\nraw Fetch ping-pong ({kind} load generator), {args.connections} connection(s), "
          f"{args.rounds} rounds of {args.seconds:.0f} s alternated; medians (min-max)")
    for n in names:
        rates = [r for r, _, _ in figures[n]]
        cpus = [c for _, c, _ in figures[n]]
        print(f"{n:<40} {statistics.median(rates):>12,.0f} records/s ({min(rates):,.0f}-{max(rates):,.0f}), "
              f"{statistics.median(cpus):.4f} CPU-s/M ({min(cpus):.4f}-{max(cpus):.4f})")
    if len(names) == 2:
        a, b = figures[names[0]], figures[names[1]]
        print(f"ratio this/reference (median of rounds): throughput "
              f"{statistics.median(x[0] / y[0] for x, y in zip(a, b)):.2f}x, CPU per record "
              f"{statistics.median(x[1] / y[1] for x, y in zip(a, b)):.2f}x")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench consume", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=None, help="kafkatwist:PATH, another source tree")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--raw", action="store_true", help="raw Fetch ping-pong from the C load generator")
    parser.add_argument("--connections", type=int, default=1, help="--raw: connections")
    parser.add_argument("--seconds", type=float, default=5.0, help="--raw: seconds a round")
    args = parser.parse_args(argv)
    names = ["kafkatwist"] + ([args.reference] if args.reference else [])
    if args.raw:
        return rawMain(args, names)
    layouts = [int(p) for p in args.partitions.split(",")]
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="kt-consume-") as directory:
        with contextlib.ExitStack() as stack:
            up = {n: stack.enter_context(startBroker(n, directory)) for n in names}
            topics = {}
            for n in names:
                for partitions in layouts:
                    topic = f"c{partitions}-{uuid.uuid4().hex[:8]}"
                    createTopic(up[n].bootstrap, topic, partitions)
                    confluentProduce(up[n].bootstrap, topic, args.records, partitions)
                    topics[n, partitions] = topic
            for round_ in range(args.rounds):
                order = names if round_ % 2 == 0 else names[::-1]
                for partitions in layouts:
                    for n in order:
                        broker = up[n]
                        cpu = broker.cpuSeconds()
                        started = time.perf_counter()
                        leanConsume(broker.bootstrap, topics[n, partitions], args.records, partitions)
                        elapsed = time.perf_counter() - started
                        cpu = broker.cpuSeconds() - cpu
                        rate, perMillion = args.records / elapsed, cpu / args.records * 1e6
                        figures.setdefault((n, partitions), []).append((rate, perMillion))
                        print(f"round {round_ + 1} {n} {partitions} partitions: "
                              f"{rate:,.0f} msgs/s, {perMillion:.3f} CPU-s/M", file=sys.stderr, flush=True)
    print(f"\n{args.records:,} records of 100 B per run, {args.rounds} rounds alternated; medians (min-max)")
    for partitions in layouts:
        for n in names:
            rates = [r for r, _ in figures[n, partitions]]
            cpus = [c for _, c in figures[n, partitions]]
            print(f"{n:<40} {partitions} partitions: {statistics.median(rates):>10,.0f} msgs/s "
                  f"({min(rates):,.0f}-{max(rates):,.0f}), {statistics.median(cpus):.3f} CPU-s/M "
                  f"({min(cpus):.3f}-{max(cpus):.3f})")
        if len(names) == 2:
            a, b = figures[names[0], partitions], figures[names[1], partitions]
            rateRatio = statistics.median(x[0] / y[0] for x, y in zip(a, b))
            cpuRatio = statistics.median(x[1] / y[1] if y[1] else float("nan") for x, y in zip(a, b))
            print(f"{'ratio this/reference (median of rounds)':<40} {partitions} partitions: "
                  f"throughput {rateRatio:.2f}x, CPU per record {cpuRatio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
