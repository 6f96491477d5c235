"""
Kafka's record formats of C{__transaction_state} (C{TransactionLogKey},
C{TransactionLogValue}) and the partitioning of transactional ids over it.

  - partition of a transactional id: C{abs(javaStringHashCode(id)) % n}, as
    for groups (an existing topic keeps its partition count);
  - key: C{int16 version 0 | string transactional_id} (int16 length, UTF-8);
  - value v0 (what Kafka writes unless C{transaction.version} >= 1, and
    what kafkatwist writes)::

        int16 version 0 | int64 producer_id | int16 producer_epoch |
        int32 transaction_timeout_ms | int8 transaction_status |
        [string topic | [int32 partition]] (null when Empty) |
        int64 last_update_timestamp_ms | int64 start_timestamp_ms

  - value v1 (read only): the same fields in the flexible encoding (compact
    strings and arrays, tagged fields: 0 previous producer id, 1 next
    producer id, 2 client transaction version);
  - a null value (tombstone): the transactional id expired.

Pure functions: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kafkatwist.coordinator.formats import partitionFor
from kafkatwist.coordinator.transaction.state import TxnState
from kafkatwist.protocol.header import readUnsignedVarint

__all__ = [
    "CorruptTxnRecord",
    "TRANSACTION_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC_CONFIGS",
    "TxnLogValue",
    "decodeKey",
    "decodeValue",
    "encodeKey",
    "encodeValue",
    "partitionFor",
]

TRANSACTION_STATE_TOPIC = "__transaction_state"
#: Kafka's C{TransactionStateManager.transactionTopicConfigs} (one broker:
#: no replication settings); C{segment.bytes} comes from
#: C{transaction.state.log.segment.bytes}
TRANSACTION_STATE_TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "compression.type": "uncompressed",
    "segment.bytes": "104857600",
}

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")
_TIMES = struct.Struct(">qq")


class CorruptTxnRecord(ValueError):
    """
    A record of C{__transaction_state} that cannot be read.
    """


@dataclass(frozen=True)
class TxnLogValue:
    """
    One transactional id's state as the log stores it.

    @ivar partitions: C{(topic, partition)} pairs; empty when Empty.
    """

    producerId: int
    producerEpoch: int
    txnTimeoutMs: int
    state: TxnState
    partitions: frozenset
    lastUpdateTimestampMs: int
    startTimestampMs: int
    previousProducerId: int = -1


def encodeKey(transactionalId: str) -> bytes:
    data = transactionalId.encode("utf-8")
    if len(data) > 0x7FFF:
        raise ValueError("transactional id too long")
    return _I16.pack(KEY_VERSION) + _I16.pack(len(data)) + data


def decodeKey(data: bytes) -> tuple[int, str | None]:
    """
    @return: C{(version, transactional id)}; the id is C{None} for a key
        version this broker does not know (the record is skipped).
    @raise CorruptTxnRecord: it does not decode.
    """
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version != KEY_VERSION:
            return version, None
        (length,) = _I16.unpack_from(data, 2)
        if length < 0 or 4 + length > len(data):
            raise CorruptTxnRecord(f"key string length {length}")
        return version, bytes(data[4 : 4 + length]).decode("utf-8")
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptTxnRecord(f"key: {e}") from None


def _byTopic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        topics.setdefault(topic, []).append(partition)
    return topics


def encodeValue(value: TxnLogValue) -> bytes:
    """
    Value v0.

    @raise ValueError: an Empty state with partitions (Kafka refuses too).
    """
    out = bytearray(
        _VALUE_HEAD.pack(
            VALUE_VERSION, value.producerId, value.producerEpoch, value.txnTimeoutMs,
            int(value.state),
        )
    )
    if value.state is TxnState.EMPTY:
        if value.partitions:
            raise ValueError("an Empty transaction has no partitions")
        out += _I32.pack(-1)
    else:
        topics = _byTopic(value.partitions)
        out += _I32.pack(len(topics))
        for topic, partitions in topics.items():
            name = topic.encode("utf-8")
            out += _I16.pack(len(name)) + name + _I32.pack(len(partitions))
            for partition in partitions:
                out += _I32.pack(partition)
    out += _TIMES.pack(value.lastUpdateTimestampMs, value.startTimestampMs)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes, flexible: bool) -> None:
        self.data = memoryview(data)
        self.at = 0
        self.flexible = flexible

    def take(self, n: int) -> memoryview:
        if n < 0 or self.at + n > len(self.data):
            raise CorruptTxnRecord(f"{n} bytes wanted at {self.at} of {len(self.data)}")
        part = self.data[self.at : self.at + n]
        self.at += n
        return part

    def unpack(self, fmt: struct.Struct):
        return fmt.unpack(self.take(fmt.size))

    def uvarint(self) -> int:
        try:
            value, self.at = readUnsignedVarint(self.data, self.at)
        except Exception as e:
            raise CorruptTxnRecord(f"varint: {e}") from None
        return value

    def count(self) -> int:
        """
        An array length (-1 for null).
        """
        if self.flexible:
            return self.uvarint() - 1
        return self.unpack(_I32)[0]

    def string(self) -> str:
        n = self.uvarint() - 1 if self.flexible else self.unpack(_I16)[0]
        try:
            return bytes(self.take(n)).decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptTxnRecord(f"string: {e}") from None

    def taggedFields(self) -> dict[int, memoryview]:
        fields = {}
        if self.flexible:
            for _ in range(self.uvarint()):
                tag = self.uvarint()
                fields[tag] = self.take(self.uvarint())
        return fields


def decodeValue(data: bytes) -> TxnLogValue:
    """
    Value v0 or v1.

    @raise CorruptTxnRecord: an unknown version, a state id out of range,
        or bytes that do not add up.
    """
    if len(data) < 2:
        raise CorruptTxnRecord("value shorter than its version")
    (version,) = _I16.unpack_from(data, 0)
    if version not in (0, 1):
        raise CorruptTxnRecord(f"unknown value version {version}")
    reader = _Reader(data, flexible=version >= 1)
    try:
        _, producerId, epoch, timeoutMs, status = reader.unpack(_VALUE_HEAD)
        try:
            state = TxnState(status)
        except ValueError:
            raise CorruptTxnRecord(f"unknown transaction state {status}") from None
        partitions = set()
        topics = reader.count()
        for _ in range(max(topics, 0)):
            topic = reader.string()
            for _ in range(max(reader.count(), 0)):
                partitions.add((topic, reader.unpack(_I32)[0]))
            reader.taggedFields()
        lastUpdate, start = reader.unpack(_TIMES)
        previous = -1
        tagged = reader.taggedFields()
        if 0 in tagged and len(tagged[0]) == 8:
            (previous,) = _I64.unpack(tagged[0])
    except struct.error as e:
        raise CorruptTxnRecord(str(e)) from None
    return TxnLogValue(
        producerId, epoch, timeoutMs, state, frozenset(partitions), lastUpdate, start, previous
    )


def transactionRecord(transactionalId: str, value: TxnLogValue | None) -> tuple[bytes, bytes | None]:
    return encodeKey(transactionalId), None if value is None else encodeValue(value)


def partitionOf(transactionalId: str, numPartitions: int) -> int:
    """
    Kafka's C{TransactionStateManager.partitionFor}: the same hash as a
    group's.
    """
    return partitionFor(transactionalId, numPartitions)
