"""
The one test double of the broker's services (L{IBroker}): a real
L{kafkatwist.server.broker.BrokerServices} whose parts are the in-memory ones a
unit test can drive -- a L{MemoryLogManager}, a C{task.Clock} behind the
broker clock, purgatories that expire in place, credential and quota
stores without files, an idle replica manager on the fake clock.  Every
field a handler may use is there; a test replaces what it cares about with
keyword arguments (C{FakeServices(groupCoordinator=..., authorizer=...)}).
"""

from __future__ import annotations

from twisted.internet import task

from kafkatwist.server.broker import BrokerParts, BrokerServices, HandlerCalls
from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.config import BrokerConfig, Listener
from kafkatwist.config.dynamic import DynamicBrokerConfig
from kafkatwist.plugins.fetchsessions import FetchSessions
from kafkatwist.log import MemoryLogManager
from kafkatwist.metrics.stats import RequestErrors, TopicBytes
from kafkatwist.util.purgatory import Purgatory
from kafkatwist.quota.manager import ClientQuotas
from kafkatwist.quota.store import ClientQuotaStore
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins
from kafkatwist.replication.manager import ReplicaManager
from kafkatwist.replication.quota import ReplicationQuotas
from kafkatwist.security.credentials import CredentialStore

__all__ = ["FakeServices"]

#: the listener a fake broker advertises unless told otherwise
PLAINTEXT = Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")


class FakeServices(BrokerServices):
    """
    @param settings: broker settings (values as in a properties file, or
        anything C{str()} makes one of), or a ready L{BrokerConfig}.
    @param handlers: C{True}: build every discovered plugin's handler
        against these services (C{handlerFor} answers with them); or a
        C{dict} ApiKey -> handler; by default none.
    @param overrides: any L{BrokerServices} field.

    @ivar fakeClock: the C{task.Clock} behind C{clock} and the replica
        manager (advance it to fire timers).
    """

    def __init__(self, settings=None, *, handlers=None, **overrides) -> None:
        if isinstance(settings, BrokerConfig):
            config = settings
        else:
            config = BrokerConfig({k: str(v) for k, v in (settings or {}).items()})
        fakeClock = overrides.pop("fakeClock", None) or task.Clock()
        self.fakeClock = fakeClock
        from kafkatwist.service import brokerLogDefaults

        logManager = overrides.pop("logManager", None)
        if logManager is None:
            logManager = MemoryLogManager(brokerLogDefaults(config))
        producePurgatory = overrides.pop("producePurgatory", None) or Purgatory("Produce")
        fetchPurgatory = overrides.pop("fetchPurgatory", None) or Purgatory("Fetch")
        parts = BrokerParts(
            config=config,
            clock=overrides.pop("clock", None) or ThreadSafeClock(fakeClock),
            handlerCalls=HandlerCalls(),
            fetchPurgatory=fetchPurgatory,
            producePurgatory=producePurgatory,
            fetchSessions=overrides.pop("fetchSessions", None) or FetchSessions(1000),
            replicationQuotas=ReplicationQuotas(config),
            clientQuotas=ClientQuotas(ClientQuotaStore(None)),
            scramCredentials=CredentialStore(None),
            topicBytes=TopicBytes(),
            requestErrors=RequestErrors(),
        )
        fields = dict(
            registry=HandlerRegistry([]),
            clusterId="test-cluster",
            advertisedListeners=[PLAINTEXT],
            dynamicConfig=DynamicBrokerConfig(config, None),
            logManager=logManager,
            replicaManager=ReplicaManager(
                config.nodeId, logManager, config, fakeClock, wake=parts.wakePartition,
                producePurgatory=producePurgatory,
            ),
            groupCoordinator=None,
            transactionCoordinator=None,
            cluster=None,
            authorizer=None,
            logCleaner=None,
        )
        for name in list(overrides):
            if hasattr(parts, name):
                setattr(parts, name, overrides.pop(name))
        fields.update(overrides)
        BrokerServices.__init__(self, **{**vars(parts), **fields})
        if handlers is True:
            self.registry = HandlerRegistry(discoverPlugins())
            self.registry.build(self)
        elif handlers:
            self.registry.handlers.update(handlers)
