"""
What a message type's fields hold, read from its type hints: the one
reading of the entity classes' conventions (C{kio}'s generated schemas and
the ones L{kafkatwist.protocol.entitytypes} declares: frozen dataclasses
whose nested structs are dataclasses, arrays C{tuple[X, ...]}, nullable
fields C{X | None}) for the walks driven by schemas alone
(L{kafkatwist.protocol.errorcounts}, L{kafkatwist.protocol.errorresponse}).

The bounds walk (L{kafkatwist.protocol.bounds}) reads fields through
C{kio}'s own classifier instead, since it must mirror C{kio}'s reader to
the letter.  The two part on a nullable array of entities
(C{tuple[X, ...] | None}): C{kio} reads it as an array of C{X}; here it is
neither an array (L{arrayElement}) nor an entity (L{entityOf}).
"""

from __future__ import annotations

import dataclasses
import typing
from functools import cache

__all__ = ["arrayElement", "entityOf", "hints", "isEntity", "nullable"]


@cache
def hints(cls: type) -> dict[str, typing.Any]:
    """
    @return: C{cls}'s fields' type hints by name, resolved.
    """
    return typing.get_type_hints(cls)


def isEntity(t: object) -> bool:
    """
    Whether the hint C{t} is an entity class (a struct of the schema).
    """
    return isinstance(t, type) and dataclasses.is_dataclass(t)


def arrayElement(t: object) -> typing.Any:
    """
    @return: the element type of a C{tuple[X, ...]} hint, or C{None}.
    """
    if typing.get_origin(t) is tuple:
        args = typing.get_args(t)
        if args:
            return args[0]
    return None


def entityOf(t: object) -> type | None:
    """
    @return: the entity class of an C{X} or C{X | None} hint, or C{None}.
    """
    if isEntity(t):
        return t  # type: ignore[return-value]
    for arg in typing.get_args(t):  # X | None
        if isEntity(arg):
            return arg
    return None


def nullable(t: object) -> bool:
    """
    Whether the hint C{t} admits C{None}.
    """
    return type(None) in typing.get_args(t)
