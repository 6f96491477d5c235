"""
Building the broker's group coordinator from its configuration.

The broker service calls L{makeGroupCoordinator} once the log is open and
before it accepts connections, and L{stopGroupCoordinator} when it stops,
before closing the log.
"""

from __future__ import annotations

import logging

from kafkatwist.config import KEYS
from kafkatwist.coordinator.coordinator import GroupCoordinator
from kafkatwist.coordinator.logstore import LogGroupStore
from kafkatwist.coordinator.store import InMemoryGroupStore

__all__ = ["makeGroupCoordinator", "stopGroupCoordinator"]

log = logging.getLogger(__name__)


def _setting(config, key: str, default=None):
    # The key's default comes from the registry (kafkatwist.config.KEYS);
    # C{default} only serves a key the registry does not know.
    value = config.get(key, None) if hasattr(config, "get") else None
    if value is None and key in KEYS:
        value = KEYS[key].defaultValue()
    return default if value is None else value


def makeGroupCoordinator(broker, config, logManager) -> GroupCoordinator:
    """
    Build the coordinator, load its groups and offsets, and start its
    periodic offset expiry.

    @param broker: the L{kafkatwist.interfaces.IBroker}; its C{clock} (the
        main reactor's, thread-safe) runs the coordinator's timers.  Its
        wall-clock seconds are also the commit and expiry timestamps.
    @param config: the L{kafkatwist.config.BrokerConfig}
        (C{group.initial.rebalance.delay.ms}, C{group.min.session.timeout.ms},
        C{group.max.session.timeout.ms}, C{offsets.retention.minutes},
        C{offsets.topic.num.partitions}).
    @param logManager: the L{kafkatwist.interfaces.ILogManager} holding
        C{__consumer_offsets}; C{None} keeps groups in memory only.
    @return: the loaded L{GroupCoordinator}; the caller sets it as
        C{broker.groupCoordinator}.
    """
    if logManager is None:
        store = InMemoryGroupStore()
    else:
        store = LogGroupStore(logManager, _setting(config, "offsets.topic.num.partitions", 50))
    coordinator = GroupCoordinator(
        broker.clock,
        store,
        initialRebalanceDelayMs=_setting(config, "group.initial.rebalance.delay.ms", 3000),
        minSessionTimeoutMs=_setting(config, "group.min.session.timeout.ms", 6000),
        maxSessionTimeoutMs=_setting(config, "group.max.session.timeout.ms", 1800000),
        offsetsRetentionMinutes=_setting(config, "offsets.retention.minutes", 10080),
    )
    coordinator.load()
    return coordinator


def stopGroupCoordinator(coordinator) -> None:
    """
    Shut the coordinator down: cancel its timers and answer parked
    JoinGroup/SyncGroup requests with NOT_COORDINATOR.  Harmless with
    C{None} and when called twice.
    """
    if coordinator is None:
        return
    try:
        coordinator.shutdown()
    except Exception:
        # Stopping must go on (the log still has to be closed).
        log.exception("group coordinator shutdown failed")
