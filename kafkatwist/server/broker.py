"""
The broker as handlers see it (L{IBroker}): L{BrokerServices}, built once
at start-up (L{kafkatwist.service.BrokerService.prepare}) from parts that
all exist by then, so every field is there from the first request on and
nothing is filled in later.

What must exist before the services do -- the request handler threads'
hook, the purgatories, the replica manager, the quotas and the credential
store -- is built from the configuration alone (L{BrokerParts}); the
network layer and the cluster layer get those parts, not the services.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from zope.interface import implementer

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.plugins.fetchsessions import FetchSessions
from kafkatwist.config.dynamic import DynamicBrokerConfig
from kafkatwist.interfaces import IBroker
from kafkatwist.log.meta import META_PROPERTIES, loadOrCreateClusterId, storedClusterId  # noqa: F401
from kafkatwist.metrics.stats import RequestErrors, TopicBytes
from kafkatwist.quota.manager import ClientQuotas
from kafkatwist.quota.store import ClientQuotaStore
from kafkatwist.replication.quota import ReplicationQuotas
from kafkatwist.util.purgatory import DelayedActions, Purgatory
from kafkatwist.security.credentials import CredentialStore

__all__ = ["BrokerParts", "BrokerServices", "HandlerCalls", "loadOrCreateClusterId", "storedClusterId"]


class HandlerCalls:
    """
    How a reactor thread (a timer, a purgatory's reaper) hands storage work
    to a request handler thread: the network layer plugs its
    RequestChannel in when it starts (L{use}) and out when it stops; until
    then, and after, calls run where they are made.
    """

    def __init__(self) -> None:
        self._call: Callable[..., None] | None = None

    def use(self, call: Callable[..., None] | None) -> None:
        """
        @param call: C{call(f, *args)} queues C{f(*args)} for a request
            handler thread, or C{None}.
        """
        self._call = call

    def __call__(self, f: Callable[..., Any], *args: Any) -> None:
        call = self._call
        if call is None:
            f(*args)
        else:
            call(f, *args)


@dataclasses.dataclass(eq=False)
class BrokerParts:
    """
    The broker's parts that need nothing but the configuration (and the
    main reactor's clock): built first, handed to the network and cluster
    layers before the data directory is opened, then gathered into the
    L{BrokerServices}.
    """

    config: Any
    clock: ThreadSafeClock
    handlerCalls: HandlerCalls
    fetchPurgatory: Purgatory
    producePurgatory: Purgatory
    fetchSessions: FetchSessions
    replicationQuotas: ReplicationQuotas
    clientQuotas: ClientQuotas
    scramCredentials: CredentialStore
    topicBytes: TopicBytes
    requestErrors: RequestErrors

    @property
    def nodeId(self) -> int:
        return self.config.nodeId

    @classmethod
    def fromConfig(cls, config, mainReactor) -> BrokerParts:
        handlerCalls = HandlerCalls()
        return cls(
            config=config,
            clock=ThreadSafeClock(mainReactor, threading.get_ident()),
            handlerCalls=handlerCalls,
            fetchPurgatory=Purgatory("Fetch", reaper=handlerCalls),
            producePurgatory=Purgatory("Produce", reaper=handlerCalls),
            fetchSessions=FetchSessions(config["max.incremental.fetch.session.cache.slots"]),
            replicationQuotas=ReplicationQuotas(config),
            # read from the data directory once the service holds its lock
            scramCredentials=CredentialStore.inDirectory(config.logDirs[0], load=False),
            clientQuotas=ClientQuotas(
                ClientQuotaStore.inDirectory(config.logDirs[0]),
                config["quota.window.num"],
                config["quota.window.size.seconds"],
            ),
            topicBytes=TopicBytes(),
            requestErrors=RequestErrors(),
        )

    def wakePartition(self, key) -> None:
        """
        Re-check what waits on partition C{key}: acks=all produces and
        fetches (its high watermark or leadership changed; what the replica
        manager calls).
        """
        self.producePurgatory.checkAndComplete(key)
        self.fetchPurgatory.checkAndComplete(key)


@implementer(IBroker)
@dataclasses.dataclass(eq=False)
class BrokerServices(BrokerParts):
    """
    Everything a request handler may use (L{IBroker}; the supported surface
    for drop-in plugins is described in C{docs/plugins.md}): the
    L{BrokerParts} and what is built after them.  Built once, complete.
    Fields that may be C{None} say so: C{None} there is a setting (no
    ZooKeeper, no authorizer, no cleaner), never "not yet".  C{config} is
    the configuration the broker started with (L{dynamicConfig} holds what
    dynamic updates made of it).
    """

    registry: Any
    clusterId: str
    advertisedListeners: list
    dynamicConfig: DynamicBrokerConfig
    logManager: Any
    replicaManager: Any
    groupCoordinator: Any
    transactionCoordinator: Any
    #: the L{kafkatwist.cluster.service.ClusterService} with
    #: zookeeper.connect, else C{None} (a cluster of one)
    cluster: Any
    #: C{None} without authorizer.class.name (everything allowed)
    authorizer: Any
    #: C{None} with log.cleaner.enable=false; replaced by a dynamic update
    logCleaner: Any

    @classmethod
    def assemble(cls, parts: BrokerParts, **rest: Any) -> BrokerServices:
        """
        The services from the early L{BrokerParts} and the rest.
        """
        fields = {f.name: getattr(parts, f.name) for f in dataclasses.fields(BrokerParts)}
        return cls(**fields, **rest)

    def callInHandlerThread(self, f, *args) -> None:
        """
        Run C{f(*args)} on a request handler thread, where disk I/O is
        allowed: how a reactor thread (a Processor's timer, the main
        reactor) hands storage work on.  Before the server started (and in
        tests) it runs at once.  Safe from any thread.
        """
        self.handlerCalls(f, *args)

    def advertisedListenerFor(self, listenerName: str):
        """
        The endpoint advertised for the listener a request came in on, as
        Kafka answers Metadata per listener.
        """
        for listener in self.advertisedListeners:
            if listener.name == listenerName:
                return listener
        return self.advertisedListeners[0]

    def afterResponse(self, f, *args) -> None:
        """
        Run C{f(*args)} once the current request's response is on its way
        (immediately outside a handler thread).
        """
        DelayedActions.add(f, *args)

    def handlerFor(self, apiKey: int):
        return self.registry.handlerFor(apiKey)

    def supportedVersions(self) -> dict[int, tuple[int, int]]:
        return self.registry.supportedVersions()
