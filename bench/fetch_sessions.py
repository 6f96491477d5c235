"""
Fetch sessions (KIP-227, issue 16): broker CPU per Fetch for a consumer of
1,000 partitions, sessionless (every fetch names all 1,000 and is answered
with all 1,000) against one incremental session (fetches name nothing new
and are answered with the partitions that have news).

Raw Fetch v12 requests on one connection, max_wait 0, one after the
other; the broker's CPU is read from /proc before and after.  Two
scenarios: every partition caught up (idle polls, the common case), and
10 partitions with 10 records each that the consumer re-reads on every
fetch (offset held at 0) beside 990 quiet ones.  The modes alternate,
best of the repeats shown.

    python -m bench fetch_sessions [--partitions 1000] [--fetches 500] [--repeats 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
import time

from bench.brokers import startBroker
from kafkatwist.client.client import KafkaWireClient
from kafkatwist.protocol.apis import FETCH, requestType
from kafkatwist.protocol.codec import encodeRequestFrame
from kafkatwist.protocol.entities import make, ms, nested
from kafkatwist.protocol.records import Record

VERSION = 12
TOPIC = "sessions"
BUSY = 10


def fetchFrame(correlationId, partitions, sessionId, epoch) -> bytes:
    cls = requestType(FETCH, VERSION)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    topics = ()
    if partitions:
        topics = (make(Topic, topic=TOPIC, partitions=tuple(
            make(Partition, partition=p, current_leader_epoch=-1, fetch_offset=o,
                 last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
            for p, o in partitions
        )),)
    request = make(
        cls, replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=50 << 20, isolation_level=0,
        session_id=sessionId, session_epoch=epoch, topics=topics, forgotten_topics_data=(),
        rack_id="",
    )
    return encodeRequestFrame(FETCH, VERSION, correlationId, "bench", request)


def sessionOf(response: bytes) -> tuple[int, int]:
    # correlation id, header tags (flexible v12), throttle, error, session id
    error, sessionId = struct.unpack_from(">hi", response, 4 + 1 + 4)
    return error, sessionId


def run(broker, client, offsets, fetches, withSession) -> dict:
    partitions = sorted(offsets.items())
    sessionId, epoch = 0, -1
    if withSession:
        response = client.sendRaw(fetchFrame(1, partitions, 0, 0))
        error, sessionId = sessionOf(response)
        assert error == 0 and sessionId != 0, (error, sessionId)
        epoch = 1
    sent = received = 0
    cpu = broker.cpuSeconds()
    started = time.monotonic()
    for i in range(fetches):
        if withSession:
            frame = fetchFrame(i + 2, (), sessionId, epoch)
            epoch += 1
        else:
            frame = fetchFrame(i + 2, partitions, 0, -1)
        response = client.sendRaw(frame)
        error, answeredSession = sessionOf(response)
        assert error == 0 and answeredSession == sessionId, (error, answeredSession)
        sent += len(frame)
        received += len(response) + 4
    elapsed = time.monotonic() - started
    cpu = broker.cpuSeconds() - cpu
    return {
        "mode": "session" if withSession else "sessionless",
        "broker_cpu_ms_per_fetch": 1000 * cpu / fetches,
        "wall_ms_per_fetch": 1000 * elapsed / fetches,
        "request_bytes": sent / fetches,
        "response_bytes": received / fetches,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench fetch_sessions")
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--fetches", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as directory:
        with startBroker("kafkatwist", directory) as broker:
            client = KafkaWireClient(f"127.0.0.1:{broker.port}", timeout=120)
            client.createTopics({TOPIC: args.partitions})
            for p in range(args.partitions):
                client.produce(TOPIC, p, [Record(value=b"x" * 100)])
            for p in range(BUSY):
                client.produce(TOPIC, p, [Record(value=b"y" * 100) for _ in range(BUSY - 1)])
            scenarios = {
                "idle": {p: BUSY if p < BUSY else 1 for p in range(args.partitions)},
                f"{BUSY} busy": {p: 0 if p < BUSY else 1 for p in range(args.partitions)},
            }
            for scenario, offsets in scenarios.items():
                for repeat in range(args.repeats):
                    order = (False, True) if repeat % 2 == 0 else (True, False)
                    for withSession in order:
                        # A fresh connection per run, as a restarted consumer.
                        with KafkaWireClient(f"127.0.0.1:{broker.port}", timeout=120) as c:
                            row = run(broker, c, offsets, args.fetches, withSession)
                        key = (scenario, row["mode"])
                        best = results.get(key)
                        if best is None or row["broker_cpu_ms_per_fetch"] < best["broker_cpu_ms_per_fetch"]:
                            results[key] = row
            client.close()
    rows = [dict(scenario=s, **r) for (s, _), r in results.items()]
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.partitions} partitions, {args.fetches} fetches per run, best of {args.repeats}")
    print("| scenario | mode | broker CPU ms/fetch | wall ms/fetch | request bytes | response bytes |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['scenario']} | {row['mode']} | {row['broker_cpu_ms_per_fetch']:.3f} "
            f"| {row['wall_ms_per_fetch']:.3f} | {row['request_bytes']:.0f} | {row['response_bytes']:.0f} |"
        )
    return 0
