"""
The controller's state machine, sans-io (Kafka's C{KafkaController} with
its partition and replica state machines, in the shape of the group
coordinator's: inputs in, effects out).

It is level-triggered: every input carries the current L{ClusterImage},
and C{reconcile} compares what the image says with what it should say --
every partition with a live leader from its ISR, no dead broker in an ISR,
no leader on a broker shutting down, queued deletions finished once every
replica's broker deleted its replicas -- and
asks for the conditional writes that close the gap.  A write that loses a
race (the state changed under it) fails in the shell, which reads the
state again; the next image is reconciled in turn.  So the machine keeps
no copy of the cluster, only what is its own: its epoch and the brokers it
is moving leaders away from.

Elections follow Kafka's (C{PartitionLeaderElectionAlgorithms}): the
first live replica, in assignment order, that is in the ISR; outside the
ISR only when C{unclean.leader.election.enable} (the topic's override in
C{/config/topics}, else the broker's; or an unclean ElectLeaders) allows
it.  An ISR never becomes empty: with no live member
the partition is left leaderless (leader -1) with its last ISR, so the
replica that had everything is elected when it comes back.
"""

from __future__ import annotations

from twisted.logger import Logger

from kafkatwist.cluster import reassignment as R
from kafkatwist.cluster.effects import (
    CompleteReassignment,
    DeleteTopic,
    Respond,
    SetTimer,
    WriteAssignment,
    WriteState,
)
from kafkatwist.cluster.image import ClusterImage
from kafkatwist.cluster.zkdata import NO_LEADER, PartitionState
from kafkatwist.errors import ErrorCode

log = Logger()

PREFERRED, UNCLEAN = 0, 1
#: the timer of the preferred-leader check
REBALANCE_TIMER = "leader-rebalance"


class ControllerMachine:
    """
    @param brokerId: this broker (the controller while active).
    @param unclean: the broker's C{unclean.leader.election.enable} (a
        topic's override in its configs wins).
    @param autoRebalance: C{auto.leader.rebalance.enable}.
    @param rebalanceIntervalMs: C{leader.imbalance.check.interval.seconds}, in ms.
    @param imbalancePercentage: C{leader.imbalance.per.broker.percentage}.
    """

    def __init__(self, brokerId: int, unclean: bool = False, autoRebalance: bool = True,
                 rebalanceIntervalMs: int = 300_000, imbalancePercentage: int = 10) -> None:
        self.brokerId = brokerId
        self.unclean = unclean
        self.autoRebalance = autoRebalance
        self.rebalanceIntervalMs = rebalanceIntervalMs
        self.imbalancePercentage = imbalancePercentage
        #: the controller epoch while active, else None
        self.epoch: int | None = None

    # -- inputs ------------------------------------------------------------------

    def activate(self, nowMs: int, epoch: int, image: ClusterImage) -> list:
        self.epoch = epoch
        log.info("Broker {id} is the controller (epoch {epoch})", id=self.brokerId, epoch=epoch)
        effects = self.reconcile(nowMs, image)
        # Reassignments in progress resume (Kafka's controller fail-over):
        # a new leader epoch tells every replica, the added ones included.
        written = {(e.topic, e.partition) for e in effects if isinstance(e, (WriteState, CompleteReassignment))}
        for topic, partition, replicas, state in image.partitions():
            if (topic, partition) not in written and self._reassigning(image, topic, partition, state):
                effects.append(self._write(image, topic, state, partition, state.leader, state.isr, "reassignment"))
        if self.autoRebalance:
            effects.append(SetTimer(REBALANCE_TIMER, self.rebalanceIntervalMs))
        return effects

    def resign(self, nowMs: int) -> list:
        if self.epoch is not None:
            log.info("Broker {id} is no longer the controller (epoch {epoch})",
                     id=self.brokerId, epoch=self.epoch)
        self.epoch = None
        return []

    @property
    def active(self) -> bool:
        return self.epoch is not None

    def reconcile(self, nowMs: int, image: ClusterImage) -> list:
        """
        The writes that bring C{image} to what it should be.
        """
        if self.epoch is None:
            return []
        effects: list = []
        live = image.live()
        leaving = image.shuttingDown & live
        for topic in sorted(image.deleting):
            if not deletionWaitsFor(topic, image):
                effects.append(DeleteTopic(topic))
        for topic, partition, replicas, state in image.partitions():
            if topic in image.deleting:
                continue
            effect = self._partition(image, topic, partition, replicas, state, live, leaving,
                                     self._unclean(topic, image))
            if effect is None and state is not None:
                effect = self._completeReassignment(image, topic, partition, replicas, state, live)
            if effect is not None:
                effects.append(effect)
        return effects

    def alterReassignments(self, nowMs: int, replyTo, requests, image: ClusterImage) -> list:
        """
        AlterPartitionReassignments (45), Kafka's ZooKeeper-mode controller:
        each partition's new target replicas written to its topic's znode
        (replacing a reassignment in progress), or, with C{None}, the one
        in progress cancelled (its target becomes the original replicas);
        a new leader epoch tells the replicas, and the reassignment
        completes once every target replica is in the ISR (L{reconcile}).
        Answered through C{replyTo} with per partition C{(topic,
        partition, ErrorCode, message)}, or C{ErrorCode.not_controller}.

        @param requests: C{[(topic, partition, replicas or None)]}.
        """
        if self.epoch is None:
            return [Respond(replyTo, ErrorCode.not_controller)]
        live = image.live()
        results = []
        changes: dict[str, dict] = {}
        for topic, partition, wanted in requests:
            assignment = image.topics.get(topic)
            replicas = assignment.partitions.get(partition) if assignment is not None else None
            adding = assignment.adding.get(partition, ()) if assignment is not None else ()
            removing = assignment.removing.get(partition, ()) if assignment is not None else ()
            if wanted is not None:
                message = R.validate(wanted, R.reassignTo(replicas or (), adding, wanted)[1], live)
                if message is not None:
                    results.append((topic, partition, ErrorCode.invalid_replica_assignment, message))
                    continue
            if wanted is None and (replicas is None or topic in image.deleting or not (adding or removing)):
                # Kafka's maybeBuildReassignment: a cancel with nothing to
                # cancel, unknown partitions included.
                results.append((topic, partition, ErrorCode.no_reassignment_in_progress,
                                "No partition reassignment is in progress."))
                continue
            if replicas is None or topic in image.deleting:
                results.append((topic, partition, ErrorCode.unknown_topic_or_partition,
                                "The partition does not exist."))
                continue
            if wanted is None:
                wanted = R.origin(replicas, adding)
            change = R.reassignTo(replicas, adding, wanted)
            if change != (replicas, adding, removing):
                changes.setdefault(topic, {})[partition] = change
            results.append((topic, partition, ErrorCode.none, None))
        effects: list = []
        for topic, partitions in changes.items():
            assignment = image.topics[topic]
            states: list = []
            for partition, (replicas, adding, removing) in partitions.items():
                state = image.states.get((topic, partition))
                if state is None:
                    continue
                if adding or removing:
                    if not set(R.target(replicas, removing)) <= set(state.isr):
                        # Kafka's phase A: a new leader epoch carries the
                        # new replica set to the leader, the added replicas
                        # follow.
                        states.append(self._write(image, topic, state, partition, state.leader, state.isr,
                                                  "reassignment"))
                    continue
                # Done at once (cancelled, reordered): Kafka's phase B on
                # the state -- a new leader epoch, the leader in the
                # replicas, the ISR without those no longer replicas.
                finished = self._finish(image, replicas, state, live)
                if finished is not None:
                    states.append(self._write(image, topic, state, partition, *finished, "reassignment"))
            effects.append(WriteAssignment(topic, partitions, assignment.zkVersion, tuple(states)))
        effects.append(Respond(replyTo, results))
        return effects

    def timerFired(self, nowMs: int, key, image: ClusterImage) -> list:
        if key != REBALANCE_TIMER or self.epoch is None:
            return []
        effects = self._rebalance(image)
        effects.append(SetTimer(REBALANCE_TIMER, self.rebalanceIntervalMs))
        return effects

    def electLeaders(self, nowMs: int, replyTo, electionType: int, partitions, image: ClusterImage) -> list:
        """
        ElectLeaders (43): per partition C{(topic, partition, ErrorCode,
        message)}, answered through C{replyTo}.

        @param partitions: (topic, partition) pairs, or C{None} for every
            partition (preferred election of all that need one).
        """
        if self.epoch is None:
            return [Respond(replyTo, ErrorCode.not_controller)]
        live = image.live()
        effects: list = []
        results = []
        wanted = partitions
        if wanted is None:
            wanted = [(t, p) for t, p, replicas, state in image.partitions()
                      if state is not None and replicas and state.leader != replicas[0]]
        for topic, partition in wanted:
            assignment = image.topics.get(topic)
            replicas = assignment.partitions.get(partition) if assignment is not None else None
            state = image.states.get((topic, partition))
            if replicas is None or state is None or topic in image.deleting:
                results.append((topic, partition, ErrorCode.unknown_topic_or_partition, None))
                continue
            if electionType == PREFERRED:
                preferred = replicas[0]
                if state.leader == preferred and preferred in live:
                    results.append((topic, partition, ErrorCode.election_not_needed, None))
                elif preferred in electableMembers(image, state, live, image.shuttingDown):
                    effects.append(self._write(image, topic, state, partition, preferred,
                                               _withoutRestarted(image, state), "preferred"))
                    results.append((topic, partition, ErrorCode.none, None))
                else:
                    results.append((topic, partition, ErrorCode.preferred_leader_not_available,
                                    f"Failed to elect leader for partition {topic}-{partition} under "
                                    f"strategy PreferredReplicaPartitionLeaderElectionStrategy"))
            else:
                if state.leader in live:
                    results.append((topic, partition, ErrorCode.election_not_needed, None))
                    continue
                candidate = self._electable(image, replicas, state, live, image.shuttingDown, unclean=True)
                if candidate is None:
                    results.append((topic, partition, ErrorCode.eligible_leaders_not_available,
                                    f"Failed to elect leader for partition {topic}-{partition} under "
                                    f"strategy OfflinePartitionLeaderElectionStrategy(true)"))
                    continue
                leader, isr = candidate
                effects.append(self._write(image, topic, state, partition, leader, isr, "unclean (ElectLeaders)",
                                           unclean=leader not in state.isr))
                results.append((topic, partition, ErrorCode.none, None))
        effects.append(Respond(replyTo, results))
        return effects

    # -- decisions -------------------------------------------------------------------

    def _unclean(self, topic: str, image: ClusterImage) -> bool:
        """
        C{unclean.leader.election.enable} for C{topic}: its override in
        C{/config/topics} (Kafka's topic config), else the broker's.
        """
        value = image.configs.get(topic, {}).get("unclean.leader.election.enable")
        if value is not None:
            value = value.strip().lower()
            if value in ("true", "false"):
                return value == "true"
        return self.unclean

    def _partition(self, image: ClusterImage, topic, partition, replicas, state: PartitionState | None,
                   live, leaving, unclean: bool):
        if state is None:
            # A new partition (Kafka's NewPartition -> OnlinePartition): the
            # live replicas are the ISR, the first of them leads.
            alive = [r for r in replicas if r in live]
            if not alive:
                return None
            isr = tuple(r for r in alive if r not in leaving) or tuple(alive)
            new = PartitionState(isr[0], 0, isr, self.epoch, leaderBrokerEpoch=_brokerEpoch(image, isr[0]),
                                 isrBrokerEpochs=_memberEpochs(image, isr))
            return WriteState(topic, partition, new, -1, "new partition")
        # A replica whose broker registered again since the state was
        # written (Kafka's bounced broker: a new broker epoch) is failed
        # first -- out of the ISR, its leadership to another ISR member in
        # a new leader epoch -- and is a new broker after that: it may have
        # lost its unflushed tail.  An offline partition (no leader) was
        # written as its replicas failed: the ISR it kept is elected from.
        restarted = restartedMembers(image, state)
        registered = live
        live = live - restarted
        leaderOk = state.leader in live and state.leader not in leaving
        if not leaderOk:
            candidate = self._electable(image, replicas, state, live, leaving, unclean=unclean)
            if candidate is not None:
                leader, isr = candidate
                why = "controlled shutdown" if state.leader in leaving else "offline leader"
                if state.leader in restarted:
                    why = f"broker {state.leader} restarted"
                if leader not in state.isr:
                    why = "unclean (no live ISR member)"
                return self._write(image, topic, state, partition, leader, isr, why,
                                   unclean=leader not in state.isr)
            if state.leader in live:
                # Shutting down with nobody in the ISR to take over: it keeps
                # leading (Kafka's controlled shutdown gives up on it too).
                return None
            if state.leader == NO_LEADER:
                return None
            # Offline: no leader, and the ISR keeps the members that may
            # come back with everything (_offlineIsr), elected (cleanly)
            # when one returns.
            isr = _offlineIsr(image, state, registered, restarted)
            return self._write(image, topic, state, partition, NO_LEADER, isr, "offline, no live ISR member")
        # The leader is fine: take dead, restarted and departing followers
        # out of the ISR.
        isr = tuple(r for r in state.isr if r == state.leader or (r in live and r not in leaving))
        if isr != state.isr:
            why = "replica restarted" if restarted & set(state.isr) else "replica offline"
            return self._write(image, topic, state, partition, state.leader, isr, why)
        return None

    @staticmethod
    def _reassigning(image: ClusterImage, topic: str, partition: int, state) -> bool:
        """
        Whether the partition has a reassignment that still waits for its
        target replicas to join the ISR.
        """
        assignment = image.topics.get(topic)
        if state is None or assignment is None or topic in image.deleting:
            return False
        removing = assignment.removing.get(partition, ())
        if not assignment.adding.get(partition) and not removing:
            return False
        target = R.target(assignment.partitions[partition], removing)
        return not set(target) <= set(state.isr)

    def _completeReassignment(self, image: ClusterImage, topic, partition, replicas, state, live):
        """
        Kafka's phase B: once every target replica is in the ISR, the
        target becomes the assignment; the leader moves to the first live
        target replica of the ISR if it is not one; the removed replicas
        leave the ISR (their brokers see they no longer host the partition
        and delete it).
        """
        assignment = image.topics[topic]
        removing = assignment.removing.get(partition, ())
        if not assignment.adding.get(partition) and not removing:
            return None
        target = R.target(replicas, removing)
        if not set(target) <= set(state.isr):
            return None
        finished = self._finish(image, target, state, live)
        if finished is None:
            return None
        new = PartitionState(finished[0], state.leaderEpoch + 1, finished[1], self.epoch,
                             leaderBrokerEpoch=_brokerEpoch(image, finished[0]),
                             isrBrokerEpochs=_memberEpochs(image, finished[1]))
        return CompleteReassignment(topic, partition, target, new, assignment.zkVersion, state.zkVersion)

    @staticmethod
    def _finish(image: ClusterImage, target, state, live):
        """
        The leader and ISR a reassignment to C{target} ends with (Kafka's
        C{ReassignPartitionLeaderElectionStrategy}: the first live target
        replica in the ISR when the leader is not a live target replica),
        or C{None} while there is none.  Live: L{electableMembers}.
        """
        electable = electableMembers(image, state, live)
        leader = state.leader
        if leader not in target or leader not in electable:
            leader = next((r for r in target if r in electable), None)
            if leader is None:
                return None
        isr = tuple(r for r in _withoutRestarted(image, state) if r in target) or (leader,)
        return leader, isr

    def _electable(self, image: ClusterImage, replicas, state: PartitionState, live, leaving,
                   unclean: bool):
        """
        The first replica, in assignment order, of the state's
        L{electableMembers}, with them as the ISR; else, when C{unclean},
        the first live replica not shutting down (alone in the ISR).

        @return: (leader, isr) or C{None}.
        """
        isrLive = electableMembers(image, state, live, leaving)
        for replica in replicas:
            if replica in isrLive:
                return replica, tuple(r for r in state.isr if r in isrLive)
        if unclean:
            for replica in replicas:
                if replica in live and replica not in leaving:
                    return replica, (replica,)
        return None

    def _write(self, image: ClusterImage, topic, state: PartitionState, partition, leader, isr,
               why, unclean: bool = False) -> WriteState:
        new = PartitionState(leader, state.leaderEpoch + 1, tuple(isr), self.epoch,
                             leaderBrokerEpoch=_brokerEpoch(image, leader),
                             isrBrokerEpochs=_memberEpochs(image, isr))
        return WriteState(topic, partition, new, state.zkVersion, why, unclean)

    def _rebalance(self, image: ClusterImage) -> list:
        """
        Kafka's C{checkAndTriggerAutoLeaderRebalance}: a broker that leads
        too few of the partitions it is preferred for gets them back.
        """
        live = image.live()
        preferredOf: dict[int, list] = {}
        for topic, partition, replicas, state in image.partitions():
            if state is None or not replicas or topic in image.deleting:
                continue
            preferredOf.setdefault(replicas[0], []).append((topic, partition, state))
        effects = []
        for broker, owned in sorted(preferredOf.items()):
            if broker not in live or broker in image.shuttingDown:
                continue
            notLed = [(t, p, s) for t, p, s in owned if s.leader != broker]
            if not notLed or len(notLed) * 100 <= len(owned) * self.imbalancePercentage:
                continue
            for topic, partition, state in notLed:
                if broker in electableMembers(image, state, live, image.shuttingDown):
                    effects.append(self._write(image, topic, state, partition, broker,
                                               _withoutRestarted(image, state), "preferred"))
        return effects


def deletionWaitsFor(topic: str, image: ClusterImage) -> frozenset:
    """
    Kafka's C{TopicDeletionManager}: a topic queued for deletion leaves
    ZooKeeper only once every broker holding one of its replicas has
    deleted it (said so for this topic id).  A broker that is down keeps
    the topic queued (Kafka's "ineligible for deletion") until it returns
    and deletes its replicas.

    @return: the brokers whose word is missing.
    """
    assignment = image.topics.get(topic)
    if assignment is None:
        return frozenset()
    done = image.deletedReplicas.get(topic, {})
    return frozenset(
        b for replicas in assignment.partitions.values() for b in replicas if done.get(b) != assignment.topicId
    )


def restartedMembers(image: ClusterImage, state: PartitionState) -> frozenset:
    """
    The leader and ISR members of C{state} whose broker registered again
    since it was written (L{ClusterImage.restartedSince}: Kafka's bounced
    broker, a new broker epoch): they may have lost their unflushed tail.
    None for an offline partition (no leader): its ISR was written as its
    replicas failed, and the member it kept is elected when it returns.
    """
    if state.leader == NO_LEADER:
        return frozenset()
    return frozenset(r for r in (state.leader, *state.isr) if image.restartedSince(r, state))


def electableMembers(image: ClusterImage, state: PartitionState, live,
                     leaving=frozenset()) -> frozenset:
    """
    The ISR members of C{state} that may lead now -- every election asks
    this (a failed leader's successor, a preferred election by the
    rebalance timer or ElectLeaders, the end of a reassignment): registered
    (in C{live}), not shutting down (C{leaving}), and not restarted since
    the state was written (L{restartedMembers}: such a member is failed
    first, out of the ISR, and is a new broker after that).
    """
    restarted = restartedMembers(image, state)
    return frozenset(r for r in state.isr if r in live and r not in leaving and r not in restarted)


def _withoutRestarted(image: ClusterImage, state: PartitionState) -> tuple:
    """
    The ISR of C{state} without its L{restartedMembers}: a state written
    with a restarted member in its ISR would hide the restart (written after
    its registration), so an election that does not fail it first fails it
    in the same write.
    """
    restarted = restartedMembers(image, state)
    return tuple(r for r in state.isr if r not in restarted)


def _brokerEpoch(image: ClusterImage, leader: int) -> int:
    """
    The broker epoch of the registration the controller elects (the one its
    image holds): the broker leads only if it is its own.
    """
    return image.brokerEpochs.get(leader, -1) if leader != NO_LEADER else -1


def _memberEpochs(image: ClusterImage, isr) -> tuple:
    """
    The registration of each ISR member the controller writes, as its image
    holds it (KIP-903's NewIsrWithEpochs, for the controller's own writes):
    a member that registers again after it is then told by its broker epoch
    whatever writes the state has seen since (a leader's ISR change, whose
    newer write would hide it from a check by write time alone), and one
    the image already held under a previous registration is told too.  A
    member not registered is left out: it is judged by the write's time.
    """
    return tuple(sorted(
        (b, image.brokerEpochs[b]) for b in set(isr) if image.brokerEpochs.get(b, 0) > 0
    ))


def _offlineIsr(image: ClusterImage, state: PartitionState, registered, restarted) -> tuple:
    """
    The ISR a partition that lost every electable ISR member goes offline
    with; the next pass elects from it as its members register (an offline
    state's members are not judged restarted: the state was written as they
    failed).

    - A member that went away without registering again may return with
      its log intact (a killed process, a lost ZooKeeper session), while a
      restarted one may have lost its unflushed tail (acknowledged records
      the others have).  So while any member is away, the restarted ones
      leave the ISR and the partition waits for the others -- unless the
      leader is back (restarted) and every registered broker restarted
      since the state was written (a whole-cluster crash: nobody stayed
      up, so the members still away went down in it too, and the leader's
      is the last leader's log), where the registered restarted members
      are kept and the first of them is elected (Kafka's onBrokerFailure
      then onBrokerStartup) rather than waiting for a member that may
      never come back.  Unclean election (the next pass) may still elect
      a restarted replica.
    - Every member registered again (all restarted): they are kept.
    - No member registered: the leader is kept (Kafka's last known leader,
      KIP-966: the replica that had every acknowledged record), not a
      follower that may return first after a crash.
    """
    away = [r for r in state.isr if r not in registered]
    wholeCluster = state.leader in restarted and all(image.restartedSince(b, state) for b in registered)
    if restarted and away and not wholeCluster:
        return tuple(r for r in state.isr if r not in restarted)
    if not any(r in registered for r in state.isr) and state.leader in state.isr:
        return (state.leader,)
    return _shrink(state.isr, registered)


def _shrink(isr, live) -> tuple:
    """
    Kafka's C{removeReplicasFromIsr}: dead members leave, but the last one
    stays.
    """
    kept = tuple(r for r in isr if r in live)
    return kept or tuple(isr[-1:])


def assignReplicas(brokers, numPartitions: int, replicationFactor: int, startIndex: int,
                   nextReplicaShift: int, firstPartition: int = 0) -> dict[int, tuple[int, ...]]:
    """
    Kafka's rack-unaware C{assignReplicasToBrokers}: leaders round-robin
    from a start index, followers shifted so a broker's followers spread
    over the others.

    @param brokers: live broker ids.
    @param startIndex: where the first leader falls (Kafka: random).
    @param nextReplicaShift: the first follower's offset (Kafka: random).
    @param firstPartition: the first partition's number (CreatePartitions
        continues an existing topic).
    """
    ids = sorted(brokers)
    n = len(ids)
    result = {}
    currentPartition = firstPartition
    shift = nextReplicaShift
    for i in range(numPartitions):
        if currentPartition > 0 and currentPartition % n == 0:
            shift += 1
        first = (currentPartition + startIndex) % n
        replicas = [ids[first]]
        for j in range(replicationFactor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        result[firstPartition + i] = tuple(replicas)
        currentPartition += 1
    return result
