"""
Issue 30, item 7: SIGTERM while ZooKeeper becomes unreachable.  Three
brokers are sent SIGTERM and their ZooKeeper is stopped about two seconds
later (also at once, and before): each must exit in bounded time, having flushed its
logs and written its clean-shutdown marker, with kazoo's own log lines in
the broker's log format (not "[stderr#error]") and no traceback.

The ZooKeeper here is this test's own (it is stopped), not the session's.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from kafkatwist.log.checkpoint import CLEAN_SHUTDOWN
from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest, partitions

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import NewTopic  # noqa: E402

#: broker.shutdown.timeout.ms: shorter than Kafka's controlled shutdown
#: attempts with ZooKeeper gone (3 x 5 s), so the bound is what ends them
SHUTDOWN_TIMEOUT_MS = 6000
#: the exit bound: the shutdown timeout, then flushing and stopping (seconds
#: on a quiet machine), with room for a loaded one
BOUND = SHUTDOWN_TIMEOUT_MS / 1000 + 8.0


@pytest.mark.parametrize("zookeeperAfter", [-1.0, 0.3, 2.0],
                         ids=["zookeeper-gone-before", "zookeeper-gone-at-once", "zookeeper-gone-after-2s"])
def test_sigterm_while_zookeeper_goes_away_exits_in_bounded_time(ownZooKeeper, tmp_path, zookeeperAfter):
    cluster = ClusterUnderTest(ownZooKeeper, tmp_path / "brokers", "gone")
    try:
        # Kafka's controlled shutdown defaults (the test cluster's are shorter).
        cluster.startAll(**{"log.cleaner.enable": "false", "controlled.shutdown.max.retries": "3",
                            "controlled.shutdown.retry.backoff.ms": "5000",
                            "broker.shutdown.timeout.ms": str(SHUTDOWN_TIMEOUT_MS)})
        admin = cluster.admin(1, 2, 3)
        waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
        admin.create_topics([NewTopic("s", num_partitions=3, replication_factor=3)],
                            request_timeout=60)["s"].result()
        waitUntil(lambda: all(len(isr) == 3 for _, _, isr in (partitions(admin, "s") or {0: (0, (), ())}).values()),
                  what="s replicated")
        producer = Producer({"bootstrap.servers": cluster.bootstrap(1, 2, 3), "acks": "all"})
        for n in range(300):
            producer.produce("s", value=b"%04d" % n)
        assert producer.flush(60) == 0
        producer = admin = None  # closes both clients before the brokers stop

        if zookeeperAfter < 0:
            ownZooKeeper.stop()
            time.sleep(-zookeeperAfter)
        started = time.monotonic()
        for broker in cluster.brokers.values():
            broker.process.send_signal(signal.SIGTERM)
        if zookeeperAfter >= 0:
            time.sleep(zookeeperAfter)
            ownZooKeeper.stop()
        exits = {}
        deadline = started + BOUND + 30
        while len(exits) < 3 and time.monotonic() < deadline:
            for i, broker in cluster.brokers.items():
                if i not in exits and broker.process.poll() is not None:
                    exits[i] = time.monotonic() - started
            time.sleep(0.05)
        print(f"exit times after SIGTERM: { {i: round(t, 1) for i, t in sorted(exits.items())} }")
        assert len(exits) == 3 and all(t <= BOUND for t in exits.values()), \
            f"exit times {exits}; logs: " + "\n".join(b.output()[-1500:] for b in cluster.brokers.values())
        for i, broker in cluster.brokers.items():
            data = os.path.join(broker.directory, "data")
            assert os.path.exists(os.path.join(data, CLEAN_SHUTDOWN)), f"broker {i}: no clean-shutdown marker"
            text = broker.output()
            # (twistd ends a SIGTERM shutdown with the signal's own status.)
            assert broker.process.returncode in (0, -signal.SIGTERM), (broker.process.returncode, text[-2000:])
            assert "kafkatwist stopped" in text
            bad = [line for line in text.splitlines()
                   if "Traceback" in line or "Unhandled" in line or "[stderr#" in line]
            assert not bad, f"broker {i}: {bad[:5]}"
    finally:
        cluster.stopAll()
