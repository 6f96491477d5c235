"""
The web console at scale (issue 28): how long the topic list and the group
list take with 1,000 topics and 500 groups (each with committed offsets on
two partitions), as JSON and as HTML, measured from an HTTP client on
loopback against a real broker process.

    python -m bench console [--topics 1000] [--groups 500] [--repeats 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request

from bench.brokers import freePort, startBroker
from kafkatwist.client.client import KafkaWireClient
from kafkatwist.protocol.apis import OFFSET_COMMIT
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record

PATHS = ("/api/topics", "/topics", "/api/groups", "/groups", "/api/brokers", "/")


def populate(bootstrap: str, topics: int, groups: int) -> None:
    with KafkaWireClient([bootstrap], timeout=120) as client:
        names = [f"topic-{i:04d}" for i in range(topics)]
        for start in range(0, topics, 200):
            client.createTopics({name: 2 for name in names[start : start + 200]}, replicationFactor=1)
        for name in names[:50]:
            client.produce(name, 0, [Record(key=b"k", value=b"v" * 100) for _ in range(20)])
        for g in range(groups):
            topic = names[g % topics]

            def build(version, cls, topic=topic, g=g):
                Topic = nested(cls, "OffsetCommitRequestTopic")
                Partition = nested(cls, "OffsetCommitRequestPartition")
                return make(
                    cls, group_id=f"group-{g:03d}", generation_id_or_member_epoch=-1, generation_id=-1,
                    member_id="", group_instance_id=None, retention_time_ms=-1,
                    topics=(make(Topic, name=topic, partitions=tuple(
                        make(Partition, partition_index=p, committed_offset=5, committed_leader_epoch=-1,
                             committed_metadata="", commit_timestamp=-1)
                        for p in (0, 1)
                    )),),
                )

            client.call(OFFSET_COMMIT, build)


def timeGet(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        body = response.read()
    return (time.perf_counter() - started) * 1000, len(body)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench console", description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--groups", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    httpPort = freePort()
    with tempfile.TemporaryDirectory() as directory:
        with startBroker("kafkatwist", directory, {
            "metrics.http.listener": f"127.0.0.1:{httpPort}", "num.partitions": "2",
        }) as broker:
            bootstrap = f"127.0.0.1:{broker.port}"
            started = time.perf_counter()
            populate(bootstrap, args.topics, args.groups)
            setup = time.perf_counter() - started
            base = f"http://127.0.0.1:{httpPort}"
            counts = json.loads(urllib.request.urlopen(base + "/api/topics", timeout=60).read())["count"]
            groups = json.loads(urllib.request.urlopen(base + "/api/groups", timeout=60).read())["count"]
            rows = []
            for path in PATHS:
                for _ in range(2):
                    timeGet(base + path)
                samples = []
                size = 0
                for _ in range(args.repeats):
                    ms, size = timeGet(base + path)
                    samples.append(ms)
                samples.sort()
                rows.append({
                    "path": path, "median_ms": round(statistics.median(samples), 1),
                    "p90_ms": round(samples[int(0.9 * (len(samples) - 1))], 1), "max_ms": round(samples[-1], 1),
                    "bytes": size,
                })
    if args.json:
        print(json.dumps({"topics": counts, "groups": groups, "rows": rows}, indent=2))
        return 0
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"console at scale: {counts} topics (incl. internal), {groups} groups; setup {setup:.1f} s; "
          f"{args.repeats} GETs each after 2 warm-ups; load average {load}")
    print(f"{'path':<14} {'median':>9} {'p90':>9} {'max':>9} {'bytes':>10}")
    for r in rows:
        print(f"{r['path']:<14} {r['median_ms']:>7.1f}ms {r['p90_ms']:>7.1f}ms {r['max_ms']:>7.1f}ms {r['bytes']:>10,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
