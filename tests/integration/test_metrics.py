"""
The Prometheus endpoint, scraped after a produce/consume run, shows the
requests and bytes the run caused.
"""

import re
import urllib.error
import urllib.request

import pytest

from tests.integration.helpers import confluentConsume, confluentProduce

pytestmark = pytest.mark.integration


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["content-type"].startswith("text/plain")
        return response.read().decode()


def value(text, name, **labels):
    pattern = name + r"\{" + ",".join(f'[^}}]*{k}="{re.escape(str(v))}"' for k, v in labels.items())
    for line in text.splitlines():
        if re.match(pattern, line) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not in scrape")


def test_scrape_after_produce_and_consume(brokerFactory):
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0", "request.logging.enable": "true"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    confluentProduce(b.bootstrap, "scraped", 5000, "none")
    rows, _ = confluentConsume(b.bootstrap, "scraped", 5000)
    produced = sum(len(k) + len(v) for k, v, _ in rows)
    text = scrape(port)

    assert value(text, "kafka_network_requests_total", request="produce") >= 1
    assert value(text, "kafka_network_requests_total", request="fetch") >= 1
    assert value(text, "kafka_network_requests_total", request="api_versions") >= 2
    assert value(text, "kafka_network_request_time_seconds_count", request="produce", phase="total") >= 1
    bytesIn = value(text, "kafka_server_bytes_in_total", topic="scraped")
    bytesOut = value(text, "kafka_server_bytes_out_total", topic="scraped")
    # Batches carry framing beyond keys and values, and nothing else.
    assert produced < bytesIn < produced * 2
    assert bytesOut >= bytesIn
    assert value(text, "kafka_log_log_end_offset", topic="scraped", partition=0) == 5000
    assert value(text, "kafka_network_connections", listener="PLAINTEXT") >= 0
    assert 0 <= value(text, "kafka_network_processor_idle_ratio", processor=0) <= 1
    assert value(text, "kafka_server_replication_throttled_byte_rate", side="leader") == 0
    assert value(text, "kafka_server_replication_throttled_byte_rate", side="follower") == 0
    assert "Completed request <RequestContext produce" in b.output()
    # The standard process families (prometheus_client's names), GC and threads.
    import time

    plain = {l.split(" ")[0]: float(l.split(" ")[1]) for l in text.splitlines() if l.startswith(("process_", "python_"))}
    assert 0 < plain["process_cpu_seconds_total"] < 10_000
    assert plain["process_resident_memory_bytes"] > 10 << 20
    assert plain["process_open_fds"] >= 5
    assert abs(plain["process_start_time_seconds"] - time.time()) < 3600
    assert plain["process_threads"] >= 4 and plain["python_threads"] >= 4
    assert value(text, "python_gc_collections_total", generation=0) >= 0
    assertStrictlyParsable(text)


def assertStrictlyParsable(text):
    """
    prometheus_client's parser keeps a family's type only when its samples
    follow its TYPE line without another family in between.
    """
    from prometheus_client.parser import text_string_to_metric_families

    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "a family is split"
    untyped = [f.name for f in families if f.type == "unknown"]
    assert not untyped, untyped
    declared = len(re.findall(r"^# TYPE ", text, re.M))
    assert len(families) == declared


def test_only_metrics_path_is_served(brokerFactory):
    # (/ is the web console since issue 28: tests/console.)
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    for path in ("/metrics/x", "/other"):
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10)
        assert raised.value.code == 404, path
    assert "kafka_network_requests_total" in scrape(port)


def test_consumer_group_lag(brokerFactory):
    from confluent_kafka import Consumer, TopicPartition

    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    confluentProduce(b.bootstrap, "lagging", 100, "none")
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "slow"})
    consumer.commit(offsets=[TopicPartition("lagging", 0, 40)], asynchronous=False)
    consumer.close()
    text = scrape(port)
    assert value(text, "kafka_consumergroup_lag", group="slow", topic="lagging", partition=0) == 60
    assertStrictlyParsable(text)
