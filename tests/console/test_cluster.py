"""
The console of each broker of a 3-broker cluster (real ZooKeeper, real
processes): it shows the whole cluster, and links each broker and each
partition's leader to that broker's console (registered in ZooKeeper).
"""

import json
import os
import urllib.request

import pytest

from kafkatwist.testing import waitUntil
from tests.cluster.helpers import ClusterUnderTest
from tests.console.helpers import consolePort

# Three brokers and ZooKeeper: make test runs them, make test-fast does not.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture
def consoles(zookeeper, tmp_path):
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic

    cluster = ClusterUnderTest(zookeeper, tmp_path, "console")
    try:
        for i in (1, 2, 3):
            cluster.startBroker(i, **{"metrics.http.listener": "127.0.0.1:0"})
        urls = {i: f"http://127.0.0.1:{consolePort(b)}" for i, b in cluster.brokers.items()}
        waitUntil(lambda: all(len(get(u + "/api/brokers")["brokers"]) == 3 for u in urls.values()),
                  what="every console sees three brokers")
        admin = cluster.admin(1)
        admin.create_topics([NewTopic("spread", num_partitions=3, replication_factor=1)],
                            request_timeout=60)["spread"].result(60)

        def led():
            parts = get(urls[1] + "/api/topics/spread")["partitions"]
            return len({p["leader"] for p in parts}) == 3 and all(p["leader"] > 0 for p in parts)

        waitUntil(led, what="three leaders")
        producer = Producer({"bootstrap.servers": cluster.bootstrap()})
        for i in range(30):
            producer.produce("spread", key=b"k%d" % i, value=b"v", partition=i % 3)
        assert producer.flush(30) == 0
        yield cluster, urls
    finally:
        cluster.stop()


def test_every_console_shows_the_cluster_and_links_the_others(consoles):
    cluster, urls = consoles
    for me, url in urls.items():
        data = get(url + "/api/brokers")
        assert data["thisBroker"] == me
        assert {b["id"]: b["console"] for b in data["brokers"]} == urls
        assert sum(1 for b in data["brokers"] if b["controller"]) == 1
        assert sum(b["partitionsLed"] for b in data["brokers"]) == data["partitions"]
        topic = get(url + "/api/topics/spread")
        for p in topic["partitions"]:
            if p["leader"] == me:
                assert p["local"] and p["logEndOffset"] == 10 and p["leaderConsole"] is None
            else:
                assert not p["local"] and p["logEndOffset"] is None
                assert p["leaderConsole"] == urls[p["leader"]]
                leaderView = get(p["leaderConsole"] + "/api/topics/spread")
                [same] = [q for q in leaderView["partitions"] if q["partition"] == p["partition"]]
                assert same["local"] and same["logEndOffset"] == 10


def test_messages_of_another_leader_link_there(consoles):
    cluster, urls = consoles
    topic = get(urls[1] + "/api/topics/spread")
    remote = next(p for p in topic["partitions"] if p["leader"] != 1)
    page = get(urls[1] + f"/api/topics/spread/messages?partition={remote['partition']}")
    assert page["records"] == [] and page["notHere"] == [remote["partition"]]
    assert page["leaderConsoles"] == {str(remote["partition"]): urls[remote["leader"]]}
    there = get(urls[remote["leader"]] + f"/api/topics/spread/messages?partition={remote['partition']}")
    assert len(there["records"]) == 10


def test_cluster_pages_in_a_browser(consoles, tmp_path):
    from tests.console.browser import chromium, dumpDom, screenshot

    chromium()
    cluster, urls = consoles
    dom = dumpDom(urls[1] + "/topics/spread")
    assert dom.count('class="leader-link"') == 2
    for i in (2, 3):
        assert f'href="{urls[i]}/topics/spread"' in dom
    dom = dumpDom(urls[1] + "/")
    assert dom.count('class="console-link"') == 2
    shots = os.environ.get("CONSOLE_SCREENSHOTS") or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    screenshot(urls[1] + "/topics/spread", os.path.join(shots, "console-cluster-topic.png"))
    screenshot(urls[2] + "/", os.path.join(shots, "console-cluster-overview.png"))



def test_every_console_lists_every_group(consoles):
    from confluent_kafka import Consumer, TopicPartition

    cluster, urls = consoles
    names = [f"team-{i}" for i in range(6)]
    for name in names:
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": name})
        consumer.commit(offsets=[TopicPartition("spread", 0, 3)], asynchronous=False)
        consumer.close()
    [first] = [p for p in get(urls[1] + "/api/topics/spread")["partitions"] if p["partition"] == 0]
    coordinators = {}
    for me, url in urls.items():
        data = get(url + "/api/groups")
        listed = {g["groupId"]: g for g in data["groups"]}
        assert set(names) <= set(listed) and data["unanswered"] == []
        for name in names:
            g = listed[name]
            coordinators.setdefault(name, g["coordinator"])
            assert g["coordinator"] == coordinators[name]
            if g["coordinator"] == me:
                # spread-0 (committed 3 of 10) has one replica: its end
                # offset is known to the coordinator only if it holds it.
                assert g["lag"] == (7 if me == first["leader"] else None) and "console" not in g
            else:
                assert g["lag"] is None and g["console"] == urls[g["coordinator"]]
    assert len(set(coordinators.values())) > 1, "the groups should spread over the coordinators"
    found = get(urls[1] + "/api/groups?q=team-3")["groups"]
    assert [g["groupId"] for g in found] == ["team-3"]
