"""
Spark ingest: how fast the kafkatwist data source feeds a DataFrame,
beside Spark reading the same rows from a local Parquet file.

    python -m bench spark_ingest [--records 1000000] [--partitions 4] [--cores 2]

Starts its own broker (C{twistd -n kafkatwist} on a free port, data in a
temporary directory), produces the records (100-byte JSON values) as
prebuilt batches, then times two jobs on each source with a local
SparkSession:

- C{count}: C{df.count()};
- C{groupBy}: decode a field of the JSON value and count per value of it.

Each job runs once to warm up (JVM, Python workers), then C{--runs} times;
the table shows the best run.  The whole benchmark stops at
C{--max-seconds}.  Needs Java 17.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_DIR = os.path.join(ROOT, "spark")
for _path in (ROOT, SPARK_DIR):
    if _path not in sys.path:
        sys.path.insert(0, _path)

KINDS = 16


def value(i: int, size: int) -> bytes:
    """
    Record i's value: a JSON object of exactly C{size} bytes.
    """
    head = b'{"id":%d,"kind":"k%02d","user":"u%05d","pad":"' % (i, i % KINDS, i % 99_991)
    pad = size - len(head) - 2
    if pad < 0:
        raise ValueError(f"values of {size} bytes are too small for the JSON fields")
    return head + b"x" * pad + b'"}'


def produce(bootstrap: str, topic: str, records: int, partitions: int, size: int) -> float:
    """
    Create C{topic} and fill it, round-robin over partitions, in batches of
    5,000 records.

    @return: seconds taken.
    """
    from kafkatwist.client import KafkaWireClient
    from kafkatwist.protocol.records import Record, buildBatch

    started = time.perf_counter()
    now = int(time.time() * 1000)
    perBatch = 5_000
    with KafkaWireClient(bootstrap) as client:
        client.createTopics({topic: partitions})
        for n, first in enumerate(range(0, records, perBatch)):
            batch = [
                Record(timestamp=now, value=value(i, size))
                for i in range(first, min(first + perBatch, records))
            ]
            client.produce(topic, n % partitions, buildBatch(batch))
    return time.perf_counter() - started


def session(cores: int, scratch: str):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    paths = [ROOT, SPARK_DIR] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    from pyspark.sql import SparkSession

    from kafkatwist_spark import register

    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("kafkatwist-spark-ingest")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.local.dir", os.path.join(scratch, "spark-local"))
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def jobs():
    from pyspark.sql import functions as F

    def count(df):
        return df.count()

    def groupBy(df):
        kind = F.get_json_object(F.col("value").cast("string"), "$.kind").alias("kind")
        return sum(r["count"] for r in df.select(kind).groupBy("kind").count().collect())

    return [("count", count), ("groupBy", groupBy)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench spark_ingest", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--cores", type=int, default=2, help="local[N] (default 2)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per job (best shown)")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="stop starting new runs after this long")
    args = parser.parse_args(argv)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("java not found: the Spark benchmark needs Java 17", file=sys.stderr)
        return 1

    from kafkatwist.testing import Broker

    started = time.monotonic()
    deadline = started + args.max_seconds
    scratch = tempfile.mkdtemp(prefix="kafkatwist-spark-ingest-")
    broker = Broker(os.path.join(scratch, "broker"))
    spark = None
    try:
        broker.start()
        topic = "ingest"
        print(
            f"producing {args.records:,} records of {args.value_bytes} bytes "
            f"to {args.partitions} partitions ...", flush=True
        )
        seconds = produce(broker.bootstrap, topic, args.records, args.partitions, args.value_bytes)
        print(f"  {seconds:.1f}s ({args.records / seconds:,.0f} records/s)", flush=True)

        print(f"starting Spark (local[{args.cores}]) ...", flush=True)
        spark = session(args.cores, scratch)
        kafkaDf = (
            spark.read.format("kafkatwist")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .load()
        )
        parquetPath = os.path.join(scratch, "ingest.parquet")
        print("writing the same rows to Parquet ...", flush=True)
        kafkaDf.write.parquet(parquetPath)
        sources = [
            ("kafkatwist", lambda: spark.read.format("kafkatwist")
             .option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).load()),
            ("parquet", lambda: spark.read.parquet(parquetPath)),
        ]

        results = []
        for jobName, job in jobs():
            for sourceName, load in sources:
                if time.monotonic() > deadline:
                    break
                rows = job(load())  # warm-up
                if rows != args.records:
                    raise RuntimeError(f"{sourceName} {jobName}: {rows} rows, not {args.records}")
                best = None
                for _ in range(args.runs):
                    if time.monotonic() > deadline:
                        break
                    t = time.perf_counter()
                    job(load())
                    elapsed = time.perf_counter() - t
                    best = elapsed if best is None else min(best, elapsed)
                if best is not None:
                    results.append((jobName, sourceName, best))
                    print(f"  {jobName:8s} {sourceName:11s} {best:7.2f}s", flush=True)

        print()
        print(f"Spark ingest: {args.records:,} records x {args.value_bytes} B, "
              f"{args.partitions} partitions, local[{args.cores}], best of {args.runs}")
        print(f"{'job':<9}{'source':<12}{'seconds':>9}{'rows/s':>14}{'vs parquet':>12}")
        baseline = {job: s for job, source, s in results if source == "parquet"}
        for jobName, sourceName, best in results:
            ratio = best / baseline[jobName] if jobName in baseline else float("nan")
            print(f"{jobName:<9}{sourceName:<12}{best:>9.2f}{args.records / best:>14,.0f}"
                  f"{ratio:>11.1f}x")
        if time.monotonic() > deadline:
            print(f"(stopped at --max-seconds {args.max_seconds:.0f}; some runs skipped)")
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
