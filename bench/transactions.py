"""
Transactions (issue 15): what exactly-once costs.

    python -m bench transactions [--records 1000000] [--partitions 4]
                                 [--fill 1000000] [--reads 5] [--repeats 3] [--quick]

1. Produce.  confluent-kafka, 100-byte values over C{--partitions}
   partitions, acks=all, linger.ms=5: a plain idempotent producer against a
   transactional one that commits every 100 ms (begin, produce for 100 ms,
   commit_transaction, which flushes and waits for EndTxn).  Records per
   second over C{--records} records each; the two alternate, C{--repeats}
   times, the median is reported with the ratio (goal >= 0.8).
2. Fetch.  One topic is filled with C{--fill} records in transactions of
   1,000 records, one in ten of them aborted.  A confluent consumer reads
   it all (to the end offsets) C{--reads} times with
   isolation.level=read_committed, then as often with read_uncommitted,
   alternating, C{--repeats} times; the broker's
   CPU seconds (from /proc) per million records of the log are compared
   (goal: read_committed <= 1.1x).

The machine is shared and noisy: only ratios within one run mean
anything.  Bounded: every wait has a limit; with the defaults the suite
takes about four minutes.  It starts its own broker on loopback under a
temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid

from bench.brokers import processCpuSeconds, startBroker
from bench.throughput import createTopic

VALUE = b"x" * 100
COMMIT_INTERVAL = 0.1
TXN_RECORDS = 1000
ABORT_EVERY = 10


def log(message: str) -> None:
    sys.stderr.write(f"[transactions] {message}\n")
    sys.stderr.flush()


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }
    config.update(extra)
    return Producer(config)


def _send(producer, topic: str, i: int, partitions: int) -> None:
    while True:
        try:
            producer.produce(topic, VALUE, partition=i % partitions)
            return
        except BufferError:
            producer.poll(0.001)


def produceIdempotent(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    """
    @return: records per second.
    """
    producer = _producer(bootstrap)
    # The topic's metadata and the producer id first, outside the timing.
    _send(producer, topic, 0, partitions)
    producer.flush(30)
    start = time.perf_counter()
    for i in range(records):
        _send(producer, topic, i, partitions)
    if producer.flush(120):
        raise RuntimeError("records were not delivered")
    return records / (time.perf_counter() - start)


def produceTransactional(bootstrap: str, topic: str, records: int, partitions: int) -> tuple[float, int]:
    """
    @return: records per second, and how many transactions were committed.
    """
    producer = _producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    _send(producer, topic, 0, partitions)
    producer.commit_transaction(30)
    commits = 0
    start = time.perf_counter()
    producer.begin_transaction()
    began = time.monotonic()
    for i in range(records):
        _send(producer, topic, i, partitions)
        if not i & 255 and time.monotonic() - began >= COMMIT_INTERVAL:
            producer.commit_transaction(60)
            commits += 1
            producer.begin_transaction()
            began = time.monotonic()
    producer.commit_transaction(60)
    commits += 1
    return records / (time.perf_counter() - start), commits


def fillWithAborts(bootstrap: str, topic: str, records: int, partitions: int) -> int:
    """
    C{records} records in transactions of L{TXN_RECORDS}, every
    L{ABORT_EVERY}th aborted.

    @return: how many were committed.
    """
    producer = _producer(bootstrap, **{"transactional.id": f"fill-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    committed = 0
    for n, first in enumerate(range(0, records, TXN_RECORDS)):
        count = min(TXN_RECORDS, records - first)
        producer.begin_transaction()
        for i in range(first, first + count):
            _send(producer, topic, i, partitions)
        if n % ABORT_EVERY == ABORT_EVERY - 1:
            producer.flush(60)
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            committed += count
    return committed


def consumeAll(bootstrap: str, topic: str, partitions: int, isolation: str) -> int:
    """
    Read C{topic} from the start to its end offsets.

    @return: how many records the consumer returned.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 262144,
        }
    )
    assigned = [TopicPartition(topic, p, 0) for p in range(partitions)]
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)}
    consumer.assign(assigned)
    seen = 0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(100_000, 0.5):
                if message.error() is None:
                    seen += 1
            # Positions move past aborted records and markers too.
            if all(tp.offset >= ends[tp.partition] for tp in consumer.position(assigned)):
                return seen
        raise RuntimeError(f"{isolation}: the end offsets were not reached in 300 s")
    finally:
        consumer.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench transactions", description=__doc__.split("\n")[1])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--fill", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--reads", type=int, default=5,
                        help="reads of the whole log per fetch measurement (CPU time has 10 ms steps)")
    parser.add_argument("--broker", default="kafkatwist", help="kafkatwist or kafkatwist:PATH")
    parser.add_argument("--quick", action="store_true", help="30,000 records, 100,000 in the log, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.fill, args.repeats, args.reads = 30_000, 100_000, 1, 1
    directory = tempfile.mkdtemp(prefix="bench-txn-")
    try:
        with startBroker(args.broker, directory) as broker:
            bootstrap = broker.bootstrap
            # Warm up (connections, first segments, the coordinator's topic).
            createTopic(bootstrap, "warmup", args.partitions)
            produceIdempotent(bootstrap, "warmup", 20_000, args.partitions)
            produceTransactional(bootstrap, "warmup", 20_000, args.partitions)
            produce = {"idempotent": [], "transactional": []}
            produceCpu = {"idempotent": [], "transactional": []}
            commits = []
            for round_ in range(args.repeats):
                # Alternate which goes first.
                order = ["idempotent", "transactional"]
                if round_ % 2:
                    order.reverse()
                for kind in order:
                    topic = f"p-{kind}-{round_}"
                    createTopic(bootstrap, topic, args.partitions)
                    before = processCpuSeconds(broker.pid)
                    if kind == "idempotent":
                        rate = produceIdempotent(bootstrap, topic, args.records, args.partitions)
                    else:
                        rate, n = produceTransactional(bootstrap, topic, args.records, args.partitions)
                        commits.append(n)
                    produce[kind].append(rate)
                    spent = processCpuSeconds(broker.pid) - before
                    produceCpu[kind].append(spent / args.records * 1e6)
                    log(f"round {round_ + 1}: {kind} {rate:,.0f} records/s, "
                        f"broker {spent:.2f} CPU-s")
            topic = "fetch"
            createTopic(bootstrap, topic, args.partitions)
            log(f"filling {topic} with {args.fill:,} records, one transaction in {ABORT_EVERY} aborted")
            committed = fillWithAborts(bootstrap, topic, args.fill, args.partitions)
            # The broker's own CPU while idle (timers), to take out of the
            # figures: the consumer, not the broker, sets the pace of a read.
            time.sleep(1)
            before, began = processCpuSeconds(broker.pid), time.monotonic()
            time.sleep(5)
            idle = (processCpuSeconds(broker.pid) - before) / (time.monotonic() - began)
            log(f"idle broker: {idle:.4f} CPU-s per second")
            cpu = {"read_committed": [], "read_uncommitted": []}
            net = {"read_committed": [], "read_uncommitted": []}
            returned = {}
            for round_ in range(args.repeats):
                order = ["read_committed", "read_uncommitted"]
                if round_ % 2:
                    order.reverse()
                for isolation in order:
                    before, began = processCpuSeconds(broker.pid), time.monotonic()
                    for _ in range(args.reads):
                        returned[isolation] = consumeAll(bootstrap, topic, args.partitions, isolation)
                    spent = processCpuSeconds(broker.pid) - before
                    wall = time.monotonic() - began
                    perMillion = 1e6 / (args.fill * args.reads)
                    cpu[isolation].append(spent * perMillion)
                    net[isolation].append((spent - idle * wall) * perMillion)
                    log(f"round {round_ + 1}: {isolation} {spent:.2f} CPU-s in {wall:.1f} s, "
                        f"{returned[isolation]:,} records returned per read")
            if returned["read_committed"] != committed:
                raise RuntimeError(
                    f"read_committed returned {returned['read_committed']:,} records, "
                    f"{committed:,} were committed"
                )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    idem, txn = statistics.median(produce["idempotent"]), statistics.median(produce["transactional"])
    cidem = statistics.median(produceCpu["idempotent"])
    ctxn = statistics.median(produceCpu["transactional"])
    rc, ru = statistics.median(cpu["read_committed"]), statistics.median(cpu["read_uncommitted"])
    nrc, nru = statistics.median(net["read_committed"]), statistics.median(net["read_uncommitted"])
    print(f"Transactions, {args.partitions} partitions, 100-byte values, median of {args.repeats} "
          f"(alternating)\n")
    print("| measure | baseline | transactional | ratio | goal |")
    print("|---|---|---|---|---|")
    print(f"| produce, records/s ({args.records:,} records; commit every 100 ms, "
          f"{statistics.median(commits):.0f} commits) | {idem:,.0f} idempotent | {txn:,.0f} | "
          f"{txn / idem:.2f}x | >= 0.8x: {'met' if txn >= 0.8 * idem else 'NOT met'} |")
    print(f"| produce, broker CPU-s per million records | {cidem:.2f} idempotent | {ctxn:.2f} | "
          f"{ctxn / cidem:.2f}x | |")
    print(f"| fetch, broker CPU-s per million records ({args.fill:,} records, "
          f"1 txn in {ABORT_EVERY} aborted, read {args.reads}x) | {ru:.2f} read_uncommitted | {rc:.2f} read_committed | "
          f"{rc / ru:.2f}x | <= 1.1x: {'met' if rc <= 1.1 * ru else 'NOT met'} |")
    print(f"| the same, less the idle broker's CPU over the read | {nru:.3f} | {nrc:.3f} | "
          f"{nrc / nru:.2f}x | |")
    print(f"\nraw: produce {produce}, produce broker CPU-s/M {produceCpu}, fetch CPU-s/M {cpu}, net of idle {net}")
    return 0
