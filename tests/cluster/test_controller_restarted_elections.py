"""
Every election path asks the same question -- which ISR members may lead
(L{electableMembers}): registered, not shutting down, not restarted since
the state was written (review 3, D4).  A broker that registered again may
have lost its unflushed tail; the reconcile fails it first (out of the
ISR), and neither a preferred election (the rebalance timer, ElectLeaders
PREFERRED) nor the end of a reassignment may elect it before that lands
(say the shrink write failed on a ZooKeeper connection loss and waits for
its retry).
"""

from __future__ import annotations

import dataclasses

from kafkatwist.cluster.controller import PREFERRED, REBALANCE_TIMER, electableMembers
from kafkatwist.cluster.effects import CompleteReassignment, WriteState
from kafkatwist.cluster.image import freeze
from kafkatwist.cluster.zkdata import PartitionState
from kafkatwist.errors import ErrorCode
from tests.cluster.test_controller_machine import active, reassigning, restartedImage, writes

#: broker 1 preferred, leader 2 after an earlier failover, ISR {1,2}
STATE = PartitionState(2, 4, (1, 2), 5, zkVersion=9, mzxid=100)


def test_the_reconcile_fails_a_restarted_preferred_replica():
    img = restartedImage({1, 2}, {0: (1, 2)}, {0: STATE}, {1: 150, 2: 20})
    assert electableMembers(img, STATE, img.live()) == {2}
    assert writes(active().reconcile(0, img)) == {("t", 0): (2, 5, (2,), 9)}


def test_the_rebalance_timer_does_not_elect_a_restarted_preferred_replica():
    restarted = restartedImage({1, 2}, {0: (1, 2)}, {0: STATE}, {1: 150, 2: 20})
    assert writes(active().timerFired(0, REBALANCE_TIMER, restarted)) == {}
    # Registered before the state was written: it gets its leadership back.
    before = restartedImage({1, 2}, {0: (1, 2)}, {0: STATE}, {1: 90, 2: 20})
    assert writes(active().timerFired(0, REBALANCE_TIMER, before)) == {("t", 0): (1, 5, (1, 2), 9)}


def test_elect_leaders_preferred_answers_not_available_for_a_restarted_replica():
    restarted = restartedImage({1, 2}, {0: (1, 2)}, {0: STATE}, {1: 150, 2: 20})
    effects = active().electLeaders(0, None, PREFERRED, [("t", 0)], restarted)
    assert writes(effects) == {}
    [(topic, partition, code, message)] = effects[-1].result
    assert code == ErrorCode.preferred_leader_not_available
    assert "PreferredReplicaPartitionLeaderElectionStrategy" in message
    before = restartedImage({1, 2}, {0: (1, 2)}, {0: STATE}, {1: 90, 2: 20})
    effects = active().electLeaders(0, None, PREFERRED, [("t", 0)], before)
    assert writes(effects) == {("t", 0): (1, 5, (1, 2), 9)}
    assert effects[-1].result == [("t", 0, ErrorCode.none, None)]


def test_a_reassignment_does_not_end_on_a_restarted_leader():
    """
    Kafka's ReassignPartitionLeaderElectionStrategy picks the first live
    target replica in the ISR; a restarted one is not live for it.
    """
    # Replicas (3, 1, 2) moving to (1, 2): 3 leads and is removed; 1 restarted.
    state = PartitionState(3, 4, (3, 1, 2), 5, zkVersion=9, mzxid=100)
    img = reassigning({1, 2, 3}, (1, 2, 3), (), (3,), state)
    machine = active()
    partition = machine._partition(
        img, "t", 0, (1, 2, 3), state, img.live(), frozenset(), False
    )
    assert partition is None  # nothing to fail: the reassignment completes
    done = machine._completeReassignment(img, "t", 0, (1, 2, 3), state, img.live())
    assert isinstance(done, CompleteReassignment) and done.state.leader == 1
    # 1 restarted: 2 leads, and 1 leaves the ISR in the same write (a state
    # written with it would hide its restart).
    restarted = dataclasses.replace(img, brokerEpochs=freeze({1: 150, 2: 20, 3: 30}))
    assert machine._finish(restarted, (1, 2), state, restarted.live()) == (2, (2,))


def test_a_preferred_election_fails_a_restarted_follower_in_the_same_write():
    """
    ISR {1,2,3}, preferred 1, leader 2; follower 3 restarted: 1 may lead,
    but the state it is elected in must not name 3 in the ISR -- written
    after 3's registration, it would hide the restart from every later pass.
    """
    state = PartitionState(2, 4, (1, 2, 3), 5, zkVersion=9, mzxid=100)
    img = restartedImage({1, 2, 3}, {0: (1, 2, 3)}, {0: state}, {1: 10, 2: 20, 3: 150})
    assert writes(active().timerFired(0, REBALANCE_TIMER, img)) == {("t", 0): (1, 5, (1, 2), 9)}
    effects = active().electLeaders(0, None, PREFERRED, [("t", 0)], img)
    assert writes(effects) == {("t", 0): (1, 5, (1, 2), 9)}


def test_the_controller_records_each_isr_members_registration():
    """
    Review 3, D6: the controller's writes name each ISR member's broker
    epoch, so a member that registers again is seen as restarted even
    after a leader's ISR write, newer than its registration, kept it.
    """
    before = PartitionState(1, 4, (1, 2, 3), 5, zkVersion=9, mzxid=100, leaderBrokerEpoch=10)
    # Broker 1, the leader, went away: 2 leads.
    effects = active().reconcile(0, restartedImage({2, 3}, {0: (1, 2, 3)}, {0: before}, {2: 20, 3: 30}))
    [written] = [e for e in effects if isinstance(e, WriteState)]
    assert written.state.leader == 2
    assert dict(written.state.isrBrokerEpochs) == {2: 20, 3: 30}
    # The leader's own ISR write lands later (mzxid 160), keeping 3 (its
    # recorded epoch copied along); broker 3 has meanwhile registered
    # again at 150, before that write.
    after = dataclasses.replace(written.state, zkVersion=10, mzxid=160)
    effects = active().reconcile(0, restartedImage({2, 3}, {0: (1, 2, 3)}, {0: after}, {2: 20, 3: 150}))
    [shrink] = [e for e in effects if isinstance(e, WriteState)]
    assert 3 not in shrink.state.isr
