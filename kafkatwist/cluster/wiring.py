"""
Building the cluster service into the broker (only with
C{zookeeper.connect}): L{kafkatwist.service.BrokerService} calls
L{makeCluster} once its listeners are bound (the registration advertises
their ports), L{startCluster} once the log and coordinators exist, and
L{controlledShutdown} then C{stop()} when it stops.
"""

from __future__ import annotations

import os
import time

from twisted.logger import Logger

from kafkatwist.cluster.coordinators import CoordinatorMover
from kafkatwist.cluster.kazoolog import routeKazooLogging
from kafkatwist.cluster.service import ClusterService
from kafkatwist.config.dynamic import DynamicBrokerConfig, Reconfigurable
from kafkatwist.coordinator.transaction.producerids import ProducerIdManager

log = Logger()


def makeCluster(config, advertisedListeners, replicaManager) -> ClusterService:
    """
    @param advertisedListeners: the broker's, with their bound ports.
    @param replicaManager: the broker's L{IReplicaManager}; the cluster
        tells it (through a L{CoordinatorMover}, which also moves the
        coordinators) the roles of this broker's replicas.
    """
    # kazoo's warnings (a dropped connection, reconnection attempts) in the
    # broker's log, not as "[stderr#error]".
    routeKazooLogging()
    cluster = ClusterService(config, advertisedListeners, CoordinatorMover(replicaManager))
    # (service.useLogManager gives the replica manager the cluster as its
    # IAlterIsr and IBrokerDirectory.)
    # Idempotent and transactional producers' ids, unique over the cluster.
    cluster.producerIds = ProducerIdManager(
        reserveBlock=cluster.reserveProducerIdBlock,
        reserveBlockLater=cluster.reserveProducerIdBlockLater,
    )
    return cluster


def clusterDynamicConfig(cluster: ClusterService, config, reactor) -> DynamicBrokerConfig:
    """
    The dynamic broker configs of a cluster broker: kept in ZooKeeper
    (C{/config/brokers}), starting from what L{ClusterService.connect}
    read there; changes read later are applied on the reactor's thread
    pool.
    """
    dynamic = DynamicBrokerConfig(config, None)
    local = DynamicBrokerConfig.inDirectory(config).path
    if os.path.exists(local):
        log.warn("{path} is not read: in a cluster the dynamic broker configs are ZooKeeper's "
                 "(/config/brokers)", path=local)

    def store(perBroker: bool, layer: dict, onDone) -> None:
        # The owner writes ZooKeeper and answers there; nobody waits.
        cluster.setBrokerConfigs(perBroker, layer, lambda result, error: onDone(error))

    dynamic.remote = store
    dynamic.handOff = reactor.callInThread
    dynamic.loadLayers(*cluster.storedBrokerConfigs, where="ZooKeeper")
    cluster.onBrokerConfigs = dynamic.storedChanged
    return dynamic


class UncleanElection(Reconfigurable):
    """
    The broker-level C{unclean.leader.election.enable}: the controller's
    default for topics without their own (Kafka's controller reads it
    from its dynamic config).
    """

    keys = frozenset(("unclean.leader.election.enable",))

    def __init__(self, cluster: ClusterService) -> None:
        self.cluster = cluster

    def reconfigure(self, old, new) -> None:
        self.cluster.setUncleanElection(new["unclean.leader.election.enable"])


def startCluster(cluster: ClusterService, broker) -> None:
    """
    Register and read the cluster; its replicas get local logs from now on,
    and the broker's coordinators follow the leaders of their topics.

    @param broker: the L{kafkatwist.server.broker.BrokerServices}.
    @raise kafkatwist.cluster.service.ClusterStartError: ZooKeeper unreachable, or this id registered by a
        live broker.
    """
    # The broker's advertised listeners carry the bound ports by now.
    cluster.advertisedListeners = list(broker.advertisedListeners)
    cluster.logManager = broker.logManager
    cluster.replicaManager.start(broker)
    cluster.start()


def controlledShutdown(cluster: ClusterService, config, deadline: float) -> None:
    """
    Kafka's controlled shutdown: C{controlled.shutdown.max.retries}
    attempts, C{controlled.shutdown.retry.backoff.ms} apart, all before
    C{deadline} (C{time.monotonic()}, from C{broker.shutdown.timeout.ms}):
    ZooKeeper unreachable, the broker stops anyway.  Blocking.
    """
    retries = config["controlled.shutdown.max.retries"]
    backoff = config["controlled.shutdown.retry.backoff.ms"] / 1000.0
    for attempt in range(max(retries, 1)):
        started = time.monotonic()
        remaining = deadline - started
        if remaining <= 0:
            break
        if cluster.controlledShutdown(timeout=min(max(backoff, 5.0), remaining)):
            return
        if attempt + 1 < max(retries, 1):
            # Attempts at least the backoff apart (one that failed at once,
            # ZooKeeper refusing, does not spin).
            time.sleep(max(0.0, min(started + backoff, deadline) - time.monotonic()))
    log.warn("Broker {id} stops without a completed controlled shutdown", id=cluster.brokerId)


def stopCluster(cluster: ClusterService, deadline: float) -> None:
    """
    Leave the cluster (the registration goes with the session), then stop
    the coordinator loader; bounded by C{deadline} whatever ZooKeeper does.
    """
    cluster.stop(timeout=max(1.0, deadline - time.monotonic()))
    cluster.replicaManager.stop()
