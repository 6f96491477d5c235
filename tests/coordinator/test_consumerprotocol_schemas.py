"""
The consumer protocol's Subscription and Assignment as Kafka's message
schemas: the same bytes as real clients write and as the hand-written codec
they replaced wrote, every version; and untrusted bytes never raise anything
but the schema codec's error (a C{ValueError}, what the group coordinator
catches).
"""

from __future__ import annotations

import random

import pytest
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment, ConsumerProtocolMemberMetadata
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KPAssignment
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KPSubscription

from kafkatwist.coordinator.consumerprotocol import (
    ConsumerAssignment,
    ConsumerSubscription,
    encodeAssignment,
    encodeSubscription,
    parseAssignment,
    parseSubscription,
)
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.schemacodec import SchemaError

# -- what librdkafka (confluent-kafka 2.16) sent to a kafkatwist broker ---------------------------
# A consumer of topics "orders" (3 partitions) and "t.x_2" (1), read back with DescribeGroups.

#: range, no client.rack: v3, empty user data, no owned partitions, generation -1, rack ""
LIBRDKAFKA_RANGE_SUBSCRIPTION = bytes.fromhex(
    "00030000000200066f72646572730005742e785f320000000000000000ffffffff0000"
)
#: cooperative-sticky, client.rack=rack-a
LIBRDKAFKA_STICKY_SUBSCRIPTION = bytes.fromhex(
    "00030000000200066f72646572730005742e785f320000000000000000ffffffff00067261636b2d61"
)
#: the range leader's assignment of both topics to that one member: v0, empty user data
LIBRDKAFKA_RANGE_ASSIGNMENT = bytes.fromhex(
    "0000000000020005742e785f32000000010000000000066f72646572730000000300000000000000010000000200000000"
)

# -- what the hand-written encoder wrote (before these schemas) -----------------------------------
#: encodeSubscription(["orders", "bé"], b"ud", v, [("orders", [0, 2])], 7, "rack-1")
OLD_FULL = {
    0: "00000000000200066f7264657273000362c3a9000000027564",
    1: "00010000000200066f7264657273000362c3a90000000275640000000100066f7264657273000000020000000000000002",
    2: "00020000000200066f7264657273000362c3a90000000275640000000100066f726465727300000002000000000000000200000007",
    3: "00030000000200066f7264657273000362c3a90000000275640000000100066f72646572730000000200000000000000020000000700067261636b2d31",
}
#: encodeSubscription(["a"], None, v, [], -1, None)
OLD_NULLS = {
    0: "000000000001000161ffffffff",
    1: "000100000001000161ffffffff00000000",
    2: "000200000001000161ffffffff00000000ffffffff",
    3: "000300000001000161ffffffff00000000ffffffffffff",
}


def test_librdkafka_subscriptions():
    s = parseSubscription(LIBRDKAFKA_RANGE_SUBSCRIPTION)
    assert s == ConsumerSubscription(3, ("orders", "t.x_2"), b"", (), -1, "")
    assert encodeSubscription(["orders", "t.x_2"], b"", 3, [], -1, "") == LIBRDKAFKA_RANGE_SUBSCRIPTION
    s = parseSubscription(LIBRDKAFKA_STICKY_SUBSCRIPTION)
    assert s == ConsumerSubscription(3, ("orders", "t.x_2"), b"", (), -1, "rack-a")
    assert encodeSubscription(["orders", "t.x_2"], b"", 3, [], -1, "rack-a") == LIBRDKAFKA_STICKY_SUBSCRIPTION


def test_librdkafka_assignment():
    a = parseAssignment(LIBRDKAFKA_RANGE_ASSIGNMENT)
    assert a == ConsumerAssignment(0, (("t.x_2", (0,)), ("orders", (0, 1, 2))), b"")
    assert encodeAssignment([("t.x_2", [0]), ("orders", [0, 1, 2])], b"") == LIBRDKAFKA_RANGE_ASSIGNMENT


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_old_encoder_bytes(version):
    full = encodeSubscription(["orders", "b\u00e9"], b"ud", version, [("orders", [0, 2])], 7, "rack-1")
    assert full.hex() == OLD_FULL[version]
    assert encodeSubscription(["a"], None, version, [], -1, None).hex() == OLD_NULLS[version]
    s = parseSubscription(full)
    assert (s.version, s.topics, s.userData) == (version, ("orders", "b\u00e9"), b"ud")
    assert s.ownedPartitions == ((("orders", (0, 2)),) if version >= 1 else ())
    assert s.generationId == (7 if version >= 2 else -1)
    assert s.rackId == ("rack-1" if version >= 3 else None)


_OWNED = [("orders", [0, 2]), ("b\u00e9", [])]


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("userData", [None, b"", b"\x00\xffuser"])
@pytest.mark.parametrize("rackId", [None, "", "r\u00e9"])
def test_subscription_as_kafka_python_writes_it(version, userData, rackId):
    theirs = KPSubscription(
        topics=["orders", "b\u00e9"],
        user_data=userData,
        owned_partitions=[KPSubscription.TopicPartition(topic=t, partitions=p) for t, p in _OWNED],
        generation_id=9,
        rack_id=rackId,
        version=version,
    ).encode()
    ours = encodeSubscription(["orders", "b\u00e9"], userData, version, _OWNED, 9, rackId)
    assert ours == theirs
    s = parseSubscription(theirs)
    assert s.version == version and s.topics == ("orders", "b\u00e9") and s.userData == userData
    back = KPSubscription.decode(ours)
    assert back.topics == ["orders", "b\u00e9"] and back.user_data == userData
    if version >= 1:
        assert s.ownedPartitions == tuple((t, tuple(p)) for t, p in _OWNED)
    if version >= 3:
        assert s.rackId == rackId == back.rack_id


@pytest.mark.parametrize("version", [0, 1, 2, 3])
@pytest.mark.parametrize("userData", [None, b"", b"\x00\xffuser"])
def test_assignment_as_kafka_python_writes_it(version, userData):
    theirs = KPAssignment(
        assigned_partitions=[KPAssignment.TopicPartition(topic=t, partitions=p) for t, p in _OWNED],
        user_data=userData,
        version=version,
    ).encode()
    assert encodeAssignment(_OWNED, userData, version) == theirs
    assert parseAssignment(theirs) == ConsumerAssignment(version, tuple((t, tuple(p)) for t, p in _OWNED), userData)


def test_aiokafka_v0():
    metadata = ConsumerProtocolMemberMetadata(0, ["orders", "b"], b"ud").encode()
    assert encodeSubscription(["orders", "b"], b"ud") == metadata
    assignment = ConsumerProtocolMemberAssignment(0, [("orders", [1, 0])], b"").encode()
    assert encodeAssignment([("orders", [1, 0])], b"") == assignment
    assert parseAssignment(assignment).partitions == (("orders", (1, 0)),)


def test_newer_assignment_version_reads_known_prefix():
    data = b"\x00\x07" + encodeAssignment([("a", [3])], None, 3)[2:] + b"future"
    assert parseAssignment(data) == ConsumerAssignment(7, (("a", (3,)),), None)


@pytest.mark.parametrize(
    "data",
    [
        "0000ffffffff",  # topics null (not nullable)
        "000000000001ffffffffffff",  # a null topic name
        "00010000000000000000ffffffff",  # ownedPartitions null (v1)
        "0001000000000000000000000001ffff00000000",  # a null owned topic
        "0001000000000000000000000001000161fffffffe",  # an owned topic's partitions negative
    ],
)
def test_nulls_kafka_refuses(data):
    with pytest.raises(SchemaError):
        parseSubscription(bytes.fromhex(data))


def test_nullable_fields_take_any_negative_length():
    # Kafka's readers: a negative length of a nullable field is null
    assert parseSubscription(bytes.fromhex("000300000000fffffffe00000000ffffffff8000")) == ConsumerSubscription(
        3, (), None, (), -1, None
    )


def test_negative_version_refused():
    with pytest.raises(SchemaError):
        parseSubscription(b"\xff\xff" + bytes.fromhex(OLD_NULLS[0])[2:])
    with pytest.raises(SchemaError):
        parseAssignment(b"\x80\x00")
    with pytest.raises(SchemaError):
        encodeSubscription(["a"], version=-1)


def _garbled(rnd: random.Random, seed: bytes) -> bytes:
    data = bytearray(seed)
    how = rnd.randrange(5)
    if how == 0:
        return bytes(data[: rnd.randrange(len(data) + 1)])
    if how == 1:
        for _ in range(rnd.randint(1, 4)):
            data[rnd.randrange(len(data))] = rnd.randrange(256)
    elif how == 2:
        return rnd.randbytes(rnd.randrange(48))
    elif how == 3:
        at = rnd.randrange(len(data) - 1)
        data[at : at + 2] = rnd.choice([b"\xff\xff", b"\xff\xfe", b"\x80\x00", b"\x7f\xff", b"\x00\x00"])
    else:
        data += rnd.randbytes(rnd.randrange(6))
    return bytes(data)


_SEEDS = [
    LIBRDKAFKA_RANGE_SUBSCRIPTION,
    LIBRDKAFKA_STICKY_SUBSCRIPTION,
    LIBRDKAFKA_RANGE_ASSIGNMENT,
    *(bytes.fromhex(h) for h in OLD_FULL.values()),
    *(bytes.fromhex(h) for h in OLD_NULLS.values()),
]


@pytest.mark.parametrize("parse", [parseSubscription, parseAssignment])
def test_every_truncation_is_a_schema_error(parse):
    for seed in _SEEDS:
        for n in range(len(seed)):
            try:
                parse(seed[:n])
            except SchemaError:
                pass


@pytest.mark.parametrize("parse", [parseSubscription, parseAssignment])
def test_garbled_bytes_raise_only_schema_errors(parse):
    rnd = random.Random(20261128)
    parsed = refused = 0
    for _ in range(20000):
        data = _garbled(rnd, rnd.choice(_SEEDS))
        try:
            parse(data)
        except SchemaError:
            refused += 1
        else:
            parsed += 1
    assert parsed and refused


def test_kafka_nulls_differ_from_the_codecs_default():
    from kafkatwist.coordinator.consumerprotocol import CONSUMER_PROTOCOL_SUBSCRIPTION
    from kafkatwist.protocol.schemacodec import Schema

    lax = Schema(CONSUMER_PROTOCOL_SUBSCRIPTION.definition)
    nullTopics = bytes.fromhex("ffffffff00000000")
    assert lax.decode(nullTopics, 0)[0]["Topics"] is None
    with pytest.raises(SchemaError):
        CONSUMER_PROTOCOL_SUBSCRIPTION.decode(nullTopics, 0)
    userDataMinus2 = bytes.fromhex("00000000fffffffe")
    with pytest.raises(SchemaError):
        lax.decode(userDataMinus2, 0)
    assert CONSUMER_PROTOCOL_SUBSCRIPTION.decode(userDataMinus2, 0)[0]["UserData"] is None


def test_group_with_garbled_metadata_answers_conservatively():
    # The coordinator's side of the contract: whatever a member sent, a
    # consumer group's subscription is parsed or taken as "anything".
    from .helpers import Harness, sub

    rnd = random.Random(7)
    answers = set()
    for i in range(100):
        metadata = _garbled(rnd, sub("t1"))
        h = Harness()
        (member,), generation = h.stableGroup(1, group=f"g{i}", protocols=[("range", metadata)])
        h.commit({("t2", 0): 1}, group=f"g{i}", member=member, generation=generation)
        result = h.coord.deleteOffsets(f"g{i}", [("t2", 0)])
        answers.add(result.partitions[("t2", 0)])
    assert answers == {ErrorCode.none, ErrorCode.group_subscribed_to_topic}
