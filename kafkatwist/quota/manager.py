"""
Throttling clients over their quotas, as Kafka's C{ClientQuotaManager}.

Which quota applies to a request: the first entity of Kafka's precedence
that has a value for the key --

  1. this user and this client id      5. default user, default client id
  2. this user, default client id      6. the default user
  3. this user                         7. this client id
  4. default user, this client id      8. the default client id

-- and whose usage counts towards it (Kafka's metric tags): the user and
client id together for 1, 2, 4 and 5, the user alone for 3 and 6 (all of
its clients share the quota), the client id alone for 7 and 8.

Usage is measured over C{quota.window.num} samples of
C{quota.window.size.seconds} (L{kafkatwist.quota.rate.SampledRate}).  A
client over its quota is throttled for C{(rate - quota) / quota * window}
milliseconds: the time it must stay silent for its rate to come back to the
quota.  The throttle goes in the response's C{throttle_time_ms} and the
Processor owning the connection reads nothing more from it for that long.

Threads: called from request handler threads (and, for a long-polled
Fetch, the connection's Processor); one lock guards the sensors.  The
quotas themselves are read from the store's immutable snapshot.
"""

from __future__ import annotations

import threading
import time

from kafkatwist.quota.store import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    USER,
    ClientQuotaStore,
)
from kafkatwist.quota.rate import SampledRate

__all__ = ["ClientQuotas", "addThrottle", "userOf"]

#: sensors unused this long are dropped (Kafka's inactive sensor expiry)
_SENSOR_EXPIRY_MS = 3600 * 1000
_SWEEP_EVERY_MS = 60 * 1000


def addThrottle(context, throttleMs: int) -> int:
    """
    Raise the request's throttle to C{throttleMs} (the largest of its
    quotas wins, as in Kafka).  @return: the request's throttle.
    """
    current = getattr(context, "throttleMs", 0)
    if throttleMs > current:
        context.throttleMs = current = throttleMs
    return current


def userOf(principal: str) -> str:
    """
    The user a quota names: the principal's name (C{User:alice} -> alice).
    """
    return principal.partition(":")[2] or principal


def _candidates(user: str, clientId: str):
    """
    Kafka's precedence: (entity, metric tags), finest first.  Entities are
    sorted by type (C{client-id} before C{user}), as the store keeps them.
    """
    both = (user, clientId)
    return (
        (((CLIENT_ID, clientId), (USER, user)), both),
        (((CLIENT_ID, None), (USER, user)), both),
        (((USER, user),), (user, "")),
        (((CLIENT_ID, clientId), (USER, None)), both),
        (((CLIENT_ID, None), (USER, None)), both),
        (((USER, None),), (user, "")),
        (((CLIENT_ID, clientId),), ("", clientId)),
        (((CLIENT_ID, None),), ("", clientId)),
    )


class ClientQuotas:
    """
    @param store: where the quotas are set.
    @param samples: C{quota.window.num}.
    @param windowSeconds: C{quota.window.size.seconds}.
    @param clock: milliseconds (wall clock; tests pass their own).
    """

    def __init__(self, store: ClientQuotaStore, samples: int = 11, windowSeconds: int = 1, clock=None) -> None:
        self.store = store
        self.samples = samples
        self.windowMs = windowSeconds * 1000
        self.clock = clock or (lambda: int(time.time() * 1000))
        self._lock = threading.Lock()
        self._sensors: dict[tuple, SampledRate] = {}
        self._lastSweep = 0
        #: the keys some entity sets: a broker without quotas measures nothing
        self._keys: frozenset[str] = frozenset()
        store.listeners.append(self._quotasChanged)
        self._quotasChanged(store.quotas())

    def _quotasChanged(self, quotas) -> None:
        self._keys = frozenset(key for values in quotas.values() for key in values)

    def active(self, key: str) -> bool:
        return key in self._keys

    def quotaFor(self, key: str, user: str, clientId: str) -> tuple[float, tuple[str, str]] | None:
        """
        @return: the quota that applies and the usage it is measured on.
        """
        quotas = self.store.quotas()
        for entity, tags in _candidates(user, clientId or ""):
            values = quotas.get(entity)
            if values is not None and key in values:
                return values[key], tags
        return None

    def record(self, key: str, principal: str, clientId: str, value: float, nowMs: int | None = None) -> int:
        """
        Count C{value} against the client's quota for C{key}.

        @return: the throttle in milliseconds (0 within the quota).
        """
        found = self._applying(key, principal, clientId)
        if found is None:
            return 0
        bound, tags = found
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            sensor = self._sensor(key, tags, nowMs)
            sensor.record(value, nowMs)
            return self._throttle(sensor, bound, nowMs)

    def throttle(self, key: str, principal: str, clientId: str, nowMs: int | None = None) -> int:
        """
        The throttle the client's usage so far calls for, recording nothing.
        """
        found = self._applying(key, principal, clientId)
        if found is None:
            return 0
        bound, tags = found
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            sensor = self._sensors.get((key, tags))
            return 0 if sensor is None else self._throttle(sensor, bound, nowMs)

    def _applying(self, key: str, principal: str, clientId: str):
        """
        C{(bound, tags)} of the quota on C{key} that applies to the client,
        or C{None} when none does (or C{key} is not enforced here).
        """
        if key not in self._keys:
            return None
        return self.quotaFor(key, userOf(principal), clientId)

    def _sensor(self, key: str, tags, nowMs: int) -> SampledRate:
        if nowMs - self._lastSweep > _SWEEP_EVERY_MS:
            self._lastSweep = nowMs
            for name in [n for n, s in self._sensors.items() if nowMs - s.lastRecordMs > _SENSOR_EXPIRY_MS]:
                del self._sensors[name]
        sensor = self._sensors.get((key, tags))
        if sensor is None:
            sensor = self._sensors[(key, tags)] = SampledRate(self.samples, self.windowMs)
        return sensor

    def _throttle(self, sensor: SampledRate, bound: float, nowMs: int) -> int:
        # Never longer than the whole sampled window.
        return sensor.throttleMs(bound, nowMs, self.samples * self.windowMs)

    # -- what the request path calls ---------------------------------------------

    def produced(self, context, size: int) -> int:
        """
        A Produce request of C{size} bytes was handled (Kafka counts the
        whole request).  @return: its throttle.
        """
        return self.record(PRODUCER_BYTE_RATE, context.principal, context.clientId, size)

    def fetched(self, context, size: int) -> int:
        """
        A Fetch answer of C{size} bytes is ready.  @return: its throttle;
        when it is not 0 the answer is replaced by an empty one and the
        bytes are taken back (L{unfetched}), as Kafka does.
        """
        return self.record(CONSUMER_BYTE_RATE, context.principal, context.clientId, size)

    def unfetched(self, context, size: int) -> None:
        self.record(CONSUMER_BYTE_RATE, context.principal, context.clientId, -size)

    def requestThrottle(self, context) -> int:
        return self.throttle(REQUEST_PERCENTAGE, context.principal, context.clientId)

    def handlerTime(self, context, threadNanos: int) -> None:
        """
        A request handler thread spent C{threadNanos} on the request
        (Kafka's request_percentage: 100 is one thread all the time).
        """
        if REQUEST_PERCENTAGE in self._keys:
            self.record(REQUEST_PERCENTAGE, context.principal, context.clientId, threadNanos / 1e7)
