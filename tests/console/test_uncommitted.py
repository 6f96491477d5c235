"""
The group page lists every partition assigned to a member, also one with no
committed offset (committed and lag "-", as kafka-consumer-groups.sh
--describe shows it), for classic and KIP-848 groups; the total lag is
Kafka's tool's: the sum over partitions with a committed offset.
"""

import pytest

from tests.console.browser import chromium, dumpDom
from tests.console.helpers import get
from kafkatwist.testing import waitUntil

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def threeParts(consoleBroker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = consoleBroker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("unread", 3, 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(90):
        producer.produce("unread", value=b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0
    return b


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_assigned_partitions_without_commits(threeParts, protocol):
    from confluent_kafka import Consumer, TopicPartition

    b = threeParts
    group = f"uncommitted-{protocol}"
    config = {"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": f"client-{protocol}",
              "enable.auto.commit": False, "auto.offset.reset": "latest", "group.protocol": protocol}
    if protocol == "classic":
        config["session.timeout.ms"] = 30000
    consumer = Consumer(config)
    try:
        consumer.subscribe(["unread"])

        def assigned():
            consumer.poll(0.2)
            data = get(b, f"/api/groups/{group}")
            return data if data["state"] == "Stable" and len(data["offsets"]) == 3 else None

        waitUntil(assigned, what=f"{group}: three assigned partitions listed")
        consumer.commit(offsets=[TopicPartition("unread", 2, 10)], asynchronous=False)

        def committed():
            consumer.poll(0.2)
            data = get(b, f"/api/groups/{group}")
            rows = {o["partition"]: o for o in data["offsets"]}
            return data if len(rows) == 3 and rows[2]["committed"] == 10 else None

        data = waitUntil(committed, what=f"{group}: commit shown")
        [member] = data["members"]
        rows = {o["partition"]: o for o in data["offsets"]}
        for p in (0, 1):
            assert rows[p]["committed"] is None and rows[p]["lag"] is None
            assert rows[p]["logEndOffset"] == 30
        assert rows[2]["committed"] == 10 and rows[2]["lag"] == 20
        for o in rows.values():
            assert o["memberId"] == member["memberId"] and o["clientId"] == f"client-{protocol}"
            assert o["host"] == member["host"]
        assert data["totalLag"] == 20 and data["uncommitted"] == 2

        chromium()
        dom = dumpDom(b.http + f"/groups/{group}")
        assert dom.count('<tr class="uncommitted">') == 2
        assert "2 assigned partitions with no committed offset" in dom
        assert "committed partitions only; 2 uncommitted" in dom
    finally:
        consumer.close()
