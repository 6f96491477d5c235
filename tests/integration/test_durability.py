"""
Data survives restarts and crashes: a clean restart keeps everything; after
C{kill -9} the log recovers, a torn tail is cut, a corrupted batch is found
and never served, and with fsync-before-ack every acknowledged record is
there.
"""

import glob
import os
import signal
import struct
import threading
import time

import pytest

from kafkatwist.testing import Broker
from kafkatwist.testing.broker import TEST_DEFAULTS
from tests.integration.helpers import (
    confluentConsume,
    confluentProduce,
    digest,
)

pytestmark = pytest.mark.integration


def restart(old: Broker, **overrides) -> Broker:
    new = Broker(old.directory, {**old.overrides, **overrides})
    new.overrides["listeners"] = "PLAINTEXT://127.0.0.1:0"
    new.logPath = old.logPath + ".2"
    return new.start()


def segmentFiles(broker: Broker, topic: str, partition: int = 0) -> list[str]:
    return sorted(glob.glob(os.path.join(broker.overrides["log.dir"], f"{topic}-{partition}", "*.log")))


def test_clean_restart_keeps_everything(tmp_path):
    broker = Broker(str(tmp_path / "b"), {**TEST_DEFAULTS, "num.partitions": "3"}).start()
    confluentProduce(broker.bootstrap, "kept", 30_000, "lz4")
    before = [confluentConsume(broker.bootstrap, "kept", 1, partition=p) for p in range(3)]
    status, _ = broker.stop()
    again = restart(broker)
    try:
        assert "recover" not in again.output().lower()
        total = []
        for p in range(3):
            from confluent_kafka import Consumer, TopicPartition

            consumer = Consumer(
                {"bootstrap.servers": again.bootstrap, "group.id": "g", "enable.auto.commit": False}
            )
            low, high = consumer.get_watermark_offsets(TopicPartition("kept", p), timeout=10)
            consumer.close()
            rows, offsets = confluentConsume(again.bootstrap, "kept", high, partition=p)
            assert offsets == list(range(high))
            assert rows[:1] == before[p][0][:1]
            total += rows
        assert len(total) == 30_000
        assert sorted(digest([r]) for r in total) == sorted(
            digest([r]) for r in confluentConsumeAll(again.bootstrap, "kept", 3)
        )
    finally:
        again.stop()


def confluentConsumeAll(bootstrap, topic, partitions):
    rows = []
    for p in range(partitions):
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        consumer.close()
        rows += confluentConsume(bootstrap, topic, high - low, partition=p, offset=low)[0]
    return rows


def test_kill9_with_fsync_before_ack_loses_nothing_acknowledged(tmp_path):
    from confluent_kafka import Producer

    broker = Broker(
        str(tmp_path / "b"),
        {**TEST_DEFAULTS, "log.flush.interval.messages": "1", "log.segment.bytes": "200000"},
    ).start()
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 3000,
            "retries": 0,
        }
    )
    acked: dict[int, bytes] = {}
    lock = threading.Lock()

    def delivered(err, msg):
        if err is None:
            with lock:
                acked[msg.offset()] = msg.value()

    started = time.monotonic()
    killed = False
    i = 0
    while time.monotonic() - started < 8:
        try:
            producer.produce("crash", value=b"record-%08d" % i, partition=0, on_delivery=delivered)
            i += 1
        except BufferError:
            pass
        producer.poll(0)
        if not killed and len(acked) > 3000:
            broker.process.send_signal(signal.SIGKILL)
            broker.process.wait()
            killed = True
            break
    producer.purge()
    producer.flush(1)
    del producer
    assert killed, "the broker acknowledged too little to test"

    # A torn write: half a batch header at the end of the active segment.
    active = segmentFiles(broker, "crash")[-1]
    with open(active, "ab") as f:
        f.write(struct.pack(">qi", 999_999, 5000) + b"\x00" * 9)

    again = restart(broker)
    try:
        output = again.output()
        assert "truncat" in output.lower(), output
        high = max(acked) + 1
        rows, offsets = confluentConsume(again.bootstrap, "crash", high)
        byOffset = dict(zip(offsets, (value for _, value, _ in rows)))
        missing = [o for o in acked if byOffset.get(o) != acked[o]]
        assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    finally:
        again.stop()


def test_corrupt_batch_detected_at_recovery_and_not_served(tmp_path):
    broker = Broker(str(tmp_path / "b"), TEST_DEFAULTS).start()
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(40):
        producer.produce("rot", value=b"v%04d" % i * 20, partition=0)
        producer.flush(5)  # one batch per record
    del producer
    broker.process.send_signal(signal.SIGKILL)
    broker.process.wait()

    [segment] = segmentFiles(broker, "rot")
    data = bytearray(open(segment, "rb").read())
    # Walk to the 25th batch and flip a byte of its records.
    position = 0
    for _ in range(25):
        position += 12 + struct.unpack_from(">i", data, position + 8)[0]
    data[position + 70] ^= 0xFF
    with open(segment, "wb") as f:
        f.write(data)

    again = restart(broker)
    try:
        assert "truncat" in again.output().lower()
        rows, offsets = confluentConsume(again.bootstrap, "rot", 40, timeout=3)
        assert offsets == list(range(25))
        assert [value for _, value, _ in rows] == [b"v%04d" % i * 20 for i in range(25)]
    finally:
        again.stop()


def test_idle_long_poll_costs_almost_no_cpu(broker):
    """
    A consumer parked on an empty topic: the broker sleeps until max wait
    passes, it does not spin.  (The figure is printed; the bound is loose.)
    """
    from confluent_kafka import Consumer, TopicPartition

    confluentProduce(broker.bootstrap, "idle", 1, "none")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "idle",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 500,
        }
    )
    consumer.assign([TopicPartition("idle", 0, 1)])
    consumer.consume(1, 1.0)

    def cpu():
        with open(f"/proc/{broker.process.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    before = cpu()
    started = time.monotonic()
    while time.monotonic() - started < 5:
        assert consumer.consume(1, 0.5) == []
    used = cpu() - before
    consumer.close()
    print(f"\nbroker CPU while a consumer long-polls an empty topic: {used:.3f}s in 5s")
    assert used < 0.5
