"""
What the crash-and-restart tests share: the records they acknowledge, the
cut a lost page cache leaves in a segment, reading a topic back, and the
tracebacks a broker's log must not hold.
"""

from __future__ import annotations

import os
import struct
import time

RECORDS = 1000
CUT = 500


def cutActiveSegment(partitionDir: str, offset: int) -> int:
    """
    Cut the partition's last (active) segment back to the batch that
    starts at C{offset}, as a lost page cache leaves it; the index files
    and checkpoints are left alone.

    @return: the bytes cut off.
    """
    logs = sorted(f for f in os.listdir(partitionDir) if f.endswith(".log"))
    path = os.path.join(partitionDir, logs[-1])
    with open(path, "rb") as f:
        data = f.read()
    position = 0
    while position + 12 <= len(data):
        baseOffset, length = struct.unpack_from(">qi", data, position)
        if baseOffset == offset:
            break
        assert baseOffset < offset, f"no batch starts at {offset} in {path}"
        position += 12 + length
    else:
        raise AssertionError(f"no batch starts at {offset} in {path}")
    os.truncate(path, position)
    return len(data) - position


def tracebacks(broker) -> list[str]:
    text = broker.output()
    return [line for line in text.splitlines() if "Traceback" in line or "Unhandled" in line]


def readAll(bootstrap: str, topic: str, count: int, timeout: float = 90.0) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{topic}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.add(message.value())
    finally:
        consumer.close()
    return seen


def startThree(cluster) -> tuple[dict, object]:
    """
    Start brokers 1-3 with the settings these tests crash them under (a short
    replica lag, fast follower fetches and checkpoints, no cleaner, the
    replication drop-ins) and wait until a client sees all three.

    @return: the settings (for restarts) and an admin client of the three.
    """
    from kafkatwist.testing import waitUntil
    from tests.replication.cluster import DROPIN

    settings = {
        "replica.lag.time.max.ms": "3000",
        "replica.fetch.wait.max.ms": "200",
        "replica.high.watermark.checkpoint.interval.ms": "500",
        "log.cleaner.enable": "false",
        "plugin.paths": DROPIN,
    }
    for i in (1, 2, 3):
        cluster.startBroker(i, **settings)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    return settings, admin
