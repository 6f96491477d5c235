"""
The coordinators' records on disk: one codec driven by Kafka's schemas
(L{kafkatwist.coordinator.recordschemas}) writes the bytes Kafka writes and
reads what Kafka writes, tagged fields it does not know included.

The fixtures are spelled out field by field from Kafka's JSON schemas
(OffsetCommitKey/Value, GroupMetadataKey/Value, ConsumerGroup*Key/Value,
TransactionLogKey/Value): classic encoding is int16-length strings, int32
bytes and arrays; flexible is unsigned varint length + 1 and a tagged-field
section after each struct.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest

from kafkatwist.coordinator import consumer_group_records as C
from kafkatwist.coordinator import formats as F
from kafkatwist.coordinator.offsets import OffsetAndMetadata
from kafkatwist.coordinator.recordschemas import OFFSET_COMMIT_VALUE
from kafkatwist.coordinator.store import GroupSnapshot, MemberSnapshot
from kafkatwist.coordinator.transaction import formats as T
from kafkatwist.coordinator.transaction.state import TxnState
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.schemacodec import SchemaError


def h(*parts: str) -> bytes:
    return bytes.fromhex("".join(parts))


OFFSET_KEY = h("0001", "0003 677270", "0006 74c3b3706963", "00000007")  # grp, "tópic", 7
OFFSET_VALUE_V3 = h("0003", "000000000000002a", "00000005", "0004 6d657461", "00000000000003e8")
OFFSET_VALUE_V1 = h("0001", "000000000000002a", "0000", "00000000000003e8", "0000000000001388")
GROUP_KEY = h("0002", "0003 677270")
GROUP_VALUE_V3 = h(
    "0003", "0008 636f6e73756d6572", "00000003", "0005 72616e6765", "0002 6d31",
    "0000000000000309",  # current state timestamp 777
    "00000001",  # one member
    "0002 6d31", "0002 6931", "0001 63", "0002 2f68", "0000012c", "00000064",
    "00000002 0102", "00000000",
)
GROUP_VALUE_EMPTY = h("0003", "0000", "00000000", "ffff", "ffff", "ffffffffffffffff", "00000000")

MEMBER = MemberSnapshot(
    memberId="m1", groupInstanceId="i1", clientId="c", clientHost="/h", rebalanceTimeoutMs=300,
    sessionTimeoutMs=100, subscription=b"\x01\x02", assignment=b"",
)
SNAPSHOT = GroupSnapshot(
    groupId="grp", protocolType="consumer", generationId=3, protocolName="range", leaderId="m1",
    currentStateTimestampMs=777, members=(MEMBER,),
)


def test_offsets_and_groups_write_kafkas_bytes():
    assert F.encodeOffsetKey("grp", "tópic", 7) == OFFSET_KEY
    assert F.encodeGroupKey("grp") == GROUP_KEY
    v3 = OffsetAndMetadata(offset=42, leaderEpoch=5, metadata="meta", commitTimestampMs=1000,
                           expireTimestampMs=None)
    v1 = OffsetAndMetadata(offset=42, leaderEpoch=5, metadata="", commitTimestampMs=1000,
                           expireTimestampMs=5000)
    assert F.encodeOffsetValue(v3) == OFFSET_VALUE_V3
    assert F.encodeOffsetValue(v1) == OFFSET_VALUE_V1
    assert F.encodeGroupValue(SNAPSHOT) == GROUP_VALUE_V3
    empty = GroupSnapshot(groupId="grp", protocolType=None, generationId=0, protocolName=None,
                          leaderId=None, currentStateTimestampMs=None, members=())
    assert F.encodeGroupValue(empty) == GROUP_VALUE_EMPTY
    assert F.decodeKey(OFFSET_KEY) == ("offset", "grp", ("tópic", 7))
    assert F.decodeKey(GROUP_KEY) == ("group", "grp")
    assert F.decodeOffsetValue(OFFSET_VALUE_V3) == v3
    assert F.decodeOffsetValue(OFFSET_VALUE_V1) == OffsetAndMetadata(
        offset=42, leaderEpoch=-1, metadata="", commitTimestampMs=1000, expireTimestampMs=5000)
    assert F.decodeGroupValue("grp", GROUP_VALUE_V3) == SNAPSHOT
    assert F.decodeGroupValue("grp", GROUP_VALUE_EMPTY) == empty


def test_older_and_newer_versions_kafka_writes_are_read():
    # GroupMetadataValue v0: no rebalance timeout (the session timeout
    # stands in), no state timestamp, no instance id.
    v0 = h("0000", "0008 636f6e73756d6572", "00000001", "0005 72616e6765", "0002 6d31",
           "00000001", "0002 6d31", "0001 63", "0002 2f68", "00000064", "00000000", "00000000")
    group = F.decodeGroupValue("g", v0)
    assert (group.currentStateTimestampMs, group.members[0].rebalanceTimeoutMs) == (None, 100)
    assert group.members[0].groupInstanceId is None
    # OffsetCommitValue v4, flexible, with a tagged field this broker does
    # not know (tag 5, two bytes): skipped.
    v4 = h("0004", "000000000000002a", "00000005", "05 6d657461", "00000000000003e8",
           "01", "05 02 abcd")
    assert F.decodeOffsetValue(v4).offset == 42
    # The legacy key type 0 reads as type 1.
    assert F.decodeKey(b"\x00\x00" + OFFSET_KEY[2:]) == ("offset", "grp", ("tópic", 7))
    assert F.decodeKey(h("0009 0000")) == ("unknown", 9)


T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2**127 + 5)
CG_MEMBER = SimpleNamespace(
    memberId="mem", instanceId=None, rackId="r", clientId="cl", clientHost="/1.2.3.4",
    subscribedTopicNames=("a", "b"), subscribedTopicRegex=None, rebalanceTimeoutMs=5000,
    serverAssignor="uniform", memberEpoch=4, previousMemberEpoch=3, state="unrevoked_partitions",
)
CG_GROUP_KEY = "0003677270"
CG_MEMBER_KEY = "0003677270 00036d656d"


def test_consumer_group_records_write_kafkas_bytes():
    assert C.groupEpochRecord("grp", 9) == (h("0003", CG_GROUP_KEY), h("0000", "00000009", "00"))
    assert C.targetEpochRecord("grp", 8) == (h("0006", CG_GROUP_KEY), h("0000", "00000008", "00"))
    assert C.memberMetadataRecord("grp", CG_MEMBER) == (
        h("0005", CG_MEMBER_KEY),
        h("0000", "00", "02 72", "03 636c", "09 2f312e322e332e34", "03 0261 0262", "00",
          "00001388", "08 756e69666f726d", "00"),
    )
    assert C.targetMemberRecord("grp", "mem", {T2: frozenset({2, 0}), T1: frozenset({1})}) == (
        h("0007", CG_MEMBER_KEY),
        h("0000", "03",
          T1.hex, "02 00000001", "00",
          T2.hex, "03 00000000 00000002", "00",
          "00"),
    )
    assert C.currentAssignmentRecord("grp", CG_MEMBER, {T1: frozenset({0, 1})}, {}) == (
        h("0008", CG_MEMBER_KEY),
        h("0000", "00000004", "00000003", "01", "02", T1.hex, "03 00000000 00000001", "00",
          "01", "00"),
    )
    assert [k for k, _ in C.memberTombstones("grp", "mem")] == [
        h("0008", CG_MEMBER_KEY), h("0007", CG_MEMBER_KEY), h("0005", CG_MEMBER_KEY)]


def test_consumer_group_records_kafka_writes_are_read():
    loaded = C.ConsumerGroupRecords()
    # ConsumerGroupMetadataValue as Kafka 4.1 writes it: MetadataHash in
    # tag 0, which this broker does not keep.
    assert loaded.apply(3, h("0003", CG_GROUP_KEY),
                        h("0000", "00000009", "01", "00 08 0102030405060708"))
    assert loaded.groups["grp"].epoch == 9
    # TopicPartitions with KIP-1251's AssignmentEpochs (tag 0): skipped.
    assert loaded.apply(7, h("0007", CG_MEMBER_KEY),
                        h("0000", "02", T1.hex, "02 00000001", "01 00 05 02 00000007", "00"))
    assert loaded.groups["grp"].members["mem"].target == {T1: frozenset({1})}
    key, value = C.currentAssignmentRecord("grp", CG_MEMBER, {T1: frozenset({0, 1})}, {T2: frozenset({3})})
    assert loaded.apply(8, key, value)
    current = loaded.groups["grp"].members["mem"].current
    assert current == dict(memberEpoch=4, previousMemberEpoch=3, state="unrevoked_partitions",
                           assigned={T1: frozenset({0, 1})}, pending={T2: frozenset({3})})
    key, value = C.memberMetadataRecord("grp", CG_MEMBER)
    assert loaded.apply(5, key, value)
    assert loaded.groups["grp"].members["mem"].metadata["subscribedTopicNames"] == ("a", "b")


TXN_VALUE_V0 = h(
    "0000", "00000000000003e8", "0002", "0000ea60", "01",
    "00000002", "0001 61", "00000002 00000000 00000003", "0001 62", "00000001 00000001",
    "000000000000000b", "000000000000000a",
)


def test_transaction_records_write_and_read_kafkas_bytes():
    assert T.encodeKey("tx-1") == h("0000", "0004 74782d31")
    value = T.TxnLogValue(1000, 2, 60000, TxnState.ONGOING,
                          frozenset({("b", 1), ("a", 3), ("a", 0)}), 11, 10)
    assert T.encodeValue(value) == TXN_VALUE_V0
    assert T.decodeValue(TXN_VALUE_V0) == value
    empty = T.TxnLogValue(1000, 2, 60000, TxnState.EMPTY, frozenset(), 11, -1)
    assert T.encodeValue(empty) == h("0000", "00000000000003e8", "0002", "0000ea60", "00",
                                     "ffffffff", "000000000000000b", "ffffffffffffffff")
    # v1 (transaction.version 1+) with all three tagged fields.
    v1 = h("0001", "00000000000003e8", "0002", "0000ea60", "01",
           "02", "02 61", "02 00000004", "00",
           "000000000000000b", "000000000000000a",
           "03", "00 08 0000000000000006", "01 08 0000000000000007", "02 02 0002")
    assert T.decodeValue(v1) == T.TxnLogValue(1000, 2, 60000, TxnState.ONGOING,
                                              frozenset({("a", 4)}), 11, 10, 6)


@pytest.mark.parametrize("data", [
    b"", b"\x00", b"\x00\x07", h("0003", "0000000000"), h("0003", "000000000000002a", "00000005", "7fff"),
    h("0004", "000000000000002a", "00000005", "ffffffff0f"),
    h("0004", "000000000000002a", "00000005", "05 6d657461", "00000000000003e8", "01", "05 7f"),
])
def test_damaged_values_raise_the_records_error(data):
    with pytest.raises(F.CorruptGroupRecord):
        F.decodeOffsetValue(data)
    with pytest.raises(SchemaError):
        OFFSET_COMMIT_VALUE.decodeValue(data)


def test_damaged_group_and_transaction_values():
    for cut in range(2, len(GROUP_VALUE_V3)):
        with pytest.raises(F.CorruptGroupRecord):
            F.decodeGroupValue("grp", GROUP_VALUE_V3[:cut])
    for cut in range(2, len(TXN_VALUE_V0)):
        with pytest.raises(T.CorruptTxnRecord):
            T.decodeValue(TXN_VALUE_V0[:cut])
    # An array count far past the bytes: refused before any loop.
    with pytest.raises(F.CorruptGroupRecord):
        F.decodeGroupValue("grp", GROUP_VALUE_EMPTY[:-4] + h("7fffffff"))


def test_strings_too_long_for_a_schema_are_refused():
    with pytest.raises(KafkaError):
        F.encodeOffsetKey("g" * 40000, "t", 0)
    with pytest.raises(ValueError):
        T.encodeKey("x" * 40000)
