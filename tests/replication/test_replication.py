"""
Replication between real broker processes on loopback, driven by a static
controller (no ZooKeeper): followers converge, acks=all waits for the ISR,
a divergent follower truncates after a leader change (KIP-279), consumers
never see past the high watermark.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from kafkatwist.client import KafkaWireClient


def produce(bootstrap, topic, values, acks="all", timeoutMs=30000, **extra):
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
        "message.timeout.ms": timeoutMs, "request.timeout.ms": timeoutMs, **extra,
    })
    results = []
    for value in values:
        producer.produce(
            topic, value=value, partition=0,
            on_delivery=lambda err, msg: results.append(err),
        )
    producer.flush(timeoutMs / 1000 + 10)
    return results


def test_followers_converge(cluster):
    c = cluster(3)
    c.createTopic("r")
    c.elect("r", 0, leader=1, epoch=1, isr=[1, 2, 3])
    c.waitFor(lambda: (c.state(2, "r") or {}).get("role") == "follower", what="roles")
    errors = produce(c.bootstrap(1), "r", [b"v%d" % i for i in range(200)])
    assert errors == [None] * 200
    dumps = c.waitInSync("r")
    assert len(dumps[1]) > 0
    state = c.state(1, "r")
    assert state["leo"] == 200 and state["hw"] == 200 and state["isr"] == [1, 2, 3]
    assert state["epochs"] == [[1, 0]]
    assert c.state(3, "r")["epochs"] == [[1, 0]]
