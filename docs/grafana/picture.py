"""
Draw docs/grafana/kafkatwist.png: the dashboard's panels, from a real run.

Grafana itself is not packaged where this project is developed, so the
picture is not a Grafana screenshot: a broker runs under a changing load, a
real Prometheus scrapes it every second, each panel's query of
kafkatwist.json is run over the whole run with query_range, and matplotlib
draws the results in the dashboard's layout.

    .venv/bin/python docs/grafana/picture.py collect run.json [--seconds 120]
    python docs/grafana/picture.py render run.json docs/grafana/kafkatwist.png   (needs matplotlib)

Run from the checkout's root (collect uses the test helpers in tests/).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def collect(out: str, seconds: float) -> None:
    sys.path.insert(0, ROOT)
    from confluent_kafka import Consumer, Producer, TopicPartition

    from kafkatwist.testing import Broker
    from tests.prometheus import PrometheusServer, concrete, findPrometheus

    binary, why = findPrometheus()
    if binary is None:
        raise SystemExit(why)
    directory = tempfile.mkdtemp(prefix="kafkatwist-picture-")
    broker = Broker(os.path.join(directory, "broker"),
                           {"metrics.http.listener": "127.0.0.1:0", "num.partitions": "2"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.output()).group(1))
    prometheus = PrometheusServer(binary, os.path.join(directory, "prometheus"), f"127.0.0.1:{port}")
    try:
        prometheus.waitForTarget()
        started = time.time()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        readers = [Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
                   for group in ("billing", "audit")]
        for reader, topics in zip(readers, (["orders"], ["orders", "clicks"])):
            reader.subscribe(topics)
        sent = 0
        while time.time() - started < seconds:
            phase = (time.time() - started) / seconds
            # Orders swell and ebb; clicks come in a burst in the middle.
            ordersPerTick = int(20 + 60 * math.sin(math.pi * phase) ** 2)
            clicksPerTick = 80 if 0.4 < phase < 0.6 else 5
            for _ in range(ordersPerTick):
                producer.produce("orders", value=os.urandom(300), partition=sent % 2)
                sent += 1
            for _ in range(clicksPerTick):
                producer.produce("clicks", value=os.urandom(120))
            producer.poll(0)
            for i, reader in enumerate(readers):
                # The audit reader falls behind for a while, then catches up.
                if i == 1 and 0.3 < phase < 0.7:
                    continue
                for message in reader.consume(200, 0.02):
                    if message.error() is None and message.offset() % 50 == 0:
                        reader.commit(offsets=[TopicPartition(message.topic(), message.partition(),
                                                              message.offset() + 1)], asynchronous=False)
            time.sleep(0.05)
        producer.flush(15)
        for reader in readers:
            reader.close()
        end = time.time()
        time.sleep(2)
        with open(os.path.join(ROOT, "docs", "grafana", "kafkatwist.json")) as f:
            dashboard = json.load(f)
        panels = []
        for panel in dashboard["panels"]:
            series = []
            for target in panel["targets"]:
                result = prometheus.api("query_range", query=concrete(target["expr"], "10s"),
                                        start=f"{started + 10:.3f}", end=f"{end:.3f}", step="2")
                for item in result["result"]:
                    series.append({"labels": item["metric"], "legendFormat": target["legendFormat"],
                                   "points": [(float(t) - started, float(v)) for t, v in item["values"]]})
            panels.append({"title": panel["title"], "unit": panel["fieldConfig"]["defaults"]["unit"],
                           "gridPos": panel["gridPos"], "series": series})
        with open(out, "w") as f:
            json.dump({"seconds": seconds, "records": sent, "panels": panels}, f)
        print(f"wrote {out}: {len(panels)} panels over {seconds:.0f} s")
    finally:
        prometheus.stop()
        broker.stop()


_UNITS = {"reqps": "req/s", "s": "s", "Bps": "B/s", "short": "", "percentunit": "",
          "bytes": "B"}


def render(data: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter, PercentFormatter

    sys.path.insert(0, ROOT)
    from tests.prometheus import legend

    with open(data) as f:
        run = json.load(f)
    panels = run["panels"]
    rows = max(p["gridPos"]["y"] // 8 for p in panels) + 1
    plt.style.use("dark_background")
    figure, axes = plt.subplots(rows, 2, figsize=(16, 3.1 * rows), facecolor="#111217")
    for panel in panels:
        ax = axes[panel["gridPos"]["y"] // 8][panel["gridPos"]["x"] // 12]
        ax.set_facecolor("#181b1f")
        ax.set_title(panel["title"], loc="left", fontsize=10, color="#ccccdc")
        for series in panel["series"]:
            if not series["points"]:
                continue
            xs, ys = zip(*series["points"])
            ax.plot(xs, ys, linewidth=1.2, label=legend(series["legendFormat"], series["labels"]))
        unit = panel["unit"]
        if unit == "percentunit":
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        else:
            ax.yaxis.set_major_formatter(EngFormatter(unit=_UNITS.get(unit, "")))
        ax.grid(color="#2c3235", linewidth=0.6)
        ax.tick_params(labelsize=8, colors="#9fa7b3")
        ax.set_xlabel("seconds into the run", fontsize=7, color="#9fa7b3")
        handles, labels = ax.get_legend_handles_labels()
        if labels:
            ax.legend(fontsize=7, loc="upper left", ncol=min(4, len(labels)), framealpha=0.3)
    figure.suptitle(
        f"kafkatwist dashboard (docs/grafana/kafkatwist.json): its queries run on a real Prometheus "
        f"scraping a broker for {run['seconds']:.0f} s; drawn with matplotlib, not Grafana",
        fontsize=10, color="#ccccdc",
    )
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(out, dpi=80, facecolor=figure.get_facecolor())
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("collect")
    c.add_argument("out")
    c.add_argument("--seconds", type=float, default=120)
    r = commands.add_parser("render")
    r.add_argument("data")
    r.add_argument("out")
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.out, args.seconds)
    else:
        render(args.data, args.out)


if __name__ == "__main__":
    main()
