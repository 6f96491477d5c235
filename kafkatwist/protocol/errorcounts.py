"""
A response's error counts (Kafka's C{AbstractResponse.errorCounts}): every
error code the response carries -- the top level, each topic, partition,
group or resource -- counted once per place it appears, NONE too, which
is what Kafka's C{RequestChannel.updateErrorMetrics} adds to the
C{ErrorsPerSec} request metric of every response.

Read from the schemas alone: each response class gets, once, the list of
its fields that hold an error code or nested entities; a response is then
walked along those fields only.
"""

from __future__ import annotations

import dataclasses

from kio.schema.errors import ErrorCode

from kafkatwist.protocol.schematypes import arrayElement, entityOf, hints

#: how a field is read: an error code, one nested entity (or None), or an
#: array of them
_CODE, _ONE, _MANY = 0, 1, 2


#: response class -> its plan (a pure function of the class: two threads
#: computing one at once compute the same)
_PLANS: dict[type, tuple[tuple[str, int], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, int], ...]:
    """
    The fields of C{cls} that lead to an error code: C{(name, how)}.
    """
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = _makePlan(cls)
    return plan


def _makePlan(cls: type) -> tuple[tuple[str, int], ...]:
    plan = []
    types = hints(cls)
    for field in dataclasses.fields(cls):
        t = types[field.name]
        if t is ErrorCode:
            plan.append((field.name, _CODE))
        elif (element := arrayElement(t)) is not None:
            element = entityOf(element)
            if element is not None and _plan(element):
                plan.append((field.name, _MANY))
        else:
            entity = entityOf(t)
            if entity is not None and _plan(entity):
                plan.append((field.name, _ONE))
    return tuple(plan)


def errorCounts(response) -> dict[int, int]:
    """
    C{{error code: how many times}} for C{response} (a response entity).
    """
    counts: dict[int, int] = {}
    _count(response, counts)
    return counts


def _count(entity: object, counts: dict[int, int]) -> None:
    for name, how in _plan(type(entity)):
        value = getattr(entity, name)
        if how == _CODE:
            code = int(value)
            counts[code] = counts.get(code, 0) + 1
        elif how == _MANY:
            for item in value:
                _count(item, counts)
        elif value is not None:
            _count(value, counts)
