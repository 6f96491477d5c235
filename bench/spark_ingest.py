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

Each job runs C{--warmups} times on each source to warm up (JVM, Python
workers), then C{--runs} rounds, each timing the sources one after the
other (so that a round's ratios compare runs under the same load: they
are printed per round, with the load average); the table shows each
source's best run, and the CPU seconds each part spent in it: the broker, Spark's Python workers (fetching and
decoding), the JVM (taking the Arrow batches in, and the job itself) and
its JIT compiler threads apart.  A third source, C{arrow-only}, is a Python
data source that hands Spark the same number of ready-made Arrow batches
of the Kafka schema (built once per worker process): what any Python data
source costs Spark, the floor under C{kafkatwist}.  The whole benchmark stops at
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

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _processes() -> dict[int, tuple[int, str, float]]:
    """
    Every process: pid -> (parent pid, command name, CPU seconds so far,
    its exited children's included).
    """
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        command = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime, stime and the reaped children's (Python workers come and go)
        out[int(name)] = (int(fields[1]), command, sum(map(int, fields[11:15])) / _TICKS)
    return out


def _compilerSeconds(pid: int) -> float:
    """
    CPU seconds the JIT compiler threads of process C{pid} have used.
    """
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if not stat[stat.index("(") + 1 : stat.rindex(")")].startswith(("C1 Compiler", "C2 Compiler")):
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


def cpuByPart(brokerPid: int) -> dict[str, float]:
    """
    CPU seconds used so far by the broker, the Spark JVM (this process's
    java child) and Spark's Python workers (the JVM's python descendants),
    the JVM's JIT compiler threads apart (C{jit}; C{jvm} is the rest): a
    JVM a few jobs old still compiles at every job, as much CPU as the job
    itself.
    """
    table = _processes()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)

    def tree(root):
        todo, seen = [root], []
        while todo:
            pid = todo.pop()
            seen.append(pid)
            todo.extend(children.get(pid, ()))
        return seen

    parts = {"broker": 0.0, "python": 0.0, "jvm": 0.0, "jit": 0.0}
    for pid in tree(brokerPid):
        parts["broker"] += table[pid][2] if pid in table else 0.0
    for child in children.get(os.getpid(), ()):
        if table[child][1] != "java":
            continue
        compiling = _compilerSeconds(child)
        parts["jit"] += compiling
        parts["jvm"] -= compiling
        for pid in tree(child):
            part = "jvm" if table[pid][1] == "java" else "python"
            parts[part] += table[pid][2]
    return parts


def arrowOnlySource():
    """
    A Python data source (C{format("arrowonly")}) of C{records} rows of the
    Kafka schema in ready-made Arrow batches of C{batchRows} (30,000), over
    C{partitions} partitions: Spark's cost of any Python data source.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from kafkatwist_spark import kafkaSchema

    class Reader(DataSourceReader):
        def __init__(self, records: int, partitions: int, size: int, rows: int) -> None:
            self.records, self.parts, self.size, self.rows = records, partitions, size, rows

        def partitions(self):
            return [InputPartition(i) for i in range(self.parts)]

        def read(self, partition):
            from bench.spark_ingest import readyBatch
            from kafkatwist_spark.reader import freezeWorkerHeap

            # what the kafkatwist source does in a worker too
            freezeWorkerHeap()

            n = self.rows
            batch = readyBatch(n, self.size, partition.value)
            left = self.records // self.parts + (partition.value < self.records % self.parts)
            while left > 0:
                yield batch if left >= n else batch.slice(0, left)
                left -= n

    class Source(DataSource):
        @classmethod
        def name(cls):
            return "arrowonly"

        def schema(self):
            from kafkatwist_spark.reader import freezeWorkerHeap

            # what the kafkatwist source does in a planning worker too
            freezeWorkerHeap()
            return kafkaSchema(False)

        def reader(self, schema):
            from kafkatwist_spark.reader import freezeWorkerHeap

            freezeWorkerHeap()
            return Reader(int(self.options["records"]), int(self.options["partitions"]),
                          int(self.options["size"]), int(self.options.get("batchRows", 30_000)))

    return Source


#: the arrow-only source's batches, built once per Python worker process
_READY: dict = {}


def readyBatch(n: int, size: int, partition: int):
    """
    A record batch of the Kafka schema holding the first C{n} records'
    values, their columns built on the first call in a Python worker and
    kept: the C{arrow-only} source then costs Spark's side alone (building
    30,000 values in Python was two thirds of its workers' CPU).
    """
    import pyarrow as pa

    from kafkatwist_spark.columnar import kafkaArrowSchema

    columns = _READY.get((n, size))
    if columns is None:
        columns = _READY[(n, size)] = [
            pa.nulls(n, pa.binary()),
            pa.array([value(i, size) for i in range(n)], pa.binary()),
            pa.array(["ingest"] * n),
            pa.array(range(n), pa.int64()),
            pa.array([1_700_000_000_000_000] * n, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.array([0] * n, pa.int32()),
        ]
    key, values, topic, offsets, timestamps, types = columns
    return pa.RecordBatch.from_arrays(
        [key, values, topic, pa.repeat(pa.scalar(partition, pa.int32()), n), offsets,
         timestamps, types],
        schema=kafkaArrowSchema(False),
    )


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
    spark.dataSource.register(arrowOnlySource())
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
    parser.add_argument("--warmups", type=int, default=1,
                        help="untimed runs per job and source first (default 1)")
    parser.add_argument("--max-seconds", type=float, default=600.0,
                        help="stop starting new runs after this long")
    args = parser.parse_args(argv)
    from kafkatwist.util import debian, jvm

    try:
        jvm.ensureJava()
    except debian.PackageUnavailable as e:
        print(f"the Spark benchmark needs Java 17: {e}", file=sys.stderr)
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
            ("arrow-only", lambda: spark.read.format("arrowonly")
             .option("records", str(args.records)).option("partitions", str(args.partitions))
             .option("size", str(args.value_bytes)).load()),
        ]

        results = []
        rounds = []
        for jobName, job in jobs():
            for sourceName, load in sources:
                if time.monotonic() > deadline:
                    break
                for _ in range(max(args.warmups, 1)):
                    rows = job(load())  # warm-up
                    if rows != args.records:
                        raise RuntimeError(
                            f"{sourceName} {jobName}: {rows} rows, not {args.records}"
                        )
            # The timed runs go round the sources, so that each round's
            # ratios compare runs taken under the same load.
            best: dict = {}
            for n in range(args.runs):
                if time.monotonic() > deadline:
                    break
                seconds = {}
                for sourceName, load in sources:
                    before = cpuByPart(broker.process.pid)
                    t = time.perf_counter()
                    job(load())
                    elapsed = time.perf_counter() - t
                    after = cpuByPart(broker.process.pid)
                    seconds[sourceName] = elapsed
                    if sourceName not in best or elapsed < best[sourceName][0]:
                        best[sourceName] = (elapsed, {k: after[k] - before[k] for k in after})
                rounds.append((jobName, n + 1, seconds, os.getloadavg()[0]))
                print(f"  {jobName:8s} round {n + 1}: " + ", ".join(
                    f"{name} {value:.2f}s" for name, value in seconds.items()), flush=True)
            for sourceName, _ in sources:
                if sourceName in best:
                    results.append((jobName, sourceName) + best[sourceName])

        print()
        print(f"Spark ingest: {args.records:,} records x {args.value_bytes} B, "
              f"{args.partitions} partitions, local[{args.cores}], best of {args.runs} "
              f"after {max(args.warmups, 1)} warm-up(s)")
        print(f"{'job':<9}{'source':<12}{'seconds':>9}{'rows/s':>14}{'vs parquet':>12}"
              f"   CPU s: broker  python   jvm   jit")
        baseline = {job: s for job, source, s, _ in results if source == "parquet"}
        for jobName, sourceName, best, cpu in results:
            ratio = best / baseline[jobName] if jobName in baseline else float("nan")
            print(f"{jobName:<9}{sourceName:<12}{best:>9.2f}{args.records / best:>14,.0f}"
                  f"{ratio:>11.2f}x{cpu['broker']:>15.2f}{cpu['python']:>8.2f}{cpu['jvm']:>6.2f}"
                  f"{cpu['jit']:>6.2f}")
        print()
        print("per round (x parquet in the same round; 1-minute load average after it):")
        for jobName, n, seconds, loadAverage in rounds:
            base = seconds.get("parquet")
            print(f"  {jobName:<8} {n}: " + ", ".join(
                f"{name} {value:.2f}s" + (f" ({value / base:.2f}x)" if base and name != "parquet"
                                           else "")
                for name, value in seconds.items()) + f"; load {loadAverage:.1f}")
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
