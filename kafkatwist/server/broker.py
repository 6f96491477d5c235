"""
The broker as handlers see it (L{IBroker}): settings, identity, and the
services -- log, purgatory, group coordinator -- behind the route table.
"""

from __future__ import annotations

import threading

from zope.interface import implementer

from kafkatwist.util.clock import ThreadSafeClock
from kafkatwist.plugins.fetchsessions import FetchSessions
from kafkatwist.config.dynamic import DynamicBrokerConfig
from kafkatwist.interfaces import IBroker
from kafkatwist.log.meta import META_PROPERTIES, loadOrCreateClusterId  # noqa: F401
from kafkatwist.metrics.stats import TopicBytes
from kafkatwist.quota.manager import ClientQuotas
from kafkatwist.quota.store import ClientQuotaStore
from kafkatwist.replication.quota import ReplicationQuotas
from kafkatwist.util.purgatory import DelayedActions, Purgatory
from kafkatwist.security.credentials import CredentialStore

@implementer(IBroker)
class Broker:
    def __init__(self, config, registry, logManager, mainReactor, clusterId: str) -> None:
        self.config = config
        #: dynamic broker configs over C{config} (the service loads them
        #: from the data directory)
        self.dynamicConfig = DynamicBrokerConfig(config, None)
        self.registry = registry
        self.logManager = logManager
        self.nodeId = config.nodeId
        self.clusterId = clusterId
        self.advertisedListeners = config.advertisedListeners
        self.clock = ThreadSafeClock(mainReactor, threading.get_ident())
        self._handlerCall = None
        self.fetchPurgatory = Purgatory("Fetch", reaper=self.callInHandlerThread)
        self.fetchSessions = FetchSessions(config["max.incremental.fetch.session.cache.slots"])
        #: leader.replication.throttled.rate and follower.replication.throttled.rate
        self.replicationQuotas = ReplicationQuotas(config)
        #: acks=all produces waiting for their ISR (kafkatwist.replication)
        self.producePurgatory = Purgatory("Produce", reaper=self.callInHandlerThread)
        #: the L{IReplicaManager}; C{None} until the service builds it
        #: (handlers then treat every log as a lone leader)
        self.replicaManager = None
        self.groupCoordinator = None
        self.transactionCoordinator = None
        #: the L{kafkatwist.cluster.service.ClusterService} with
        #: zookeeper.connect, else None (a cluster of one)
        self.cluster = None
        self.logCleaner = None
        self.authorizer = None
        #: read from the data directory once the service holds its lock
        self.scramCredentials = CredentialStore.inDirectory(config.logDirs[0], load=False)
        #: client quotas (AlterClientQuotas), read from the data directory
        #: with the credentials
        self.clientQuotas = ClientQuotas(
            ClientQuotaStore.inDirectory(config.logDirs[0]),
            config["quota.window.num"],
            config["quota.window.size.seconds"],
        )
        self.topicBytes = TopicBytes()

    def useHandlerThreads(self, call) -> None:
        """
        @param call: C{call(f, *args)} queues C{f(*args)} for a request
            handler thread (the SocketServer's RequestChannel), or C{None}.
        """
        self._handlerCall = call

    def callInHandlerThread(self, f, *args) -> None:
        """
        Run C{f(*args)} on a request handler thread, where disk I/O is
        allowed: how a reactor thread (a Processor's timer, the main
        reactor) hands storage work on.  Before the server started (and in
        tests) it runs at once.  Safe from any thread.
        """
        call = self._handlerCall
        if call is None:
            f(*args)
        else:
            call(f, *args)

    def wakePartition(self, key) -> None:
        """
        Re-check what waits on partition C{key}: acks=all produces and
        fetches (its high watermark or leadership changed).
        """
        self.producePurgatory.checkAndComplete(key)
        self.fetchPurgatory.checkAndComplete(key)

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
