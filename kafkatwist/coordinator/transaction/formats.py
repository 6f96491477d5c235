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

The schemas are in L{kafkatwist.coordinator.recordschemas}.

Pure functions: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from kafkatwist.coordinator.formats import partitionFor
from kafkatwist.coordinator.recordschemas import TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE
from kafkatwist.coordinator.transaction.state import TxnState

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
    """
    C{TransactionLogKey} v0.

    @raise ValueError: an id too long for a string.
    """
    return TRANSACTION_LOG_KEY.encodeKey({"TransactionalId": transactionalId})


def decodeKey(data: bytes) -> tuple[int, str | None]:
    """
    @return: C{(version, transactional id)}; the id is C{None} for a key
        version this broker does not know (the record is skipped).
    @raise CorruptTxnRecord: it does not decode.
    """
    if len(data) < 2:
        raise CorruptTxnRecord(f"key of {len(data)} bytes")
    (version,) = _I16.unpack_from(data, 0)
    if version != KEY_VERSION:
        return version, None
    transactionalId = TRANSACTION_LOG_KEY.decodeKey(data, CorruptTxnRecord)["TransactionalId"]
    if transactionalId is None:
        raise CorruptTxnRecord("null transactional id")
    return version, transactionalId


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
    if value.state is TxnState.EMPTY:
        if value.partitions:
            raise ValueError("an Empty transaction has no partitions")
        partitions = None
    else:
        partitions = [
            {"Topic": topic, "PartitionIds": ids} for topic, ids in _byTopic(value.partitions).items()
        ]
    return TRANSACTION_LOG_VALUE.encodeValue(
        {
            "ProducerId": value.producerId,
            "ProducerEpoch": value.producerEpoch,
            "TransactionTimeoutMs": value.txnTimeoutMs,
            "TransactionStatus": int(value.state),
            "TransactionPartitions": partitions,
            "TransactionLastUpdateTimestampMs": value.lastUpdateTimestampMs,
            "TransactionStartTimestampMs": value.startTimestampMs,
            "PreviousProducerId": value.previousProducerId,
        },
        VALUE_VERSION,
    )


def decodeValue(data: bytes) -> TxnLogValue:
    """
    Value v0 or v1.

    @raise CorruptTxnRecord: an unknown version, a state id out of range,
        or bytes that do not add up.
    """
    _, v = TRANSACTION_LOG_VALUE.decodeValue(data, CorruptTxnRecord)
    try:
        state = TxnState(v["TransactionStatus"])
    except ValueError:
        raise CorruptTxnRecord(f"unknown transaction state {v['TransactionStatus']}") from None
    partitions = set()
    for topic in v["TransactionPartitions"] or ():
        if topic["Topic"] is None:
            raise CorruptTxnRecord("null topic")
        for partition in topic["PartitionIds"] or ():
            partitions.add((topic["Topic"], partition))
    return TxnLogValue(
        v["ProducerId"],
        v["ProducerEpoch"],
        v["TransactionTimeoutMs"],
        state,
        frozenset(partitions),
        v["TransactionLastUpdateTimestampMs"],
        v["TransactionStartTimestampMs"],
        v["PreviousProducerId"],
    )


def transactionRecord(transactionalId: str, value: TxnLogValue | None) -> tuple[bytes, bytes | None]:
    return encodeKey(transactionalId), None if value is None else encodeValue(value)


def partitionOf(transactionalId: str, numPartitions: int) -> int:
    """
    Kafka's C{TransactionStateManager.partitionFor}: the same hash as a
    group's.
    """
    return partitionFor(transactionalId, numPartitions)
