"""
The kafkatwist Spark demo, against a running broker (C{make run}):

1. fills the topic with JSON events if it is empty (and adds a few more on
   every run, to show the stream picking up where it stopped);
2. runs the batch pipeline (C{events_pipeline.py}): windowed counts per
   kind, written as Parquet;
3. runs the streaming job (C{streaming_job.py}) with Trigger.AvailableNow
   on its checkpoint, printing each micro-batch as it completes.

    make spark-demo ARGS="--bootstrap 127.0.0.1:9092"
    python spark/examples/run_demo.py --help
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
SPARK_DIR = os.path.dirname(HERE)
ROOT = os.path.dirname(SPARK_DIR)
for _path in (HERE, SPARK_DIR, ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

KINDS = ["view", "view", "view", "click", "click", "purchase", "signup"]


def say(stage: str, message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {stage:<8} {message}", flush=True)


def makeEvents(rng: random.Random, start: datetime, count: int) -> list[bytes]:
    """
    C{count} events a few seconds apart from C{start}, a few of them late.
    """
    out = []
    ts = start
    for _ in range(count):
        ts += timedelta(milliseconds=rng.randint(50, 400))
        kind = rng.choice(KINDS)
        stamp = ts - timedelta(seconds=rng.randint(60, 300)) if rng.random() < 0.02 else ts
        out.append(json.dumps({
            "ts": stamp.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
            "user": f"u{rng.randint(0, 49)}",
            "kind": kind,
            "amount": round(rng.uniform(1, 200), 2) if kind == "purchase" else 0.0,
        }).encode())
    return out


def topicSize(client, topic: str) -> tuple[int, int]:
    """
    (partitions, records) of C{topic}; (0, 0) if it does not exist.
    """
    meta = client.metadata([topic]).topics.get(topic)
    if meta is None or meta.error:
        return 0, 0
    partitions = sorted(meta.partitions)
    earliest = client.listOffsets(topic, partitions, -2)
    latest = client.listOffsets(topic, partitions, -1)
    return len(partitions), sum(latest[p][0] - earliest[p][0] for p in partitions)


def produceEvents(client, topic: str, partitions: int, events: list[bytes], label: str) -> None:
    from kafkatwist.protocol.records import Record, buildBatch

    chunk = 1000
    step = max(1, len(events) // chunk // 5)
    for n, first in enumerate(range(0, len(events), chunk)):
        records = [Record(key=None, value=v) for v in events[first : first + chunk]]
        client.produce(topic, n % partitions, buildBatch(records, "lz4"))
        done = min(first + chunk, len(events))
        if n % step == 0 or done == len(events):
            say("produce", f"{label}: {done:,}/{len(events):,} events")


def progressListener(total: list[int]):
    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event):
            say("stream", f"query started (id {str(event.id)[:8]})")

        def onQueryProgress(self, event):
            p = event.progress
            rows = p.numInputRows
            if not rows:
                return
            total[0] += rows
            ends = [json.loads(s.endOffset) if isinstance(s.endOffset, str) else s.endOffset
                    for s in p.sources]
            where = ", ".join(
                f"{t}-{part}@{off}" for e in ends for t, parts in (e or {}).items()
                for part, off in parts.items()
            )
            say("stream", f"micro-batch {p.batchId}: {rows:,} rows "
                          f"({p.processedRowsPerSecond:,.0f}/s), offsets now {where}")

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            failure = f" with {event.exception}" if event.exception else ""
            say("stream", "query finished" + failure)

    return Progress()


class JobProgress:
    """
    Print the tasks done in Spark's active stages about once a second,
    while a batch job runs (Spark's own console bar is turned off: it would
    garble these lines).
    """

    def __init__(self, spark, stage: str) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.stage = stage
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        last = None
        while not self._stop.wait(1.0):
            stages = [self.tracker.getStageInfo(i) for i in self.tracker.getActiveStageIds()]
            line = ", ".join(
                f"stage {s.stageId}: {s.numCompletedTasks}/{s.numTasks} tasks"
                for s in stages if s is not None
            )
            if line and line != last:
                say(self.stage, line)
                last = line


def plainDoc(doc: str) -> str:
    """
    The module docstring as --help shows it: epytext markup (C{...}) removed.
    """
    return re.sub(r"\b[BCILU]\{([^}]*)\}", r"\1", doc).strip()


def defaultOutput() -> str:
    """
    Under the user's cache directory, so a run leaves nothing in the checkout.
    """
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "kafkatwist", "spark-demo")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="run_demo.py", description=plainDoc(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092",
                        help="broker (default %(default)s)")
    parser.add_argument("--topic", default="demo-events")
    parser.add_argument("--partitions", type=int, default=3, help="if the topic is created")
    parser.add_argument("--events", type=int, default=50_000,
                        help="events to produce into an empty topic (default %(default)s)")
    parser.add_argument("--more", type=int, default=2_000,
                        help="events added on every run, for the stream to pick up")
    parser.add_argument("--output", default=defaultOutput(),
                        help="directory for Parquet output and the stream checkpoint, kept between "
                             "runs; outside the checkout (default %(default)s)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    args = parser.parse_args(argv)

    from kafkatwist.client import KafkaConnectionError, KafkaWireClient

    say("broker", f"connecting to {args.bootstrap}")
    try:
        client = KafkaWireClient(args.bootstrap, timeout=10)
    except KafkaConnectionError as e:
        say("broker", f"no broker at {args.bootstrap} ({e}); start one with `make run`")
        return 1
    with client:
        partitions, records = topicSize(client, args.topic)
        if not partitions:
            client.createTopics({args.topic: args.partitions}, ignoreExisting=True)
            say("broker", f"created topic {args.topic} with {args.partitions} partitions")
            partitions = args.partitions
        rng = random.Random()
        now = datetime.now(timezone.utc)
        # event times end about now, so that each run's arrivals are newer
        # and move the stream's watermark on (closing more windows)
        start = now - timedelta(milliseconds=225 * args.events)
        if records == 0:
            produceEvents(client, args.topic, partitions, makeEvents(rng, start, args.events),
                          "demo events")
        else:
            say("broker", f"{args.topic} already holds {records:,} records")
        more = makeEvents(rng, now, args.more)
        produceEvents(client, args.topic, partitions, more, "new arrivals")
        partitions, records = topicSize(client, args.topic)
        say("broker", f"{args.topic}: {records:,} records in {partitions} partitions")

    # Spark's Python workers run this interpreter and import this tree.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [SPARK_DIR, ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))

    say("spark", "starting a local SparkSession")
    from pyspark.sql import SparkSession

    import events_pipeline
    import streaming_job
    from kafkatwist_spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafkatwist-spark-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    output = os.path.abspath(args.output)
    try:
        say("batch", f"reading {args.topic} and aggregating 5-minute windows")
        started = time.monotonic()
        with JobProgress(spark, "batch"):
            windows = events_pipeline.run(
                spark, args.bootstrap, args.topic, os.path.join(output, "windows")
            )
            count = windows.count()
        say("batch", f"{count} windows written to {output}/windows "
                     f"in {time.monotonic() - started:.1f}s; the busiest:")
        windows.orderBy(windows.events.desc()).show(5, truncate=False)

        checkpoint = os.path.join(output, "checkpoint")
        resumed = os.path.exists(checkpoint)
        say("stream", ("resuming from the checkpoint in " if resumed else "new checkpoint in ")
            + checkpoint)
        total = [0]
        spark.streams.addListener(progressListener(total))
        query = streaming_job.start(
            spark, args.bootstrap, args.topic, os.path.join(output, "stream"), checkpoint,
            args.max_offsets_per_trigger, availableNow=True,
        )
        query.awaitTermination()
        time.sleep(0.5)  # let the listener print the last progress
        say("stream", f"read {total[0]:,} new records this run"
                      + (" (only what arrived since the last run)" if resumed else ""))
        streamed = spark.read.parquet(os.path.join(output, "stream"))
        say("stream", f"{streamed.count()} closed windows in {output}/stream")
        say("done", "run again to see the stream continue from its checkpoint")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
