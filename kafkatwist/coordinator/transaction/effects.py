"""
The transaction coordinator's own effect, besides the shared ones of
L{kafkatwist.coordinator.effects}: writing end-transaction markers.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WriteMarkers"]


@dataclass(frozen=True)
class WriteMarkers:
    """
    Write the marker of one transaction's outcome into C{partitions} (the
    WriteTxnMarkers path), then hand the per-partition results back as
    C{markersWritten(nowMs, token, {(topic, partition): error})}.
    """

    producerId: int
    producerEpoch: int
    commit: bool
    coordinatorEpoch: int
    partitions: frozenset
    token: int
