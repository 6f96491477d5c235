"""
Building response entities of any version from one set of values.

Handlers compute every field the newest version has and let L{make} keep
the ones the requested version defines, so one code path serves v0 to vN.
"""

import datetime
import sys
from dataclasses import fields
from functools import cache

NO_THROTTLE = datetime.timedelta(0)
#: "authorized operations were not requested"
OPERATIONS_OMITTED = -(2**31)
#: no leader (Kafka's C{LeaderAndIsr.NoLeader}; a leader id of -1 on the wire)
NO_LEADER = -1


@cache
def fieldNames(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values):
    """
    Instantiate C{cls} with the given values it has fields for.
    """
    names = fieldNames(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has(cls: type, name: str) -> bool:
    return name in fieldNames(cls)


@cache
def nested(cls: type, name: str) -> type:
    """
    @return: the entity class C{name} defined beside C{cls} (the schema of
        its arrays' elements, e.g. C{MetadataResponseTopic}).
    """
    value = getattr(cls, name, None)
    if isinstance(value, type):
        return value
    return getattr(sys.modules[cls.__module__], name)


def ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def durationMs(value) -> int:
    """
    @param value: a C{kio} duration field (a C{timedelta}) or plain
        milliseconds.
    @return: whole milliseconds (negative values such as -1 are kept).
    """
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def timestampMs(value: int | None):
    """
    kio's C{datetime_i64} fields take aware datetimes, or None for -1.
    """
    if value is None or value < 0:
        return None
    return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)
