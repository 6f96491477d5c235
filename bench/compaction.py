"""
The log cleaner's figures (issue 14): what compaction does to
C{__consumer_offsets} and to restarts, and how fast the cleaner runs beside
a producer.

    python -m bench compaction [--commits 1000000] [--spread 100000:10000]
                               [--dirty-mb 200] [--value-sizes 100,1000] [--quick]

1. Offset commits.  C{__consumer_offsets} is written as the broker writes
   it (the group store's own code, one batch per commit, 50 partitions),
   C{--commits} commits for one group, then C{--spread} commits spread over
   that many groups (each group committing one partition).  For each: the
   topic's size on disk and the broker's start-up time (process start to
   its "started" line; the cleaner off, so only loading is timed) before
   and after the cleaner has run, against an empty broker's start-up time.
   The spread case also runs with C{offsets.topic.segment.bytes=65536}:
   with Kafka's 100 MiB segments all of its data stays in active segments,
   which the cleaner never touches (in Kafka neither).
2. Cleaner throughput while a producer runs.  A compacted topic is filled
   with C{--dirty-mb} MB of updates to 100,000 keys (values of each size in
   C{--value-sizes}) with C{min.compaction.lag.ms} holding the cleaner off;
   then a producer sends 1,000 records/s to another topic (linger.ms=0,
   acks=1) and its produce->ack latency is measured for 10 s, the lag is
   lifted, and the latency is measured again during the cleaner's pass.
   Throughput is dirty bytes over the pass's duration, from the broker's
   log line.

Bounded in time: every wait has a limit; with the defaults the suite takes
about five minutes on a 2-core machine.  It starts its own brokers on
loopback and writes its data under a temporary directory.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from bench.brokers import ROOT, TWISTD, freePort, terminate

OFFSETS = "__consumer_offsets"
_CLEANED = re.compile(
    r"cleaned (?P<name>\S+) up to offset \d+: (?P<dirty>[\d,]+) dirty bytes mapped in "
    r"(?P<mapSecs>[\d.]+) s, .*? (?P<secs>[\d.]+) s \([\d.]+ MB/s of dirty log; "
    r"(?P<cpu>[\d.]+) CPU-s\)"
)


def log(message: str) -> None:
    sys.stderr.write(f"[compaction] {message}\n")
    sys.stderr.flush()


def percentile(values, q):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- brokers ------------------------------------------------------------------


class Broker:
    """
    A C{twistd -n kafkatwist} on a free port over C{logDir}.
    """

    def __init__(self, workdir: str, logDir: str, overrides: dict[str, str] | None = None) -> None:
        self.port = freePort()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.logPath = os.path.join(workdir, f"broker-{self.port}.log")
        args = [TWISTD, "-n", "--pidfile=", "kafkatwist",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dir={logDir}"]
        for key, value in (overrides or {}).items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(self.logPath, "wb")
        self.started = time.monotonic()
        self.process = subprocess.Popen(args, cwd=workdir, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def output(self) -> str:
        with open(self.logPath, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def waitStarted(self, timeout: float = 120.0) -> float:
        """
        @return: seconds from process start to the "started" line.
        """
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if "kafkatwist node" in self.output():
                return time.monotonic() - self.started
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited:\n{self.output()[-3000:]}")
            time.sleep(0.01)
        raise RuntimeError(f"broker did not start in {timeout} s")

    def stop(self) -> None:
        terminate(self.process)
        self._log.close()

    def cleanerPasses(self, topic: str | None = None) -> list[dict]:
        passes = []
        for match in _CLEANED.finditer(self.output()):
            if topic is None or match["name"].rpartition("-")[0] == topic:
                passes.append(
                    {
                        "name": match["name"],
                        "dirty": int(match["dirty"].replace(",", "")),
                        "secs": float(match["secs"]),
                        "mapSecs": float(match["mapSecs"]),
                        "cpu": float(match["cpu"]),
                    }
                )
        return passes


def startupSeconds(workdir: str, logDir: str, overrides: dict[str, str] | None = None) -> float:
    broker = Broker(workdir, logDir, overrides)
    try:
        return broker.waitStarted()
    finally:
        broker.stop()


def directoryBytes(path: str, prefix: str) -> int:
    total = 0
    for name in os.listdir(path):
        if name.startswith(prefix + "-"):
            partition = os.path.join(path, name)
            total += sum(os.path.getsize(os.path.join(partition, f)) for f in os.listdir(partition))
    return total


# -- offset commits ------------------------------------------------------------


def writeCommits(logDir: str, commits: int, groups: int, segmentBytes: int) -> None:
    """
    Commit as the broker's group coordinator writes commits: one batch each,
    through its store, into a log directory the broker then opens.
    """
    sys.path.insert(0, ROOT)
    from kafkatwist.coordinator.formats import offsetRecords, partitionFor
    from kafkatwist.coordinator.logstore import OffsetsTopicLog
    from kafkatwist.coordinator.offsets import OffsetAndMetadata
    from kafkatwist.log import LogManager
    from kafkatwist.log.meta import loadOrCreateClusterId

    os.makedirs(logDir, exist_ok=True)
    loadOrCreateClusterId(logDir, 1, None)
    manager = LogManager([logDir], {})
    offsetsLog = OffsetsTopicLog(manager, 50, segmentBytes=segmentBytes)
    now = int(time.time() * 1000)
    names = [f"bench-group-{g}" for g in range(groups)]
    partitions = [partitionFor(name, offsetsLog.numPartitions) for name in names]
    started = time.monotonic()
    for i in range(commits):
        g = i % groups
        committed = OffsetAndMetadata(offset=i, leaderEpoch=0, metadata="",
                                      commitTimestampMs=now, expireTimestampMs=None)
        offsetsLog.append(partitions[g], offsetRecords(names[g], {("bench-topic", 0): committed}))
        if i and i % 200_000 == 0:
            log(f"  {i:,} commits written ({time.monotonic() - started:.0f} s)")
    manager.close()


def cleanedUpToActive(logDir: str, topic: str) -> bool:
    """
    Whether every partition of C{topic} is clean up to its active segment,
    by the broker's C{cleaner-offset-checkpoint}.
    """
    checkpoints = {}
    try:
        with open(os.path.join(logDir, "cleaner-offset-checkpoint")) as f:
            for line in f.read().splitlines()[2:]:
                name, partition, offset = line.split(" ")
                checkpoints[(name, int(partition))] = int(offset)
    except FileNotFoundError:
        pass
    for name in os.listdir(logDir):
        stem, _, partition = name.rpartition("-")
        if stem != topic or not partition.isdigit():
            continue
        bases = sorted(int(f[:20]) for f in os.listdir(os.path.join(logDir, name)) if f.endswith(".log"))
        if len(bases) > 1 and checkpoints.get((topic, int(partition)), -1) < bases[-1]:
            return False
    return True


def waitCleaned(broker: Broker, logDir: str, topic: str, timeout: float = 600.0) -> list[dict]:
    """
    Wait until the cleaner has cleaned C{topic} up to its active segments.
    """
    deadline = time.monotonic() + timeout
    while not cleanedUpToActive(logDir, topic):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{topic} was not cleaned within {timeout} s")
        time.sleep(0.2)
    # Then the passes that merge what the first ones left in small pieces.
    passes, quietSince = len(broker.cleanerPasses(topic)), time.monotonic()
    while time.monotonic() - quietSince < 3.0 and time.monotonic() < deadline:
        time.sleep(0.2)
        now = len(broker.cleanerPasses(topic))
        if now != passes:
            passes, quietSince = now, time.monotonic()
    return broker.cleanerPasses(topic)


def commitScenario(workdir: str, label: str, commits: int, groups: int, segmentBytes: int,
                   emptyStart: float) -> dict:
    logDir = os.path.join(workdir, f"data-{uuid.uuid4().hex[:6]}")
    log(f"{label}: writing {commits:,} commits for {groups:,} group(s), segments of {segmentBytes:,} B")
    writeCommits(logDir, commits, groups, segmentBytes)
    before = directoryBytes(logDir, OFFSETS)
    off = {"log.cleaner.enable": "false", "offsets.topic.segment.bytes": str(segmentBytes)}
    startBefore = startupSeconds(workdir, logDir, off)
    log(f"{label}: {before / 1e6:.1f} MB, start-up {startBefore:.2f} s; cleaning")
    broker = Broker(workdir, logDir, {"log.cleaner.backoff.ms": "200",
                                      "offsets.topic.segment.bytes": str(segmentBytes)})
    try:
        broker.waitStarted()
        passes = waitCleaned(broker, logDir, OFFSETS)
    finally:
        broker.stop()
    after = directoryBytes(logDir, OFFSETS)
    startAfter = startupSeconds(workdir, logDir, off)
    dirty = sum(p["dirty"] for p in passes)
    secs = sum(p["secs"] for p in passes)
    cpu = sum(p["cpu"] for p in passes)
    log(f"{label}: {after / 1e6:.2f} MB, start-up {startAfter:.2f} s, {len(passes)} pass(es)")
    shutil.rmtree(logDir, ignore_errors=True)
    return {
        "label": label,
        "before": before,
        "after": after,
        "startBefore": startBefore,
        "startAfter": startAfter,
        "extraBefore": startBefore - emptyStart,
        "extraAfter": startAfter - emptyStart,
        "passes": len(passes),
        "cleanerMBs": dirty / secs / 1e6 if secs else float("nan"),
        "cleanerMBcpu": dirty / cpu / 1e6 if cpu else float("nan"),
    }


# -- throughput beside a producer ---------------------------------------------


class AckProbe(threading.Thread):
    """
    Produce C{rate} records/s to C{topic} (linger.ms=0, acks=1) until
    stopped, recording (send time, produce->ack latency in ms).
    """

    def __init__(self, bootstrap: str, topic: str, rate: int = 1000) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.samples: list[tuple[float, float]] = []
        self.stopping = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": 1, "linger.ms": 0,
                             "enable.idempotence": False})
        producer.produce(self.topic, b"warmup", partition=0)
        producer.flush(10)
        self.ready.set()
        interval = 1.0 / self.rate
        start = time.monotonic()
        i = 0
        while not self.stopping.is_set():
            due = start + i * interval
            wait = due - time.monotonic()
            if wait > 0:
                # Never spin: poll() waits whole milliseconds at least.
                producer.poll(max(wait, 0.001))
                continue
            sent = time.monotonic()
            producer.produce(
                self.topic, b"x" * 100, partition=0,
                on_delivery=lambda err, msg, sent=sent: err is None and self.samples.append(
                    (sent, (time.monotonic() - sent) * 1000)),
            )
            producer.poll(0)
            i += 1
        producer.flush(10)

    def between(self, start: float, end: float) -> list[float]:
        return [latency for sent, latency in self.samples if start <= sent <= end]


def fillTable(bootstrap: str, topic: str, megabytes: float, valueSize: int, keys: int = 100_000) -> int:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.kbytes": 512 * 1024, "compression.type": "none"})
    value = b"v" * valueSize
    rnd = random.Random(14)
    produced = 0
    target = megabytes * 1e6
    while produced < target:
        key = b"key-%06d" % rnd.randrange(keys)
        while True:
            try:
                producer.produce(topic, value, key=key, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        produced += len(key) + valueSize + 10
        producer.poll(0)
    producer.flush(120)
    return produced


def alterConfig(bootstrap: str, topic: str, key: str, value: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def createTopic(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=configs or {})]).values():
        future.result(30)


def throughputScenario(workdir: str, megabytes: float, valueSize: int, baselineSecs: float) -> dict:
    logDir = os.path.join(workdir, f"data-{uuid.uuid4().hex[:6]}")
    broker = Broker(workdir, logDir, {"log.cleaner.backoff.ms": "100"})
    try:
        broker.waitStarted()
        table = "table"
        createTopic(broker.bootstrap, table, {
            "cleanup.policy": "compact", "segment.bytes": str(16 << 20),
            "min.compaction.lag.ms": str(86_400_000),
        })
        createTopic(broker.bootstrap, "probe")
        log(f"throughput: filling {megabytes:.0f} MB of {valueSize}-byte values")
        fillTable(broker.bootstrap, table, megabytes, valueSize)
        # The fill's writeback would stall the baseline (a VM's disk takes
        # a while over 200 MB): write it all out first.
        os.sync()
        time.sleep(2.0)
        probe = AckProbe(broker.bootstrap, "probe")
        probe.start()
        probe.ready.wait(30)
        time.sleep(1.0)
        baselineStart = time.monotonic()
        time.sleep(baselineSecs)
        baselineEnd = time.monotonic()
        log("throughput: lifting min.compaction.lag.ms")
        alterConfig(broker.bootstrap, table, "min.compaction.lag.ms", "0")
        deadline = time.monotonic() + 600
        while not broker.cleanerPasses(table):
            if time.monotonic() > deadline:
                raise RuntimeError("the cleaner did not clean the table")
            time.sleep(0.02)
        seen = time.monotonic()
        probe.stopping.set()
        probe.join(30)
        cleaned = broker.cleanerPasses(table)[0]
        baseline = probe.between(baselineStart, baselineEnd)
        during = probe.between(seen - cleaned["secs"], seen)
    finally:
        broker.stop()
        shutil.rmtree(logDir, ignore_errors=True)
    return {
        "valueSize": valueSize,
        "dirtyMB": cleaned["dirty"] / 1e6,
        "secs": cleaned["secs"],
        "mapSecs": cleaned["mapSecs"],
        "MBs": cleaned["dirty"] / cleaned["secs"] / 1e6,
        "MBcpu": cleaned["dirty"] / cleaned["cpu"] / 1e6,
        "p50Before": percentile(baseline, 0.5),
        "p99Before": percentile(baseline, 0.99),
        "p50During": percentile(during, 0.5),
        "p99During": percentile(during, 0.99),
        "samplesDuring": len(during),
    }


# -- report ----------------------------------------------------------------------


def render(empty: float, commits: list[dict], throughput: list[dict]) -> str:
    lines = [f"Empty broker start-up: {empty:.2f} s (median of 3)", ""]
    if commits:
        lines += [
            "| __consumer_offsets | size before | size after | start-up before | start-up after | extra over empty, after | cleaner (per CPU-second) | target |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in commits:
            lines.append(
                f"| {c['label']} | {c['before'] / 1e6:.1f} MB | {c['after'] / 1e6:.2f} MB | "
                f"{c['startBefore']:.2f} s | {c['startAfter']:.2f} s | {c['extraAfter']:+.2f} s | "
                f"{c['cleanerMBs']:.0f} MB/s ({c['cleanerMBcpu']:.0f} MB), {c['passes']} pass(es) | "
                f"<= 5 MB, <= +1 s |"
            )
        lines.append("")
    if throughput:
        lines += [
            "| cleaning beside a producer | dirty log | pass | cleaner throughput (per CPU-second) | produce->ack p50 / p99 before | during the pass | target |",
            "|---|---|---|---|---|---|---|",
        ]
        for t in throughput:
            lines.append(
                f"| {t['valueSize']}-byte values, 100,000 keys | {t['dirtyMB']:.0f} MB | "
                f"{t['secs']:.2f} s (map {t['mapSecs']:.2f} s) | {t['MBs']:.0f} MB/s ({t['MBcpu']:.0f} MB) | "
                f"{t['p50Before']:.2f} / {t['p99Before']:.2f} ms | "
                f"{t['p50During']:.2f} / {t['p99During']:.2f} ms ({t['samplesDuring']} samples) | "
                f">= 50 MB/s, p99 <= 2x |"
            )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench compaction", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=1_000_000)
    parser.add_argument("--spread", default="100000:10000", help="COMMITS:GROUPS, or 0 to skip")
    parser.add_argument("--segment-bytes", default="65536,104857600",
                        help="offsets.topic.segment.bytes values to run the commit cases with")
    parser.add_argument("--dirty-mb", type=float, default=200.0)
    parser.add_argument("--value-sizes", default="100,1000")
    parser.add_argument("--skip-commits", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small sizes, to check the suite runs")
    args = parser.parse_args(argv)
    if args.quick:
        args.commits, args.spread, args.dirty_mb = 50_000, "10000:1000", 20.0
    workdir = tempfile.mkdtemp(prefix="bench-compaction-")
    try:
        empties = []
        for _ in range(3):
            empties.append(startupSeconds(workdir, os.path.join(workdir, f"empty-{uuid.uuid4().hex[:6]}")))
        empty = statistics.median(empties)
        log(f"empty broker starts in {empty:.2f} s")
        commits = []
        if not args.skip_commits:
            cases = [(args.commits, 1)]
            if args.spread != "0":
                cases.append(tuple(int(x) for x in args.spread.split(":")))
            for total, groups in cases:
                for segmentBytes in (int(x) for x in args.segment_bytes.split(",")):
                    label = f"{total:,} commits, {groups:,} group(s), {segmentBytes // 1024:,} KiB segments"
                    commits.append(commitScenario(workdir, label, total, groups, segmentBytes, empty))
        throughput = []
        if not args.skip_throughput:
            for size in (int(s) for s in args.value_sizes.split(",")):
                throughput.append(throughputScenario(workdir, args.dirty_mb, size, 10.0))
        print(render(empty, commits, throughput))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
