"""
Rough throughput of the record codec (not a test; run by hand):

    .venv/bin/python -m tests.client.bench_records [records]
"""

import sys
import time

from kafkatwist.protocol.records import Record, buildBatch, decodeBatches


def main(count: int = 100_000, perBatch: int = 1000) -> None:
    # 100-byte records: an 8-byte key and a 92-byte value
    records = [
        Record(
            timestamp=1_700_000_000_000 + i, key=b"k%07d" % i, value=(b"%08d" % i) * 11 + b"abcd"
        )
        for i in range(count)
    ]
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        started = time.perf_counter()
        raw = b"".join(
            buildBatch(records[i : i + perBatch], codec, baseOffset=i)
            for i in range(0, count, perBatch)
        )
        encoded = time.perf_counter() - started
        started = time.perf_counter()
        decoded = sum(len(b.records) for b in decodeBatches(raw))
        elapsed = time.perf_counter() - started
        assert decoded == count
        print(
            f"{codec:6s}  encode {count / encoded:>10,.0f} records/s   "
            f"decode {count / elapsed:>10,.0f} records/s   {len(raw):>10,} bytes"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
