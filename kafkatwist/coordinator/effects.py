"""
What a sans-io coordinator asks its shell to do.

A coordinator's state machine never touches a log, a clock or a socket: each
of its entry points takes the current time and a request (or a timer that
fired, or an append that finished) and returns a list of effects, which the
shell (L{kafkatwist.coordinator.runtime.CoordinatorRuntime}) performs in
order.  The group coordinator uses these four; a transaction coordinator or
a KIP-848 coordinator would use the same ones with their own timer keys and
records.

Outcomes come back as inputs: an L{Append} is answered by calling the
machine's C{appendCompleted(nowMs, token, error)}, a L{SetTimer} by
C{timerFired(nowMs, key)}.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

__all__ = ["Append", "CancelTimer", "Effect", "Respond", "SetTimer"]

#: one record of an internal topic: key, and value (C{None}: a tombstone)
KeyValue = tuple[bytes, "bytes | None"]


@dataclass(frozen=True)
class Append:
    """
    Append C{records} as one batch to C{partition} of the coordinator's
    internal topic.  Appends to one partition are performed in the order
    they were emitted.

    @ivar token: handed back with the outcome, in
        C{appendCompleted(nowMs, token, error)}.
    @ivar producer: C{(producerId, producerEpoch)} to write C{records} as
        a transactional batch of that producer (transactional offset
        commits), or C{None}.
    @ivar marker: C{(producerId, producerEpoch, commit, coordinatorEpoch)}
        to append an end-transaction marker (C{records} then empty), or
        C{None}.
    """

    partition: int
    records: tuple[KeyValue, ...]
    token: int
    producer: tuple[int, int] | None = None
    marker: tuple[int, int, bool, int] | None = None


@dataclass(frozen=True)
class Respond:
    """
    Answer a request: call C{replyTo(result)}.  C{replyTo} is whatever the
    caller passed in with the request; the machine only stores it.
    """

    replyTo: Callable[[object], None]
    result: object


@dataclass(frozen=True)
class SetTimer:
    """
    Arm the timer C{key} to fire in C{delayMs}, replacing any armed timer
    with the same key.
    """

    key: Hashable
    delayMs: int


@dataclass(frozen=True)
class CancelTimer:
    """
    Disarm the timer C{key}; nothing if it is not armed.
    """

    key: Hashable


Effect = Append | Respond | SetTimer | CancelTimer
