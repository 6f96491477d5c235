"""
What applies each dynamic broker config (L{kafkatwist.config.dynamic}), and
the settings the log and its cleaner are built from.

Every reconfigurable runs on the request handler thread serving the alter
request (disk I/O allowed there); state owned by another thread is handed
over or swapped whole:

  - L{LogDefaults}: the C{log.*} keys topics inherit, C{message.max.bytes},
    C{min.insync.replicas}, C{compression.type}: the log manager resolves
    every topic's config again (under its lock), the next append, retention
    or cleaning pass sees it;
  - L{CleanerSettings}: C{log.cleaner.*}: the rate and back-off change in
    place; thread count and buffers restart the cleaner as Kafka does (a
    pass in progress is abandoned and redone);
  - L{HandlerThreads}: C{num.io.threads}, with Kafka's bounds (half to
    double the current count);
  - L{NetworkThreads}: C{num.network.threads}, the same bounds: the
    Processors are added or removed on the main thread, which owns the
    list the Acceptors hand connections from (the alter request is answered
    before a removed Processor closes its connections);
  - L{ConnectionLimits}: C{max.connections}, C{max.connections.per.ip},
    C{max.connections.per.ip.overrides}, C{max.connection.creation.rate}
    and a listener's own C{listener.name.<name>.max.connection.creation.rate},
    from the next accept;
  - L{ListenerKeystores}: a listener's C{listener.name.<name>.ssl.*}: a new
    TLS context for new connections, existing ones keep theirs;
  - L{ReplicationThrottles}: C{leader.replication.throttled.rate},
    C{follower.replication.throttled.rate}, in place.
"""

from __future__ import annotations

from kafkatwist.config import (
    KEYS,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigError,
    listenerConnectionKey,
    listenerSslKey,
)
from kafkatwist.config.dynamic import Reconfigurable
from kafkatwist.errors import KafkaError
from kafkatwist.network.connectionquotas import connectionRates
from kafkatwist.log.cleaner import LogCleaner
from kafkatwist.util.affinity import availableCpus, requestThreadCpusFor
from kafkatwist.log.config import BrokerLogDefaults
from kafkatwist.network.tls import listenerContextFactory

__all__ = [
    "CleanerSettings",
    "ConnectionLimits",
    "HandlerThreads",
    "ListenerKeystores",
    "LogDefaults",
    "NetworkThreads",
    "ReplicationThrottles",
    "brokerLogDefaults",
    "makeLogCleaner",
]


def brokerLogDefaults(config) -> dict:
    """
    The broker settings the log manager resolves topic defaults from: every
    key that is set (the log reads the ones it knows, through the
    registry's topic keys, L{kafkatwist.config.TOPIC_KEYS}).
    """
    return {name: config[name] for name in KEYS if config[name] is not None}


def makeLogCleaner(config, logManager):
    """
    The log cleaner (C{log.cleaner.*}), or C{None} when disabled or without
    a log.  Its processes keep off the CPUs of the request threads.
    """

    if logManager is None or not config["log.cleaner.enable"] or not config["log.cleaner.threads"]:
        return None
    available = availableCpus()
    requestCpus = requestThreadCpusFor(config, available)
    cpus = None
    if available and requestCpus and available - requestCpus:
        cpus = frozenset(available - requestCpus)
    return LogCleaner(
        logManager,
        threads=config["log.cleaner.threads"],
        dedupeBufferSize=config["log.cleaner.dedupe.buffer.size"],
        ioBufferSize=config["log.cleaner.io.buffer.size"],
        loadFactor=config["log.cleaner.io.buffer.load.factor"],
        maxIoBytesPerSecond=config["log.cleaner.io.max.bytes.per.second"],
        backoffMs=config["log.cleaner.backoff.ms"],
        cpus=cpus,
    )


class LogDefaults(Reconfigurable):
    keys = frozenset(name for key in TOPIC_KEYS.values() for name, _ in key.synonyms)

    def __init__(self, broker) -> None:
        self.broker = broker

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        try:
            BrokerLogDefaults(brokerLogDefaults(new))
        except KafkaError as e:
            raise ConfigError("log", e.message or str(e)) from None

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        logManager = self.broker.logManager
        if logManager is not None:
            logManager.setBrokerDefaults(brokerLogDefaults(new))
        cleaner = self.broker.logCleaner
        if cleaner is not None:
            # A default turned to compact: look now, not after the back-off.
            cleaner.wakeUp()


#: cleaner keys applied in place; the others restart the cleaner
_CLEANER_LIVE = ("log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms")


class CleanerSettings(Reconfigurable):
    keys = frozenset(
        (
            "log.cleaner.threads",
            "log.cleaner.dedupe.buffer.size",
            "log.cleaner.io.buffer.size",
            "log.cleaner.io.buffer.load.factor",
        )
        + _CLEANER_LIVE
    )

    def __init__(self, broker) -> None:
        self.broker = broker

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        # Kafka's LogCleaner.validateReconfiguration: the dedupe buffer of
        # each thread must stay under 2 GiB.
        perThread = new["log.cleaner.dedupe.buffer.size"] // max(new["log.cleaner.threads"], 1)
        if perThread > 2**31 - 1:
            raise ConfigError(
                "log.cleaner.dedupe.buffer.size",
                f"{perThread} per cleaner thread is above the 2 GB limit of a dedupe buffer",
            )

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        cleaner = self.broker.logCleaner
        restart = any(old[key] != new[key] for key in self.keys - set(_CLEANER_LIVE))
        if cleaner is not None and not restart:
            # Read at the next pass (and the next sleep).
            rate = new["log.cleaner.io.max.bytes.per.second"]
            cleaner.maxIoBytesPerSecond = rate
            cleaner.throttler.bytesPerSecond = rate
            cleaner.backoffMs = new["log.cleaner.backoff.ms"]
            cleaner.wakeUp()
            return
        if cleaner is not None:
            cleaner.stop()
        replacement = makeLogCleaner(new, self.broker.logManager)
        if replacement is not None:
            replacement.start()
        self.broker.logCleaner = replacement


def checkThreadCount(key: str, current: int, wanted: int) -> None:
    """
    Kafka's bounds on a dynamic thread count (C{DynamicThreadPool},
    C{DataPlaneAcceptor}): from half to double the current count.

    @raise ConfigError: out of them.
    """
    if wanted == current:
        return
    if wanted < current / 2:
        raise ConfigError(key, f"value should be at least half the current value {current}")
    if wanted > current * 2:
        raise ConfigError(key, f"value should not be greater than double the current value {current}")


class HandlerThreads(Reconfigurable):
    keys = frozenset(("num.io.threads",))

    def __init__(self, server) -> None:
        self.server = server

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        checkThreadCount("num.io.threads", self.server.handlerPool.numThreads, new["num.io.threads"])

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        self.server.handlerPool.resize(new["num.io.threads"])


class NetworkThreads(Reconfigurable):
    """
    C{num.network.threads}: the Processors the Acceptors share.

    @ivar count: the count last asked for (the list itself changes on the
        main thread, a moment later).
    """

    keys = frozenset(("num.network.threads",))

    def __init__(self, server) -> None:
        self.server = server
        self.count = len(server.processors)

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        checkThreadCount("num.network.threads", self.count, new["num.network.threads"])

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        self.count = new["num.network.threads"]
        if self.server.started:
            self.server.mainReactor.callFromThread(self.server.resizeProcessors, self.count)
        else:
            # Start-up (stored configs): nothing runs yet.
            self.server.resizeProcessors(self.count)


class ConnectionLimits(Reconfigurable):
    keys = frozenset((
        "max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
        "max.connection.creation.rate",
    ))

    def __init__(self, server) -> None:
        self.server = server

    def _concerns(self, key: str) -> bool:
        return key in self.keys or listenerConnectionKey(key) is not None

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        # Kafka's ListenerConnectionQuota.validateReconfiguration.
        for name, rate in connectionRates(new)[1].items():
            if rate <= 0:
                raise ConfigError(f"listener.name.{name.lower()}.max.connection.creation.rate",
                                  f"Invalid max.connection.creation.rate {rate}")

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        quotas = self.server.quotas
        quotas.update(
            new["max.connections"], new["max.connections.per.ip"], new["max.connections.per.ip.overrides"]
        )
        quotas.updateRates(*connectionRates(new))


class ListenerKeystores(Reconfigurable):
    """
    A TLS listener's own SSL keys.  Setting the same keystore path again
    reloads the file: how a certificate replaced in place is picked up.
    """

    def __init__(self, server) -> None:
        self.server = server

    def _concerns(self, key: str) -> bool:
        return listenerSslKey(key) is not None

    def _contexts(self, new: BrokerConfig) -> dict:
        return {
            name: listenerContextFactory(new.sslSettings(name))
            for name in self.server.tlsContextFactories
        }

    def validate(self, old: BrokerConfig, new: BrokerConfig) -> None:
        self._contexts(new)

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        for name, factory in self._contexts(new).items():
            self.server.tlsContextFactories[name].replace(factory)


class ReplicationThrottles(Reconfigurable):
    """
    C{leader.replication.throttled.rate}, C{follower.replication.throttled.rate}:
    the bounds change in place, read at the next fetch.
    """

    keys = frozenset(("leader.replication.throttled.rate", "follower.replication.throttled.rate"))

    def __init__(self, broker) -> None:
        self.broker = broker

    def reconfigure(self, old: BrokerConfig, new: BrokerConfig) -> None:
        self.broker.replicationQuotas.update(new)


def reconfigurables(broker, server) -> list[Reconfigurable]:
    """
    Everything that applies dynamic broker configs on this broker.
    """
    return [
        LogDefaults(broker),
        CleanerSettings(broker),
        HandlerThreads(server),
        NetworkThreads(server),
        ConnectionLimits(server),
        ListenerKeystores(server),
        ReplicationThrottles(broker),
    ]
