"""
Record the fuzzer's seeds: the request frames the three real clients
(confluent-kafka, kafka-python, aiokafka) send to a broker, through a
recording proxy, while each runs a scenario touching every API it speaks
(produce in every codec, consume in a group, commit, admin operations).

    python -m tests.fuzz.record [--out tests/fuzz/seeds/frames.txt]

The broker advertises the proxy's address, so every connection a client
opens after bootstrapping goes through it too.  Frames are kept up to
L{PER_KEY} distinct ones per (client, ApiKey, version), small (the
scenario's records are short), and written one per line::

    client apiKey version hex-of-frame-without-size-prefix
"""

from __future__ import annotations

import argparse
import asyncio
import os
import selectors
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict

from kafkatwist.testing import Broker

SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds", "frames.txt")
PER_KEY = 3
MAX_FRAME = 16 * 1024
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class RecordingProxy:
    """
    Forward bytes both ways between clients and the broker, and keep each
    complete client->broker frame under the label current when its
    connection was opened.
    """

    def __init__(self, upstreamPort: int) -> None:
        self.upstreamPort = upstreamPort
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.port = self.listener.getsockname()[1]
        self.label = "bootstrap"
        self.frames: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self, upstreamPort: int | None = None) -> None:
        if upstreamPort is not None:
            self.upstreamPort = upstreamPort
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop = True
        if self._thread is not None:
            self._thread.join(5)

    def _keep(self, label: str, frame: bytes) -> None:
        if len(frame) < 8 or len(frame) > MAX_FRAME:
            return
        apiKey, version = struct.unpack_from(">hh", frame)
        kept = self.frames[(label, apiKey, version)]
        if len(kept) < PER_KEY and frame not in kept:
            kept.append(frame)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        self.listener.setblocking(False)
        sel.register(self.listener, selectors.EVENT_READ, None)
        peers: dict[socket.socket, tuple[socket.socket, bytearray | None, str]] = {}
        while not self._stop:
            for key, _ in sel.select(0.1):
                sock = key.fileobj
                if sock is self.listener:
                    try:
                        client, _ = self.listener.accept()
                    except BlockingIOError:
                        continue
                    upstream = socket.create_connection(("127.0.0.1", self.upstreamPort))
                    client.setblocking(False)
                    upstream.setblocking(False)
                    # the client side parses frames; the broker side only forwards
                    peers[client] = (upstream, bytearray(), self.label)
                    peers[upstream] = (client, None, self.label)
                    sel.register(client, selectors.EVENT_READ)
                    sel.register(upstream, selectors.EVENT_READ)
                    continue
                other, buffer, label = peers[sock]
                try:
                    data = sock.recv(1 << 16)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    for s in (sock, other):
                        if s in peers:
                            sel.unregister(s)
                            del peers[s]
                            s.close()
                    continue
                other.setblocking(True)
                try:
                    other.sendall(data)
                except OSError:
                    pass
                other.setblocking(False)
                if buffer is not None:
                    buffer += data
                    while len(buffer) >= 4:
                        (size,) = struct.unpack_from(">i", buffer)
                        if len(buffer) < 4 + size:
                            break
                        self._keep(label, bytes(buffer[4 : 4 + size]))
                        del buffer[: 4 + size]
        for s in list(peers):
            s.close()
        self.listener.close()

    def write(self, path: str) -> int:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lines = []
        for (label, apiKey, version), frames in sorted(self.frames.items()):
            for frame in frames:
                lines.append(f"{label} {apiKey} {version} {frame.hex()}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return len(lines)


# -- scenarios -----------------------------------------------------------------


def attempt(what: str, fn, *args, **kw):
    """
    Run one client call of a scenario; a refusal is fine (its request was
    recorded all the same), so it is only reported.
    """
    try:
        result = fn(*args, **kw)
        if isinstance(result, dict):
            for future in result.values():
                if hasattr(future, "result"):
                    future.result(15)
        elif hasattr(result, "result") and callable(result.result):
            result.result(15)
        return result
    except Exception as e:
        print(f"  {what}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
        return None


def _confluent(bootstrap: str, proxy: RecordingProxy) -> None:
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        Producer,
        TopicPartition,
    )
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        ResourcePatternType,
        ResourceType,
    )

    proxy.label = "confluent"
    topic = "seed-confluent"
    group = "seed-confluent-group"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    attempt("create_topics", admin.create_topics, [NewTopic(topic, 2, 1), NewTopic(topic + "-x", 1, 1)])
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                             "linger.ms": 5})
        for i in range(5):
            producer.produce(topic, key=b"k%d" % i, value=(b"v%d-" % i) * 8, partition=i % 2,
                             headers=[("h", b"x")])
        producer.flush(20)
    acks0 = Producer({"bootstrap.servers": bootstrap, "acks": 0, "enable.idempotence": False})
    acks0.produce(topic, b"a0", partition=0)
    acks0.flush(10)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    got = 0
    while got < 10 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got += 1
    attempt("commit", consumer.commit, asynchronous=False)
    attempt("committed", consumer.committed, [TopicPartition(topic, 0)], 10)
    attempt("watermarks", consumer.get_watermark_offsets, TopicPartition(topic, 0), 10)
    attempt("offsets_for_times", consumer.offsets_for_times,
            [TopicPartition(topic, 0, int(time.time() * 1000) - 60000)], 10)
    consumer.close()
    attempt("list_topics", admin.list_topics, timeout=10)
    attempt("describe_cluster", admin.describe_cluster)
    attempt("describe_configs", admin.describe_configs, [ConfigResource(ConfigResource.Type.TOPIC, topic)])
    attempt("incremental_alter_configs", admin.incremental_alter_configs, [
        ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])])
    attempt("create_partitions", admin.create_partitions, [NewPartitions(topic + "-x", 2)])
    attempt("delete_records", admin.delete_records, [TopicPartition(topic, 0, 1)])
    attempt("list_offsets", admin.list_offsets, {TopicPartition(topic, 0): OffsetSpec.latest()})
    attempt("list_consumer_groups", admin.list_consumer_groups)
    attempt("describe_consumer_groups", admin.describe_consumer_groups, [group])
    attempt("list_consumer_group_offsets", admin.list_consumer_group_offsets,
            [ConsumerGroupTopicPartitions(group)])
    acl = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:seed", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    attempt("create_acls", admin.create_acls, [acl])
    aclFilter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                 AclOperation.ANY, AclPermissionType.ANY)
    attempt("describe_acls", admin.describe_acls, aclFilter)
    attempt("delete_acls", admin.delete_acls, [aclFilter])
    attempt("describe_user_scram_credentials", admin.describe_user_scram_credentials)
    attempt("delete_consumer_groups", admin.delete_consumer_groups, [group])
    attempt("delete_topics", admin.delete_topics, [topic + "-x"])


def _kafkaPython(bootstrap: str, proxy: RecordingProxy) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
        NewTopic,
        ResourcePatternFilter,
        ResourceType,
    )

    topic = "seed-kafka-python"
    # The default negotiation, then older protocol versions as older
    # brokers would get them.
    for apiVersion in (None, (2, 5, 0), (1, 1, 0), (0, 11, 0)):
        proxy.label = "kafka-python" if apiVersion is None else "kafka-python-" + ".".join(
            map(str, apiVersion)
        )
        kw = {} if apiVersion is None else {"api_version": apiVersion}
        name = f"{topic}-{uuid.uuid4().hex[:6]}"
        group = f"seed-kp-{uuid.uuid4().hex[:6]}"
        admin = attempt("admin", KafkaAdminClient, bootstrap_servers=bootstrap, **kw)
        if admin is not None:
            attempt("create_topics", admin.create_topics, [NewTopic(name, 2, 1), NewTopic(name + "-x", 1, 1)])
            attempt("describe_configs", admin.describe_configs,
                    [ConfigResource(ConfigResourceType.TOPIC, name)])
            attempt("alter_configs", admin.alter_configs, [ConfigResource(
                ConfigResourceType.TOPIC, name, configs={"retention.ms": "86400000"})])
            attempt("create_partitions", admin.create_partitions, {name + "-x": NewPartitions(2)})
            attempt("describe_topics", admin.describe_topics, [name])
            attempt("describe_cluster", admin.describe_cluster)
        for codec in (None, "gzip", "snappy", "lz4", "zstd"):
            if codec == "zstd" and apiVersion is not None and apiVersion < (2, 1, 0):
                continue
            producer = attempt(f"producer {codec}", KafkaProducer, bootstrap_servers=bootstrap,
                               compression_type=codec, linger_ms=5, **kw)
            if producer is None:
                continue
            for i in range(5):
                attempt("send", producer.send, name, key=b"k%d" % i, value=(b"v%d-" % i) * 8,
                        partition=i % 2, headers=[("h", b"x")])
            attempt("flush", producer.flush, 20)
            producer.close(5)
        consumer = attempt("consumer", KafkaConsumer, name, bootstrap_servers=bootstrap,
                           group_id=group, auto_offset_reset="earliest",
                           enable_auto_commit=False, consumer_timeout_ms=8000, **kw)
        if consumer is not None:
            for _, message in zip(range(10), consumer):
                pass
            attempt("commit", consumer.commit)
            attempt("committed", consumer.committed, TopicPartition(name, 0))
            attempt("end_offsets", consumer.end_offsets, [TopicPartition(name, 0)])
            attempt("offsets_for_times", consumer.offsets_for_times,
                    {TopicPartition(name, 0): int(time.time() * 1000) - 60000})
            consumer.close()
        if admin is not None:
            attempt("list_groups", admin.list_groups)
            attempt("describe_groups", admin.describe_groups, [group])
            attempt("list_group_offsets", admin.list_group_offsets, {group: None})
            attempt("delete_records", admin.delete_records, {TopicPartition(name, 0): 1})
            attempt("describe_acls", admin.describe_acls, ACLFilter(
                principal=None, host="*", operation=ACLOperation.ANY,
                permission_type=ACLPermissionType.ANY,
                resource_pattern=ResourcePatternFilter(ResourceType.TOPIC, None,
                                                       ACLResourcePatternType.ANY)))
            attempt("describe_user_scram_credentials", admin.describe_user_scram_credentials)
            attempt("delete_groups", admin.delete_groups, [group])
            attempt("delete_topics", admin.delete_topics, [name + "-x"])
            admin.close()


def _aiokafka(bootstrap: str, proxy: RecordingProxy) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    proxy.label = "aiokafka"
    topic = "seed-aiokafka"

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, 1), NewTopic(topic + "-x", 1, 1)])
            await admin.describe_cluster()
            await admin.list_consumer_groups()
        except Exception as e:
            print(f"  aiokafka admin: {e!r}", file=sys.stderr)
        for codec in (None, "gzip", "snappy", "lz4", "zstd"):
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec,
                                        linger_ms=5)
            await producer.start()
            try:
                for i in range(5):
                    await producer.send(topic, key=b"k%d" % i, value=(b"v%d-" % i) * 8,
                                        partition=i % 2, headers=[("h", b"x")])
                await producer.flush()
            finally:
                await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="seed-aio-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            got = 0
            deadline = time.monotonic() + 20
            while got < 10 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                got += sum(len(v) for v in batches.values())
            await consumer.commit()
            await consumer.committed(TopicPartition(topic, 0))
            await consumer.end_offsets([TopicPartition(topic, 0)])
            await consumer.offsets_for_times({TopicPartition(topic, 0): int(time.time() * 1000) - 60000})
        finally:
            await consumer.stop()
        try:
            await admin.describe_consumer_groups(["seed-aio-group"])
            await admin.list_consumer_group_offsets("seed-aio-group")
            await admin.delete_topics([topic + "-x"])
        except Exception as e:
            print(f"  aiokafka admin 2: {e!r}", file=sys.stderr)
        await admin.close()

    asyncio.run(scenario())


def record(out: str = SEEDS) -> int:
    with tempfile.TemporaryDirectory() as directory:
        proxy = RecordingProxy(0)
        broker = Broker(
            directory,
            {
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}",
                "group.initial.rebalance.delay.ms": "0",
            },
        )
        broker.start()
        proxy.start(broker.port)
        bootstrap = f"127.0.0.1:{proxy.port}"
        try:
            for scenario in (_confluent, _kafkaPython, _aiokafka):
                print(f"recording {scenario.__name__.strip('_')}", file=sys.stderr)
                scenario(bootstrap, proxy)
        finally:
            time.sleep(0.5)
            proxy.stop()
            broker.stop()
        written = proxy.write(out)
    print(f"{written} frames, {len(proxy.frames)} (client, ApiKey, version) in {out}", file=sys.stderr)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=SEEDS)
    args = parser.parse_args(argv)
    record(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
