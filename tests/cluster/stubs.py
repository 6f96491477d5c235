"""
Test doubles of the replication side, for the control plane's tests.
"""

from __future__ import annotations

import threading


class RecordingReplicaManager:
    """
    An L{IReplicaManager} that records what it is told: C{roles} holds
    each partition's last (role, leader, leaderEpoch, isr or None,
    partitionEpoch).
    """

    def __init__(self) -> None:
        self.calls: list = []
        self.roles: dict = {}
        self.stopped: list = []
        self._lock = threading.Lock()

    def becomeLeader(self, topic, partition, leaderEpoch, isr, replicas, partitionEpoch):
        with self._lock:
            self.calls.append(("leader", topic, partition, leaderEpoch))
            self.roles[(topic, partition)] = ("leader", None, leaderEpoch, tuple(isr), partitionEpoch)

    def becomeFollower(self, topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch):
        with self._lock:
            self.calls.append(("follower", topic, partition, leaderEpoch))
            self.roles[(topic, partition)] = ("follower", leaderId, leaderEpoch, None, partitionEpoch)

    def stopReplica(self, topic, partition, delete):
        with self._lock:
            self.calls.append(("stop", topic, partition, delete))
            self.roles.pop((topic, partition), None)
            self.stopped.append((topic, partition, delete))

    def leaderEpochs(self):
        with self._lock:
            return {key: (role[0], role[2]) for key, role in self.roles.items()}
