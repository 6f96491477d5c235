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

from kafkatwist.testing import waitUntil
from tests.console.helpers import get

pytestmark = pytest.mark.integration


def getError(broker, path):
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(broker.http + path, timeout=20)
    return raised.value.code, json.loads(raised.value.read())


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

        data = waitUntil(stable, what="group live Stable")
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
    """
    Rates and each group's lag are sampled every 5 s, in memory.
    """
    data = waitUntil(lambda: (lambda d: d if d["series"] else None)(get(populated, "/api/history")),
                   what="two samples")
    assert data["interval"] == 5.0
    last = data["series"][-1]
    for key in ("requestsPerSec", "bytesInPerSec", "bytesOutPerSec"):
        assert last[key] >= 0
    assert "produceP99Ms" in last and "fetchP99Ms" in last
    lag = get(populated, "/api/history?group=slow")["lag"]
    assert lag and lag[-1][1] == 20
    assert get(populated, "/api/history?group=nope")["lag"] == []


def messages(broker, topic, **query):
    return get(broker, f"/api/topics/{topic}/messages?" + urllib.parse.urlencode(query))


def test_messages_newest_first_with_transaction_markers(populated):
    page = messages(populated, "payments", partition=0, limit=3)
    assert [r["offset"] for r in page["records"]] == [5, 4, 3]
    marker, last = page["records"][0], page["records"][1]
    assert marker["control"] == "COMMIT" and marker["key"] is None and marker["transactional"]
    assert last["transaction"] == "committed" and last["key"]["utf8"] == "p4" and last["value"]["utf8"] == "paid"
    assert page["older"] == "0:3" and page["next"] is None
    older = messages(populated, "payments", partition=0, limit=3, cursor=page["older"])
    assert [r["offset"] for r in older["records"]] == [2, 1, 0] and older["older"] is None


def test_messages_from_offset_and_paging(populated):
    page = messages(populated, "orders", partition=1, offset=25)
    assert [r["offset"] for r in page["records"]] == [25, 26, 27, 28, 29] and page["next"] is None
    first = messages(populated, "orders", partition=0, mode="oldest", limit=10)
    assert [r["offset"] for r in first["records"]] == list(range(10)) and first["next"] == "0:10"
    second = messages(populated, "orders", partition=0, mode="oldest", limit=10, cursor=first["next"])
    assert [r["offset"] for r in second["records"]] == list(range(10, 20))
    record = first["records"][0]
    assert record["key"] == {"size": 2, "truncated": False, "utf8": "k0", "json": None, "hex": "6b 30"}
    assert json.loads(record["value"]["json"]) == {"i": 0} and record["transaction"] is None
    assert record["timestampType"] == "CreateTime" and record["timestamp"] > 0


def test_messages_all_partitions_share_one_page(populated):
    page = messages(populated, "orders", mode="oldest", limit=30)
    assert len(page["records"]) == 30
    assert {r["partition"] for r in page["records"]} == {0, 1, 2}
    assert page["next"] == "0:10,1:10,2:10"
    assert len(messages(populated, "orders", mode="oldest", limit=500)["records"]) == 90  # capped at 100


def test_messages_from_timestamp(populated):
    page = messages(populated, "orders", partition=2, mode="oldest", limit=1)
    ts = page["records"][0]["timestamp"]
    assert messages(populated, "orders", partition=2, timestamp=ts)["records"][0]["offset"] == 0
    assert messages(populated, "orders", partition=2, timestamp=ts + 10**9)["records"] == []
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts / 1000 - 1))
    assert messages(populated, "orders", partition=2, timestamp=iso, limit=1)["records"][0]["offset"] == 0


def test_aborted_and_open_transactions(populated):
    from confluent_kafka import Producer

    txn = Producer({"bootstrap.servers": populated.bootstrap, "transactional.id": "console-abort"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("payments", key=b"undo", value=b"refund")
    txn.flush(30)
    txn.abort_transaction(30)
    txn.begin_transaction()
    txn.produce("payments", key=b"pending", value=b"wait")
    txn.flush(30)
    try:
        def page():
            records = messages(populated, "payments", partition=0, limit=3)["records"]
            return records if records and records[0]["key"] and records[0]["key"]["utf8"] == "pending" else None

        records = waitUntil(page, what="the open transaction's record")
        assert [(r["offset"], r["transaction"], r["control"]) for r in records] == [
            (8, "open", None), (7, None, "ABORT"), (6, "aborted", None),
        ]
    finally:
        txn.abort_transaction(30)


def test_messages_bad_queries(populated):
    assert getError(populated, "/api/topics/orders/messages?partition=x")[0] == 400
    assert getError(populated, "/api/topics/orders/messages?timestamp=yesterday")[0] == 400
    assert getError(populated, "/api/topics/orders/messages?partition=7")[0] == 404
    assert getError(populated, "/api/topics/orders/messages?mode=random")[0] == 400
    assert getError(populated, "/api/topics/nope/messages")[0] == 404


def test_kip848_group(populated):
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": populated.bootstrap, "group.id": "next-gen", "group.protocol": "consumer",
        "group.remote.assignor": "uniform", "auto.offset.reset": "earliest", "client.id": "kip848-client",
    })
    try:
        consumer.subscribe(["orders"])

        def assigned():
            consumer.poll(0.2)
            data = get(populated, "/api/groups/next-gen")
            members = data["members"]
            return data if members and members[0]["assignment"] else None

        data = waitUntil(assigned, what="a KIP-848 member with partitions")
        assert data["protocol"] == "consumer" and data["assignor"] == "uniform"
        [member] = data["members"]
        assert member["clientId"] == "kip848-client" and member["subscribed"] == ["orders"]
        assert member["assignment"] == [{"topic": "orders", "partitions": [0, 1, 2]}]
        listed = {g["groupId"]: g for g in get(populated, "/api/groups")["groups"]}
        assert listed["next-gen"]["protocol"] == "consumer" and listed["next-gen"]["members"] == 1
    finally:
        consumer.close()
