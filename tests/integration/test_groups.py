"""
Consumer groups through a real broker with real clients: confluent-kafka
(librdkafka), kafka-python and aiokafka in one group, a member killed, and
committed offsets surviving a broker restart.

Each consumer runs in its own process (so one can be killed without a
goodbye) and reports what happens to it as JSON lines: assignments,
revocations and every record, with C{time.monotonic()} stamps, which are
comparable across processes on one host.

All three use the roundrobin assignor: aiokafka has nothing else by default,
and a group whose members share no protocol is refused
(INCONSISTENT_GROUP_PROTOCOL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kafkatwist.coordinator import consumerprotocol
from kafkatwist.testing import waitUntil
from tests.rawclient import RawConnection

# Each test normally takes 3-12 s; 60 s is the hard bound.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

SESSION_TIMEOUT_MS = 5000
PARTITIONS = 6

@pytest.fixture
def groupBroker(brokerFactory, tmp_path):
    """
    @return: a function starting a broker (on the same data directory each
        time it is called with the same name) that serves groups.
    """
    overrides = {
        "num.partitions": str(PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "offsets.topic.num.partitions": "5",
    }
    brokers = {}

    def start(name="b"):
        if name not in brokers:
            brokers[name] = brokerFactory(dict(overrides))
        broker = brokers[name]
        if os.path.exists(broker.logPath):
            # A restart: Broker.start reads the log for the startup
            # line, so the previous run's must not be there.
            os.replace(broker.logPath, broker.logPath + f".{time.monotonic_ns()}")
        broker.start()
        from kafkatwist.client import KafkaWireClient

        with KafkaWireClient(broker.bootstrap) as client:
            versions = client.brokerApiVersions()
        assert all(key in versions for key in (0, 1, 2, 8, 9, 10, 11, 12, 13, 14))
        return broker

    return start


# -- the consumer processes ------------------------------------------------------

CONSUMER = r'''
import json, signal, sys, time

kind, bootstrap, group, topic, sessionMs = sys.argv[1:6]
sessionMs = int(sessionMs)
running = True


def stop(*_):
    global running
    running = False


signal.signal(signal.SIGTERM, stop)


def emit(**event):
    event["t"] = time.monotonic()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


if kind == "confluent":
    from confluent_kafka import Consumer

    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": "confluent",
        "partition.assignment.strategy": "roundrobin",
        "session.timeout.ms": sessionMs,
        "heartbeat.interval.ms": 1000,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 500,
    })
    c.subscribe(
        [topic],
        on_assign=lambda c, ps: emit(ev="assign", parts=[p.partition for p in ps]),
        on_revoke=lambda c, ps: emit(ev="revoke", parts=[p.partition for p in ps]),
    )
    emit(ev="ready", member=None)
    while running:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            emit(ev="error", error=str(m.error()))
            continue
        emit(ev="rec", p=m.partition(), o=m.offset(), v=m.value().decode())
    c.close()

elif kind == "kafka-python":
    from kafka import ConsumerRebalanceListener, KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(ev="revoke", parts=[p.partition for p in revoked])

        def on_partitions_assigned(self, assigned):
            emit(ev="assign", parts=[p.partition for p in assigned])

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id="kafka-python",
        partition_assignment_strategy=[RoundRobinPartitionAssignor],
        session_timeout_ms=sessionMs,
        heartbeat_interval_ms=1000,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=500,
    )
    c.subscribe([topic], listener=Listener())
    emit(ev="ready")
    while running:
        for tp, msgs in c.poll(200).items():
            for m in msgs:
                emit(ev="rec", p=m.partition, o=m.offset, v=m.value.decode())
    c.close()

elif kind == "aiokafka":
    import asyncio
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit(ev="revoke", parts=[p.partition for p in revoked])

        def on_partitions_assigned(self, assigned):
            emit(ev="assign", parts=[p.partition for p in assigned])

    async def main():
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id="aiokafka",
            session_timeout_ms=sessionMs,
            heartbeat_interval_ms=1000,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=500,
        )
        c.subscribe([topic], listener=Listener())
        await c.start()
        emit(ev="ready")
        try:
            while running:
                batches = await c.getmany(timeout_ms=200)
                for tp, msgs in batches.items():
                    for m in msgs:
                        emit(ev="rec", p=m.partition, o=m.offset, v=m.value.decode())
        finally:
            await c.stop()

    asyncio.run(main())
'''


class ConsumerProcess:
    """
    One consumer in a child process, and the events it reported.
    """

    def __init__(self, kind, bootstrap, group, topic, workdir) -> None:
        self.kind = kind
        self.events: list[dict] = []
        self.lock = threading.Lock()
        script = os.path.join(workdir, "consumer.py")
        if not os.path.exists(script):
            with open(script, "w") as f:
                f.write(CONSUMER)
        self.stderr = open(os.path.join(workdir, f"{kind}.stderr"), "wb")
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, script, kind, bootstrap, group, topic, str(SESSION_TIMEOUT_MS)],
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.events.append(event)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.events)

    def records(self) -> list[dict]:
        return [e for e in self.snapshot() if e["ev"] == "rec"]

    def kill(self) -> float:
        """
        SIGKILL: no LeaveGroup, no last commit.

        @return: when it died.
        """
        self.process.kill()
        self.process.wait()
        self.reader.join(5)
        return time.monotonic()

    def stop(self, timeout: float = 20.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(5)
        self.stderr.close()

    def describe(self) -> str:
        with open(self.stderr.name, "rb") as f:
            tail = f.read()[-3000:].decode("utf-8", "replace")
        return f"{self.kind}: exit={self.process.poll()} events={len(self.events)}\n{tail}"


def produce(bootstrap, topic, start, count) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for i in range(start, start + count):
        # Keys spread the records over every partition.
        producer.produce(topic, key=b"k%d" % i, value=b"%d" % i)
    assert producer.flush(30) == 0


def parseAssignment(data: bytes) -> dict[str, list[int]]:
    """
    Kafka's C{ConsumerProtocolAssignment} (any version: the topic
    partitions come first).
    """
    return {topic: list(partitions) for topic, partitions in consumerprotocol.parseAssignment(data).partitions}


def describe(port: int, group: str):
    conn = RawConnection(port)
    try:
        (g,) = conn.request(15, 5, groups=(group,), include_authorized_operations=False).groups
    finally:
        conn.close()
    owners = {}
    for m in g.members:
        for p in parseAssignment(m.member_assignment).get("shared", []) if m.member_assignment else []:
            owners.setdefault(p, []).append(m.client_id)
    return g, owners


def described(consumers):
    return lambda: "\n".join(c.describe() for c in consumers)


def heldNow(consumer) -> set[int]:
    """
    The partitions the consumer's own callbacks say it holds now.
    """
    held: set[int] = set()
    for e in consumer.snapshot():
        if e["ev"] == "assign":
            held.update(e["parts"])
        elif e["ev"] == "revoke":
            held.difference_update(e["parts"])
    return held


def ownershipIntervals(consumer, end: float) -> dict[int, list[tuple[float, float]]]:
    """
    @return: partition -> [(assigned at, revoked at)] from the consumer's
        callbacks; an open interval ends at C{end} (its death or the end).
    """
    intervals: dict[int, list] = {}
    held: dict[int, float] = {}
    for e in consumer.snapshot():
        if e["ev"] == "assign":
            for p in e["parts"]:
                held[p] = e["t"]
        elif e["ev"] == "revoke":
            for p in e["parts"]:
                if p in held:
                    intervals.setdefault(p, []).append((held.pop(p), e["t"]))
    for p, t in held.items():
        intervals.setdefault(p, []).append((t, end))
    return intervals


def test_three_clients_share_rebalance_and_consume_everything(groupBroker, tmp_path):
    broker = groupBroker()
    bootstrap, group, topic = broker.bootstrap, "mixed", "shared"
    # Create the topic (6 partitions by num.partitions) before anyone
    # subscribes, so the first assignment already covers every partition.
    produce(bootstrap, topic, 0, 1)
    consumers = [
        ConsumerProcess(kind, bootstrap, group, topic, str(tmp_path))
        for kind in ("confluent", "kafka-python", "aiokafka")
    ]
    try:
        # Every partition has exactly one owner once the three are in.
        def stable3():
            g, owners = describe(broker.port, group)
            if g.group_state != "Stable" or len(g.members) != 3:
                return None
            return owners if sorted(owners) == list(range(PARTITIONS)) else None

        owners = waitUntil(stable3, 60, "a stable group of three", describe=described(consumers))
        assert all(len(o) == 1 for o in owners.values()), owners
        assert {o[0] for o in owners.values()} == {"confluent", "kafka-python", "aiokafka"}

        def consumed(n):
            return lambda: len({e["v"] for c in consumers for e in c.records()}) >= n

        # Records produced now are shared by the three owners.
        produce(bootstrap, topic, 1, 599)
        waitUntil(consumed(600), 30, "the first 600 records", describe=described(consumers))
        waitUntil(lambda: all(c.records() for c in consumers), 30, "records at every member",
                  describe=described(consumers))
        # Let the members' own view settle (their assign callbacks ran).
        victim = consumers[1]  # kafka-python
        victimParts = sorted(p for p, o in owners.items() if o == [victim.kind])
        waitUntil(lambda: all(heldNow(c) == {p for p, o in owners.items() if o == [c.kind]}
                              for c in consumers),
                  30, "each member's assign callback for what the group gave it",
                  describe=described(consumers))
        killedAt = victim.kill()
        produce(bootstrap, topic, 600, 600)

        def moved():
            g, owners = describe(broker.port, group)
            if g.group_state != "Stable" or len(g.members) != 2:
                return None
            if sorted(owners) != list(range(PARTITIONS)):
                return None
            return owners

        owners = waitUntil(moved, SESSION_TIMEOUT_MS / 1000 + 30, "the partitions to move",
                           describe=described(consumers))
        movedAfter = time.monotonic() - killedAt
        assert all(len(o) == 1 for o in owners.values()), owners
        assert victim.kind not in {o[0] for o in owners.values()}
        # The survivors learn of the rebalance by heartbeat (1 s) once the
        # session (5 s) expired; allow for their poll loops.
        assert movedAfter < SESSION_TIMEOUT_MS / 1000 + 6, movedAfter
        for p in victimParts:
            assert owners[p][0] != victim.kind

        waitUntil(consumed(1200), 30, "all 1200 records", describe=described(consumers))
        # Everything produced was consumed.
        seen = {e["v"] for c in consumers for e in c.records()}
        assert seen == {str(i) for i in range(1200)}

        # No partition was owned by two members at once, and every record
        # was consumed by a member while it owned the partition: a record
        # seen twice was seen in different generations (the killed
        # member's uncommitted progress, re-read after the rebalance).
        end = time.monotonic()
        intervals = {
            c.kind: ownershipIntervals(c, killedAt if c is victim else end) for c in consumers
        }
        for p in range(PARTITIONS):
            spans = sorted(
                (start, stop, kind)
                for kind, byPart in intervals.items()
                for start, stop in byPart.get(p, [])
            )
            for (s1, e1, k1), (s2, e2, k2) in zip(spans, spans[1:]):
                assert e1 <= s2, f"partition {p} owned by {k1} and {k2} at once: {spans}"
        for c in consumers:
            for e in c.records():
                spans = intervals[c.kind].get(e["p"], [])
                assert any(s <= e["t"] <= t for s, t in spans), (c.kind, e, spans)
        byRecord: dict[str, set] = {}
        for c in consumers:
            for e in c.records():
                byRecord.setdefault(e["v"], set()).add(c.kind)
        twice = {v: ks for v, ks in byRecord.items() if len(ks) > 1}
        # Only the killed member's records can be read twice.
        assert all(victim.kind in ks for ks in twice.values()), twice
        print(
            f"partitions moved {movedAfter:.1f}s after the kill; "
            f"{len(twice)} records read again after the rebalance; consumed per member: "
            + ", ".join(f"{c.kind}={len(c.records())}" for c in consumers)
        )
    finally:
        for c in consumers:
            c.stop()


# -- commit, restart, resume ---------------------------------------------------------


def _committedOffsets(consumer, partitions):
    return {tp.partition: (tp.offset, tp.metadata) for tp in consumer.committed(partitions, timeout=10)}


def test_commit_restart_resume(groupBroker):
    from confluent_kafka import Consumer, TopicPartition

    broker = groupBroker("durable")
    topic, group = "resume", "resumers"
    produce(broker.bootstrap, topic, 0, 300)
    # Commit half of each partition, with a metadata string that must come
    # back verbatim (a known failure of other Kafka-compatible brokers).
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "roundrobin",
        }
    )
    c.subscribe([topic])
    byPartition: dict[int, list] = {}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in byPartition.values()) < 300 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            byPartition.setdefault(m.partition(), []).append(m.offset())
    assert sum(len(v) for v in byPartition.values()) == 300
    committed = {p: len(offsets) // 2 for p, offsets in byPartition.items()}
    c.commit(
        offsets=[
            TopicPartition(topic, p, o, metadata=f"meta-{p}-ünï")
            for p, o in committed.items()
        ],
        asynchronous=False,
    )
    c.close()

    broker.stop()
    broker = groupBroker("durable")  # same data directory, new port
    bootstrap = broker.bootstrap
    parts = [TopicPartition(topic, p) for p in committed]

    # OffsetFetch after the restart, through librdkafka.
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    got = _committedOffsets(probe, parts)
    probe.close()
    assert got == {p: (o, f"meta-{p}-ünï") for p, o in committed.items()}

    # The group resumes at the committed offsets with each client in turn.
    assert firstOffsetsConfluent(bootstrap, group, topic) == committed
    assert firstOffsetsKafkaPython(bootstrap, group, topic) == committed
    assert firstOffsetsAiokafka(bootstrap, group, topic) == committed


def firstOffsetsConfluent(bootstrap, group, topic):
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "partition.assignment.strategy": "roundrobin",
        }
    )
    c.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(first) < PARTITIONS and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            first.setdefault(m.partition(), m.offset())
    c.close()
    return first


def firstOffsetsKafkaPython(bootstrap, group, topic):
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="latest",
        partition_assignment_strategy=[RoundRobinPartitionAssignor],
    )
    first: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while len(first) < PARTITIONS and time.monotonic() < deadline:
        for tp, msgs in c.poll(500).items():
            for m in msgs:
                first.setdefault(m.partition, m.offset)
    c.close()
    return first


def firstOffsetsAiokafka(bootstrap, group, topic):
    import asyncio

    from aiokafka import AIOKafkaConsumer

    async def run():
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        await c.start()
        first: dict[int, int] = {}
        try:
            deadline = time.monotonic() + 30
            while len(first) < PARTITIONS and time.monotonic() < deadline:
                for tp, msgs in (await c.getmany(timeout_ms=500)).items():
                    for m in msgs:
                        first.setdefault(m.partition, m.offset)
        finally:
            await c.stop()
        return first

    return asyncio.run(run())
