"""
The control plane in process against a real ZooKeeper: three
L{ClusterService}s with recording replica managers, no network listeners.
"""

from __future__ import annotations

import threading

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError

from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.controller import PREFERRED, UNCLEAN
from kafkatwist.cluster.service import ClusterService
from kafkatwist.config import BrokerConfig
from kafkatwist.errors import ErrorCode
from kafkatwist.testing import waitUntil
from tests.cluster.stubs import RecordingReplicaManager


class Node:
    def __init__(self, connect, brokerId, **overrides):
        settings = {
            "node.id": str(brokerId),
            "zookeeper.connect": connect,
            "zookeeper.session.timeout.ms": "6000",
            "listeners": f"PLAINTEXT://127.0.0.1:{19000 + brokerId}",
        }
        settings.update(overrides)
        self.config = BrokerConfig(settings)
        self.replicas = RecordingReplicaManager()
        self.service = ClusterService(self.config, self.config.advertisedListeners, self.replicas)

    def start(self):
        self.service.connect()
        self.service.start()
        return self

    def stop(self):
        self.service.stop()

    @property
    def image(self):
        return self.service.image


@pytest.fixture
def cluster(zookeeper):
    connect = zookeeper.connect("cp")
    nodes = []

    def start(brokerId, **overrides):
        node = Node(connect, brokerId, **overrides).start()
        nodes.append(node)
        return node

    start.connect = connect
    yield start
    for node in nodes:
        node.stop()


def call(method, *args):
    done = threading.Event()
    box = []

    def onDone(*result):
        box.append(result)
        done.set()

    method(*args, onDone)
    assert done.wait(20), "no answer"
    return box[0]


def test_registration_and_controller(cluster):
    a, b, c = cluster(1), cluster(2), cluster(3, **{"broker.rack": "r3"})
    for node in (a, b, c):
        waitUntil(lambda: node.image.live() == {1, 2, 3}, what="three live brokers")
    assert a.image.brokers[3].rack == "r3" and a.image.brokers[1].rack is None
    waitUntil(lambda: {n.image.controllerId for n in (a, b, c)} == {1}, what="one controller")
    assert a.service.controller.active and not b.service.controller.active
    assert b.service.endpoint(3) == ("127.0.0.1", 19003)
    assert a.image.clusterId == b.image.clusterId is not None
    # Kafka's layout: a tool reading ZooKeeper sees the broker and controller.
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        info = Z.decodeBroker(2, zk.get("/brokers/ids/2")[0])
        assert info.endpoint("PLAINTEXT") == ("127.0.0.1", 19002)
        assert Z.decodeController(zk.get("/controller")[0]) == 1
        assert int(zk.get("/controller_epoch")[0]) >= 1
    finally:
        zk.stop()
        zk.close()


def test_rack_aware_assignment(cluster):
    """
    With broker.rack registered, new partitions' replicas go to different
    racks, as Kafka's AdminUtils places them; one broker without a rack
    among racked ones is refused as Kafka refuses it.
    """
    a = cluster(1, **{"broker.rack": "a"})
    b = cluster(2, **{"broker.rack": "a"})  # noqa: F841 (the broker runs)
    c = cluster(3, **{"broker.rack": "b"})  # noqa: F841 (the broker runs)
    waitUntil(lambda: a.image.live() == {1, 2, 3}, what="three live brokers")
    for _ in range(5):
        assignment = a.service.assign(6, 2)
        assert all(sorted({1: "a", 2: "a", 3: "b"}[r] for r in replicas) == ["a", "b"]
                   for replicas in assignment.values())
    d = cluster(4)
    waitUntil(lambda: a.image.live() == {1, 2, 3, 4}, what="four live brokers")
    with pytest.raises(Exception) as e:
        a.service.assign(1, 1)
    assert e.value.code == ErrorCode.unknown_server_error
    d.stop()


def test_topic_leaders_and_failover(cluster):
    a, b, c = cluster(1), cluster(2), cluster(3)
    waitUntil(lambda: a.image.live() == {1, 2, 3})
    assignment = a.service.assign(6, 3)
    assert all(len(set(r)) == 3 for r in assignment.values())
    assert sorted(r[0] for r in assignment.values()) == [1, 1, 2, 2, 3, 3]
    topicId, error = call(b.service.createTopic, "t", assignment, {"retention.ms": "1000"})
    assert error is None
    for node in (a, b, c):
        waitUntil(lambda: len([s for (t, _), s in node.image.states.items() if t == "t"]) == 6,
                  what="six states")
    for p, replicas in assignment.items():
        state = a.image.states[("t", p)]
        assert state.leader == replicas[0] and state.leaderEpoch == 0 and set(state.isr) == {1, 2, 3}
    assert a.image.topics["t"].topicId == topicId
    # Broker 3 reads the topic's configs apart from its states.
    waitUntil(lambda: c.image.configs.get("t") == {"retention.ms": "1000"}, what="broker 3 reads the configs")
    assert c.image.configs["t"] == {"retention.ms": "1000"}
    # Every hosting broker was told its role.
    waitUntil(lambda: len(c.replicas.roles) == 6)
    for (t, p), role in c.replicas.roles.items():
        assert role[0] == ("leader" if assignment[p][0] == 3 else "follower")

    # Broker 2 goes: its partitions get a leader from the ISR, and it leaves every ISR.
    led = [p for p, r in assignment.items() if r[0] == 2]
    b.stop()
    def moved():
        states = [a.image.states.get(("t", p)) for p in assignment]
        return all(s and s.leader in (1, 3) and 2 not in s.isr for s in states)
    waitUntil(moved, what="leaders moved off broker 2")
    for p in led:
        state = a.image.states[("t", p)]
        assert state.leaderEpoch == 1 and state.leader == [r for r in assignment[p] if r != 2][0]

    # The controller goes: another broker takes over, with a higher epoch.
    oldEpoch = a.service.controller.epoch
    a.stop()
    waitUntil(lambda: c.service.controller.active, what="broker 3 controller")
    assert c.service.controller.epoch > oldEpoch
    # (Partitions it led already lose broker 1 from their ISR in a write of their own.)
    waitUntil(lambda: all(c.image.states[("t", p)].leader == 3 and c.image.states[("t", p)].isr == (3,)
                          for p in assignment), what="broker 3 leads everything, alone in the ISR")
    # Nobody else in the ISR: the ISR keeps broker 3 alone.
    assert all(c.image.states[("t", p)].isr == (3,) for p in assignment)


def test_offline_partition_waits_for_its_isr(cluster):
    a, b = cluster(1), cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    _, error = call(a.service.createTopic, "solo", {0: (2,)}, {})
    assert error is None
    waitUntil(lambda: a.image.leader("solo", 0) == 2)
    b.stop()
    waitUntil(lambda: a.image.states[("solo", 0)].leader == -1, what="offline")
    assert a.image.states[("solo", 0)].isr == (2,)
    # It returns: elected again, cleanly.
    b2 = cluster(2)
    waitUntil(lambda: a.image.leader("solo", 0) == 2, what="broker 2 back as leader")
    waitUntil(lambda: b2.replicas.roles.get(("solo", 0), ("",))[0] == "leader", what="told it leads")


def test_unclean_election(cluster):
    a = cluster(1, **{"unclean.leader.election.enable": "false"})
    b = cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    _, error = call(a.service.createTopic, "u", {0: (2, 1)}, {})
    # Broker 2 writes the ISR below as its leader: once it has read the state
    # (a leader's write names what it read).
    waitUntil(lambda: a.image.leader("u", 0) == 2 and b.image.leader("u", 0) == 2)
    # Broker 1 drops out of the ISR (as its leader would write it).
    state = a.image.states[("u", 0)]
    newVersion, error = call(b.service.alterIsr, "u", 0, 2, state.leaderEpoch, (2,), state.zkVersion)
    assert error is None and newVersion == state.zkVersion + 1
    # A stale partition epoch is refused.
    _, error = call(b.service.alterIsr, "u", 0, 2, state.leaderEpoch, (2, 1), state.zkVersion)
    assert error.code == ErrorCode.invalid_update_version
    waitUntil(lambda: a.image.states[("u", 0)].isr == (2,))
    b.stop()
    waitUntil(lambda: a.image.states[("u", 0)].leader == -1, what="offline")
    results = call(a.service.electLeaders, PREFERRED, [("u", 0)])[0]
    assert results[0][2] == ErrorCode.preferred_leader_not_available
    results = call(a.service.electLeaders, UNCLEAN, [("u", 0)])[0]
    assert results[0][2] == ErrorCode.none
    waitUntil(lambda: a.image.leader("u", 0) == 1, what="unclean leader")
    assert a.image.states[("u", 0)].isr == (1,)


def test_preferred_election_and_controlled_shutdown(cluster):
    a, b = cluster(1), cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    _, error = call(a.service.createTopic, "p", {0: (2, 1), 1: (1, 2)}, {})
    waitUntil(lambda: a.image.leader("p", 0) == 2 and a.image.leader("p", 1) == 1)
    # Controlled shutdown of broker 2: its leadership moves first.
    assert b.service.controlledShutdown(10)
    # Broker 2 waited on its own view: broker 1 reads the new state apart.
    waitUntil(lambda: a.image.leader("p", 0) == 1 and a.image.states[("p", 0)].isr == (1,),
              what="broker 1 reads the leadership moved")
    assert a.image.leader("p", 0) == 1
    assert a.image.states[("p", 0)].isr == (1,)
    b.stop()
    b2 = cluster(2)
    waitUntil(lambda: 2 in a.image.live() and 2 not in a.image.shuttingDown)
    # The follower catches up (its leader writes it back into the ISR) ...
    state = a.image.states[("p", 0)]
    epochs = {2: a.image.brokerEpochs[2]}  # the registration its fetches named (KIP-903)
    call(lambda *args: a.service.alterIsr(*args, brokerEpochs=epochs),
         "p", 0, 1, state.leaderEpoch, (1, 2), state.zkVersion)
    # ... and a preferred election gives it its partition back.
    results = call(a.service.electLeaders, PREFERRED, None)[0]
    assert [(t, p, code) for t, p, code, _ in results] == [("p", 0, ErrorCode.none)]
    waitUntil(lambda: a.image.leader("p", 0) == 2, what="preferred leader back")
    waitUntil(lambda: b2.replicas.roles[("p", 0)][0] == "leader", what="broker 2 told it leads")


def test_delete_topic(cluster):
    a, b = cluster(1), cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    call(a.service.createTopic, "gone", {0: (1, 2), 1: (2, 1)}, {})
    waitUntil(lambda: len(b.replicas.roles) == 2)
    _, error = call(b.service.deleteTopic, "gone")
    assert error is None
    waitUntil(lambda: "gone" not in a.image.topics and "gone" not in b.image.topics)
    waitUntil(lambda: sorted(b.replicas.stopped) == [("gone", 0, True), ("gone", 1, True)])
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        # The controller (broker 1) ends the deletion after broker 2 said
        # its replicas are gone: wait for its writes, not broker 2's view.
        waitUntil(lambda: zk.exists("/brokers/topics/gone") is None
                  and zk.get_children("/admin/delete_topics") == [], what="the deletion completed in ZooKeeper")
        assert zk.exists("/brokers/topics/gone") is None
        assert zk.get_children("/admin/delete_topics") == []
    finally:
        zk.stop()
        zk.close()


def test_producer_id_blocks_are_cluster_wide(cluster):
    a, b = cluster(1), cluster(2)
    starts = [a.service.reserveProducerIdBlock(1000), b.service.reserveProducerIdBlock(1000),
              a.service.reserveProducerIdBlock(10)]
    assert starts == [0, 1000, 2000]
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        assert Z.decodeProducerIdBlockEnd(zk.get("/latest_producer_id_block")[0]) == 2009
    finally:
        zk.stop()
        zk.close()


def test_bounced_broker_loses_its_leadership(cluster):
    """
    A broker that went and came back between two reads of /brokers/ids
    (its registration's czxid changed) is treated as gone, then back.
    """
    a, b = cluster(1), cluster(2)  # noqa: F841 (the broker runs)
    waitUntil(lambda: a.image.live() == {1, 2})
    call(a.service.createTopic, "bounce", {0: (2, 1)}, {})
    waitUntil(lambda: a.image.leader("bounce", 0) == 2)
    epoch = a.image.states[("bounce", 0)].leaderEpoch
    # Broker 2's registration replaced behind the watchers' back.
    a.service.owner.call(lambda: a.service._brokerEpochs.__setitem__(2, -1))
    a.service.owner.call(a.service._onEvent, "/brokers/ids")
    waitUntil(lambda: a.image.states[("bounce", 0)].leaderEpoch > epoch, what="re-elected")
    assert a.image.live() == {1, 2}


def test_reassignment_resumes_on_a_new_controller(cluster):
    """
    A reassignment lives in ZooKeeper (the topic znode's adding/removing
    replicas): the controller that takes over resumes it with a new leader
    epoch, and completes it once the leader's ISR holds the target; the
    removed replica's broker is told to stop with delete.
    """
    a, b, c, d = cluster(1), cluster(2), cluster(3), cluster(4)
    waitUntil(lambda: a.image.live() == {1, 2, 3, 4} and a.service.controller.active)
    call(b.service.createTopic, "r", {0: (2, 3)}, {})
    waitUntil(lambda: ("r", 0) in b.replicas.roles and ("r", 0) in c.replicas.roles, what="roles")
    [results] = call(b.service.alterReassignments, [("r", 0, (2, 4))])
    assert results == ErrorCode.not_controller
    [results] = call(a.service.alterReassignments, [("r", 0, (2, 4))])
    assert results == [("r", 0, ErrorCode.none, None)]
    waitUntil(lambda: d.replicas.roles.get(("r", 0), ("",))[0] == "follower", what="the new replica follows")
    # Each broker reads the topic's znode and the partition's state with
    # watches of its own: broker 2 catches up with broker 4 in its own time.
    reassigning = d.replicas.roles[("r", 0)][2]
    waitUntil(lambda: b.image.topics["r"].adding and b.image.states[("r", 0)].leaderEpoch >= reassigning,
              what="broker 2 sees the reassignment")
    assert b.image.topics["r"].partitions[0] == (2, 4, 3)
    assert (b.image.topics["r"].adding, b.image.topics["r"].removing) == ({0: (4,)}, {0: (3,)})
    epoch = b.image.states[("r", 0)].leaderEpoch
    a.stop()
    waitUntil(lambda: b.service.controller.active or c.service.controller.active or d.service.controller.active,
              what="a new controller")
    waitUntil(lambda: b.image.states[("r", 0)].leaderEpoch > epoch, what="resumed with a new epoch")
    # The leader (broker 2) takes broker 4 into its ISR: the reassignment completes.
    state = b.image.states[("r", 0)]
    epochs = {4: b.image.brokerEpochs[4]}  # the registration its fetches named (KIP-903)
    _, error = call(lambda *args: b.service.alterIsr(*args, brokerEpochs=epochs),
                    "r", 0, 2, state.leaderEpoch, (2, 3, 4), state.zkVersion)
    assert error is None
    waitUntil(lambda: b.image.topics["r"].partitions[0] == (2, 4) and not b.image.topics["r"].adding,
              what="completed")
    # The completion's new leader epoch: broker 2 reads the state apart from the topic.
    waitUntil(lambda: b.image.states[("r", 0)].leaderEpoch > state.leaderEpoch, what="the completed state")
    assert set(b.image.states[("r", 0)].isr) == {2, 4}
    waitUntil(lambda: ("r", 0, True) in c.replicas.stopped, what="broker 3 stopped its replica with delete")


class LocalTopics:
    """
    A log manager that only lists topics and records deletions.
    """

    def __init__(self, *names):
        self.names = set(names)
        self.deleted = []

    def topics(self):
        return {name: None for name in self.names}

    def deleteTopic(self, name):
        self.names.discard(name)
        self.deleted.append(name)

    def createTopic(self, name, *args, **kw):
        self.names.add(name)

    def getLog(self, name, partition):
        return self.logs.get((name, partition)) if hasattr(self, "logs") else None


class StrayLog:
    """
    A partition's log that records being emptied.
    """

    def __init__(self, logEndOffset):
        self.logEndOffset = logEndOffset

    def truncateFullyAndStartAt(self, offset):
        self.logEndOffset = offset


def test_strays_are_deleted_but_not_topics_zookeeper_cannot_read(cluster):
    """
    At start-up a broker deletes its local topics the cluster no longer
    has, or has no replica of here -- but not one whose znode it cannot
    read (its data may be the only copy).
    """
    a = cluster(1)
    call(a.service.createTopic, "elsewhere", {0: (1,)}, {})
    # Partition 0 moved away while broker 2 was down; it still hosts 1.
    call(a.service.createTopic, "half", {0: (1,), 1: (2,)}, {})
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        zk.create("/brokers/topics/garbled", b"not json")
    finally:
        zk.stop()
        zk.close()
    waitUntil(lambda: "elsewhere" in a.image.topics and "half" in a.image.topics)
    node = Node(cluster.connect, 2)
    local = LocalTopics("gone", "elsewhere", "garbled", "half")
    local.logs = {("half", 0): StrayLog(40), ("half", 1): StrayLog(7)}
    node.service.logManager = local
    node.start()
    try:
        assert sorted(local.deleted) == ["elsewhere", "gone"]
        assert local.names == {"garbled", "half"}
        assert (local.logs[("half", 0)].logEndOffset, local.logs[("half", 1)].logEndOffset) == (0, 7)
    finally:
        node.stop()


def test_broker_configs_and_change_notifications(cluster):
    """
    The dynamic broker config znodes: written by one broker in Kafka's
    layout, read (watched) by every broker, each its own and the default;
    the change notifications older than Kafka's 15 minutes are purged by
    the next writer.
    """
    a, b = cluster(1), cluster(2)
    seen = {1: [], 2: []}
    a.service.onBrokerConfigs = lambda default, broker: seen[1].append((default, broker))
    b.service.onBrokerConfigs = lambda default, broker: seen[2].append((default, broker))
    assert call(a.service.setBrokerConfigs, False, {"message.max.bytes": "3000"}) == (None, None)
    assert call(b.service.setBrokerConfigs, True, {"log.retention.ms": "1000"}) == (None, None)
    waitUntil(lambda: seen[1] and seen[1][-1] == ({"message.max.bytes": "3000"}, {}), what="a read it")
    waitUntil(lambda: seen[2] and seen[2][-1] == ({"message.max.bytes": "3000"}, {"log.retention.ms": "1000"}),
              what="b read both")
    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        assert zk.get("/config/brokers/2")[0] == Z.encodeTopicConfig({"log.retention.ms": "1000"})
        changes = sorted(zk.get_children("/config/changes"))
        assert len(changes) == 2
        # Fifteen minutes on, the next writer purges both.
        later = zk.exists("/config/changes/" + changes[-1]).ctime + Z.CONFIG_CHANGE_EXPIRATION_MS + 1
        a.service.owner.call(a.service._purgeChangeNotifications, later)
        assert zk.get_children("/config/changes") == []
        # A broker that starts reads both before it serves.
        c = cluster(3)
        assert c.service.storedBrokerConfigs == ({"message.max.bytes": "3000"}, {})
        zk.set("/config/brokers/<default>", b"{damaged")
        waitUntil(lambda: seen[1][-1] == ({}, {}), what="a damaged default read as empty")
    finally:
        zk.stop()
        zk.close()


def test_a_watched_read_that_fails_is_read_again(cluster):
    """
    Issue 30: a read a watch asked for failed on ZooKeeper (the connection
    dropped under load) and the watch it would have set again was lost:
    the controller never heard of the next broker to go, whose partitions
    then had no leader for good.  Now the failure is one line and the
    broker reads everything again (watches set anew).
    """
    a, b = cluster(1), cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    call(a.service.createTopic, "w", {0: (2, 1)}, {})
    waitUntil(lambda: a.image.leader("w", 0) == 2, what="broker 2 leads w-0")
    assert a.service.controller.active
    real = a.service.zk.get_children
    failed = []

    def droppedOnce(path, *args, **kw):
        if path == Z.BROKER_IDS and not failed:
            failed.append(path)
            raise ConnectionLoss()
        return real(path, *args, **kw)

    a.service.zk.get_children = droppedOnce
    cluster(3)  # the controller's watch on /brokers/ids fires; its read fails
    waitUntil(lambda: failed, what="the failed read")
    waitUntil(lambda: a.image.live() == {1, 2, 3}, what="broker 3 seen after all")
    b.stop()
    waitUntil(lambda: a.image.leader("w", 0) == 1, what="a new leader of w-0")


def test_a_deletion_note_created_between_the_read_and_the_watch_is_seen(cluster):
    """
    The controller read a topic's deleted-replicas znode just before the
    first broker's note created it (absent at the read, present when the
    watch was set): it set only an existence watch, never heard of the
    notes, and the deletion waited for good ("gone" stayed in every image).
    Now a node found between the two is read again, its children watched.
    """
    a, b = cluster(1), cluster(2)
    waitUntil(lambda: a.image.live() == {1, 2})
    call(a.service.createTopic, "gone", {0: (1, 2), 1: (2, 1)}, {})
    waitUntil(lambda: len(b.replicas.roles) == 2)
    assert a.service.controller.active
    notes = Z.deletedReplicasPath("gone")
    real = a.service.zk.get_children
    raced = []

    def createdJustAfter(path, *args, **kw):
        if path == notes and not raced:
            raced.append(path)
            a.service.zk.ensure_path(path)  # another broker's note makes it now
            raise NoNodeError()
        return real(path, *args, **kw)

    a.service.zk.get_children = createdJustAfter
    _, error = call(b.service.deleteTopic, "gone")
    assert error is None
    waitUntil(lambda: raced, what="the read that raced the note")
    waitUntil(
        lambda: "gone" not in a.image.topics and "gone" not in b.image.topics,
        what="the deletion completed",
    )


def test_a_restarted_broker_leads_only_when_the_controller_elects_it_again():
    """
    Issue 30: ZooKeeper still names the restarted broker leader, in the
    leader epoch of its previous life (the state was written before this
    registration): it serves nothing (follows no one) until a state
    written after its registration names it leader in a newer epoch.
    """
    import dataclasses

    from kafkatwist.cluster.image import ClusterImage, freeze

    node = Node("127.0.0.1:1/unused", 2)
    service = node.service
    service._brokerEpoch = 200
    assignment = Z.TopicAssignment("t", None, {0: (2, 1, 3)})
    old = Z.PartitionState(2, 4, (2, 1, 3), 1, zkVersion=7, mzxid=100)
    image = ClusterImage(brokers=freeze({}), topics=freeze({"t": assignment}), states=freeze({("t", 0): old}))
    service._applyLocal(image)
    assert node.replicas.roles[("t", 0)] == ("follower", -1, 4, None, 7)
    # Another write of the same epoch, after the registration (an ISR
    # change by a controller that has not seen the restart yet): still not.
    same = dataclasses.replace(old, isr=(2, 1), zkVersion=8, mzxid=300)
    service._applyLocal(dataclasses.replace(image, states=freeze({("t", 0): same})))
    assert node.replicas.roles[("t", 0)][0] == "follower"
    # Elected by the controller: a newer epoch, written after.
    new = Z.PartitionState(2, 6, (2, 1), 1, zkVersion=9, mzxid=400)
    service._applyLocal(dataclasses.replace(image, states=freeze({("t", 0): new})))
    assert node.replicas.roles[("t", 0)] == ("leader", None, 6, (2, 1), 9)
    # Another broker leads: followed.
    other = Z.PartitionState(1, 7, (1, 2), 1, zkVersion=10, mzxid=500)
    service._applyLocal(dataclasses.replace(image, states=freeze({("t", 0): other})))
    assert node.replicas.roles[("t", 0)] == ("follower", 1, 7, None, 10)


def test_a_topic_created_again_is_led_from_its_first_epoch():
    """
    The leader epochs a restarted broker refused to lead in belong to the
    topic they were seen for: once it is deleted, a topic created again
    under its name is led in its leader epoch 0 -- whether this broker saw
    the deletion or only the new topic id.
    """
    import dataclasses
    import uuid

    from kafkatwist.cluster.image import ClusterImage, freeze

    node = Node("127.0.0.1:1/unused", 2)
    service = node.service
    service._brokerEpoch = 200
    first, second, third = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)
    old = Z.PartitionState(2, 3, (2, 1, 3), 1, zkVersion=7, mzxid=100)

    def imageOf(topicId, state):
        assignment = Z.TopicAssignment("t", topicId, {0: (2, 1, 3)})
        return ClusterImage(brokers=freeze({}), topics=freeze({"t": assignment}),
                            states=freeze({("t", 0): state}))

    service._applyLocal(imageOf(first, old))
    assert node.replicas.roles[("t", 0)] == ("follower", -1, 3, None, 7)
    # Deleted (seen), then created again: a new partition in epoch 0,
    # written after this registration.
    service._applyLocal(ClusterImage(brokers=freeze({}), topics=freeze({}), states=freeze({})))
    new = Z.PartitionState(2, 0, (2, 1, 3), 1, zkVersion=0, mzxid=600)
    service._applyLocal(imageOf(second, new))
    assert node.replicas.roles[("t", 0)] == ("leader", None, 0, (2, 1, 3), 0)
    # Refused again on a stale state, then the topic replaced while this
    # broker did not see it go: the new topic id is enough.
    service._brokerEpoch = 700
    service._applyLocal(imageOf(second, dataclasses.replace(new, leaderEpoch=3, zkVersion=3, mzxid=650)))
    assert node.replicas.roles[("t", 0)][:2] == ("follower", -1)
    service._applyLocal(imageOf(third, dataclasses.replace(new, mzxid=900)))
    assert node.replicas.roles[("t", 0)] == ("leader", None, 0, (2, 1, 3), 0)


def test_the_broker_epoch_comes_from_the_registration_itself(cluster):
    """
    The broker epoch is the czxid of the registration this broker created,
    taken from the create itself: a read after it that finds nothing (the
    session lost in between) left it 0 and the restart protection off.
    """
    node = Node(cluster.connect, 2)
    real = node.service.zk.exists

    def gone(path, *args, **kw):
        return None if path == Z.brokerPath(2) else real(path, *args, **kw)

    node.service.zk.exists = gone
    try:
        node.start()
        zk = KazooClient(cluster.connect)
        zk.start()
        try:
            assert node.service._brokerEpoch == zk.exists(Z.brokerPath(2)).czxid > 0
        finally:
            zk.stop()
            zk.close()
    finally:
        node.stop()


def test_a_registration_refused_on_a_new_session_is_one_line_and_retried(cluster):
    """
    Registering again under a new session can be refused (the id still
    held by another session): one line, and the broker tries again later,
    instead of a traceback and no retry.
    """
    from twisted.logger import globalLogPublisher

    from kafkatwist.cluster.service import ClusterStartError

    node = cluster(2)
    service = node.service
    real = service._register
    attempts = []

    def refusedOnce(wait):
        attempts.append(wait)
        if len(attempts) == 1:
            raise ClusterStartError("broker id 2 is registered by another session")
        return real(wait)

    seen = []
    globalLogPublisher.addObserver(seen.append)
    try:
        service._register = refusedOnce
        service.owner.call(lambda: setattr(service, "_sessionId", -1))  # as if the session were new
        service.owner.submit(service._catchUp)
        waitUntil(lambda: len(attempts) >= 2 and service._sessionId == service.zk.client_id[0],
                  what="registered again after the refusal")
    finally:
        globalLogPublisher.removeObserver(seen.append)
    assert not [e for e in seen if e.get("log_failure") is not None]
    assert [e for e in seen if "ClusterStartError" in str(e.get("e")) or "registered by another" in str(e.get("e"))]


def test_a_broker_leads_only_for_the_registration_the_state_names():
    """
    A state written after this broker registered, but by an election that
    named its previous registration (the state's leader broker epoch is
    not this broker's): not led; an election naming this one is.
    """
    from kafkatwist.cluster.image import ClusterImage, freeze

    node = Node("127.0.0.1:1/unused", 2)
    service = node.service
    service._brokerEpoch = 200
    assignment = Z.TopicAssignment("t", None, {0: (2, 1, 3)})

    def imageOf(state):
        return ClusterImage(brokers=freeze({}), topics=freeze({"t": assignment}), states=freeze({("t", 0): state}))

    service._applyLocal(imageOf(Z.PartitionState(2, 5, (2, 1, 3), 1, zkVersion=7, mzxid=300,
                                                 leaderBrokerEpoch=150)))
    assert node.replicas.roles[("t", 0)] == ("follower", -1, 5, None, 7)
    service._applyLocal(imageOf(Z.PartitionState(2, 6, (2, 1), 1, zkVersion=8, mzxid=400,
                                                 leaderBrokerEpoch=200)))
    assert node.replicas.roles[("t", 0)] == ("leader", None, 6, (2, 1), 8)
