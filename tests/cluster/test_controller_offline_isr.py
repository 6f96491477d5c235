"""
Which ISR a partition goes offline with when no ISR member can lead
(review 3, D2): a member that went away without registering again may come
back with its log intact, a restarted one may have lost its unflushed tail
-- acknowledged records the other has.  The restarted one is not elected
over the one away, except after a whole-cluster crash (every registered
broker restarted since the state was written: docs/crash-restart.md) or by
an unclean election.
"""

from __future__ import annotations

from kafkatwist.cluster.zkdata import PartitionState
from tests.cluster.test_controller_machine import active, restartedImage, writes

#: ISR {1,2}, leader 1, written at zxid 100
STATE = PartitionState(1, 4, (1, 2), 5, zkVersion=9, mzxid=100)


def test_a_restarted_follower_is_not_elected_over_the_dead_leader():
    """
    Leader 1's process dies (its log intact); follower 2 lost its unflushed
    tail and registered again; broker 3, not a replica in the ISR, stayed
    up.  The partition waits for 1.
    """
    replicas = {0: (1, 2, 3)}
    effects = active().reconcile(0, restartedImage({2, 3}, replicas, {0: STATE}, {2: 150, 3: 30}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    offline = PartitionState(-1, 5, (1,), 5, zkVersion=10, mzxid=170)
    effects = active().reconcile(0, restartedImage({2, 3}, replicas, {0: offline}, {2: 150, 3: 30}))
    assert writes(effects) == {}
    # Broker 1 returns: elected; 2 catches up from it.
    back = restartedImage({1, 2, 3}, replicas, {0: offline}, {1: 200, 2: 150, 3: 30})
    assert writes(active().reconcile(0, back)) == {("t", 0): (1, 6, (1,), 10)}
    # Unclean election allowed: a live replica, the restarted one included.
    effects = active(unclean=True).reconcile(0, restartedImage({2, 3}, replicas, {0: offline},
                                                               {2: 150, 3: 30}))
    assert writes(effects) == {("t", 0): (2, 6, (2,), 10)}


def test_the_other_brokers_sessions_do_not_matter_while_the_leader_is_away():
    """
    Broker 3 renewed its ZooKeeper session meanwhile (a long pause), or
    there is no broker 3 (a cluster of two): every registered broker
    registered after the state was written, but the leader is away, and may
    come back with its log.
    """
    effects = active().reconcile(0, restartedImage({2, 3}, {0: (1, 2, 3)}, {0: STATE}, {2: 150, 3: 160}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    effects = active().reconcile(0, restartedImage({2}, {0: (1, 2)}, {0: STATE}, {2: 150}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}


def test_a_restarted_leader_is_not_elected_over_a_dead_follower():
    """
    Leader 1 restarted (its tail maybe cut), follower 2 away (maybe
    intact), broker 3 stayed up: the partition waits for 2.
    """
    effects = active().reconcile(0, restartedImage({1, 3}, {0: (1, 2, 3)}, {0: STATE}, {1: 150, 3: 30}))
    assert writes(effects) == {("t", 0): (-1, 5, (2,), 9)}


def test_after_a_whole_cluster_crash_the_restarted_leader_is_elected():
    """
    The leader is back (restarted) and every registered broker restarted
    since the state was written (nobody stayed up): the member away went
    down in the same crash, and the registered ones are kept, the leader
    elected, rather than waiting for it (also
    test_a_whole_cluster_restart_elects_a_live_isr_member_not_the_one_missing).
    """
    effects = active().reconcile(0, restartedImage({1}, {0: (1, 2)}, {0: STATE}, {1: 150}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    effects = active().reconcile(0, restartedImage({1, 3}, {0: (1, 2, 3)}, {0: STATE}, {1: 150, 3: 160}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    offline = PartitionState(-1, 5, (1,), 5, zkVersion=10, mzxid=170)
    effects = active().reconcile(0, restartedImage({1}, {0: (1, 2)}, {0: offline}, {1: 150}))
    assert writes(effects) == {("t", 0): (1, 6, (1,), 10)}


def test_every_isr_member_restarted_keeps_them_all():
    effects = active().reconcile(0, restartedImage({1, 2, 3}, {0: (1, 2, 3)}, {0: STATE},
                                                   {1: 150, 2: 160, 3: 30}))
    assert writes(effects) == {("t", 0): (-1, 5, (1, 2), 9)}


def test_with_no_member_registered_the_leader_is_kept():
    """
    Both gone in one read (a controller that sees 1 gone and 2 bounced
    settles with both absent first): the leader, which had every
    acknowledged record, is the member kept, not a follower that may come
    back first after a crash.
    """
    effects = active().reconcile(0, restartedImage({3}, {0: (1, 2, 3)}, {0: STATE}, {3: 30}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    offline = PartitionState(-1, 5, (1,), 5, zkVersion=10, mzxid=170)
    effects = active().reconcile(0, restartedImage({2, 3}, {0: (1, 2, 3)}, {0: offline}, {2: 180, 3: 30}))
    assert writes(effects) == {}
