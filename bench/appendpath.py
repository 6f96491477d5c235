"""
The append path alone (issue 29): Python opcodes and wall time per append
through the replica manager's append seam (C{appendRecords}, what Produce
calls) into a partition log on disk, without the network or the handler.

    python -m bench appendpath [--records 1] [--idempotent] [--acks 1]
        [--appends 20000] [--top 25] [--reference PATH]

Counts the Python opcodes every frame executes while one append runs
(C{sys.settrace} with C{f_trace_opcodes}; load-independent, like
C{bench instructions}, but blind to the C work: CRC, the write), by
function, then times C{--appends} appends (blurred by the machine's load:
compare trees in one run, alternated).  C{--reference} runs the same on
another tree (its C{kafkatwist} first on the path) for an A/B.

Instructions per append (the C work included), as RESULTS.md reports
them: run it twice under callgrind with equal C{--build} and different
C{--appends} and divide the difference of the totals, e.g.

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/tmp/a.N \
        python bench/appendpath.py --appends N --build 2800 --top 0     # N = 500, 2500

The batches are those of C{bench instructions}' Produce: C{--records}
100-byte records, linger-like timestamp deltas; C{--idempotent} gives each
append a producer id and consecutive sequences (built beforehand: the CRC
covers them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter

NOW = 1_700_000_000_000


def _batches(n: int, records: int, idempotent: bool) -> list:
    from kafkatwist.protocol.records import Record, buildBatch

    out = []
    for i in range(n):
        kw = dict(producerId=7, producerEpoch=0, baseSequence=(i * records) % 2**31) if idempotent else {}
        out.append(
            memoryview(
                buildBatch(
                    [Record(timestamp=NOW + j * 5 // records, value=b"x" * 100) for j in range(records)],
                    **kw,
                )
            )
        )
    return out


def _seam(acks: int):
    try:
        from kafkatwist.replication.appends import appendToLeader
    except ImportError:  # an older tree: the log is the seam
        def appendToLeader(log, records, nowMs, requiredAcks):
            return log.append(records, nowMs)
    return appendToLeader


def _count(call, lines: bool = False) -> tuple[int, Counter]:
    byFunction: Counter = Counter()

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        code = frame.f_code
        name = f"{os.path.basename(code.co_filename)}:{code.co_qualname}"

        def local(frame, event, arg):
            if event == "opcode":
                byFunction[f"{name}:{frame.f_lineno}" if lines else name] += 1
            return local

        return local

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return sum(byFunction.values()), byFunction


def run(args) -> None:
    from kafkatwist.log import LogManager

    directory = tempfile.mkdtemp(prefix="kafkatwist-appendpath-")
    try:
        manager = LogManager([directory])
        manager.createTopic("t", 1, {})
        log = manager.getLog("t", 0)
        append = _seam(args.acks)
        warm = 200
        batches = _batches(max(args.build, args.appends + warm + 10), args.records, args.idempotent)
        # Warm up (first append of an epoch, index loading, handle cache).
        for batch in batches[:warm]:
            append(log, batch, NOW, args.acks)
        counted = []
        for batch in batches[warm : warm + 10]:
            counted.append(_count(lambda batch=batch: append(log, batch, NOW, args.acks), args.lines))
        total, byFunction = min(counted, key=lambda c: c[0])
        rest = batches[warm + 10 : warm + 10 + args.appends]
        start = time.perf_counter()
        for batch in rest:
            append(log, batch, NOW, args.acks)
        elapsed = time.perf_counter() - start
        print(
            f"{args.label}: {total} Python opcodes per append ({args.records} record(s), "
            f"{'idempotent' if args.idempotent else 'no producer id'}, acks={args.acks}); "
            f"{elapsed / len(rest) * 1e6:.2f} us per append over {len(rest)}"
        )
        for name, count in byFunction.most_common(args.top):
            print(f"  {count:6d}  {name}")
        manager.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.appendpath")
    parser.add_argument("--records", type=int, default=1)
    parser.add_argument("--idempotent", action="store_true")
    parser.add_argument("--acks", type=int, default=1)
    parser.add_argument("--appends", type=int, default=20000)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--build", type=int, default=0,
        help="batches to build beforehand (at least what the run appends): equal in two runs "
        "whose difference is counted (callgrind)",
    )
    parser.add_argument("--lines", action="store_true", help="opcodes by line, not by function")
    parser.add_argument("--reference", default=None, help="another tree's root (its kafkatwist/)")
    parser.add_argument("--label", default="this tree")
    args = parser.parse_args(argv)
    if args.reference:
        here = [a for a in argv if not a.startswith("--reference") and a != args.reference]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.abspath(args.reference), os.getcwd()]))
        subprocess.run(
            [sys.executable, os.path.abspath(__file__), *here, "--label", args.reference], env=env, check=True
        )
    run(args)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if os.environ.get("PYTHONPATH"):
        sys.path[:0] = os.environ["PYTHONPATH"].split(os.pathsep)
    raise SystemExit(main(sys.argv[1:]))
