"""
Three real broker processes on loopback with a real ZooKeeper: what
clients see of the cluster, topics created and deleted across brokers, and
fail-over when a broker (the controller among them) is killed with kill -9.
"""

from __future__ import annotations

import os
import time

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import controllerId, partitions

pytest.importorskip("kafka")
from confluent_kafka.admin import NewTopic  # noqa: E402
from kafka import KafkaAdminClient  # noqa: E402


def test_metadata_seen_by_clients(runningCluster):
    cluster = runningCluster
    admin = cluster.admin(2)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3, what="three brokers")
    md = admin.list_topics(timeout=10)
    assert {b.id: b.port for b in md.brokers.values()} == {i: b.port for i, b in cluster.brokers.items()}
    controller = md.controller_id
    assert controller in (1, 2, 3)
    described = admin.describe_cluster().result(timeout=10)
    assert described.controller.id == controller
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(3))
    try:
        info = client.describe_cluster()
        assert info["controller_id"] == controller
        assert sorted(b["broker_id"] for b in info["brokers"]) == [1, 2, 3]
    finally:
        client.close()


def test_topics_across_brokers(runningCluster):
    cluster = runningCluster
    admin = cluster.admin(1)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    futures = admin.create_topics([
        NewTopic("replicated", num_partitions=3, replication_factor=3),
        NewTopic("toomany", num_partitions=1, replication_factor=4),
    ], request_timeout=60)
    futures["replicated"].result()
    # kafka-python sends a manual assignment (-1 partitions and replication factor).
    from kafka.admin import NewTopic as PlainNewTopic

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(2))
    try:
        client.create_topics([PlainNewTopic("placed", -1, -1, replica_assignments={0: [2, 3], 1: [3, 1]})])
    finally:
        client.close()
    with pytest.raises(Exception) as error:
        futures["toomany"].result()
    assert "INVALID_REPLICATION_FACTOR" in str(error.value)
    # Every broker answers the same: leaders spread, every replica in the ISR.
    seen = [partitions(cluster.admin(i), "replicated") for i in (1, 2, 3)]
    assert seen[0] == seen[1] == seen[2]
    assert sorted(leader for leader, _, _ in seen[0].values()) == [1, 2, 3]
    assert all(sorted(replicas) == [1, 2, 3] == sorted(isr) for _, replicas, isr in seen[0].values())
    assert partitions(admin, "placed") == {0: (2, (2, 3), (2, 3)), 1: (3, (3, 1), (3, 1))}
    # Each replica has its log on its broker.
    for i, broker in cluster.brokers.items():
        dirs = set(os.listdir(os.path.join(broker.directory, "data")))
        assert {"replicated-0", "replicated-1", "replicated-2"} <= dirs
    # Deleted across the cluster: from the metadata, and each broker's disk.
    admin.delete_topics(["replicated"], request_timeout=60)["replicated"].result()
    for i in (1, 2, 3):
        waitUntil(lambda: partitions(cluster.admin(i), "replicated") is None, what=f"gone from {i}")
    for broker in cluster.brokers.values():
        waitUntil(lambda: not any(d.startswith("replicated-")
                                  for d in os.listdir(os.path.join(broker.directory, "data"))),
                  what="replica logs deleted")


def test_controller_and_leader_failover_on_kill_9(cluster):
    for i in (1, 2, 3):
        cluster.startBroker(i)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    admin.create_topics([NewTopic("f", num_partitions=6, replication_factor=3)],
                        request_timeout=60)["f"].result()
    controller = controllerId(admin)
    before = partitions(admin, "f")
    cluster.brokers[controller].kill()
    survivors = [i for i in (1, 2, 3) if i != controller]
    other = cluster.admin(*survivors)

    def failedOver():
        md = other.list_topics(timeout=10)
        if controller in md.brokers or md.controller_id not in survivors:
            return False
        now = partitions(other, "f")
        return all(leader in survivors and controller not in isr for leader, _, isr in now.values())

    started = time.monotonic()
    waitUntil(failedOver, timeout=90, what="a new controller and leaders")
    assert time.monotonic() - started < 20
    after = partitions(other, "f")
    for p, (leader, replicas, isr) in after.items():
        if before[p][0] == controller:
            # The first live replica of the ISR, in assignment order.
            assert leader == [r for r in replicas if r != controller][0]
    # The killed broker comes back (once ZooKeeper dropped its old session)
    # and is back in every ISR as far as the control plane goes: it is a
    # replica again, registered.
    cluster.startBroker(controller)
    waitUntil(lambda: controller in other.list_topics(timeout=10).brokers, what="rejoined")


def test_group_coordinator_moves_with_its_partition(cluster):
    from confluent_kafka import Consumer, Producer

    for i in (1, 2, 3):
        cluster.startBroker(i)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    admin.create_topics([NewTopic("events", num_partitions=1, replication_factor=3)],
                        request_timeout=60)["events"].result()
    leader = partitions(admin, "events")[0][0]
    producer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap})
    for i in range(10):
        producer.produce("events", value=b"%d" % i)
    assert producer.flush(60) == 0

    def consume(bootstrap, count):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "movers",
                             "auto.offset.reset": "earliest", "session.timeout.ms": 6000})
        consumer.subscribe(["events"])
        got = []
        deadline = time.monotonic() + 90
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        return got

    assert len(consume(cluster.bootstrap(), 10)) == 10
    # __consumer_offsets was created on first use, replicated three times.
    internal = partitions(admin, "__consumer_offsets")
    assert len(internal) == 3 and all(len(r) == 3 for _, r, _ in internal.values())
    listed = admin.list_consumer_groups().result(timeout=60)
    assert "movers" in {g.group_id for g in listed.valid}
    # The broker leading the group's partition goes: another leads it, and
    # its coordinator serves the group.
    from kafkatwist.coordinator.formats import partitionFor

    owner = internal[partitionFor("movers", 3)][0]
    cluster.brokers[owner].kill()
    survivors = [i for i in (1, 2, 3) if i != owner]
    other = cluster.admin(*survivors)
    waitUntil(lambda: partitions(other, "__consumer_offsets")[partitionFor("movers", 3)][0] in survivors,
              timeout=90, what="a new leader of the group's partition")
    if leader == owner:
        waitUntil(lambda: partitions(other, "events")[0][0] in survivors, timeout=90)
    # (Records written before may be gone with their broker until the
    # replicas are replicated: new ones are consumed.)
    producer = Producer({"bootstrap.servers": cluster.bootstrap(*survivors)})
    for i in range(5):
        producer.produce("events", value=b"after %d" % i)
    assert producer.flush(60) == 0
    assert consume(cluster.bootstrap(*survivors), 1)
    for i in survivors:
        log = cluster.brokers[i].output()
        if f"__consumer_offsets-{partitionFor('movers', 3)} loaded here" in log:
            break
    else:
        raise AssertionError("no surviving broker loaded the group's partition")


def test_paused_controller_is_deposed_and_rejoins(cluster):
    import signal

    for i in (1, 2, 3):
        cluster.startBroker(i)
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    admin.create_topics([NewTopic("p", num_partitions=3, replication_factor=3)],
                        request_timeout=60)["p"].result()
    controller = controllerId(admin)
    paused = cluster.brokers[controller]
    survivors = [i for i in (1, 2, 3) if i != controller]
    other = cluster.admin(*survivors)
    paused.process.send_signal(signal.SIGSTOP)
    try:
        waitUntil(lambda: other.list_topics(timeout=10).controller_id in survivors, timeout=60,
                  what="a new controller while the old one is paused")
        waitUntil(lambda: all(l in survivors for l, _, _ in partitions(other, "p").values()),
                  timeout=60, what="leaders off the paused broker")
    finally:
        paused.process.send_signal(signal.SIGCONT)
    # Woken, it finds its session gone: it registers again and follows the
    # new controller instead of acting as one.
    waitUntil(lambda: controller in other.list_topics(timeout=10).brokers, timeout=60, what="re-registered")
    # Registered, it reads the cluster next: until then it knows no
    # controller (-1), never itself.
    woken = cluster.admin(controller)
    waitUntil(lambda: woken.list_topics(timeout=10).controller_id != -1, timeout=60, what="a controller known")
    md = woken.list_topics(timeout=10)
    assert md.controller_id in survivors
    assert "New ZooKeeper session" in paused.output()


def test_elect_leaders_gives_preferred_replicas_their_partitions_back(cluster):
    from confluent_kafka import ElectionType, TopicPartition

    for i in (1, 2, 3):
        cluster.startBroker(i, **{"auto.leader.rebalance.enable": "false"})
    admin = cluster.admin(1, 2, 3)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    admin.create_topics([NewTopic("e", num_partitions=3, replication_factor=3)],
                        request_timeout=60)["e"].result()
    before = partitions(admin, "e")
    # A clean stop of a preferred leader: its partitions move away ...
    victim = before[0][1][0]
    cluster.brokers[victim].stop()
    others = [i for i in (1, 2, 3) if i != victim]
    other = cluster.admin(*others)
    waitUntil(lambda: all(l != victim for l, _, _ in partitions(other, "e").values()))
    cluster.startBroker(victim)
    waitUntil(lambda: victim in other.list_topics(timeout=10).brokers)
    # ... and stay away (no automatic rebalance here), until ElectLeaders.
    # (Without replication the returning broker is not back in the ISR by
    # itself: put it back as its leader would.)
    import json

    from kazoo.client import KazooClient
    from kazoo.exceptions import BadVersionError

    zk = KazooClient(cluster.connect)
    zk.start()
    try:
        for p in range(3):
            path = f"/brokers/topics/e/partitions/{p}/state"
            data, stat = zk.get(path)
            state = json.loads(data)
            if victim not in state["isr"]:
                state["isr"].append(victim)
                try:
                    zk.set(path, json.dumps(state).encode(), version=stat.version)
                except BadVersionError:
                    pass  # its leader did (replication)
    finally:
        zk.stop()
        zk.close()
    waitUntil(lambda: all(victim in isr for _, _, isr in partitions(admin, "e").values()))
    assert partitions(admin, "e")[0][0] != victim
    result = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("e", p) for p in range(3)]).result(timeout=60)
    assert all(error is None or "ELECTION_NOT_NEEDED" in str(error) for error in result.values())
    waitUntil(lambda: all(leader == replicas[0] for leader, replicas, _ in partitions(admin, "e").values()),
              what="preferred leaders back")


def test_topic_configs_reach_every_replica(runningCluster):
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    cluster = runningCluster
    admin = cluster.admin(1)
    waitUntil(lambda: len(admin.list_topics(timeout=10).brokers) == 3)
    admin.create_topics([NewTopic("cfg", num_partitions=1, replication_factor=2,
                                  config={"retention.ms": "100000"})], request_timeout=60)["cfg"].result()
    resource = ConfigResource(ResourceType.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("retention.ms", "200000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET),
    ])
    admin.incremental_alter_configs([resource])[resource].result(timeout=60)

    def described(i):
        r = ConfigResource(ResourceType.TOPIC, "cfg")
        client = cluster.admin(i)
        return client.describe_configs([r])[r].result(timeout=60)

    # Every broker describes the cluster's configs, replica or not.
    for i in (1, 2, 3):
        configs = described(i)
        assert configs["retention.ms"].value == "200000"
        assert configs["segment.bytes"].value == "1048576"
    # The replicas' logs use them.
    for i in partitions(admin, "cfg")[0][1]:
        path = os.path.join(cluster.brokers[i].directory, "data", "cfg-0", "topic-metadata.json")

        def applied():
            with open(path) as f:
                return "200000" in f.read()

        waitUntil(applied, what=f"broker {i} applied the configs")
