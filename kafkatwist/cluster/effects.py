"""
What the controller's state machine (L{kafkatwist.cluster.controller})
asks its shell to do.  Every ZooKeeper write it asks for is conditional:
the shell performs it in one ZooKeeper transaction with a check of
C{/controller_epoch}'s version (a deposed controller's writes fail), and
a partition's state is written only over the version the machine read
(C{expectedVersion}: -1 creates it).  Answers to requests reuse the
coordinator's L{Respond}; timers its L{SetTimer}.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkatwist.cluster.zkdata import PartitionState
from kafkatwist.coordinator.effects import Respond, SetTimer

__all__ = ["CompleteReassignment", "DeleteTopic", "Respond", "SetTimer", "WriteAssignment", "WriteState"]


@dataclass(frozen=True)
class WriteState:
    """
    Write a partition's state znode: a new leader, leader epoch or ISR.

    @ivar why: for the log line (Kafka's election reasons: offline,
        controlled shutdown, preferred, unclean, new partition).
    @ivar unclean: the leader is not of the ISR it was elected from
        (Kafka's UncleanLeaderElectionsPerSec counts it once written).
    """

    topic: str
    partition: int
    state: PartitionState
    expectedVersion: int
    why: str
    unclean: bool = False


@dataclass(frozen=True)
class DeleteTopic:
    """
    Remove a topic from ZooKeeper: its assignment, states and configs, then
    its C{/admin/delete_topics} entry.  Brokers see the topic go and delete
    their replicas.
    """

    topic: str


@dataclass(frozen=True)
class WriteAssignment:
    """
    Write new replicas for some partitions of a topic (a reassignment
    begins, is replaced or cancelled): C{partitions} maps each to
    C{(replicas, adding, removing)}; the topic znode is written over the
    version the machine read.  C{states}: the partitions' new states
    (L{WriteState}s: Kafka's new leader epoch that tells the leader and the
    added replicas), written in the same ZooKeeper transaction -- written
    apart, a failure between the two would leave a reassignment that the
    leader never hears of and that never completes.
    """

    topic: str
    partitions: dict
    expectedVersion: int
    states: tuple = ()


@dataclass(frozen=True)
class CompleteReassignment:
    """
    Finish a partition's reassignment in one transaction: its replicas
    become the target (nothing added or removed any more) and its state the
    one given (the leader moved into the target if it was not, the removed
    replicas out of the ISR, a new leader epoch).
    """

    topic: str
    partition: int
    replicas: tuple
    state: PartitionState
    topicVersion: int
    stateVersion: int
