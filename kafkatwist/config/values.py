"""
The value parsers of broker keys: C{parse(key, text)} -> typed value,
raising L{ConfigError} naming the key; each marked with the Kafka type of
the values it accepts (L{ConfigType}, DescribeConfigs' C{config_type}).

L{kafkatwist.config.KEYS} pairs every key with one of these.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from kafkatwist.config.base import (
    INT_MAX,
    LONG_MAX,
    SECURITY_PROTOCOLS,
    ConfigError,
    ConfigType,
    Listener,
)
from kafkatwist.util.affinity import AUTO, NONE, availableCpus, showCpus
from kafkatwist.security.sslprincipal import InvalidRules, parseRules

def _ofType(configType: ConfigType):
    """
    Mark a validator with the Kafka type of the values it accepts.
    """

    def mark(parse):
        parse.configType = configType
        return parse

    return mark


def _int(lo: int = -(2**31), hi: int = INT_MAX, *, configType=ConfigType.INT):
    def parse(key: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(key, f"{raw!r} is not an integer") from None
        if not lo <= value <= hi:
            raise ConfigError(key, f"{value} is outside [{lo}, {hi}]")
        return value

    return _ofType(configType)(parse)


def _long(lo: int = -(2**63), hi: int = LONG_MAX) -> Callable[[str, str], int]:
    return _int(lo, hi, configType=ConfigType.LONG)


def _double(lo: float, hi: float) -> Callable[[str, str], float]:
    def parse(key: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(key, f"{raw!r} is not a number") from None
        if not lo <= value <= hi:
            raise ConfigError(key, f"{value} is outside [{lo}, {hi}]")
        return value

    return _ofType(ConfigType.DOUBLE)(parse)


@_ofType(ConfigType.BOOLEAN)
def _bool(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(key, f"{raw!r} is not true or false")
    return value == "true"


def _string(key: str, raw: str) -> str:
    return raw.strip()


def _optionalString(key: str, raw: str) -> str | None:
    return raw.strip() or None


def _choice(*choices: str) -> Callable[[str, str], str]:
    def parse(key: str, raw: str) -> str:
        value = raw.strip()
        for choice in choices:
            if value.lower() == choice.lower():
                return choice
        raise ConfigError(key, f"{raw!r} is not one of {', '.join(choices)}")

    return parse


def _principalRules(key: str, raw: str) -> str:
    try:
        parseRules(raw)
    except InvalidRules as e:
        raise ConfigError(key, str(e)) from None
    return raw.strip() or "DEFAULT"


@_ofType(ConfigType.LIST)
def _list(key: str, raw: str) -> list[str]:
    return [item.strip() for item in raw.split(",") if item.strip()]


def _listOf(*allowed: str) -> Callable[[str, str], tuple[str, ...]]:
    """
    A non-empty list of C{allowed} words, duplicates dropped.
    """

    def parse(key: str, raw: str) -> tuple[str, ...]:
        items = tuple(item.lower() for item in _list(key, raw))
        if not items:
            raise ConfigError(key, "must not be empty")
        for item in items:
            if item not in allowed:
                raise ConfigError(key, f"{item!r} is not one of {', '.join(allowed)}")
        return tuple(dict.fromkeys(items))

    return _ofType(ConfigType.LIST)(parse)


def _optional(parseValue: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    """
    C{parseValue}, or C{None} for an empty value or C{null} (unset: a
    synonym decides).  C{required} is C{parseValue}, for the topic key.
    """

    def parse(key: str, raw: str) -> Any:
        if not raw.strip() or raw.strip().lower() == "null":
            return None
        return parseValue(key, raw)

    parse.required = parseValue
    return _ofType(getattr(parseValue, "configType", ConfigType.STRING))(parse)


#: Kafka 3.9's MetadataVersion values as (release, internal version), in
#: order; the last production one is 3.9-IV0.
_METADATA_VERSIONS = (
    ("0.8.0", ""), ("0.8.1", ""), ("0.8.2", ""), ("0.9.0", ""),
    ("0.10.0", "IV0"), ("0.10.0", "IV1"), ("0.10.1", "IV0"), ("0.10.1", "IV1"), ("0.10.1", "IV2"),
    ("0.10.2", "IV0"), ("0.11.0", "IV0"), ("0.11.0", "IV1"), ("0.11.0", "IV2"),
    ("1.0", "IV0"), ("1.1", "IV0"), ("2.0", "IV0"), ("2.0", "IV1"),
    ("2.1", "IV0"), ("2.1", "IV1"), ("2.1", "IV2"), ("2.2", "IV0"), ("2.2", "IV1"),
    ("2.3", "IV0"), ("2.3", "IV1"), ("2.4", "IV0"), ("2.4", "IV1"), ("2.5", "IV0"), ("2.6", "IV0"),
    ("2.7", "IV0"), ("2.7", "IV1"), ("2.7", "IV2"), ("2.8", "IV0"), ("2.8", "IV1"),
    ("3.0", "IV0"), ("3.0", "IV1"), ("3.1", "IV0"), ("3.2", "IV0"),
    ("3.3", "IV0"), ("3.3", "IV1"), ("3.3", "IV2"), ("3.3", "IV3"), ("3.4", "IV0"),
    ("3.5", "IV0"), ("3.5", "IV1"), ("3.5", "IV2"), ("3.6", "IV0"), ("3.6", "IV1"), ("3.6", "IV2"),
    ("3.7", "IV0"), ("3.7", "IV1"), ("3.7", "IV2"), ("3.7", "IV3"), ("3.7", "IV4"),
    ("3.8", "IV0"), ("3.9", "IV0"), ("4.0", "IV0"), ("4.0", "IV1"),
)
_LATEST_PRODUCTION = _METADATA_VERSIONS.index(("3.9", "IV0"))
#: Kafka's IBP_VERSIONS: every internal version by its full name, and each
#: release with a production version by its short name.
_VERSION_NAMES = frozenset(
    [f"{release}-{iv}" if iv else release for release, iv in _METADATA_VERSIONS]
    + [release for release, _ in _METADATA_VERSIONS[: _LATEST_PRODUCTION + 1]]
)


def _messageFormatVersion(key: str, raw: str) -> str:
    """
    A Kafka release, as Kafka 3.x's C{MetadataVersion.fromVersionString}
    reads it: the first three dot-separated parts of a 0.x version, the
    first two otherwise, name a release or one of its internal versions
    (C{0.10.0.0}, C{0.10.2}, C{2.8.1}, C{3.0-IV1}).
    """
    value = raw.strip()
    parts = value.split(".")
    wanted = 3 if value.startswith("0.") else 2
    name = value if wanted >= len(parts) else ".".join(parts[:wanted])
    if name not in _VERSION_NAMES:
        raise ConfigError(key, f"Version {value} is not a valid version")
    return value


#: the replica selectors kafkatwist implements (Kafka's class names)
REPLICA_SELECTORS = (
    "org.apache.kafka.common.replica.RackAwareReplicaSelector",
    "org.apache.kafka.common.replica.LeaderSelector",
)


@_ofType(ConfigType.CLASS)
def _replicaSelector(key: str, raw: str) -> str | None:
    value = raw.strip()
    if not value or value == "null":
        return None
    if value not in REPLICA_SELECTORS:
        raise ConfigError(key, f"Class {value} cannot be found (kafkatwist has {', '.join(REPLICA_SELECTORS)})")
    return value


def _compressionLevel(special: int | None, lo: int, hi: int):
    plain = _int(lo, hi)

    def parse(key: str, raw: str) -> int:
        if special is not None and raw.strip() == str(special):
            return special
        return plain(key, raw)

    return _ofType(ConfigType.INT)(parse)


def _optionalLong(lo: int = 0) -> Callable[[str, str], int | None]:
    return _optional(_long(lo))


def _cpuAffinity(key: str, raw: str) -> str | frozenset[int]:
    """
    C{auto}, C{none}, or CPU numbers and ranges such as C{3} or C{0,2-3},
    all of which this process must be allowed to run on.
    """
    value = raw.strip().lower()
    if value in (AUTO, NONE):
        return value
    cpus: set[int] = set()
    try:
        for item in value.split(","):
            low, dash, high = item.strip().partition("-")
            first, last = int(low), int(high if dash else low)
            if first < 0 or last < first:
                raise ValueError(item)
            cpus.update(range(first, last + 1))
    except ValueError:
        raise ConfigError(key, f"{raw!r} is not auto, none, or CPU numbers such as 3 or 0,2-3") from None
    available = availableCpus()
    if available is None:
        raise ConfigError(key, "CPU affinity is not supported on this platform; use auto or none")
    outside = cpus - available
    if outside:
        raise ConfigError(
            key, f"CPU {showCpus(outside)} is not one this process may run on ({showCpus(available)})"
        )
    return frozenset(cpus)


_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/]*)):(?P<port>\d+)$")


def parseListeners(key: str, raw: str, protocolMap: dict[str, str]) -> list[Listener]:
    """
    Parse C{PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093}.
    """
    listeners = []
    names = set()
    for item in _list(key, raw):
        match = _LISTENER.match(item)
        if match is None:
            raise ConfigError(key, f"{item!r} is not NAME://host:port")
        name = match["name"].upper()
        host = match["v6"] if match["v6"] is not None else match["host"]
        port = int(match["port"])
        if port > 65535:
            raise ConfigError(key, f"port {port} in {item!r} is out of range")
        if name in names:
            raise ConfigError(key, f"listener name {name} appears twice")
        if name not in protocolMap:
            raise ConfigError(
                key,
                f"listener {name} has no security protocol in listener.security.protocol.map",
            )
        names.add(name)
        listeners.append(Listener(name, host, port, protocolMap[name]))
    if not listeners:
        raise ConfigError(key, "no listener given")
    return listeners


def _protocolMap(key: str, raw: str) -> dict[str, str]:
    result = {}
    for item in _list(key, raw):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(key, f"{item!r}: protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
        result[name.strip().upper()] = protocol
    return result


@_ofType(ConfigType.STRING)
def _perIpOverrides(key: str, raw: str) -> dict[str, int]:
    """
    Kafka's C{host:count,...}: an address (or a host name, resolved now)
    and the connections it may have.
    """
    import ipaddress
    import socket

    result: dict[str, int] = {}
    for item in _list(key, raw):
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(key, f"{item!r} is not host:count")
        try:
            address = str(ipaddress.ip_address(host))
        except ValueError:
            try:
                address = socket.gethostbyname(host)
            except OSError as e:
                raise ConfigError(key, f"cannot resolve {host!r}: {e}") from None
        result[address] = int(count)
    return result


def _semicolonList(key: str, raw: str) -> list[str]:
    return [item.strip() for item in raw.split(";") if item.strip()]


def _mechanisms(key: str, raw: str) -> list[str]:
    # Checked against what is implemented only where a SASL listener uses
    # them: Kafka's default (GSSAPI) is harmless without one.
    return [item.upper() for item in _list(key, raw)]
