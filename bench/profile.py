"""
Profile the broker's produce and fetch paths with py-spy under the
throughput load (confluent-kafka, 100-byte records, acks=1, linger.ms=5).

    python -m bench profile [--partitions 8] [--records 2000000]
        [--spy "--gil -r 1000"] [--out DIR]

Writes py-spy's raw (collapsed) stacks per phase to DIR and prints, per
phase, the broker's user/system CPU and the hottest functions (self and
inclusive, line numbers folded).  Add C{--native} to the spy arguments to
see C frames (futex, memmove); it slows the broker down.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

from bench.brokers import processCpuTimes, startBroker
from bench.throughput import confluentConsume, confluentProduce, createTopic


def summarize(path: str, top: int = 25) -> str:
    selfCounts: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not n.isdigit():
                continue
            n = int(n)
            frames = [re.sub(r":\d+\)", ")", frame) for frame in stack.split(";")]
            total += n
            selfCounts[frames[-1]] += n
            for frame in set(frames[1:]):
                inclusive[frame] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples", "self:"]
    lines += [f"  {n * 100 / total:5.1f}%  {frame}" for frame, n in selfCounts.most_common(top)]
    lines.append("inclusive:")
    lines += [f"  {n * 100 / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top + 15)]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--spy", default="--gil -r 1000", help="py-spy record arguments")
    parser.add_argument("--out", default="bench-profiles")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kt-profile-") as directory:
        with startBroker("kafkatwist", directory) as broker:
            topic = "profile"
            createTopic(broker.bootstrap, topic, args.partitions)
            for phase, run in (("produce", confluentProduce), ("consume", confluentConsume)):
                out = os.path.join(args.out, f"{phase}-{args.partitions}.txt")
                recorder = subprocess.Popen(
                    [spy, "record", "--pid", str(broker.pid), *args.spy.split(), "-f", "raw", "-o", out],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                time.sleep(1.0)
                user, system = processCpuTimes(broker.pid)
                started = time.perf_counter()
                run(broker.bootstrap, topic, args.records, args.partitions)
                elapsed = time.perf_counter() - started
                user2, system2 = processCpuTimes(broker.pid)
                recorder.send_signal(2)
                recorder.wait(30)
                perMillion = 1e6 / args.records
                print(f"== {phase}, {args.partitions} partitions: {args.records / elapsed:,.0f} records/s, "
                      f"broker CPU per million records: user {(user2 - user) * perMillion:.2f} s, "
                      f"system {(system2 - system) * perMillion:.2f} s (under py-spy)")
                print(summarize(out) if os.path.exists(out) else "py-spy wrote nothing (permissions?)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
