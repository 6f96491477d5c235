"""
Building the broker's transaction coordinator from its configuration.

The broker service calls L{makeTransactionCoordinator} after the group
coordinator (markers into C{__consumer_offsets} go through it) and before
it accepts connections, and L{stopTransactionCoordinator} when it stops,
before the group coordinator and the log.
"""

from __future__ import annotations

from kafkatwist.util.timers import TimerThread
from kafkatwist.coordinator.transaction.channel import MarkerChannel
from kafkatwist.coordinator.transaction.logstore import TransactionStateLog
from kafkatwist.coordinator.transaction.markers import MarkerWriter
from kafkatwist.coordinator.transaction.service import TransactionCoordinatorService
from kafkatwist.coordinator.transaction.verifier import RemoteVerifier
from kafkatwist.coordinator.wiring import _setting, stopCoordinator
from kafkatwist.log import MemoryLogManager

__all__ = ["makeTransactionCoordinator", "stopTransactionCoordinator"]


def makeTransactionCoordinator(
    broker, config, logManager, clock=None, loadAll: bool = True, cluster=None,
    groupCoordinator=None,
):
    """
    Build the coordinator, load C{__transaction_state} and start its
    sweeps.

    @param broker: the broker's L{kafkatwist.server.broker.BrokerParts} (or
        services): its fetch purgatory is woken by markers.
    @param config: the L{kafkatwist.config.BrokerConfig}
        (C{transaction.state.log.num.partitions},
        C{transaction.state.log.segment.bytes}, C{transaction.max.timeout.ms},
        C{transactional.id.expiration.ms},
        C{transaction.abort.timed.out.transaction.cleanup.interval.ms},
        C{transaction.remove.expired.transaction.cleanup.interval.ms}).
    @param logManager: the L{kafkatwist.interfaces.ILogManager}.
    @param clock: the coordinator's clock; by default a started
        L{TimerThread}, which L{stopTransactionCoordinator} stops.
    @param loadAll: coordinate every transactional id (one broker);
        C{False} in a cluster, where partitions are loaded as this broker
        comes to lead them.
    @param cluster: the L{kafkatwist.cluster.service.ClusterService} (with
        C{zookeeper.connect}): markers go to each partition's leader
        through a L{MarkerChannel}, verifications to the id's coordinator
        through a L{RemoteVerifier} (both C{request.timeout.ms}).
    @param groupCoordinator: the group coordinator, which takes the markers
        of C{__consumer_offsets} (C{None}: none there).
    @return: the loaded L{TransactionCoordinatorService}; the caller sets
        it as C{broker.transactionCoordinator}.
    """
    if logManager is None:
        logManager = MemoryLogManager()
    coordinatorLog = TransactionStateLog(
        logManager,
        _setting(config, "transaction.state.log.num.partitions"),
        segmentBytes=_setting(config, "transaction.state.log.segment.bytes"),
    )
    writer = MarkerWriter(
        logManager,
        groupCoordinator=lambda: groupCoordinator,
        wake=broker.fetchPurgatory.checkAndComplete,
    )
    channel = verifier = None
    if cluster is not None:
        timeoutMs = _setting(config, "request.timeout.ms")
        channel = MarkerChannel(
            config.nodeId, lambda: cluster.image, writer, cluster.endpoint, timeoutMs=timeoutMs,
        )
        verifier = RemoteVerifier(
            config.nodeId, lambda: cluster.image, cluster.endpoint, coordinatorLog.numPartitions,
            timeoutMs=timeoutMs,
        )
    if clock is None:
        clock = TimerThread("transaction-coordinator")
        clock.start()
    coordinator = TransactionCoordinatorService(
        clock,
        coordinatorLog,
        writer,
        markerChannel=channel,
        remoteVerifier=verifier,
        maxTimeoutMs=_setting(config, "transaction.max.timeout.ms"),
        expirationMs=_setting(config, "transactional.id.expiration.ms"),
        abortIntervalMs=_setting(
            config, "transaction.abort.timed.out.transaction.cleanup.interval.ms"
        ),
        expiryIntervalMs=_setting(
            config, "transaction.remove.expired.transaction.cleanup.interval.ms"
        ),
        ownsAllPartitions=loadAll,
    )
    coordinator.load(partitions=None if loadAll else ())
    return coordinator


def stopTransactionCoordinator(coordinator) -> None:
    """
    Stop the sweeps and wait for the appends under way; stop its clock.
    Harmless with C{None} and twice.
    """
    stopCoordinator(coordinator, "transaction coordinator")
