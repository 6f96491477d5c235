"""
Connection quotas (Kafka's C{SocketServer.ConnectionQuotas}), checked by
the Acceptors as they accept:

  - C{max.connections}, C{max.connections.per.ip} and its per-address
    C{max.connections.per.ip.overrides}: counted at accept, released when
    the Processor sees the connection close; over them a connection is
    closed at once;
  - C{max.connection.creation.rate} broker-wide and
    C{listener.name.<listener>.max.connection.creation.rate} (KIP-612): each
    accept is recorded on the broker's and the listener's rate; over either,
    the Acceptor admits this connection only after the delay that brings the
    rate back, and accepts nothing else meanwhile (Kafka's acceptor thread
    blocks; here the Acceptor stops reading and a reactor timer resumes it);
  - the C{connection_creation_rate} client quota of an C{ip} entity (the
    address's own, else the default ip's): a connection over it is not
    counted anywhere and is closed once the throttle has passed, so a client
    reconnecting in a loop waits too.

Rates are Kafka's sampled rates over C{quota.window.num} windows of
C{quota.window.size.seconds}; a delay is C{(rate - limit) / limit} of the
measured window, at most one window (Kafka's C{maxThrottleTimeMs}).

Threads: the Acceptors call in from the main reactor; Processors release
from their threads; dynamic updates come from handler threads.  One lock.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from twisted.logger import Logger

from kafkatwist.quota.rate import SampledRate
from kafkatwist.quota.store import CONNECTION_CREATION_RATE, IP, ipAddress

__all__ = ["UNLIMITED_RATE", "ConnectionQuotas"]

log = Logger()

#: Kafka's "no limit" for a connection creation rate (Int.MaxValue)
UNLIMITED_RATE = 2**31 - 1
#: idle per-address sensors are dropped after this (Kafka's sensor expiry)
_IP_SENSOR_EXPIRY_MS = 3600 * 1000
_SWEEP_EVERY_MS = 60 * 1000


def ipConnectionRates(quotas) -> tuple[dict[str, float], float]:
    """
    From a client quota snapshot: address -> C{connection_creation_rate},
    and the default ip entity's (L{UNLIMITED_RATE} when unset).
    """
    perIp: dict[str, float] = {}
    default = float(UNLIMITED_RATE)
    for entity, values in quotas.items():
        if len(entity) != 1 or entity[0][0] != IP or CONNECTION_CREATION_RATE not in values:
            continue
        name = entity[0][1]
        if name is None:
            default = values[CONNECTION_CREATION_RATE]
            continue
        address = ipAddress(name)
        if address is None:
            # Kept in the store; enforced once it resolves (at the next
            # change of the quotas).
            log.warn("The connection creation rate of {name} is not enforced: it does not resolve now",
                     name=name)
            continue
        perIp[address] = values[CONNECTION_CREATION_RATE]
    return perIp, default


class ConnectionQuotas:
    """
    @param maxRate: C{max.connection.creation.rate}.
    @param listenerRates: listener name -> its connection creation rate
        (its own key, else the broker-wide one, as Kafka configures a
        listener from its prefixed keys over the others).
    @param clock: milliseconds; the Acceptors' reactor time in the broker.
    """

    def __init__(
        self,
        maxConnections: int,
        maxPerIp: int,
        overrides=None,
        *,
        maxRate: int = UNLIMITED_RATE,
        listenerRates=None,
        samples: int = 11,
        windowSeconds: int = 1,
        clock=None,
    ) -> None:
        self.maxConnections = maxConnections
        self.maxPerIp = maxPerIp
        self.overrides: dict[str, int] = dict(overrides or {})
        self._lock = threading.Lock()
        self._perIp: Counter[str] = Counter()
        self.total = 0
        self.clock = clock or (lambda: int(time.time() * 1000))
        self.samples = samples
        self.windowMs = windowSeconds * 1000
        self.maxRate = maxRate
        self.listenerRates: dict[str, int] = dict(listenerRates or {})
        self._brokerRate = self._newRate()
        self._listenerRate: dict[str, SampledRate] = {}
        self.ipRates: dict[str, float] = {}
        self.defaultIpRate = float(UNLIMITED_RATE)
        self._ipRate: dict[str, SampledRate] = {}
        self._lastSweep = 0

    def _newRate(self) -> SampledRate:
        return SampledRate(self.samples, self.windowMs)

    # -- counts ------------------------------------------------------------------

    def tryAcquire(self, host: str) -> str | None:
        """
        @return: C{None} if the connection may proceed, else why not.
        """
        with self._lock:
            if self.total >= self.maxConnections:
                return f"max.connections={self.maxConnections} reached"
            limit = self.overrides.get(host)
            if limit is not None:
                if self._perIp[host] >= limit:
                    return f"max.connections.per.ip.overrides={host}:{limit} reached"
            elif self._perIp[host] >= self.maxPerIp:
                return f"max.connections.per.ip={self.maxPerIp} reached for {host}"
            self.total += 1
            self._perIp[host] += 1
            return None

    def release(self, host: str) -> None:
        with self._lock:
            if self._perIp[host] <= 0:
                return
            self.total -= 1
            self._perIp[host] -= 1
            if not self._perIp[host]:
                del self._perIp[host]

    def update(self, maxConnections: int, maxPerIp: int, overrides=None) -> None:
        """
        New limits (a dynamic update): connections above them stay, new
        ones wait until the count is under.
        """
        with self._lock:
            self.maxConnections, self.maxPerIp = maxConnections, maxPerIp
            self.overrides = dict(overrides or {})

    def count(self, host: str) -> int:
        with self._lock:
            return self._perIp[host]

    # -- creation rates ------------------------------------------------------------

    def updateRates(self, maxRate: int, listenerRates) -> None:
        """
        New creation rate limits (a dynamic update); what was measured
        stays, and a delay already under way runs its course (as in Kafka).
        """
        with self._lock:
            self.maxRate = maxRate
            self.listenerRates = dict(listenerRates)

    def quotasChanged(self, quotas) -> None:
        """
        The client quotas changed (a L{ClientQuotaStore} listener): take
        the ip entities' C{connection_creation_rate}.
        """
        perIp, default = ipConnectionRates(quotas)
        with self._lock:
            self.ipRates, self.defaultIpRate = perIp, default

    def acceptDelayMs(self, listenerName: str, nowMs: int | None = None) -> int:
        """
        Record one accepted connection on the broker's and the listener's
        creation rate (Kafka's C{recordConnectionAndGetThrottleTimeMs}).

        @return: how long to hold it (and every later accept) back: the
            longer of the two delays, 0 within both limits.
        """
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            # Recorded whatever the limits, so that a limit set later
            # measures what came before, as Kafka's sensors do.
            self._brokerRate.record(1.0, nowMs)
            listenerRate = self._listenerRate.get(listenerName)
            if listenerRate is None:
                listenerRate = self._listenerRate[listenerName] = self._newRate()
            listenerRate.record(1.0, nowMs)
            delay = 0
            if self.maxRate < UNLIMITED_RATE:
                delay = self._brokerRate.throttleMs(self.maxRate, nowMs, self.windowMs)
            limit = self.listenerRates.get(listenerName, self.maxRate)
            if limit < UNLIMITED_RATE:
                delay = max(delay, listenerRate.throttleMs(limit, nowMs, self.windowMs))
            return delay

    def ipThrottleMs(self, listenerName: str, host: str, nowMs: int | None = None) -> int:
        """
        Record one connection from C{host} on its creation rate, if an ip
        quota applies (Kafka's C{recordIpConnectionMaybeThrottle}).

        @return: 0 if it may proceed; else the throttle after which it is
            to be closed, and it is taken back from every rate (it was never
            accepted).
        """
        nowMs = self.clock() if nowMs is None else nowMs
        with self._lock:
            limit = self.ipRates.get(host, self.defaultIpRate)
            if limit >= UNLIMITED_RATE:
                return 0
            self._sweep(nowMs)
            sensor = self._ipRate.get(host)
            if sensor is None:
                sensor = self._ipRate[host] = self._newRate()
            sensor.record(1.0, nowMs)
            throttle = sensor.throttleMs(limit, nowMs, self.windowMs)
            if throttle > 0:
                sensor.record(-1.0, nowMs)
                self._brokerRate.record(-1.0, nowMs)
                listenerRate = self._listenerRate.get(listenerName)
                if listenerRate is not None:
                    listenerRate.record(-1.0, nowMs)
            return throttle

    def _sweep(self, nowMs: int) -> None:
        if nowMs - self._lastSweep < _SWEEP_EVERY_MS:
            return
        self._lastSweep = nowMs
        for host in [h for h, s in self._ipRate.items() if nowMs - s.lastRecordMs > _IP_SENSOR_EXPIRY_MS]:
            del self._ipRate[host]


def connectionRates(config) -> tuple[int, dict[str, int]]:
    """
    C{max.connection.creation.rate}: the broker's, and each listener's
    (its own key, else the broker's).
    """
    key = "max.connection.creation.rate"
    return config[key], {l.name: config.listenerSetting(l.name, key) for l in config.listeners}
