"""
Stopping the cluster layer: never on the reactor thread (it waits for the
owner thread and ZooKeeper up to the shutdown deadline), and no local log
touched by the cluster owner once L{ClusterService.stop} returned -- the
logs close next -- even by an owner thread that outlived it.
"""

from __future__ import annotations

import threading

from kafkatwist import service as brokerservice
from kafkatwist.cluster import zkdata as Z
from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.cluster.service import ClusterService
from kafkatwist.config import BrokerConfig


class Pool:
    """A reactor thread pool that keeps what it is handed."""

    def __init__(self):
        self.handed = []

    def callInThreadWithCallback(self, onResult, f, *args, **kwargs):
        self.handed.append((onResult, f, args, kwargs))

    def runInThread(self):
        def run():
            for onResult, f, args, kwargs in self.handed:
                onResult(True, f(*args, **kwargs))

        worker = threading.Thread(target=run)
        worker.start()
        worker.join(10)


class Reactor:
    def __init__(self):
        self.pool = Pool()

    def getThreadPool(self):
        return self.pool

    def callFromThread(self, f, *args, **kwargs):
        f(*args, **kwargs)


def test_stopping_the_broker_stops_the_cluster_off_the_reactor_thread(monkeypatch):
    threadsSeen = []
    monkeypatch.setattr(brokerservice, "stopCluster",
                        lambda cluster, deadline: threadsSeen.append(threading.current_thread()))
    reactor = Reactor()
    broker = brokerservice.BrokerService(
        BrokerConfig({"node.id": "1", "controlled.shutdown.enable": "false"}), reactor)
    broker.cluster = object()
    broker.running = True
    done = []
    broker.stopService().addBoth(done.append)
    assert threadsSeen == [], "the cluster was stopped on the reactor's thread"
    reactor.pool.runInThread()
    assert len(threadsSeen) == 1 and threadsSeen[0] is not threading.current_thread()
    assert done == [None]


class Logs:
    """A log manager that records every call, and can hold one."""

    def __init__(self):
        self.calls = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def topics(self):
        self.calls.append("topics")
        self.entered.set()
        assert self.release.wait(10)
        return {}

    def createTopic(self, name, count, configs, topicId=None):
        self.calls.append(("createTopic", name))


class Replicas:
    def __init__(self):
        self.calls = []

    def becomeLeader(self, *args):
        self.calls.append(("becomeLeader",) + args[:2])

    def becomeFollower(self, *args):
        self.calls.append(("becomeFollower",) + args[:2])

    def stopReplica(self, *args):
        self.calls.append(("stopReplica",) + args[:2])


class Kazoo:
    def __init__(self, **kwargs):
        pass


def _cluster():
    config = BrokerConfig({"node.id": "1", "zookeeper.connect": "127.0.0.1:1"})
    logs, replicas = Logs(), Replicas()
    cluster = ClusterService(config, [], replicas, logs, kazooFactory=Kazoo)
    import uuid

    topicId = uuid.uuid4()
    image = ClusterImage(
        brokers=freeze({1: None}),
        topics=freeze({"t": Z.TopicAssignment("t", topicId, {0: (1,)})}),
        states=freeze({("t", 0): Z.PartitionState(1, 1, (1,), 1, 0, 0)}),
    )
    return cluster, logs, replicas, image


def test_the_owner_touches_no_log_once_the_cluster_stopped():
    cluster, logs, replicas, image = _cluster()
    cluster.stop()
    # The owner thread, blocked on ZooKeeper through the stop, goes on.
    cluster._applyLocal(image)
    cluster._deleteLocal("t")
    assert logs.calls == [] and replicas.calls == []


def test_stop_waits_for_local_work_under_way():
    cluster, logs, replicas, image = _cluster()
    logs.release.clear()
    owner = threading.Thread(target=cluster._applyLocal, args=(image,))
    owner.start()
    assert logs.entered.wait(10)
    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (cluster.stop(), stopped.set()))
    stopper.start()
    assert not stopped.wait(0.3), "stop returned while the owner was creating a log"
    logs.release.set()
    owner.join(10)
    assert stopped.wait(10)
    stopper.join(10)
    calls = len(logs.calls)
    cluster._applyLocal(image)
    assert len(logs.calls) == calls
