"""
The client quotas set with AlterClientQuotas: entity -> quota key -> value,
kept in C{kafkatwist-client-quotas.json} in the first data directory.

An entity is a user, a client id, or both (Kafka's C{ClientQuotaEntity}),
each named or the default (C{None}).  Written whole with
L{kafkatwist.security.statefile} (temporary file, fsync, rename) before a
change is acknowledged; a damaged record is skipped at start-up with one
log line.

Threads: any thread reads L{ClientQuotaStore.quotas}, an immutable snapshot
replaced whole; changes are serialised by a lock.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping
from types import MappingProxyType

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.security.statefile import readRecords, storeRecords

__all__ = [
    "CLIENT_ID",
    "CONSUMER_BYTE_RATE",
    "PRODUCER_BYTE_RATE",
    "QUOTAS_FILE",
    "REQUEST_PERCENTAGE",
    "USER",
    "ClientQuotaStore",
    "Entity",
    "checkEntity",
    "checkQuota",
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
#: the keys kafkatwist enforces, and whether their values are whole numbers
QUOTA_KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False}
#: Kafka's other keys, refused with the reason
_UNSUPPORTED_KEYS = {
    "controller_mutation_rate": "kafkatwist does not throttle topic creations and deletions",
    "connection_creation_rate": "kafkatwist has no IP quotas (connection_creation_rate)",
}

#: C{((entity type, name or None for the default), ...)}, sorted by type
Entity = tuple[tuple[str, "str | None"], ...]


def checkEntity(components) -> Entity:
    """
    @param components: C{(entity type, name or None)} pairs as a request
        names them.
    @return: the entity, normalised.
    @raise KafkaError: INVALID_REQUEST naming what is wrong.
    """
    entity: dict[str, str | None] = {}
    for entityType, name in components:
        if entityType in entity:
            raise KafkaError(ErrorCode.invalid_request, f"Duplicate {entityType} entity type in {list(components)}")
        entity[entityType] = name
    if not entity:
        raise KafkaError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    for entityType in entity:
        if entityType == IP:
            raise KafkaError(ErrorCode.invalid_request, _UNSUPPORTED_KEYS["connection_creation_rate"])
        if entityType not in (USER, CLIENT_ID):
            raise KafkaError(ErrorCode.invalid_request, f"Unhandled client quota entity type: {entityType}")
    return tuple(sorted(entity.items()))


def checkQuota(key: str, value: float) -> None:
    """
    @raise KafkaError: INVALID_REQUEST for a key kafkatwist does not
        enforce or a value it cannot be.
    """
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        why = _UNSUPPORTED_KEYS.get(key)
        raise KafkaError(ErrorCode.invalid_request, why or f"Invalid configuration key {key}")
    if not math.isfinite(value) or value <= 0:
        raise KafkaError(ErrorCode.invalid_request, f"Invalid value {value} for {key}: must be positive")
    if whole and value != int(value):
        raise KafkaError(ErrorCode.invalid_request, f"Invalid value {value} for {key}: must be an integer")


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
                entity = checkEntity([(t, n) for t, n in record["entity"]])
                key, value = record["key"], float(record["value"])
                checkQuota(key, value)
            except (KafkaError, KeyError, TypeError, ValueError) as e:
                log.error("Skipping a damaged client quota in {path}: {record} ({error})",
                          path=self.path, record=record, error=e)
                continue
            quotas.setdefault(entity, {})[key] = value
        self._publish(quotas)
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
