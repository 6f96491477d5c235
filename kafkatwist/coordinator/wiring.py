"""
Building the broker's group coordinator from its configuration.

The broker service calls L{makeGroupCoordinator} once the log is open and
before it accepts connections, and L{stopGroupCoordinator} when it stops,
before closing the log.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.config import KEYS
from kafkatwist.coordinator.consumer_group import TopicImage
from kafkatwist.coordinator.logstore import OffsetsTopicLog
from kafkatwist.util.timers import TimerThread
from kafkatwist.coordinator.service import GroupCoordinatorService
from kafkatwist.log import MemoryLogManager

__all__ = ["makeGroupCoordinator", "stopGroupCoordinator"]

log = Logger()


def _setting(config, key: str):
    """
    C{key} from C{config} (a L{kafkatwist.config.BrokerConfig}, or a plain
    mapping in tests), else its default from L{kafkatwist.config.KEYS}.
    """
    value = config.get(key, None) if hasattr(config, "get") else None
    return KEYS[key].defaultValue() if value is None else value


def makeGroupCoordinator(broker, config, logManager, clock=None, loadAll: bool = True) -> GroupCoordinatorService:
    """
    Build the coordinator, load its groups and offsets, and start its
    periodic offset expiry.

    @param broker: the L{kafkatwist.interfaces.IBroker} (unused: the
        coordinator keeps its own clock, off the reactors).
    @param config: the L{kafkatwist.config.BrokerConfig}
        (C{group.initial.rebalance.delay.ms}, C{group.min.session.timeout.ms},
        C{group.max.session.timeout.ms}, C{offsets.retention.minutes},
        C{offsets.retention.check.interval.ms}, C{offset.metadata.max.bytes},
        C{offsets.topic.num.partitions}, C{offsets.topic.segment.bytes},
        C{group.consumer.*}).
    @param logManager: the L{kafkatwist.interfaces.ILogManager} holding
        C{__consumer_offsets}; C{None} keeps groups in memory only.
    @param clock: the coordinator's clock; by default a started
        L{TimerThread}, which L{stopGroupCoordinator} stops.
    @param loadAll: coordinate every group (one broker); C{False} in a
        cluster, where partitions are loaded as this broker comes to lead
        them (L{GroupCoordinatorService.loadPartition}).
    @return: the loaded L{GroupCoordinatorService}; the caller sets it as
        C{broker.groupCoordinator}.
    """
    if logManager is None:
        logManager = MemoryLogManager()
    coordinatorLog = OffsetsTopicLog(
        logManager,
        _setting(config, "offsets.topic.num.partitions"),
        segmentBytes=_setting(config, "offsets.topic.segment.bytes"),
    )
    if clock is None:
        clock = TimerThread("group-coordinator")
        clock.start()
    coordinator = GroupCoordinatorService(
        clock,
        coordinatorLog,
        initialRebalanceDelayMs=_setting(config, "group.initial.rebalance.delay.ms"),
        minSessionTimeoutMs=_setting(config, "group.min.session.timeout.ms"),
        maxSessionTimeoutMs=_setting(config, "group.max.session.timeout.ms"),
        offsetsRetentionMinutes=_setting(config, "offsets.retention.minutes"),
        offsetsRetentionCheckIntervalMs=_setting(config, "offsets.retention.check.interval.ms"),
        offsetMetadataMaxBytes=_setting(config, "offset.metadata.max.bytes"),
        consumerGroups=dict(
            heartbeatIntervalMs=_setting(config, "group.consumer.heartbeat.interval.ms"),
            sessionTimeoutMs=_setting(config, "group.consumer.session.timeout.ms"),
            assignors=tuple(_setting(config, "group.consumer.assignors")),
            maxSize=_setting(config, "group.consumer.max.size"),
        ),
        ownsAllPartitions=loadAll,
    )
    coordinator.load(topicImage(logManager), partitions=None if loadAll else ())
    return coordinator


def topicImage(logManager) -> TopicImage:
    """
    The broker's topics as KIP-848 groups' records name them (by id).
    """
    return TopicImage({name: (info.topicId, info.numPartitions) for name, info in logManager.topics().items()})


def stopGroupCoordinator(coordinator) -> None:
    """
    Shut the coordinator down: answer parked JoinGroup/SyncGroup requests
    with NOT_COORDINATOR, wait for its appends, stop its clock.  Harmless
    with C{None} and when called twice.
    """
    stopCoordinator(coordinator, "group coordinator")


def stopCoordinator(coordinator, what: str) -> None:
    """
    Stop a coordinator service (the group's or the transactions'): its
    C{shutdown()}, then the clock it runs on (its timer thread).  Harmless
    with C{None} and when called twice.
    """
    if coordinator is None:
        return
    try:
        coordinator.shutdown()
    except Exception:
        # Stopping must go on (the log still has to be closed).
        log.failure("{what} shutdown failed", what=what)
    stop = getattr(coordinator.clock, "stop", None)
    if stop is not None:
        stop()
