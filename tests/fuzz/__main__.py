"""
python -m tests.fuzz [--frames N | --seconds S] [--connections C] [--seed K]
                     [--results bench/fuzz-results.json]

Fuzz a real broker process with mutated frames; print progress, write the
results as JSON (C{python -m bench fuzz} prints them as a table).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from tests.fuzz.engine import FuzzRun

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "bench", "fuzz-results.json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[1])
    parser.add_argument("--frames", type=int, default=None, help="mutated frames to send")
    parser.add_argument("--seconds", type=float, default=None, help="or: how long to fuzz")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=3.0,
                        help="seconds before an unanswered request's connection is dropped")
    parser.add_argument("--results", default=RESULTS)
    parser.add_argument("--directory", default=None, help="broker data and log (default: a temporary one)")
    args = parser.parse_args(argv)
    if args.frames is None and args.seconds is None:
        args.frames = 1_000_000
    with tempfile.TemporaryDirectory(prefix="kafkatwist-fuzz-") as scratch:
        run = FuzzRun(args.directory or scratch, frames=args.frames, seconds=args.seconds,
                      connections=args.connections, seed=args.seed, timeout=args.timeout,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
        results = run.run()
    results["command"] = "python -m tests.fuzz " + " ".join(argv if argv is not None else sys.argv[1:])
    with open(args.results, "w") as f:
        json.dump(results, f, indent=1)
    from bench.fuzz import render

    print(render(results))
    ok = not results["crashes"] and not results["tracebackCount"] and not results["roundTrips"]["failed"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
