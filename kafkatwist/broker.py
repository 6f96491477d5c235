"""
The broker as handlers see it (L{IBroker}): settings, identity, and the
services -- log, purgatory, group coordinator -- behind the route table.
"""

from __future__ import annotations

import base64
import os
import threading
import uuid

from zope.interface import implementer

from kafkatwist.clock import ThreadSafeClock
from kafkatwist.interfaces import IBroker
from kafkatwist.metrics import TopicBytes
from kafkatwist.purgatory import DelayedActions, Purgatory
from kafkatwist.security.credentials import CredentialStore

META_PROPERTIES = "meta.properties"


def loadOrCreateClusterId(logDir: str, nodeId: int, configured: str | None) -> str:
    """
    Read C{meta.properties} in C{logDir} (Kafka's file), writing it on first
    start, so a data directory keeps its cluster id across restarts.
    """
    path = os.path.join(logDir, META_PROPERTIES)
    existing: dict[str, str] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and not key.startswith("#"):
                    existing[key.strip()] = value.strip()
    clusterId = existing.get("cluster.id")
    if configured and clusterId and configured != clusterId:
        from kafkatwist.config import ConfigError

        raise ConfigError("cluster.id", f"{configured} differs from {clusterId} in {path}")
    if clusterId is None:
        clusterId = configured or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"#kafkatwist\nversion=1\ncluster.id={clusterId}\nnode.id={nodeId}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return clusterId


@implementer(IBroker)
class Broker:
    def __init__(self, config, registry, logManager, mainReactor, clusterId: str) -> None:
        self.config = config
        self.registry = registry
        self.logManager = logManager
        self.nodeId = config.nodeId
        self.clusterId = clusterId
        self.advertisedListeners = config.advertisedListeners
        self.clock = ThreadSafeClock(mainReactor, threading.get_ident())
        self._handlerCall = None
        self.fetchPurgatory = Purgatory("Fetch", reaper=self.callInHandlerThread)
        self.groupCoordinator = None
        self.authorizer = None
        self.scramCredentials = CredentialStore.inDirectory(config.logDirs[0])
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
