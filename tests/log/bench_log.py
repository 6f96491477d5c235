"""
Log throughput figures (not a test): run with
C{.venv/bin/python -m tests.log.bench_log [directory]}.

Appends 1,000,000 records of 100-byte values in batches of 1000, then
single-record batches without and with a producer id (idempotent), retried
batches (duplicates), then measures read latency (region creation) at
random offsets.
"""

from __future__ import annotations

import random
import shutil
import sys
import tempfile
import time

from kafkatwist.log import LogManager, MemoryLogManager

from .batches import makeBatch

RECORDS = 1_000_000
PER_BATCH = 1000
NOW = 1_700_000_000_000


def bench(manager, label: str) -> None:
    manager.createTopic("bench", 1, {})
    log = manager.getLog("bench", 0)
    batch = makeBatch(PER_BATCH, valueSize=100, baseTimestamp=NOW)
    appends = RECORDS // PER_BATCH
    start = time.perf_counter()
    for _ in range(appends):
        log.append(batch, NOW)
    elapsed = time.perf_counter() - start
    total = len(batch) * appends
    print(
        f"{label}: append {RECORDS:,} records ({total / 1e6:.1f} MB) in {elapsed:.3f}s: "
        f"{total / 1e6 / elapsed:.0f} MB/s, {elapsed / appends * 1e6:.0f} us per append "
        f"({RECORDS / elapsed / 1e6:.2f} M records/s)"
    )
    small = makeBatch(1, valueSize=100, baseTimestamp=NOW)
    start = time.perf_counter()
    for _ in range(20000):
        log.append(small, NOW)
    elapsed = time.perf_counter() - start
    print(f"{label}: single-record batch appends: {elapsed / 20000 * 1e6:.1f} us per append")
    # Idempotent producer: the same single-record batches with a producer id
    # and consecutive sequences (built beforehand: the CRC covers them).
    idempotent = [
        makeBatch(1, valueSize=100, baseTimestamp=NOW, producerId=1, producerEpoch=0, baseSequence=i)
        for i in range(20000)
    ]
    start = time.perf_counter()
    for batch in idempotent:
        log.append(batch, NOW)
    elapsed = time.perf_counter() - start
    print(f"{label}: idempotent single-record appends: {elapsed / 20000 * 1e6:.1f} us per append")
    retries = idempotent[-5:] * 2000
    start = time.perf_counter()
    for batch in retries:
        log.append(batch, NOW)
    elapsed = time.perf_counter() - start
    print(f"{label}: duplicate (retried) batch: {elapsed / len(retries) * 1e6:.1f} us per append")
    rng = random.Random(1)
    end = log.logEndOffset
    for maxBytes in (1 << 20, 16 << 10):
        samples = []
        for _ in range(5000):
            offset = rng.randrange(end)
            t0 = time.perf_counter()
            records = log.read(offset, maxBytes).records
            samples.append(time.perf_counter() - t0)
            if not isinstance(records, bytes):
                records.close()
        samples.sort()
        print(
            f"{label}: read(maxBytes={maxBytes}) latency: "
            f"median {samples[len(samples) // 2] * 1e6:.1f} us, "
            f"p99 {samples[int(len(samples) * 0.99)] * 1e6:.1f} us"
        )
    manager.close()


def main() -> None:
    directory = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kafkatwist-bench-")
    try:
        bench(LogManager([directory]), "disk")
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    bench(MemoryLogManager(), "memory")


if __name__ == "__main__":
    main()
