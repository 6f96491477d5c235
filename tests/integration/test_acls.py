"""
ACLs with real clients against a real broker on SASL_SSL: a user without
ACLs is refused with Kafka's error codes (topic and group authorization),
CreateAcls lets it in, the admin APIs list and delete ACLs, and ACLs and
users survive a restart.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.security import (
    BOB,
    adminClient,
    aiokafkaConfig,
    confluentConfig,
    confluentRoundTrip,
    kafkaPythonConfig,
    restarted,
    securedBroker,
)

pytestmark = pytest.mark.integration


def createTopic(admin, name):
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic(name, 1, 1)], request_timeout=15).values():
        future.result()


def bobAcls(topic, group):
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:bob", "*", op,
                   AclPermissionType.ALLOW)
        for op in (AclOperation.WRITE, AclOperation.READ)
    ] + [
        AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
    ]


def confluentProduceError(config, topic):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**config, "message.timeout.ms": 10000})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    return errors[0].code() if errors and errors[0] is not None else None


def confluentConsumeError(config, topic, group):
    from confluent_kafka import Consumer

    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        for _ in range(30):
            message = consumer.poll(1)
            if message is not None and message.error():
                return message.error().code()
        return None
    finally:
        consumer.close()


def kafkaPythonProduceError(config, topic):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    producer = KafkaProducer(max_block_ms=10000, **config)
    try:
        producer.send(topic, b"x").get(timeout=15)
    except KafkaError as e:
        return type(e).__name__
    finally:
        producer.close()
    return None


def aiokafkaProduceError(config, topic):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    async def main():
        producer = AIOKafkaProducer(request_timeout_ms=10000, **config)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"x")
        except KafkaError as e:
            return type(e).__name__
        finally:
            await producer.stop()
        return None

    return asyncio.run(main())


def test_refused_until_acls_then_acls_and_users_survive_restart(tmp_path, pki):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    broker = securedBroker(str(tmp_path), pki)
    broker.start()
    try:
        admin = adminClient(broker, pki)
        createTopic(admin, "orders")
        bob = confluentConfig(broker, "SASL_SSL", "SCRAM-SHA-256", BOB, pki)

        assert confluentProduceError(bob, "orders") == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert kafkaPythonProduceError(
            kafkaPythonConfig(broker, "SASL_SSL", "PLAIN", BOB, pki), "orders"
        ) == "TopicAuthorizationFailedError"
        assert aiokafkaProduceError(
            aiokafkaConfig(broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", BOB, pki), "orders"
        ) == "TopicAuthorizationFailedError"
        # May read the topic, but not use the group.
        for future in admin.create_acls(bobAcls("orders", "other-group")[1:2], request_timeout=15).values():
            future.result()
        assert confluentConsumeError(bob, "orders", "bob-group") == KafkaError.GROUP_AUTHORIZATION_FAILED

        for future in admin.create_acls(bobAcls("orders", "bob-group"), request_timeout=15).values():
            future.result()
        assert confluentRoundTrip(bob, "orders", "bob-group") == [b"v0", b"v1", b"v2"]

        acls = admin.describe_acls(
            AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                             AclOperation.ANY, AclPermissionType.ANY),
            request_timeout=15,
        ).result()
        # READ on the topic was created twice: one ACL.
        assert len(acls) == 3
    finally:
        broker.stop()

    broker = restarted(broker)
    try:
        from confluent_kafka import Consumer, Producer

        # Users and ACLs are back: bob may still write, read and use its
        # group, which resumes after its commit.
        bob = confluentConfig(broker, "SASL_SSL", "SCRAM-SHA-256", BOB, pki)
        producer = Producer(bob)
        errors = []
        producer.produce("orders", b"after-restart", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(15)
        assert errors == [None]
        consumer = Consumer({**bob, "group.id": "bob-group", "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe(["orders"])
            message = None
            for _ in range(30):
                message = consumer.poll(1)
                if message is not None:
                    break
            assert message is not None and message.error() is None
            assert (message.offset(), message.value()) == (3, b"after-restart")
        finally:
            consumer.close()

        admin = adminClient(broker, pki)
        deleted = admin.delete_acls(
            [AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", None,
                              AclOperation.WRITE, AclPermissionType.ALLOW)],
            request_timeout=15,
        )
        [(_, future)] = deleted.items()
        assert len(future.result()) == 1
        assert confluentProduceError(bob, "orders") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.stop()


def test_policy_file_authorizer_plugin(tmp_path, pki):
    """
    The example authorizer from plugins_examples/, chosen by
    authorizer.class.name: its shipped policy lets alice write 'orders'
    and keeps bob out.
    """
    import os

    from confluent_kafka import KafkaError

    from kafkatwist.testing.broker import ROOT
    from tests.integration.security import ALICE

    broker = securedBroker(
        str(tmp_path), pki,
        **{"plugin.paths": os.path.join(ROOT, "plugins_examples"),
           "authorizer.class.name": "example.PolicyFileAuthorizer"},
    )
    broker.start()
    try:
        assert "Authorizer: example.PolicyFileAuthorizer (plugin.paths)" in broker.output()
        admin = adminClient(broker, pki)
        createTopic(admin, "orders")
        alice = confluentConfig(broker, "SASL_SSL", "PLAIN", ALICE, pki)
        assert confluentProduceError(alice, "orders") is None
        bob = confluentConfig(broker, "SASL_SSL", "PLAIN", BOB, pki)
        assert confluentProduceError(bob, "orders") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.stop()
