"""
Shared pieces of the security integration tests: a broker with SASL_PLAINTEXT
and SASL_SSL listeners and the built-in authorizer, users created before the
first start with C{kafkatwist-storage format}, and the three clients'
settings for a user, mechanism and listener.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid

from kafkatwist.security.format import formatDirectory
from kafkatwist.testing import Broker

ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")
USERS = (ADMIN, ALICE, BOB)
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
CLIENTS = ("confluent", "kafka-python", "aiokafka")


def securedBroker(directory: str, pki, **overrides) -> Broker:
    """
    A broker (not started) whose data directory already holds the users.
    """
    broker = Broker(
        directory,
        {
            "ssl.keystore.location": pki.serverKeystore,
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "group.initial.rebalance.delay.ms": "0",
            "connection.failed.authentication.delay.ms": "100",
            **overrides,
        },
        listeners="SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
    )
    formatDirectory(
        broker.overrides["log.dir"],
        1,
        None,
        [f"{m}=[name={user},password={password}]" for user, password in USERS for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")],
    )
    return broker


def restarted(old: Broker) -> Broker:
    """
    The same broker started again on its data directory, logging to a new
    file (the start-up check reads the log).
    """
    new = Broker(old.directory, dict(old.overrides))
    new.overrides["listeners"] = old.overrides["listeners"]
    new.logPath = f"{old.logPath}.{time.monotonic_ns()}"
    return new.start()


def bootstrap(broker, protocol: str) -> str:
    # The server certificate names localhost; SASL_PLAINTEXT does not care.
    return f"localhost:{broker.ports[protocol]}"


def confluentConfig(broker, protocol, mechanism, user, pki) -> dict:
    name, password = user
    config = {
        "bootstrap.servers": bootstrap(broker, protocol),
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": name,
        "sasl.password": password,
    }
    if protocol == "SASL_SSL":
        config["ssl.ca.location"] = pki.caFile
    return config


def kafkaPythonConfig(broker, protocol, mechanism, user, pki) -> dict:
    name, password = user
    config = {
        "bootstrap_servers": bootstrap(broker, protocol),
        "security_protocol": protocol,
        "sasl_mechanism": mechanism,
        "sasl_plain_username": name,
        "sasl_plain_password": password,
    }
    if protocol == "SASL_SSL":
        config["ssl_cafile"] = pki.caFile
    return config


def aiokafkaConfig(broker, protocol, mechanism, user, pki) -> dict:
    from aiokafka.helpers import create_ssl_context

    # kafka-python's names; aiokafka takes an SSL context instead of a CA file.
    config = kafkaPythonConfig(broker, protocol, mechanism, user, pki)
    if protocol == "SASL_SSL":
        config["ssl_context"] = create_ssl_context(cafile=config.pop("ssl_cafile"))
    return config


def uniqueName(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# -- produce, consume in a group, commit -------------------------------------------


def confluentRoundTrip(config: dict, topic: str, group: str, n: int = 3) -> list[bytes]:
    from confluent_kafka import Consumer, KafkaException, Producer

    producer = Producer({**config, "enable.idempotence": True})
    errors = []
    for i in range(n):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: err and errors.append(err))
    producer.flush(30)
    if errors:
        raise KafkaException(errors[0])
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        values = []
        while len(values) < n:
            message = consumer.poll(30)
            if message is None:
                raise TimeoutError(f"got {values}")
            if message.error():
                raise KafkaException(message.error())
            values.append(message.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=15)
        assert sum(tp.offset for tp in committed) == n
        return values
    finally:
        consumer.close()


def kafkaPythonRoundTrip(config: dict, topic: str, group: str, n: int = 3) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(**config)
    try:
        for i in range(n):
            producer.send(topic, f"v{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        consumer_timeout_ms=30000, **config,
    )
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == n:
                break
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == n
        return values
    finally:
        consumer.close()


def aiokafkaRoundTrip(config: dict, topic: str, group: str, n: int = 3) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def main():
        producer = AIOKafkaProducer(**config)
        await producer.start()
        try:
            for i in range(n):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False, **config
        )
        await consumer.start()
        try:
            values = []
            while len(values) < n:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
                for messages in batch.values():
                    values.extend(m.value for m in messages)
            await consumer.commit()
            assert await consumer.committed(TopicPartition(topic, 0)) == n
            return values
        finally:
            await consumer.stop()

    return asyncio.run(main())


ROUND_TRIPS = {
    "confluent": (confluentConfig, confluentRoundTrip),
    "kafka-python": (kafkaPythonConfig, kafkaPythonRoundTrip),
    "aiokafka": (aiokafkaConfig, aiokafkaRoundTrip),
}


def adminClient(broker, pki, user=ADMIN, protocol="SASL_SSL", mechanism="SCRAM-SHA-512"):
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluentConfig(broker, protocol, mechanism, user, pki))


def dataDirectory(broker) -> str:
    return os.path.abspath(broker.overrides["log.dir"])
