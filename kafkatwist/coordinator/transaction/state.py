"""
A transactional id's state (Kafka's C{TransactionMetadata}, C{TransactionState}).

State ids and names are Kafka's (they are written to C{__transaction_state}
and shown by DescribeTransactions and ListTransactions).  A change is
I{prepared} (L{TxnMetadata.pending} holds the target), written to the log,
and applied only once the append succeeded; while a change is pending every
mutating request for the id answers CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

__all__ = ["EPOCH_EXHAUSTED", "TxnMetadata", "TxnSnapshot", "TxnState", "VALID_PREVIOUS"]

#: Kafka's C{producerEpoch >= Short.MaxValue - 1}: the next InitProducerId
#: starts a new producer id at epoch 0
EPOCH_EXHAUSTED = 32766


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def displayName(self) -> str:
        return _NAMES[self]

    @classmethod
    def byName(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name)


_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
_BY_NAME = {name: state for state, name in _NAMES.items()}

S = TxnState

#: Kafka's C{TransactionState.validPreviousStates}
VALID_PREVIOUS = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARE_COMMIT: {S.ONGOING},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING},
}


@dataclass(frozen=True)
class TxnSnapshot:
    """
    The persisted part of a transactional id's state: what one record
    holds (and what a prepared change will make it).
    """

    producerId: int
    producerEpoch: int
    txnTimeoutMs: int
    state: TxnState
    partitions: frozenset = frozenset()
    txnStartTimestampMs: int = -1
    txnLastUpdateTimestampMs: int = -1
    previousProducerId: int = -1
    lastProducerEpoch: int = -1


@dataclass
class TxnMetadata:
    """
    One transactional id, owned by the coordinator's state machine.

    @ivar current: what the log holds (or, for a new id, what it will).
    @ivar pending: a change being written, or C{None}.
    @ivar partition: its partition of C{__transaction_state}.
    """

    transactionalId: str
    current: TxnSnapshot
    pending: TxnSnapshot | None = None
    partition: int = 0

    @property
    def state(self) -> TxnState:
        return self.current.state

    def prepare(self, **changes) -> TxnSnapshot:
        """
        The snapshot after C{changes}, set as pending.

        @raise ValueError: the state change is not one Kafka allows.
        """
        target = replace(self.current, **changes)
        if self.current.state not in VALID_PREVIOUS[target.state]:
            raise ValueError(
                f"{self.transactionalId}: {self.current.state.displayName} -> "
                f"{target.state.displayName} is not a valid transition"
            )
        self.pending = target
        return target
