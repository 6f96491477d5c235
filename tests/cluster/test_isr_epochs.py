"""
ISR expansion with broker epochs (Kafka's KIP-903): a follower's fetches
carry its broker epoch (its registration's czxid); the leader keeps it with
what the fetches told and fences fetches of an earlier registration; an
ISR expansion names each added replica's epoch, and the ISR write refuses
one that is not the replica's current registration.  A follower that
restarted with a cut log joins again only once it caught up under its new
registration, never on what its previous life fetched.  And a state znode
without (or with a bad) C{leader_broker_epoch} reads as not known.
"""

from __future__ import annotations

import json
import types

from twisted.internet import task

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.adminwrites import AdminWrites
from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.replication.manager import ReplicaManager, StaticDirectory
from tests.cluster.epochhelpers import CONFIG, NEW, OLD, NoFetcher
from tests.log.batches import makeBatch

NOW = 1_700_000_000_000
class Alter:
    """An IAlterIsr that records its calls and answers when told."""

    def __init__(self):
        self.calls = []

    def alterIsr(self, topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                 brokerEpochs=None):
        self.calls.append((tuple(newIsr), dict(brokerEpochs or {}), onDone, partitionEpoch))


class Directory(StaticDirectory):
    """Broker 2's registration as the leader's cluster view has it."""

    def __init__(self):
        super().__init__({1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)})
        self.epochs = {2: OLD}

    def brokerEpoch(self, brokerId):
        return self.epochs.get(brokerId, -1)


class Leader:
    def __init__(self):
        self.clock = task.Clock()
        self.alter = Alter()
        self.directory = Directory()
        logManager = MemoryLogManager()
        logManager.createTopic("t", 1, {})
        self.log = logManager.getLog("t", 0)
        self.manager = ReplicaManager(
            1, logManager, CONFIG, self.clock, alterIsr=self.alter, directory=self.directory,
            fetcherFactory=NoFetcher, nowMs=lambda: NOW,
        )
        self.log.append(makeBatch(10), NOW)
        # Broker 2 is out of the ISR (it lagged, or it is new).
        self.manager.becomeLeader("t", 0, 3, [1], [1, 2], 5)
        self.clock.advance(0)

    def fetch(self, offset, brokerEpoch):
        self.manager.recordFollowerFetch(2, [(("t", 0), offset, self.log.logEndOffset, None)], brokerEpoch)

    def answer(self, call, error=None):
        newIsr, _, onDone, partitionEpoch = call
        onDone(None, error) if error is not None else onDone(partitionEpoch + 1, None)
        self.clock.advance(0)


def test_an_expansion_names_the_broker_epoch_the_fetches_were_made_under():
    leader = Leader()
    leader.fetch(10, OLD)
    [call] = leader.alter.calls
    assert call[:2] == ((1, 2), {2: OLD})


def test_a_fetch_of_an_earlier_registration_read_late_is_fenced():
    leader = Leader()
    leader.directory.epochs[2] = NEW  # broker 2 restarted and registered again
    leader.fetch(10, OLD)  # its previous life's fetch, read only now
    assert leader.alter.calls == []
    p = leader.manager._partitions[("t", 0)]
    assert p.followers[2].logEndOffset == -1


def test_a_restarted_follower_joins_only_once_caught_up_under_its_new_epoch():
    leader = Leader()
    leader.fetch(10, OLD)  # caught up in its previous life: expansion asked
    [first] = leader.alter.calls
    # It crashed, lost its log's tail (it has 4 of the 10) and registered
    # again; the expansion from its old fetches is refused by the ISR write.
    leader.directory.epochs[2] = NEW
    leader.answer(first, KafkaErrorLike())
    leader.fetch(4, NEW)
    p = leader.manager._partitions[("t", 0)]
    assert p.followers[2].brokerEpoch == NEW and p.followers[2].logEndOffset == 4
    assert len(leader.alter.calls) == 1 and p.isr == {1}
    assert leader.log.highWatermark == 10
    leader.fetch(10, NEW)  # caught up under its new registration
    [_, second] = leader.alter.calls
    assert second[:2] == ((1, 2), {2: NEW})
    leader.answer(second)
    assert p.isr == {1, 2}


def test_a_new_registration_forgets_what_the_previous_one_fetched():
    leader = Leader()
    p = leader.manager._partitions[("t", 0)]
    leader.fetch(8, OLD)
    assert p.followers[2].logEndOffset == 8 and leader.alter.calls == []
    leader.directory.epochs[2] = NEW
    leader.fetch(3, NEW)
    follower = p.followers[2]
    assert (follower.brokerEpoch, follower.logEndOffset, follower.lastCaughtUpMs) == (NEW, 3, 0)


def KafkaErrorLike():
    from kafkatwist.errors import KafkaError

    return KafkaError(ErrorCode.ineligible_replica, "stale")


# -- the ISR write (the controller's check) ---------------------------------------------


class FakeZk:
    def __init__(self, czxids):
        self.czxids = czxids
        self.sets = []

    def exists(self, path):
        brokerId = int(path.rsplit("/", 1)[1])
        czxid = self.czxids.get(brokerId)
        return None if czxid is None else types.SimpleNamespace(czxid=czxid)

    def set(self, path, data, version=-1):
        self.sets.append((path, json.loads(data)))
        return types.SimpleNamespace(version=version + 1, mzxid=0x999)

    def create(self, *args, **kwargs):
        pass


class Owner:
    def submit(self, f, *args):
        f(*args)


class Writes(AdminWrites):
    def __init__(self, known, registered):
        self.owner = Owner()
        self.zk = FakeZk(registered)
        self._states = {("t", 0): Z.PartitionState(1, 3, (1,), 1, 5, 0x50, 0x10)}
        self._brokers = {1: object(), 2: object()}
        self._brokerEpochs = dict(known)
        self._shuttingDown = set()
        self._applied = {}

    def _settle(self):
        pass

    def expand(self, brokerEpochs):
        answers = []
        self.alterIsr("t", 0, 1, 3, [1, 2], 5, lambda v, e: answers.append((v, e)), brokerEpochs=brokerEpochs)
        [(version, error)] = answers
        return error.code if error is not None else version


def test_the_isr_write_refuses_a_replica_of_another_registration():
    assert Writes({1: 0x10, 2: NEW}, {2: NEW}).expand({2: OLD}) == ErrorCode.ineligible_replica


def test_the_isr_write_accepts_a_replica_whose_epoch_is_not_said():
    # As Kafka accepts -1 (a fetch by name, v11: an internal topic whose
    # local id is not the cluster's); nothing recorded for it.
    writes = Writes({1: 0x10, 2: NEW}, {2: NEW})
    assert writes.expand({}) == 6
    assert "isr_broker_epochs" not in writes.zk.sets[-1][1]
    assert Writes({1: 0x10, 2: NEW}, {2: NEW}).expand({2: -1}) == 6


def test_the_isr_write_reads_the_registration_again():
    # Its image still holds the old registration; ZooKeeper has the new one.
    writes = Writes({1: 0x10, 2: OLD}, {2: NEW})
    assert writes.expand({2: OLD}) == ErrorCode.ineligible_replica
    assert writes.zk.sets == []


def test_the_isr_write_adds_the_current_registration():
    writes = Writes({1: 0x10, 2: NEW}, {2: NEW})
    assert writes.expand({2: NEW}) == 6
    [(path, value)] = writes.zk.sets
    assert value["isr"] == [1, 2] and value["leader_broker_epoch"] == 0x10


# -- states written by older versions -------------------------------------------------------


def _state(**extra):
    value = {"controller_epoch": 1, "leader": 2, "version": 1, "leader_epoch": 3, "isr": [2, 3], **extra}
    return Z.decodeState("t", 0, json.dumps(value).encode(), 4, 0x50)


def test_a_state_without_the_leader_broker_epoch_reads_as_not_known():
    assert _state().leaderBrokerEpoch == -1
    for bad in (None, "5", True, -7, 1.5, [1]):
        assert _state(leader_broker_epoch=bad).leaderBrokerEpoch == -1
    assert _state(leader_broker_epoch=0x40).leaderBrokerEpoch == 0x40


def test_a_state_without_the_leader_broker_epoch_is_judged_by_its_write_only():
    image = ClusterImage(brokerEpochs=freeze({2: 0x40, 3: 0x41}))
    # Registered before the state's last write: the broker it names.
    assert not image.restartedSince(2, _state())
    assert not image.restartedSince(2, _state(leader_broker_epoch=None))
    # Registered after it: restarted since.
    assert ClusterImage(brokerEpochs=freeze({2: 0x60})).restartedSince(2, _state())


def test_the_isr_write_records_the_registration_each_member_was_added_under():
    writes = Writes({1: 0x10, 2: NEW}, {2: NEW})
    writes._states[("t", 0)] = Z.PartitionState(1, 3, (1, 3), 1, 5, 0x50, 0x10, ((3, 0x30),))
    answers = []
    writes.alterIsr("t", 0, 1, 3, [1, 2, 3], 5, lambda v, e: answers.append((v, e)), brokerEpochs={2: NEW})
    assert answers == [(6, None)]
    [(_, value)] = writes.zk.sets
    assert value["isr_broker_epochs"] == {"2": NEW, "3": 0x30}
    assert writes._states[("t", 0)].isrBrokerEpochs == ((2, NEW), (3, 0x30))
    # A member that leaves the ISR takes its entry along.
    writes.alterIsr("t", 0, 1, 3, [1, 2], 6, lambda v, e: None)
    assert writes.zk.sets[-1][1]["isr_broker_epochs"] == {"2": NEW}


def test_a_member_added_as_a_previous_registration_is_a_restarted_replica():
    # The leader's write landed after broker 2 registered again (so its
    # mzxid is newer than the registration): the epoch it names tells.
    state = Z.PartitionState(1, 3, (1, 2), 1, 6, 0x300, 0x10, ((2, OLD),))
    assert ClusterImage(brokerEpochs=freeze({1: 0x10, 2: NEW})).restartedSince(2, state)
    assert not ClusterImage(brokerEpochs=freeze({1: 0x10, 2: OLD})).restartedSince(2, state)
    # Without the field: the write's time only.
    state = Z.PartitionState(1, 3, (1, 2), 1, 6, 0x300, 0x10)
    assert not ClusterImage(brokerEpochs=freeze({1: 0x10, 2: NEW})).restartedSince(2, state)


def test_isr_broker_epochs_read_safely():
    assert _state().isrBrokerEpochs == ()
    assert _state(isr_broker_epochs=None).isrBrokerEpochs == ()
    assert _state(isr_broker_epochs=[1, 2]).isrBrokerEpochs == ()
    assert _state(isr_broker_epochs={"2": 5, "x": 6, "3": None, "4": True, "5": -1}).isrBrokerEpochs == ((2, 5),)
    encoded = Z.encodeState(Z.PartitionState(2, 3, (2, 3), 1, isrBrokerEpochs=((3, 9),)))
    assert Z.decodeState("t", 0, encoded, 1).isrBrokerEpochs == ((3, 9),)


def test_follower_fetches_name_each_topic_by_its_current_id():
    leader = Leader()
    manager, logManager = leader.manager, leader.manager.logManager
    first = logManager.topics()["t"].topicId
    assert manager._topicIdOf("t") == first
    assert manager._topicIdOf("nothing") is None
    # The topic deleted and created again: a new log, a new id.
    logManager.deleteTopic("t")
    logManager.createTopic("t", 1, {})
    manager.becomeFollower("t", 0, 2, 4, [1, 2], 9)
    leader.clock.advance(0)
    assert manager._topicIdOf("t") == logManager.topics()["t"].topicId != first


def test_a_topic_whose_local_id_is_not_the_clusters_is_fetched_by_name():
    leader = Leader()
    manager = leader.manager
    local = manager.logManager.topics()["t"].topicId
    leader.directory.topicId = lambda name: local
    assert manager._topicIdOf("t") == local
    leader.directory.topicId = lambda name: None  # (each broker's own internal topic)
    assert manager._topicIdOf("t") is None


def test_the_isr_write_refuses_to_keep_a_member_that_registered_again():
    """
    Review 3, D6: a member the controller wrote (no epoch recorded) that
    registered again after that write, or one whose recorded epoch is not
    its registration, has restarted, maybe with a cut log.  A leader's
    write keeping it would hide that from the next controller.
    """
    # ISR {1, 2} as the controller wrote it at mzxid 0x50; broker 2 registered at 0x60.
    writes = Writes({1: 0x10, 2: 0x60}, {1: 0x10, 2: 0x60, 3: 0x30})
    writes._brokers[3] = object()
    writes._states[("t", 0)] = Z.PartitionState(1, 3, (1, 2), 1, 5, 0x50, 0x10)
    answers = []
    writes.alterIsr("t", 0, 1, 3, [1, 2, 3], 5, lambda v, e: answers.append((v, e)), brokerEpochs={3: 0x30})
    [(version, error)] = answers
    assert error.code == ErrorCode.ineligible_replica and writes.zk.sets == []
    # Registered before the write: it stays.
    writes.zk.czxids[2] = 0x40
    answers.clear()
    writes.alterIsr("t", 0, 1, 3, [1, 2, 3], 5, lambda v, e: answers.append((v, e)), brokerEpochs={3: 0x30})
    assert answers == [(6, None)]
    # A recorded epoch that is not the registration: restarted.
    writes._states[("t", 0)] = Z.PartitionState(1, 3, (1, 2, 3), 1, 6, 0x999, 0x10, ((2, 0x40), (3, 0x30)))
    writes.zk.czxids[3] = 0x70
    answers.clear()
    writes.alterIsr("t", 0, 1, 3, [1, 2], 6, lambda v, e: answers.append((v, e)))
    assert answers == [(7, None)]  # 3 leaves: nothing hidden
    writes._states[("t", 0)] = Z.PartitionState(1, 3, (1, 2, 3), 1, 6, 0x999, 0x10, ((2, 0x40), (3, 0x30)))
    answers.clear()
    writes.alterIsr("t", 0, 1, 3, [1, 3], 6, lambda v, e: answers.append((v, e)))
    [(version, error)] = answers
    assert error.code == ErrorCode.ineligible_replica


def test_an_isr_write_whose_re_read_fails_is_answered_request_timed_out():
    """
    Review 4, R4-1: after a stale version, the state is read again; a
    ZooKeeper error there still answers, so the leader's change does not
    stay pending for the rest of its epoch.
    """
    from kazoo.exceptions import BadVersionError, ConnectionLoss

    class Flaky(Writes):
        def _readState(self, topic, partition):
            raise ConnectionLoss()

    writes = Flaky({1: 0x10, 2: NEW}, {2: NEW})

    def stale(path, data, version=-1):
        raise BadVersionError()

    writes.zk.set = stale
    assert writes.expand({2: NEW}) == ErrorCode.request_timed_out
    writes = Flaky({1: 0x10, 2: NEW}, {2: NEW})
    answers = []
    writes.alterIsr("t", 0, 1, 3, [1, 2], 4, lambda v, e: answers.append((v, e)), brokerEpochs={2: NEW})
    [(version, error)] = answers  # a stale partition epoch: the re-read fails
    assert error.code == ErrorCode.request_timed_out
