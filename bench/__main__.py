"""
kafkatwist benchmarks.

    python -m bench [--reference tansu]   # the headline figures vs a reference broker, one table
    python -m bench network         # the network-layer suite (issue 2)
    python -m bench SUITE [ARGS]    # one suite; SUITE --help for its options
    python -m bench --list

Each suite is a module C{bench.<name>} with C{main(argv) -> int}.
"""

from __future__ import annotations

import importlib
import sys

#: suite name -> (module, one-line description)
SUITES = {
    "comparison": ("bench.comparison", "the headline figures (CPU per record, throughput, latency, connections, group join) vs a reference broker, one table (default)"),
    "network": ("bench.network", "network layer vs a one-reactor server (issue 2)"),
    "throughput": ("bench.throughput", "produce/consume throughput with real clients"),
    "consume": ("bench.consume", "consume throughput and broker CPU per record, a lean consumer that counts only, two trees alternated (issue 29)"),
    "latency": ("bench.latency", "produce->ack latency at 1k records/s with a consumer tailing, each of N runs' p99, fresh broker per run, optional GC pause trace (issue 29)"),
    "profile": ("bench.profile", "py-spy profiles of the produce and fetch paths under load"),
    "connections": ("bench.connections", "idle connections RSS and a connection burst"),
    "spark_ingest": ("bench.spark_ingest", "kafkatwist data source vs Parquet in Spark (issue 5)"),
    "compaction": ("bench.compaction", "log cleaner: __consumer_offsets size and restart time, cleaner throughput beside a producer (issue 14)"),
    "fuzz": ("bench.fuzz", "the fuzzer's results (make fuzz): frames/s, crashes, tracebacks, RSS (issue 11)"),
    "fetch_sessions": ("bench.fetch_sessions", "broker CPU per Fetch for a consumer of 1,000 partitions with and without a fetch session (issue 16)"),
    "transactions": ("bench.transactions", "transactional produce vs idempotent, read_committed fetch CPU vs read_uncommitted (issue 15)"),
    "appendpath": ("bench.appendpath", "the append path alone: Python opcodes by function and time per append through the append seam into a log on disk, optionally beside another tree (issue 29)"),
    "instructions": ("bench.instructions", "instructions per Produce request under callgrind, a before/after count the load does not blur (issue 12)"),
    "cluster": ("bench.cluster", "three brokers on ZooKeeper: acks=all throughput RF 3 vs 1, produce->ack latency, fail-over time, two brokers vs one on small requests (issue 17)"),
    "failover": ("bench.failover", "fail-over time's median and maximum, kill -9 and pause past the session, with and without CPU-bound processes beside the cluster (issue 30)"),
    "smallrequests": ("bench.smallrequests", "broker CPU per small request (one-record Produce, one-batch Fetch, ApiVersions, Metadata) over 32 connections, side by side with another tree and Tansu (issue 29)"),
    "twobrokers": ("bench.twobrokers", "two brokers against one on one-record Produce requests, driven by the C load generator, with who is on CPU (issue 17)"),
    "testing": ("bench.testing", "Kafka for tests: the pytest fixtures' time to ready and to the first acknowledged record, one broker and three (issue 25)"),
    "console": ("bench.console", "the web console's topic and group lists with 1,000 topics and 500 groups, JSON and HTML (issue 28)"),
    "security": ("bench.security", "SASL handshakes/s, produce CPU with 10,000 ACLs vs no authorizer (issue 13)"),
}
DEFAULT = "comparison"


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("--list", "-l"):
        for name, (_, description) in SUITES.items():
            print(f"{name:<14} {description}")
        return 0
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    if argv and not argv[0].startswith("-"):
        name, rest = argv[0], argv[1:]
    else:
        name, rest = DEFAULT, argv
    if name not in SUITES:
        sys.stderr.write(f"unknown suite {name!r}; suites: {', '.join(SUITES)}\n")
        return 2
    module = importlib.import_module(SUITES[name][0])
    return module.main(rest) or 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
