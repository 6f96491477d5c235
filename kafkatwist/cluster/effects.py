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

__all__ = ["DeleteTopic", "Respond", "SetTimer", "WriteState"]


@dataclass(frozen=True)
class WriteState:
    """
    Write a partition's state znode: a new leader, leader epoch or ISR.

    @ivar why: for the log line (Kafka's election reasons: offline,
        controlled shutdown, preferred, unclean, new partition).
    """

    topic: str
    partition: int
    state: PartitionState
    expectedVersion: int
    why: str


@dataclass(frozen=True)
class DeleteTopic:
    """
    Remove a topic from ZooKeeper: its assignment, states and configs, then
    its C{/admin/delete_topics} entry.  Brokers see the topic go and delete
    their replicas.
    """

    topic: str
