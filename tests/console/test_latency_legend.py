"""
The overview's "Produce / fetch p99" legend: a p99 exists only over a
sampled interval with requests, so after a produce and a fetch the legend
keeps showing the last such interval's value (with its age) instead of "-",
and says "no requests in the last N s" before any.
"""

import pytest

from tests.console.browser import chromium, dumpDom
from tests.console.helpers import get
from kafkatwist.testing import waitUntil

pytestmark = pytest.mark.integration


def legend(broker) -> str:
    dom = dumpDom(broker.http + "/")
    return dom.split('id="chart-latency"', 1)[1].split('class="plot"', 1)[0]


def test_p99_after_produce_and_fetch(consoleBroker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = consoleBroker
    chromium()
    waitUntil(lambda: get(b, "/api/history")["series"], what="a first sampled interval")
    assert "no requests in the last" in legend(b)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    producer.produce("p99-topic", value=b"v")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "p99", "enable.auto.commit": False})
    consumer.assign([TopicPartition("p99-topic", 0, 0)])
    assert waitUntil(lambda: consumer.poll(0.5), what="the record fetched").value() == b"v"
    consumer.close()

    def seenThenQuiet():
        series = get(b, "/api/history")["series"]
        seen = [r for r in series if r["produceP99Ms"] is not None and r["fetchP99Ms"] is not None]
        return seen and series[-1]["produceP99Ms"] is None and series[-1]["fetchP99Ms"] is None

    waitUntil(seenThenQuiet, what="an interval with produce and fetch, then one without", timeout=60)
    shown = legend(b)
    assert "—" not in shown and shown.count(" ms, ") == 2 and " s ago" in shown, shown
