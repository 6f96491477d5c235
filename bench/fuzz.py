"""
The fuzzer's figures (issue 11): frames per second, crashes, unhandled
tracebacks, a real client's round trips, the broker's RSS before and after.

    python -m bench fuzz [RESULTS.json]     # print a run's results
    python -m bench fuzz --run [ARGS]        # run the fuzzer first (python -m tests.fuzz ARGS)

C{make fuzz} runs 10^6 frames and prints this.
"""

from __future__ import annotations

import json
import os
import sys

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fuzz-results.json")


def _mib(kib) -> str:
    return f"{kib / 1024:.0f} MiB" if kib else "-"


def render(r: dict) -> str:
    rss = r.get("rssKiB", {})
    trips = r.get("roundTrips", {})
    rows = [
        ("mutated frames", f"{r['frames']:,}"),
        ("seconds", f"{r['seconds']:,}"),
        ("frames/s", f"{r['framesPerSecond']:,}"),
        ("answered / closed by broker / timed out", f"{r['answered']:,} / {r['closedByBroker']:,} / {r['timeouts']:,}"),
        ("crashes (broker process died)", str(len(r["crashes"]))),
        ("unhandled tracebacks in the broker log", str(r["tracebackCount"])),
        ("error/critical log lines", str(r.get("errorLineCount", 0))),
        ("answers with a wrong correlation id", str(r.get("mismatchedAnswers", 0))),
        ("real client round trips ok / failed", f"{trips.get('ok', 0)} / {trips.get('failed', 0)}"),
        ("broker RSS before / after / peak", f"{_mib(rss.get('before'))} / {_mib(rss.get('after'))} / {_mib(rss.get('peak'))}"),
        ("broker RSS every 30 s", " ".join(f"{kib // 1024}" for _, kib in r.get("rssSamplesKiB", [])) + " MiB"),
        ("seeds (by origin)", f"{r['seeds']} ({', '.join(f'{k} {v}' for k, v in sorted(r.get('seedsByOrigin', {}).items()))})"),
        ("mutations", ", ".join(f"{k} {v:,}" for k, v in r.get("mutations", {}).items())),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"fuzz run: {r.get('command', '')}"]
    lines += [f"  {k:<{width}}  {v}" for k, v in rows]
    for signature, count in list(r.get("tracebackSignatures", {}).items())[:20]:
        lines.append(f"  {count:>7}  {signature}")
    for kind in ("crashes", "tracebacks"):
        for item in r.get(kind, [])[:3]:
            lines.append(f"  {kind[:-1]}: frames {item.get('frames', [])[:2]}")
            lines.append("    " + item.get("log", "")[-1500:].replace("\n", "\n    "))
    for failure in trips.get("failures", [])[:5]:
        lines.append(f"  round trip failed: {failure}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--run":
        from tests.fuzz.__main__ import main as fuzz

        return fuzz(argv[1:])
    path = argv[0] if argv else RESULTS
    with open(path) as f:
        print(render(json.load(f)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
