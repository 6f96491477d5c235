"""
The controller's state machine without ZooKeeper: images in, writes out.
"""

from __future__ import annotations

import dataclasses
import uuid

from kafkatwist.cluster.controller import PREFERRED, UNCLEAN, ControllerMachine, assignReplicas
from kafkatwist.cluster.effects import (
    CompleteReassignment,
    DeleteTopic,
    Respond,
    SetTimer,
    WriteAssignment,
    WriteState,
)
from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.cluster.zkdata import (
    BrokerInfo,
    PartitionState,
    TopicAssignment,
    decodeState,
    decodeTopic,
    decodeTopicId,
    encodeState,
    encodeTopic,
    encodeTopicId,
)
from kafkatwist.errors import ErrorCode

TID = uuid.UUID(int=7)


def image(live, partitions, states=None, deleting=(), shuttingDown=(), deletedReplicas=None):
    return ClusterImage(
        brokers=freeze({b: BrokerInfo(b, (("PLAINTEXT", "h", 9000 + b),)) for b in live}),
        controllerId=min(live),
        topics=freeze({"t": TopicAssignment("t", TID, dict(partitions))}),
        states=freeze({("t", p): s for p, s in (states or {}).items()}),
        deleting=frozenset(deleting),
        shuttingDown=frozenset(shuttingDown),
        deletedReplicas=freeze({t: freeze(m) for t, m in (deletedReplicas or {}).items()}),
    )


def active(**kw):
    machine = ControllerMachine(1, **kw)
    machine.epoch = 5
    return machine


def writes(effects):
    """
    The states written, alone or in the same transaction as an assignment.
    """
    states = [e for e in effects if isinstance(e, WriteState)]
    states += [w for e in effects if isinstance(e, WriteAssignment) for w in e.states]
    return {(e.topic, e.partition): (e.state.leader, e.state.leaderEpoch, e.state.isr, e.expectedVersion)
            for e in states}


def test_inactive_writes_nothing():
    assert ControllerMachine(1).reconcile(0, image({1, 2}, {0: (1, 2)})) == []


def test_new_partitions_get_the_first_live_replica():
    effects = active().reconcile(0, image({2, 3}, {0: (1, 2, 3), 1: (3, 1)}))
    assert writes(effects) == {("t", 0): (2, 0, (2, 3), -1), ("t", 1): (3, 0, (3,), -1)}
    assert all(e.state.controllerEpoch == 5 for e in effects)


def test_activation_arms_the_rebalance_check():
    effects = ControllerMachine(1, rebalanceIntervalMs=1000).activate(0, 3, image({1}, {}))
    assert effects[-1] == SetTimer("leader-rebalance", 1000)


def test_offline_leader_is_replaced_from_the_isr_in_assignment_order():
    states = {0: PartitionState(1, 4, (1, 3, 2), 2, zkVersion=9)}
    effects = active().reconcile(0, image({2, 3}, {0: (1, 2, 3)}, states))
    assert writes(effects) == {("t", 0): (2, 5, (3, 2), 9)}


def test_dead_follower_leaves_the_isr():
    states = {0: PartitionState(1, 4, (1, 2, 3), 2, zkVersion=9)}
    assert writes(active().reconcile(0, image({1, 2}, {0: (1, 2, 3)}, states))) == {
        ("t", 0): (1, 5, (1, 2), 9)
    }


def test_no_live_isr_member_leaves_the_partition_offline_with_its_last_isr():
    states = {0: PartitionState(1, 4, (1,), 2, zkVersion=9)}
    live = image({2, 3}, {0: (1, 2, 3)}, states)
    assert writes(active().reconcile(0, live)) == {("t", 0): (-1, 5, (1,), 9)}
    # Already offline: nothing more to write.
    offline = image({2, 3}, {0: (1, 2, 3)}, {0: PartitionState(-1, 5, (1,), 2, zkVersion=10)})
    assert writes(active().reconcile(0, offline)) == {}
    # Unclean election allowed: a live replica outside the ISR.
    assert writes(active(unclean=True).reconcile(0, offline)) == {("t", 0): (2, 6, (2,), 10)}
    # The ISR member returns: elected cleanly.
    back = image({1, 2, 3}, {0: (1, 2, 3)}, {0: PartitionState(-1, 5, (1,), 2, zkVersion=10)})
    assert writes(active().reconcile(0, back)) == {("t", 0): (1, 6, (1,), 10)}


def test_controlled_shutdown_moves_leadership_and_isr():
    states = {0: PartitionState(2, 0, (2, 1, 3), 1, zkVersion=0), 1: PartitionState(1, 0, (1, 2), 1, zkVersion=0)}
    effects = active().reconcile(0, image({1, 2, 3}, {0: (2, 1, 3), 1: (1, 2)}, states, shuttingDown={2}))
    assert writes(effects) == {("t", 0): (1, 1, (1, 3), 0), ("t", 1): (1, 1, (1,), 0)}
    # Alone in its ISR: it keeps leading.
    alone = {0: PartitionState(2, 0, (2,), 1, zkVersion=0)}
    assert writes(active().reconcile(0, image({1, 2}, {0: (2, 1)}, alone, shuttingDown={2}))) == {}


def test_topic_override_of_unclean_leader_election():
    """
    The topic's unclean.leader.election.enable (/config/topics) wins over
    the broker's, either way; an unreadable one leaves the broker's.
    """
    def offline(configs):
        state = {0: PartitionState(-1, 5, (1,), 2, zkVersion=10)}
        return dataclasses.replace(image({2, 3}, {0: (1, 2, 3)}, state), configs=freeze({"t": configs}))

    elected = {("t", 0): (2, 6, (2,), 10)}
    assert writes(active().reconcile(0, offline({"unclean.leader.election.enable": "true"}))) == elected
    assert writes(active().reconcile(0, offline({"unclean.leader.election.enable": " TRUE "}))) == elected
    assert writes(active(unclean=True).reconcile(0, offline({"unclean.leader.election.enable": "false"}))) == {}
    assert writes(active(unclean=True).reconcile(0, offline({"unclean.leader.election.enable": "x"}))) == elected
    assert writes(active().reconcile(0, offline({"retention.ms": "1"}))) == {}


def test_deletion_comes_first_and_skips_the_topics_partitions():
    done = {"t": {1: TID}}
    effects = active().reconcile(0, image({1}, {0: (1,)}, deleting={"t"}, deletedReplicas=done))
    assert effects == [DeleteTopic("t")]


def test_deletion_waits_for_every_replicas_broker():
    """
    Kafka's TopicDeletionManager: the topic's znodes go only once every
    broker holding a replica deleted it -- a broker that is down keeps it
    queued; a word about an older topic of the same name does not count.
    """
    partitions = {0: (1, 2), 1: (2, 3)}
    waiting = image({1, 2}, partitions, deleting={"t"}, deletedReplicas={"t": {1: TID, 2: TID}})
    assert active().reconcile(0, waiting) == []
    stale = image({1, 2, 3}, partitions, deleting={"t"},
                  deletedReplicas={"t": {1: TID, 2: TID, 3: uuid.UUID(int=8)}})
    assert active().reconcile(0, stale) == []
    done = image({1, 2}, partitions, deleting={"t"}, deletedReplicas={"t": {1: TID, 2: TID, 3: TID}})
    assert active().reconcile(0, done) == [DeleteTopic("t")]


def test_preferred_rebalance_over_the_imbalance_threshold():
    states = {p: PartitionState(2, 1, (2, 1), 1, zkVersion=3) for p in range(4)}
    partitions = {p: (1, 2) for p in range(4)}
    effects = active(imbalancePercentage=10).timerFired(0, "leader-rebalance", image({1, 2}, partitions, states))
    assert writes(effects) == {("t", p): (1, 2, (2, 1), 3) for p in range(4)}
    assert isinstance(effects[-1], SetTimer)


def test_elect_leaders():
    states = {0: PartitionState(2, 1, (2, 1), 1, zkVersion=3), 1: PartitionState(-1, 1, (3,), 1, zkVersion=3)}
    live = image({1, 2}, {0: (1, 2), 1: (1, 2, 3)}, states)
    answered = []
    effects = active().electLeaders(0, answered.append, PREFERRED, [("t", 0), ("t", 1), ("t", 9)], live)
    assert isinstance(effects[-1], Respond)
    codes = [(p, code) for _, p, code, _ in effects[-1].result]
    assert codes == [(0, ErrorCode.none), (1, ErrorCode.preferred_leader_not_available),
                     (9, ErrorCode.unknown_topic_or_partition)]
    assert writes(effects) == {("t", 0): (1, 2, (2, 1), 3)}
    effects = active().electLeaders(0, answered.append, UNCLEAN, [("t", 0), ("t", 1)], live)
    assert [code for _, _, code, _ in effects[-1].result] == [ErrorCode.election_not_needed, ErrorCode.none]
    assert writes(effects) == {("t", 1): (1, 2, (1,), 3)}
    notController = ControllerMachine(1).electLeaders(0, answered.append, PREFERRED, None, live)
    assert notController == [Respond(answered.append, ErrorCode.not_controller)]


def test_assignment_is_kafkas_round_robin():
    # Kafka's AdminUtils example: 5 brokers, 10 partitions, 3 replicas,
    # start index 0 and shift 0.
    assignment = assignReplicas([0, 1, 2, 3, 4], 10, 3, 0, 0)
    assert assignment[0] == (0, 1, 2)
    assert assignment[4] == (4, 0, 1)
    assert assignment[5] == (0, 2, 3)
    assert assignment[9] == (4, 1, 2)
    leaders = [r[0] for r in assignment.values()]
    assert sorted(leaders) == sorted([0, 1, 2, 3, 4] * 2)
    assert all(len(set(r)) == 3 for r in assignment.values())
    assert assignReplicas([7], 2, 1, 0, 0) == {0: (7,), 1: (7,)}
    assert set(assignReplicas([1, 2, 3], 2, 2, 1, 1, firstPartition=3)) == {3, 4}


def test_znodes_in_kafkas_json():
    state = PartitionState(2, 7, (2, 3), 4)
    assert decodeState("t", 0, encodeState(state), 11) == PartitionState(2, 7, (2, 3), 4, 11)
    assert b'"leader_epoch":7' in encodeState(state)
    topicId = uuid.uuid4()
    assert decodeTopicId(encodeTopicId(topicId)) == topicId
    assert len(encodeTopicId(topicId)) == 22
    decoded = decodeTopic("t", encodeTopic(topicId, {1: (3, 1), 0: (1, 2)}))
    assert decoded == TopicAssignment("t", topicId, {0: (1, 2), 1: (3, 1)})


def reassigning(live, replicas, adding, removing, state):
    base = image(live, {0: replicas}, {0: state})
    topic = TopicAssignment("t", TID, {0: replicas}, {0: adding} if adding else {},
                            {0: removing} if removing else {}, zkVersion=7)
    return dataclasses.replace(base, topics=freeze({"t": topic}))


def test_reassignment_starts_with_a_new_leader_epoch():
    """
    KIP-455 in ZooKeeper mode: the target's replicas then the original
    ones, adding and removing written beside them; a new leader epoch
    tells the replicas (Kafka's phase A).
    """
    state = PartitionState(1, 4, (1, 2), 2, zkVersion=9)
    answered = []
    effects = active().alterReassignments(0, answered.append, [("t", 0, (3, 2)), ("t", 9, (1,)),
                                                               ("t", 0, (3, 3))],
                                          image({1, 2, 3}, {0: (1, 2)}, {0: state}))
    assert effects[0].partitions == {0: ((3, 2, 1), (3,), (1,))} and effects[0].expectedVersion == -1
    assert writes(effects) == {("t", 0): (1, 5, (1, 2), 9)}
    assert [(p, code) for _, p, code, _ in effects[-1].result] == [
        (0, ErrorCode.none), (9, ErrorCode.unknown_topic_or_partition), (0, ErrorCode.invalid_replica_assignment)]
    # Not alive, empty, cancelling nothing, not the controller.
    results = active().alterReassignments(0, answered.append, [("t", 0, (4, 2)), ("t", 0, ()), ("t", 0, None)],
                                          image({1, 2, 3}, {0: (1, 2)}, {0: state}))[-1].result
    assert [code for _, _, code, _ in results] == [ErrorCode.invalid_replica_assignment,
                                                    ErrorCode.invalid_replica_assignment,
                                                    ErrorCode.no_reassignment_in_progress]
    assert ControllerMachine(1).alterReassignments(0, answered.append, [], image({1}, {}))[-1].result == \
        ErrorCode.not_controller


def test_reassignment_completes_once_the_target_is_in_the_isr():
    waiting = reassigning({1, 2, 3}, (3, 2, 1), (3,), (1,), PartitionState(1, 5, (1, 2), 2, zkVersion=10))
    assert active().reconcile(0, waiting) == []
    caught = reassigning({1, 2, 3}, (3, 2, 1), (3,), (1,), PartitionState(1, 5, (1, 2, 3), 2, zkVersion=11))
    [effect] = active().reconcile(0, caught)
    # The leader (1) leaves: the first live target replica in the ISR leads.
    assert effect == CompleteReassignment("t", 0, (3, 2), PartitionState(3, 6, (2, 3), 5), 7, 11)
    # A controller taking over resumes it with a new leader epoch.
    effects = ControllerMachine(1).activate(0, 6, waiting)
    assert writes(effects) == {("t", 0): (1, 6, (1, 2), 10)}


def test_cancelled_reassignment_returns_to_the_original_replicas():
    state = PartitionState(1, 5, (1, 2), 2, zkVersion=10)
    answered = []
    effects = active().alterReassignments(0, answered.append, [("t", 0, None)],
                                          reassigning({1, 2, 3}, (3, 2, 1), (3,), (1,), state))
    assert (effects[0].partitions, effects[0].expectedVersion) == ({0: ((2, 1), (), ())}, 7)
    assert writes(effects) == {("t", 0): (1, 6, (1, 2), 10)}
    assert effects[-1].result == [("t", 0, ErrorCode.none, None)]


def restartedImage(live, partitions, states, epochs):
    return dataclasses.replace(image(live, partitions, states), brokerEpochs=freeze(epochs))


def test_a_leader_registered_after_its_state_was_written_is_failed_first():
    """
    Issue 30: the leader's broker registered again (a new broker epoch,
    the czxid of its registration, above the state's last write): it
    restarted and may have lost its unflushed tail, so another ISR member
    leads in a new leader epoch and the restarted one leaves the ISR --
    even though it is registered (live) when the controller looks.
    """
    state = PartitionState(1, 4, (1, 2, 3), 5, zkVersion=9, mzxid=100)
    effects = active().reconcile(0, restartedImage({1, 2, 3}, {0: (1, 2, 3)}, {0: state},
                                                   {1: 150, 2: 20, 3: 30}))
    assert writes(effects) == {("t", 0): (2, 5, (2, 3), 9)}
    # Registered before the state was written: nothing to do.
    effects = active().reconcile(0, restartedImage({1, 2, 3}, {0: (1, 2, 3)}, {0: state},
                                                   {1: 90, 2: 20, 3: 30}))
    assert writes(effects) == {}


def test_a_restarted_follower_leaves_the_isr():
    state = PartitionState(1, 4, (1, 2, 3), 5, zkVersion=9, mzxid=100)
    effects = active().reconcile(0, restartedImage({1, 2, 3}, {0: (1, 2, 3)}, {0: state},
                                                   {1: 10, 2: 20, 3: 130}))
    assert writes(effects) == {("t", 0): (1, 5, (1, 2), 9)}


def test_a_restarted_sole_isr_member_is_failed_then_elected_again():
    """
    Kafka's onBrokerFailure then onBrokerStartup: with nobody else in the
    ISR, the partition goes offline (a new epoch), and the restarted
    broker, its last ISR member, is then elected in a newer one.
    """
    state = PartitionState(1, 4, (1,), 5, zkVersion=9, mzxid=100)
    effects = active().reconcile(0, restartedImage({1, 2}, {0: (1, 2)}, {0: state}, {1: 150, 2: 20}))
    assert writes(effects) == {("t", 0): (-1, 5, (1,), 9)}
    offline = PartitionState(-1, 5, (1,), 5, zkVersion=10, mzxid=160)
    effects = active().reconcile(0, restartedImage({1, 2}, {0: (1, 2)}, {0: offline}, {1: 150, 2: 20}))
    assert writes(effects) == {("t", 0): (1, 6, (1,), 10)}
    # An offline state written before the broker came back: it is still
    # the ISR's last member, elected from it.
    offline = PartitionState(-1, 5, (1,), 5, zkVersion=10, mzxid=120)
    effects = active().reconcile(0, restartedImage({1, 2}, {0: (1, 2)}, {0: offline}, {1: 150, 2: 20}))
    assert writes(effects) == {("t", 0): (1, 6, (1,), 10)}


def test_a_whole_cluster_restart_elects_a_live_isr_member_not_the_one_missing():
    """
    Every ISR member restarted (a whole-cluster crash); brokers 1 and 2 are
    back, 3 is not.  The offline state keeps the ISR members that are
    registered (failed first, then elected: Kafka's onBrokerFailure, then
    onBrokerStartup), not the one that never came back: the next pass
    elects 1 in a newer epoch rather than waiting for 3.
    """
    state = PartitionState(1, 4, (1, 2, 3), 5, zkVersion=9, mzxid=100)
    effects = active().reconcile(0, restartedImage({1, 2}, {0: (1, 2, 3)}, {0: state}, {1: 150, 2: 160}))
    assert writes(effects) == {("t", 0): (-1, 5, (1, 2), 9)}
    offline = PartitionState(-1, 5, (1, 2), 5, zkVersion=10, mzxid=170)
    effects = active().reconcile(0, restartedImage({1, 2}, {0: (1, 2, 3)}, {0: offline}, {1: 150, 2: 160}))
    assert writes(effects) == {("t", 0): (1, 6, (1, 2), 10)}
