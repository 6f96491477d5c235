"""
End-transaction markers: the control batches a transaction coordinator has
written into each partition of a transaction when it commits or aborts
(Kafka's C{EndTransactionMarker}, C{MemoryRecords.withEndTransactionMarker}).

A marker is one magic-2 batch, transactional and control (attributes
C{0x30}), carrying the producer id and epoch, base sequence -1, and one
record whose key is C{int16 version 0 | int16 type} (0 ABORT, 1 COMMIT) and
whose value is C{int16 version 0 | int32 coordinator epoch}.  Readers accept
a key version above 0 as 0 (only a negative one is invalid) and skip control
types they do not know (KRaft's leader-change and snapshot records).

Pure functions: no I/O.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kafkatwist.protocol.batch import CONTROL_BIT, HEADER, HEADER_SIZE
from kafkatwist.protocol.compression import CorruptRecordError
from kafkatwist.protocol.records import Record, buildBatch, controlRecord, decodeBatches

__all__ = [
    "ABORT",
    "COMMIT",
    "Marker",
    "MarkerError",
    "buildMarkerBatch",
    "readMarker",
]

#: control record types (Kafka's C{ControlRecordType})
ABORT = 0
COMMIT = 1

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class MarkerError(ValueError):
    """
    A control batch whose record is not a readable end-transaction marker.
    """


class Marker(NamedTuple):
    """
    What a marker says.

    @ivar controlType: L{ABORT}, L{COMMIT}, or another control type (not a
        transaction marker).
    """

    controlType: int
    coordinatorEpoch: int

    @property
    def isTransactionMarker(self) -> bool:
        return self.controlType in (ABORT, COMMIT)

    @property
    def isAborted(self) -> bool:
        return self.controlType == ABORT


def buildMarkerBatch(
    producerId: int,
    producerEpoch: int,
    commit: bool,
    coordinatorEpoch: int,
    timestamp: int,
    partitionLeaderEpoch: int = -1,
) -> bytes:
    """
    The control batch of one marker (offset 0: the log assigns it).
    """
    record: Record = controlRecord(commit, coordinatorEpoch, timestamp)
    return buildBatch(
        [record],
        producerId=producerId,
        producerEpoch=producerEpoch,
        baseSequence=-1,
        partitionLeaderEpoch=partitionLeaderEpoch,
        isTransactional=True,
        isControl=True,
    )


def readMarker(batch) -> Marker:
    """
    Read the control record of one control batch (its whole bytes).

    @raise MarkerError: it is not a control batch, or its record does not
        decode or is too short for its type.
    """
    view = memoryview(batch)
    if len(view) < HEADER_SIZE or not HEADER.unpack_from(view, 0)[5] & CONTROL_BIT:
        raise MarkerError("not a control batch")
    try:
        decoded = next(decodeBatches(view, checkCrc=False), None)
    except CorruptRecordError as e:
        raise MarkerError(str(e)) from None
    if decoded is None or not decoded.records:
        raise MarkerError("a control batch without a record")
    record = decoded.records[0]
    key = record.key
    if key is None or len(key) < _KEY.size:
        raise MarkerError("a control record key shorter than 4 bytes")
    version, controlType = _KEY.unpack_from(key, 0)
    if version < 0:
        raise MarkerError(f"control record key version {version}")
    if controlType not in (ABORT, COMMIT):
        return Marker(controlType, -1)
    value = record.value
    if value is None or len(value) < _VALUE.size:
        raise MarkerError("an end-transaction marker value shorter than 6 bytes")
    _, coordinatorEpoch = _VALUE.unpack_from(value, 0)
    return Marker(controlType, coordinatorEpoch)
