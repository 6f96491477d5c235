"""
A handler that raises is answered as Kafka answers it: UNKNOWN_SERVER_ERROR
for what the request named, one log line, and the connection stays open.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration

POISON_PLUGIN = '''
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import PRODUCE


class Poisoned(Handler):
    apiKey = PRODUCE

    def __init__(self, broker, wrapped):
        super().__init__(broker, wrapped)
        self.minVersion, self.maxVersion = wrapped.minVersion, wrapped.maxVersion

    def handle(self, context, request):
        if any(t.name == "poisoned" for t in request.topic_data):
            raise ValueError("this plugin refuses topic poisoned")
        return self.wrapped.handle(context, request)


poisoned = HandlerPlugin("test.poisoned", PRODUCE, Poisoned, priority=10)
'''


def test_a_raising_handler_answers_unknown_server_error_and_keeps_the_connection(brokerFactory, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "poison.py").write_text(POISON_PLUGIN)
    broker = brokerFactory({"plugin.paths": str(plugins)}).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("poisoned", 1), NewTopic("healthy", 1)]).values():
        future.result(timeout=30)

    stats = []
    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "linger.ms": 0,
        # Long enough that only an answer (not a time-out) can fail a record.
        "message.timeout.ms": 60000,
        "statistics.interval.ms": 100,
        "stats_cb": stats.append,
    })
    results = []

    def report(err, msg):
        results.append((msg.topic(), err))

    producer.produce("healthy", b"before", on_delivery=report)
    assert producer.flush(30) == 0
    producer.produce("poisoned", b"refused", on_delivery=report)
    assert producer.flush(30) == 0
    producer.produce("healthy", b"after", on_delivery=report)
    assert producer.flush(30) == 0
    producer.poll(0.5)

    assert [topic for topic, _ in results] == ["healthy", "poisoned", "healthy"]
    assert results[0][1] is None and results[2][1] is None
    error = results[1][1]
    assert error is not None and error.name() == "UNKNOWN", error
    # One connection to the broker all along (librdkafka counts its connects).
    last = json.loads(stats[-1])
    [brokerStats] = [b for b in last["brokers"].values() if b["nodeid"] >= 0]
    assert brokerStats["connects"] == 1, brokerStats
    assert brokerStats["disconnects"] == 0, brokerStats

    output = broker.output()
    failures = [l for l in output.splitlines() if "Handler for produce" in l]
    assert len(failures) == 1, failures
    assert "ValueError: this plugin refuses topic poisoned; answered UNKNOWN_SERVER_ERROR" in failures[0]
    assert "Traceback" not in output
