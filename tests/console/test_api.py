"""
The console's JSON API against a real broker process, with data written by
real clients: a confluent-kafka producer, a group with lag, a transactional
producer, a live consumer.
"""

import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

pytestmark = pytest.mark.integration


def get(broker, path):
    with urllib.request.urlopen(broker.http + path, timeout=20) as response:
        assert response.headers["content-type"] == "application/json; charset=utf-8"
        return json.loads(response.read())


def getError(broker, path):
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(broker.http + path, timeout=20)
    return raised.value.code, json.loads(raised.value.read())


def waitFor(predicate, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def populated(consoleBroker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = consoleBroker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    futures = admin.create_topics([
        NewTopic("orders", 3, 1, config={"retention.ms": "3600000"}),
        NewTopic("payments", 1, 1),
    ])
    for f in futures.values():
        f.result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(90):
        producer.produce("orders", key=b"k%d" % i, value=json.dumps({"i": i}).encode(), partition=i % 3)
    assert producer.flush(30) == 0
    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "console-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(5):
        txn.produce("payments", key=b"p%d" % i, value=b"paid")
    txn.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "slow"})
    consumer.commit(offsets=[TopicPartition("orders", 0, 10), TopicPartition("orders", 1, 30)], asynchronous=False)
    consumer.close()
    return b


def test_brokers(populated):
    data = get(populated, "/api/brokers")
    assert data["clusterId"]
    [broker] = data["brokers"]
    assert broker["id"] == data["thisBroker"] == data["controllerId"]
    assert broker["controller"] and broker["thisBroker"]
    assert broker["address"] == populated.bootstrap
    assert broker["partitionsLed"] == data["partitions"] >= 4
    assert broker["diskBytes"] > 0
    assert broker["upSince"]
    assert data["underReplicatedPartitions"] == 0 and data["offlinePartitions"] == 0
    for key in ("requestsPerSec", "bytesInPerSec", "bytesOutPerSec"):
        assert data[key] >= 0


def test_topics_and_search(populated):
    data = get(populated, "/api/topics")
    byName = {t["name"]: t for t in data["topics"]}
    orders = byName["orders"]
    assert orders["partitions"] == 3 and orders["replicationFactor"] == 1
    assert orders["sizeBytes"] > 90 * 10 and orders["underReplicated"] == 0
    assert not orders["internal"]
    assert byName["__consumer_offsets"]["internal"]
    found = get(populated, "/api/topics?q=PAY")
    assert [t["name"] for t in found["topics"]] == ["payments"]


def test_topic(populated):
    data = get(populated, "/api/topics/orders")
    assert [p["partition"] for p in data["partitions"]] == [0, 1, 2]
    for p in data["partitions"]:
        assert p["leader"] == get(populated, "/api/brokers")["thisBroker"]
        assert p["isr"] == p["replicas"] and p["logStartOffset"] == 0 and p["logEndOffset"] == 30
        assert p["sizeBytes"] > 0
    configs = {c["name"]: c for c in data["configs"]}
    assert configs["retention.ms"]["value"] == "3600000" and configs["retention.ms"]["dynamic"]
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert not configs["segment.bytes"]["dynamic"] and configs["segment.bytes"]["source"] == "DEFAULT_CONFIG"


def test_transactional_topic(populated):
    data = get(populated, "/api/topics/payments")
    [p] = data["partitions"]
    # Five records and the commit marker.
    assert p["logEndOffset"] == 6


def test_group_with_lag(populated):
    groups = {g["groupId"]: g for g in get(populated, "/api/groups")["groups"]}
    slow = groups["slow"]
    assert slow["state"] == "Empty" and slow["protocol"] == "classic"
    assert slow["lag"] == 20 + 0 and slow["members"] == 0 and slow["topics"] == 1
    group = get(populated, "/api/groups/slow")
    assert group["totalLag"] == 20
    assert group["offsets"] == [
        {"topic": "orders", "partition": 0, "committed": 10, "logEndOffset": 30, "lag": 20},
        {"topic": "orders", "partition": 1, "committed": 30, "logEndOffset": 30, "lag": 0},
    ]
    assert group["lagHistory"][-1][1] == 20


def test_live_group_members_and_assignment(populated):
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": populated.bootstrap, "group.id": "live", "auto.offset.reset": "earliest",
        "client.id": "console-test-client",
    })
    try:
        consumer.subscribe(["orders"])

        def stable():
            consumer.poll(0.2)
            data = get(populated, "/api/groups/live")
            return data if data["state"] == "Stable" and data["members"] else None

        data = waitFor(stable, what="group live Stable")
        [member] = data["members"]
        assert member["clientId"] == "console-test-client"
        assert member["assignment"] == [{"topic": "orders", "partitions": [0, 1, 2]}]
        assert data["protocolType"] == "consumer" and data["protocol"] == "classic"
        listed = {g["groupId"]: g for g in get(populated, "/api/groups?q=liv")["groups"]}
        assert list(listed) == ["live"] and listed["live"]["members"] == 1
    finally:
        consumer.close()


def test_not_found(populated):
    assert getError(populated, "/api/topics/nope")[0] == 404
    assert getError(populated, "/api/groups/nope")[0] == 404
    assert getError(populated, "/api/nothing")[0] == 404


def test_history(populated):
    data = get(populated, "/api/history")
    assert data["interval"] > 0 and isinstance(data["series"], list)
