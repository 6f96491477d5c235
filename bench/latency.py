"""
Produce->ack latency at 1,000 records/s with a consumer tailing: each run's own p99.

    python -m bench latency [--runs 5] [--seconds 5] [--reference kafkatwist:PATH]
        [--gc-trace]

Each run is what C{python -m bench comparison} pools over (its
C{latencyRun}): a fresh topic, a confluent producer at 1,000 records/s
(linger.ms=0, acks=1, blocking in poll() between sends) alone, then again
while a consumer in another process tails the topic (a parked long-poll
Fetch woken by every append).  Every run gets a broker of its own, started
fresh (measured from its "started" line, after the start-up's full
collection and C{gc.freeze()}), so one run's garbage or one stall does not
carry into the next; with
C{--reference} the two trees alternate (A B, B A, ...).  Prints each run's
p50/p99/max of the three latencies, then every run's p99 of the
with-consumer row on one line: issue 29's target is <= 2 ms in each of them.

C{--gc-trace} also has each broker report its garbage collector's pauses
(a C{sitecustomize} on its path hooks C{gc.callbacks}): collections and
their longest pause per generation during the run, to tell a GC pause from
the rest of the tail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from bench.brokers import startBroker
from bench.comparison import latencyRun, percentile

#: The sitecustomize C{--gc-trace} puts on the broker's path: it writes
#: each collection's generation, duration (microseconds) and end
#: (C{time.monotonic()}) to C{$KT_GC_TRACE} every half second.
_GC_HOOK = '''
import gc, json, os, threading, time
_path = os.environ.get("KT_GC_TRACE")
if _path:
    _pauses = []
    _started = [0]
    def _hook(phase, info, _now=time.perf_counter_ns):
        if phase == "start":
            _started[0] = _now()
        else:
            _pauses.append((info["generation"], (_now() - _started[0]) // 1000, time.monotonic()))
    gc.callbacks.append(_hook)
    # twistd ends on SIGTERM by re-raising it (no atexit): written as it goes.
    def _dump():
        while True:
            time.sleep(0.5)
            with open(_path + ".tmp", "w") as f:
                json.dump(list(_pauses), f)
            os.replace(_path + ".tmp", _path)
    threading.Thread(target=_dump, daemon=True, name="gc-trace").start()
'''


def _waitStarted(broker, directory: str, timeout: float = 60.0) -> None:
    """
    Wait for the broker's "started" line: its port is bound before the
    start-up's last full collection and C{gc.freeze()}, which must not fall
    into the measurement.
    """
    path = os.path.join(directory, f"kafkatwist-{broker.port}.log.twistd")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                if " started" in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"no 'started' line in {path} within {timeout:.0f} s")


def _row(samples: list[float]) -> str:
    if not samples:
        return "no samples"
    ms = [s / 1000 for s in samples]
    return f"p50 {percentile(ms, 50):.2f} p99 {percentile(ms, 99):.2f} max {max(ms):.2f} ms ({len(ms)})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of each phase of a run")
    parser.add_argument("--reference", default=None, help="kafkatwist:PATH, another source tree")
    parser.add_argument("--gc-trace", action="store_true", help="report the brokers' GC pauses")
    args = parser.parse_args(argv)
    names = ["kafkatwist"] + ([args.reference] if args.reference else [])
    p99s: dict[str, list[float]] = {n: [] for n in names}
    started = time.monotonic()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="kt-latency-") as directory:
        hookDir = os.path.join(directory, "gchook")
        os.makedirs(hookDir)
        with open(os.path.join(hookDir, "sitecustomize.py"), "w") as f:
            f.write(_GC_HOOK)
        saved = dict(os.environ)
        for run in range(args.runs):
            order = names if run % 2 == 0 else names[::-1]
            for name in order:
                trace = os.path.join(directory, f"gc-{run}-{len(p99s[name])}.json")
                if args.gc_trace:
                    os.environ["KT_GC_TRACE"] = trace
                    os.environ["PYTHONPATH"] = hookDir + os.pathsep + saved.get("PYTHONPATH", "")
                try:
                    with startBroker(name, directory) as broker:
                        os.environ.clear()
                        os.environ.update(saved)
                        _waitStarted(broker, directory)
                        window = (time.monotonic(),)
                        result = latencyRun(broker, args.seconds)
                        window += (time.monotonic(),)
                finally:
                    os.environ.clear()
                    os.environ.update(saved)
                p99 = percentile(result["ack_with_consumer"], 99) / 1000
                p99s[name].append(p99)
                print(f"run {run + 1} {name}", flush=True)
                print(f"  ack alone          {_row(result['ack_alone'])}", flush=True)
                print(f"  ack with consumer  {_row(result['ack_with_consumer'])}", flush=True)
                print(f"  end to end         {_row(result['e2e'])}", flush=True)
                if args.gc_trace and os.path.exists(trace):
                    with open(trace) as f:
                        pauses = [p for p in json.load(f) if window[0] <= p[2] <= window[1]]
                    for generation in (0, 1, 2):
                        each = [us for g, us, _ in pauses if g == generation]
                        if each:
                            print(f"  gc gen {generation}: {len(each)} collections, longest {max(each)} us, "
                                  f"{sum(1 for us in each if us >= 500)} of 0.5 ms or more", flush=True)
    print(f"\n{args.runs} runs of {args.seconds:.0f} s per phase, 1,000 records/s; load average "
          f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; {time.monotonic() - started:.0f} s")
    for name in names:
        each = ", ".join(f"{p:.2f}" for p in p99s[name])
        print(f"{name}: produce->ack p99 with a consumer, each run: {each} ms; "
              f"worst {max(p99s[name]):.2f} ms (target <= 2 ms in every run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
