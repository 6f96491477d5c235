"""
The client quotas set with AlterClientQuotas: entity -> quota key -> value,
kept in C{kafkatwist-client-quotas.json} in the first data directory.

An entity is a user, a client id, or both (Kafka's C{ClientQuotaEntity}),
each named or the default (C{None}).  Written whole with
L{kafkatwist.util.statefile} (temporary file, fsync, rename) before a
change is acknowledged; a damaged record is skipped at start-up with one
log line.

Threads: any thread reads L{ClientQuotaStore.quotas}, an immutable snapshot
replaced whole; changes are serialised by a lock.
"""

from __future__ import annotations

import ipaddress
import math
import os
import socket
import threading
from collections.abc import Mapping
from types import MappingProxyType

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.util.statefile import readRecords, storeRecords

__all__ = [
    "CLIENT_ID",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTAS_FILE",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaStore",
    "Entity",
    "checkEntity",
    "checkQuota",
    "ipAddress",
]

log = Logger()

QUOTAS_FILE = "kafkatwist-client-quotas.json"
_KIND = "client-quotas"
_VERSION = 1

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: the keys of user and client-id entities kafkatwist enforces, and whether
#: their values are whole numbers
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
#: the keys of an ip entity (Kafka's C{QuotaConfig.ipConfigs}: an INT)
IP_QUOTA_KEYS = {CONNECTION_CREATION_RATE: True}
#: Kafka's other keys, refused with the reason
_UNSUPPORTED_KEYS = {
    "controller_mutation_rate": "kafkatwist does not throttle topic creations and deletions",
}
_INT_MAX = 2**31 - 1

#: C{((entity type, name or None for the default), ...)}, sorted by type
Entity = tuple[tuple[str, "str | None"], ...]


def ipAddress(name: str) -> str | None:
    """
    The address an ip entity names, as the Acceptor sees a peer's (an IP
    in its usual text, or a host name resolved now, as Kafka's
    C{InetAddress.getByName}); C{None} when it is neither.
    """
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    return ipaddress.ip_address(found[0][4][0]).compressed if found else None


def _hostName(name: str) -> bool:
    """
    Whether C{name} is an IP address or could be a host name (RFC 1123
    labels), without asking a resolver.
    """
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    labels = name.rstrip(".").split(".")
    return len(name) <= 253 and all(
        0 < len(label) <= 63 and label[0] != "-" and label[-1] != "-"
        and all(c.isascii() and (c.isalnum() or c == "-") for c in label)
        for label in labels
    )


def checkEntity(components, resolve: bool = True) -> Entity:
    """
    Kafka's checks of an entity (C{ClientQuotaControlManager}): known types,
    each once, no empty name; an ip alone, naming an address.

    @param components: C{(entity type, name or None)} pairs as a request
        names them.
    @param resolve: an ip entity's host name must resolve now (a request);
        C{False} checks only its form (the stored file at start-up: a
        resolver down then must not lose an acknowledged quota).
    @return: the entity, normalised.
    @raise KafkaError: INVALID_REQUEST naming what is wrong.
    """
    entity: dict[str, str | None] = {}
    for entityType, name in components:
        if entityType in entity:
            raise KafkaError(ErrorCode.invalid_request, f"Duplicate {entityType} entity type in {list(components)}")
        if entityType not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.invalid_request, f"Unhandled client quota entity type: {entityType}")
        if name is not None and not name:
            raise KafkaError(ErrorCode.invalid_request, f"Empty {entityType} not supported")
        entity[entityType] = name
    if not entity:
        raise KafkaError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    if IP in entity:
        if len(entity) > 1:
            raise KafkaError(
                ErrorCode.invalid_request,
                "Invalid quota entity combination, IP entity should not be combined with User or ClientId",
            )
        name = entity[IP]
        if name is not None and not (ipAddress(name) is not None if resolve else _hostName(name)):
            raise KafkaError(ErrorCode.invalid_request, f"{name} is not a valid IP or resolvable host.")
    return tuple(sorted(entity.items()))


def checkQuota(entity: Entity, key: str, value: float) -> None:
    """
    @raise KafkaError: INVALID_REQUEST for a key the entity cannot have (or
        kafkatwist does not enforce) or a value it cannot be.
    """
    keys = IP_QUOTA_KEYS if entity[0][0] == IP else QUOTA_KEYS
    whole = keys.get(key)
    if whole is None:
        why = _UNSUPPORTED_KEYS.get(key) if keys is QUOTA_KEYS else None
        raise KafkaError(ErrorCode.invalid_request, why or f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0:
        raise KafkaError(ErrorCode.invalid_request, f"Invalid value {value} for {key}: must be positive")
    if whole and value != int(value):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid value {value} for {key}: must be an integer")
    if keys is IP_QUOTA_KEYS and value > _INT_MAX:
        raise KafkaError(ErrorCode.invalid_request, f"Proposed value for {key} is too large for an INT.")


def showEntity(entity: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


class ClientQuotaStore:
    """
    @param path: the file; C{None} keeps everything in memory (tests).
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._quotas: Mapping[Entity, Mapping[str, float]] = MappingProxyType({})
        #: called with the new snapshot after each change
        self.listeners: list = []

    @classmethod
    def inDirectory(cls, directory: str) -> ClientQuotaStore:
        return cls(os.path.join(directory, QUOTAS_FILE))

    def load(self) -> None:
        """
        Read the file (at start-up, once the data directory is ours).
        """
        if not self.path:
            return
        quotas: dict[Entity, dict[str, float]] = {}
        for record in readRecords(self.path, _KIND, _VERSION):
            try:
                entity = checkEntity([(t, n) for t, n in record["entity"]], resolve=False)
                key, value = record["key"], float(record["value"])
                checkQuota(entity, key, value)
            except (KafkaError, KeyError, TypeError, ValueError) as e:
                log.error("Skipping a damaged client quota in {path}: {record} ({error})",
                          path=self.path, record=record, error=e)
                continue
            quotas.setdefault(entity, {})[key] = value
        self._publish(quotas)
        for listener in list(self.listeners):
            listener(self._quotas)
        if quotas:
            log.info("Loaded the client quotas of {count} entities from {path}", count=len(quotas), path=self.path)

    def quotas(self) -> Mapping[Entity, Mapping[str, float]]:
        return self._quotas

    def alter(self, changes: list[tuple[Entity, list[tuple[str, float | None]]]]) -> None:
        """
        Apply every change at once, durably: C{(entity, [(key, value, or
        None to remove)])}, each already checked.

        @raise KafkaError: KAFKA_STORAGE_ERROR, nothing changed.
        """
        with self._lock:
            quotas = {entity: dict(values) for entity, values in self._quotas.items()}
            for entity, ops in changes:
                values = quotas.setdefault(entity, {})
                for key, value in ops:
                    if value is None:
                        values.pop(key, None)
                    else:
                        values[key] = value
                if not values:
                    del quotas[entity]
            if self.path:
                records = [
                    {"entity": [list(c) for c in entity], "key": key, "value": value}
                    for entity, values in sorted(quotas.items(), key=lambda item: repr(item[0]))
                    for key, value in sorted(values.items())
                ]
                storeRecords(self.path, _KIND, _VERSION, records)
            self._publish(quotas)
        for listener in list(self.listeners):
            listener(self._quotas)

    def _publish(self, quotas: dict) -> None:
        self._quotas = MappingProxyType(
            {entity: MappingProxyType(dict(values)) for entity, values in quotas.items()}
        )
