"""
The console's actions (POST forms with a CSRF token) against a real broker:
each goes through the same handler as the client request it stands for.
"""

import json
import urllib.parse
import urllib.request

import pytest

from kafkatwist.testing import waitUntil
from tests.console.formclient import FormClient, flash
from tests.console.helpers import get

pytestmark = pytest.mark.integration


@pytest.fixture
def client(consoleBroker):
    return FormClient(consoleBroker.http)


def test_create_topic_change_config_add_partitions_delete(consoleBroker, client):
    status, body, url = client.post("/topics", {
        "action": "create", "name": "made-here", "partitions": "2", "replicationFactor": "1",
        "configs": "retention.ms=7200000\ncleanup.policy=compact",
    })
    assert status == 200 and url.endswith("/topics/made-here"), (status, body[:300])
    assert flash(body) == "ok: Topic made-here created with 2 partitions."
    topic = get(consoleBroker, "/api/topics/made-here")
    configs = {c["name"]: c for c in topic["configs"]}
    assert configs["retention.ms"]["value"] == "7200000" and configs["retention.ms"]["dynamic"]
    assert len(topic["partitions"]) == 2

    status, body, _ = client.post("/topics/made-here", {"action": "config", "key": "retention.ms", "value": "60000"})
    assert flash(body) == "ok: retention.ms of made-here set to 60000."
    status, body, _ = client.post("/topics/made-here", {"action": "config", "key": "cleanup.policy", "reset": "1"})
    assert flash(body) == "ok: cleanup.policy of made-here is back to its default."
    configs = {c["name"]: c for c in get(consoleBroker, "/api/topics/made-here")["configs"]}
    assert configs["retention.ms"]["value"] == "60000"
    assert not configs["cleanup.policy"]["dynamic"] and configs["cleanup.policy"]["value"] == "delete"
    status, body, _ = client.post("/topics/made-here", {"action": "config", "key": "retention.ms", "value": "soon"})
    assert flash(body).startswith("err: change retention.ms of made-here: INVALID_CONFIG")

    status, body, _ = client.post("/topics/made-here", {"action": "partitions", "count": "5"})
    assert flash(body) == "ok: Topic made-here now has 5 partitions."
    assert len(get(consoleBroker, "/api/topics/made-here")["partitions"]) == 5
    status, body, _ = client.post("/topics/made-here", {"action": "partitions", "count": "3"})
    assert flash(body).startswith("err: add partitions to made-here: INVALID_PARTITIONS")

    status, body, _ = client.post("/topics/made-here", {"action": "delete", "confirm": "made-her"})
    assert flash(body) == "err: Not done: type 'made-here' to confirm"
    status, body, url = client.post("/topics/made-here", {"action": "delete", "confirm": "made-here"})
    assert url.endswith("/topics") and flash(body) == "ok: Topic made-here deleted."
    waitUntil(lambda: "made-here" not in [t["name"] for t in get(consoleBroker, "/api/topics")["topics"]],
            what="the topic gone")

    status, body, _ = client.post("/topics", {"action": "create", "name": "bad name!", "partitions": "1"})
    assert flash(body).startswith("err: create topic bad name!: INVALID_TOPIC_EXCEPTION")


def test_produce_a_message(consoleBroker, client):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": consoleBroker.bootstrap})
    admin.create_topics([NewTopic("typed", 2, 1)])["typed"].result(30)
    status, body, _ = client.post("/topics/typed", {
        "action": "produce", "partition": "1", "key": "<script>k</script>", "value": '{"a": 1}',
        "headers": "source=console\n<b>=<i>",
    })
    assert flash(body) == "ok: Produced to typed partition 1 at offset 0."
    [record] = get(consoleBroker, "/api/topics/typed/messages?partition=1")["records"]
    assert record["key"]["utf8"] == "<script>k</script>" and json.loads(record["value"]["json"]) == {"a": 1}
    assert [(h["key"], h["value"]["utf8"]) for h in record["headers"]] == [("source", "console"), ("<b>", "<i>")]
    status, body, _ = client.post("/topics/typed", {"action": "produce", "partition": "", "value": "any"})
    assert flash(body).startswith("ok: Produced to typed partition ")


def test_csrf_is_required(consoleBroker, client):
    csrf = client.csrf("/topics")
    status, body, _ = client.post("/topics", {"action": "create", "name": "forged"}, csrf="wrong")
    assert status == 403
    status, body, _ = client.post("/topics", {"action": "create", "name": "forged"}, csrf=csrf,
                                  origin="http://evil.example")
    assert status == 403
    other = FormClient(consoleBroker.http)  # another browser: another session
    status, body, _ = other.post("/topics", {"action": "create", "name": "forged"}, csrf=csrf)
    assert status == 403
    request = urllib.request.Request(consoleBroker.http + "/topics", data=b"action=create&name=forged", method="POST")
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=20)
    assert raised.value.code == 403
    assert "forged" not in [t["name"] for t in get(consoleBroker, "/api/topics")["topics"]]


def test_reset_offsets_and_delete_group(consoleBroker, client):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = consoleBroker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("ledger", 2, 1)])["ledger"].result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(40):
        producer.produce("ledger", value=b"%d" % i, partition=i % 2, timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "resettable"})
    consumer.commit(offsets=[TopicPartition("ledger", 0, 5), TopicPartition("ledger", 1, 7)], asynchronous=False)
    consumer.close()

    def committed():
        return {(o["topic"], o["partition"]): o["committed"] for o in get(b, "/api/groups/resettable")["offsets"]}

    page = "/groups/resettable"
    assert flash(client.post(page, {"action": "reset", "strategy": "latest"})[1]).startswith("ok: Offsets of resettable reset (latest)")
    assert committed() == {("ledger", 0): 20, ("ledger", 1): 20}
    assert flash(client.post(page, {"action": "reset", "strategy": "earliest", "topic": "ledger", "partition": "1"})[1]).startswith("ok:")
    assert committed() == {("ledger", 0): 20, ("ledger", 1): 0}
    # Record i has timestamp base + i s; partition 0 holds the even ones.
    client.post(page, {"action": "reset", "strategy": "timestamp", "value": str(1_700_000_000_000 + 10_000)})
    assert committed() == {("ledger", 0): 5, ("ledger", 1): 5}
    client.post(page, {"action": "reset", "strategy": "timestamp", "value": "2023-11-14T22:13:30"})
    assert committed() == {("ledger", 0): 5, ("ledger", 1): 5}
    client.post(page, {"action": "reset", "strategy": "exact", "value": "12", "topic": "ledger", "partition": "0"})
    client.post(page, {"action": "reset", "strategy": "exact", "value": "999", "topic": "ledger", "partition": "1"})
    assert committed() == {("ledger", 0): 12, ("ledger", 1): 20}
    assert get(b, "/api/groups/resettable")["totalLag"] == 8

    live = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "resettable", "auto.offset.reset": "earliest"})
    try:
        live.subscribe(["ledger"])

        def stable():
            live.poll(0.2)
            return get(b, "/api/groups/resettable")["state"] == "Stable"

        waitUntil(stable, what="the group Stable")
        # The page offers no form then; a form posted from before is refused.
        assert "stop its consumers" in client.get(page)[1] and 'id="reset-offsets"' not in client.get(page)[1]
        csrf = client.csrf("/topics")
        status, body, _ = client.post(page, {"action": "reset", "strategy": "earliest"}, csrf=csrf)
        assert flash(body).startswith("err: Group resettable has active members (Stable)")
        assert flash(client.post(page, {"action": "delete", "confirm": "resettable"}, csrf=csrf)[1]) == (
            "err: Group resettable has active members: it cannot be deleted"
        )
    finally:
        live.close()
    waitUntil(lambda: get(b, "/api/groups/resettable")["state"] == "Empty", what="the group Empty")
    status, body, url = client.post(page, {"action": "delete", "confirm": "resettable"})
    assert url.endswith("/groups") and flash(body) == "ok: Group resettable deleted."
    assert "resettable" not in [g["groupId"] for g in get(b, "/api/groups")["groups"]]
