"""
Compacted topics through a real broker and real clients: consumers see the
latest value of each key across the gaps compaction leaves, tombstones go
after C{delete.retention.ms}, keyless records are refused, a C{kill -9}
during cleaning loses nothing, and C{__consumer_offsets} is compacted and
loaded back.
"""

from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import pytest

from kafkatwist.client import KafkaWireClient
from kafkatwist.protocol.records import Record
from kafkatwist.testing import Broker, waitUntil

pytestmark = pytest.mark.integration

FAST = {"log.cleaner.backoff.ms": "50"}
TABLE = {"cleanup.policy": "compact", "segment.bytes": "8192", "min.cleanable.dirty.ratio": "0.01"}


def produceRounds(bootstrap, topic, rounds, keys, prefix="v", pad=0):
    """
    C{rounds} batches, each with one record per key (values padded with
    C{pad} bytes).

    @return: key -> last value produced.
    """
    latest = {}
    padding = b"." * pad
    with KafkaWireClient(bootstrap) as client:
        for r in range(rounds):
            records = [
                Record(key=b"key-%d" % k, value=b"%s-%d-%d%s" % (prefix.encode(), r, k, padding))
                for k in range(keys)
            ]
            client.produce(topic, 0, records)
            latest.update((rec.key, rec.value) for rec in records)
    return latest


def waitCleaned(broker, topic, passes=1, timeout=60.0):
    pattern = re.compile(rf"cleaned {re.escape(topic)}-0 up to offset (\d+)")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = pattern.findall(broker.output())
        if len(found) >= passes:
            return int(found[-1])
        time.sleep(0.05)
    raise AssertionError(f"{topic} was not cleaned {passes} time(s):\n{broker.output()[-3000:]}")


def confluentReadAll(bootstrap, topic):
    """
    @return: C{[(offset, key, value)]} from the start to the high watermark.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
         "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, 0)])
        rows = []
        deadline = time.monotonic() + 30
        while (not rows or rows[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            rows.append((message.offset(), message.key(), message.value()))
        return rows
    finally:
        consumer.close()


def kafkaPythonReadAll(bootstrap, topic):
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        high = consumer.end_offsets([tp])[tp]
        rows = []
        for message in consumer:
            rows.append((message.offset, message.key, message.value))
            if message.offset >= high - 1:
                break
        return rows
    finally:
        consumer.close()


def latestOf(rows):
    latest = {}
    for _, key, value in rows:
        latest[key] = value
    return latest


def test_clients_read_latest_value_per_key(brokerFactory):
    broker = brokerFactory(FAST).start()
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({"table": (1, TABLE)})
    latest = produceRounds(broker.bootstrap, "table", 60, 40)
    waitCleaned(broker, "table")
    for read in (confluentReadAll, kafkaPythonReadAll):
        rows = read(broker.bootstrap, "table")
        offsets = [o for o, _, _ in rows]
        assert offsets == sorted(set(offsets))
        assert len(rows) < 60 * 40, "nothing was compacted"
        assert offsets[-1] == 60 * 40 - 1
        assert latestOf(rows) == latest, read.__name__
    # ListOffsets by timestamp answers an offset that is there.
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        tp = TopicPartition("table", 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        first = next(iter(consumer))
        found = consumer.offsets_for_times({tp: first.timestamp})[tp]
        assert found.offset in set(offsets) and found.offset <= first.offset

        # Timestamp 0 answers the first record there.  The cleaner may still
        # be compacting the dirty tail of the reads above (a later pass can
        # drop what was first then), so compare with a fresh read of the
        # first record until both agree.
        def firstAgrees():
            consumer.seek_to_beginning(tp)
            firstNow = next(iter(consumer))
            return consumer.offsets_for_times({tp: 0})[tp].offset == firstNow.offset

        waitUntil(firstAgrees, 60, "ListOffsets(timestamp 0) to answer the first record")
    finally:
        consumer.close()


def test_tombstones_go_after_delete_retention(brokerFactory):
    broker = brokerFactory(FAST).start()
    configs = dict(TABLE, **{"delete.retention.ms": "4000"})
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({"deletes": (1, configs)})
        client.produce("deletes", 0, [Record(key=b"gone", value=b"1"), Record(key=b"kept", value=b"1")])
        client.produce("deletes", 0, [Record(key=b"gone", value=None)])
    produceRounds(broker.bootstrap, "deletes", 40, 20)
    waitCleaned(broker, "deletes")
    keys = {key: value for _, key, value in confluentReadAll(broker.bootstrap, "deletes")}
    assert keys[b"gone"] is None and keys[b"kept"] == b"1"
    # Past the horizon the cleaner runs again for it alone.  Under load a
    # second pass may come before the horizon (for the other records'
    # sake), so wait for the one that drops the tombstone.
    waitCleaned(broker, "deletes", passes=2, timeout=30)
    deadline = time.monotonic() + 60
    while True:
        rows = confluentReadAll(broker.bootstrap, "deletes")
        if b"gone" not in {key for _, key, _ in rows} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert b"gone" not in {key for _, key, _ in rows}
    assert (b"kept", b"1") in {(k, v) for _, k, v in rows}


def test_keyless_record_refused(brokerFactory):
    from confluent_kafka import KafkaError, Producer

    broker = brokerFactory().start()
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({"keyed": (1, {"cleanup.policy": "compact"})})
    errors = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})
    producer.produce("keyed", value=b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    producer.produce("keyed", key=b"k", value=b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(10)
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    assert errors[1] is None


def alterTopic(bootstrap, topic, key, value):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ConfigResource.Type.TOPIC, topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _cleanerProcesses(brokerPid):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"kafkatwist.log.cleanerworker" in argv and str(brokerPid).encode() in argv:
            found.append(int(pid))
    return found


@pytest.mark.parametrize("delay", [0.0, 0.4, 1.2])
def test_kill9_during_cleaning_loses_nothing(tmp_path, delay):
    overrides = dict(FAST, **{"log.cleaner.io.max.bytes.per.second": "400000"})
    broker = Broker(str(tmp_path / "b"), overrides).start()
    # Held off while it is filled, so the pass is long and starts at once.
    configs = dict(TABLE, **{"segment.bytes": "65536", "min.compaction.lag.ms": "3600000"})
    with KafkaWireClient(broker.bootstrap) as client:
        client.createTopics({"crash": (1, configs)})
    # 2.4 MB: at 400 kB/s the pass takes seconds, swapping a segment about
    # every 0.2 s.
    latest = produceRounds(broker.bootstrap, "crash", 100, 100, pad=200)
    alterTopic(broker.bootstrap, "crash", "min.compaction.lag.ms", "0")
    directory = os.path.join(broker.overrides["log.dir"], "crash-0")
    deadline = time.monotonic() + 30
    while not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(directory)):
        assert time.monotonic() < deadline, f"the cleaner never started:\n{broker.output()[-2500:]}"
        time.sleep(0.01)
    time.sleep(delay)
    workers = _cleanerProcesses(broker.process.pid)
    assert workers, "no cleaner process"
    broker.stop(signal.SIGKILL)
    # The cleaner process dies with the broker.
    deadline = time.monotonic() + 5
    while _cleanerProcesses(broker.process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _cleanerProcesses(broker.process.pid) == []
    assert "cleaned crash-0" not in broker.output(), "the pass finished before the kill"
    again = Broker(broker.directory, dict(broker.overrides, listeners="PLAINTEXT://127.0.0.1:0"))
    again.logPath += ".2"
    again.start()
    try:
        rows = confluentReadAll(again.bootstrap, "crash")
        offsets = [o for o, _, _ in rows]
        assert offsets == sorted(set(offsets))
        assert offsets[-1] == 100 * 100 - 1
        assert latestOf(rows) == latest
        values = {(key, value) for _, key, value in rows}
        # Nothing that was never produced (each value names its round).
        assert all(v.startswith(b"v-") for _, v in values)
    finally:
        again.stop()


def scrape(broker):
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", broker.output()).group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return response.read().decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in scrape")


def test_consumer_offsets_compacted_and_loaded(tmp_path):
    from confluent_kafka import Consumer, TopicPartition

    overrides = dict(
        FAST,
        **{
            "offsets.topic.num.partitions": "1",
            "offsets.topic.segment.bytes": "16384",
            "metrics.http.listener": "127.0.0.1:0",
        },
    )
    broker = Broker(str(tmp_path / "b"), overrides).start()
    try:
        with KafkaWireClient(broker.bootstrap) as client:
            client.createTopics({"anything": 3})
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer"})
        for i in range(1500):
            consumer.commit(offsets=[TopicPartition("anything", i % 3, i)], asynchronous=False)
        consumer.close()
        waitCleaned(broker, "__consumer_offsets")
        text = scrape(broker)
        assert metric(text, "kafka_log_logcleaner_bytes_read_total") > 0
        assert metric(text, "kafka_log_logcleaner_dead_thread_count") == 0
        assert 0 <= metric(text, "kafka_log_logcleanermanager_max_dirty_percent") <= 100
        assert metric(text, "kafka_log_logcleanermanager_time_since_last_run_ms") >= 0
        for name in ("max_buffer_utilization_percent", "cleaner_recopy_percent", "max_clean_time_secs",
                     "max_compaction_delay_secs"):
            metric(text, f"kafka_log_logcleaner_{name}")
        directory = os.path.join(broker.overrides["log.dir"], "__consumer_offsets-0")

        def size():
            total = 0
            for n in os.listdir(directory):
                if n.endswith(".log"):
                    try:
                        total += os.path.getsize(os.path.join(directory, n))
                    except FileNotFoundError:
                        pass  # the cleaner deleted it after it was listed: it is not left
            return total

        # Segments roll every 16 KiB, and the cleaner keeps up: what is left is
        # the active segment and the three latest commits.
        deadline = time.monotonic() + 30
        while size() > 2 * 16384 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert size() <= 2 * 16384
    finally:
        broker.stop()
    again = Broker(broker.directory, dict(broker.overrides, listeners="PLAINTEXT://127.0.0.1:0"))
    again.logPath += ".2"
    again.start()
    try:
        consumer = Consumer({"bootstrap.servers": again.bootstrap, "group.id": "committer"})
        committed = consumer.committed([TopicPartition("anything", p) for p in range(3)], timeout=10)
        consumer.close()
        assert sorted(tp.offset for tp in committed) == [1497, 1498, 1499]
    finally:
        again.stop()
