"""
A real Prometheus (Debian's package, installed by this set-up when missing)
scrapes a broker under load: the scrape succeeds, Prometheus keeps every
family's type, and every query of the Grafana dashboard
(docs/grafana/kafkatwist.json) names metrics that exist and returns data.
"""

import re
import time
import urllib.request

import pytest

from tests.prometheus import (
    PrometheusServer,
    concrete,
    dashboardTargets,
    findPrometheus,
    metricNames,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def scrapeText(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def runLoad(bootstrap, until, timeout=90.0, topic="dashboard", group="dashboard-readers"):
    """
    Produce and consume until C{until()} (asked about once a second) is
    true, committing behind the end so the group has lag.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + timeout
    asked = time.monotonic()
    sent = 0
    try:
        while True:
            if time.monotonic() - asked >= 1.0:
                asked = time.monotonic()
                if until():
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"Prometheus had no data for every dashboard query after {timeout} s")
            for _ in range(50):
                producer.produce(topic, key=b"k%d" % (sent % 7), value=b"x" * 200, partition=sent % 2)
                sent += 1
            producer.poll(0)
            message = consumer.poll(0.05)
            if message is not None and message.error() is None and message.offset() > 10:
                consumer.commit(offsets=[TopicPartition(topic, message.partition(), message.offset() - 10)],
                                asynchronous=False)
        producer.flush(15)
    finally:
        consumer.close()
    return sent


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    binary, why = findPrometheus()
    if binary is None:
        pytest.skip(why)
    from kafkatwist.testing import Broker

    directory = tmp_path_factory.mktemp("prometheus")
    broker = Broker(str(directory / "broker"), {"metrics.http.listener": "127.0.0.1:0",
                                                       "num.partitions": "2"}).start()
    metricsPort = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.output()).group(1))
    prometheus = PrometheusServer(binary, str(directory / "prometheus"), f"127.0.0.1:{metricsPort}")
    try:
        prometheus.waitForTarget()

        def everyQueryHasData():
            # The load runs until Prometheus has scraped enough of it to
            # answer every panel's query (rates need two scrapes).
            return all(prometheus.api("query", query=concrete(expr, "15s"))["result"]
                       for _, expr, _ in dashboardTargets())

        runLoad(broker.bootstrap, everyQueryHasData)
        yield prometheus, scrapeText(metricsPort)
    finally:
        prometheus.stop()
        broker.stop()


def test_scrape_is_healthy(scraped):
    prometheus, _ = scraped
    target = prometheus.waitForTarget(timeout=10)
    assert target["health"] == "up" and target["lastError"] == ""
    assert prometheus.api("query", query='up{job="kafkatwist"}')["result"][0]["value"][1] == "1"


def test_prometheus_keeps_every_family_type(scraped):
    prometheus, text = scraped
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    metadata = prometheus.api("metadata")
    for family, kind in declared.items():
        assert family in metadata, f"{family} unknown to Prometheus"
        assert {m["type"] for m in metadata[family]} == {kind}, family


@pytest.mark.parametrize("title, expr, legend", dashboardTargets(), ids=lambda v: v if len(v) < 60 else None)
def test_dashboard_query_has_data(scraped, title, expr, legend):
    prometheus, text = scraped
    samples = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for name in metricNames(expr):
        assert name in samples, f"panel {title!r} uses {name}, which the broker does not export"
    result = prometheus.api("query", query=concrete(expr, "15s"))["result"]
    assert result, f"panel {title!r}: {expr} returns nothing"
