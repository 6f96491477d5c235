"""
The console's pages in headless Chromium against a real broker: every page
loads, shows what the API says, and hostile names stay text.  Screenshots go
to C{$CONSOLE_SCREENSHOTS} (the docs' one is taken this way), else to the
test's temporary directory.
"""

import os
import urllib.parse

import pytest

from tests.console.browser import chromium, dumpDom, screenshot

pytestmark = pytest.mark.integration

HOSTILE = "<script>document.body.setAttribute('data-pwned','1')</script>"
HOSTILE_ATTR = "\"><img id=pwned src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    chromium()
    directory = os.environ.get("CONSOLE_SCREENSHOTS") or str(tmp_path_factory.mktemp("screens"))
    os.makedirs(directory, exist_ok=True)
    return directory


@pytest.fixture(scope="module")
def pagesBroker(consoleBroker):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    b = consoleBroker
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic("clicks", 6, 1, config={"cleanup.policy": "compact"}),
                                  NewTopic("orders", 3, 1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(600):
        producer.produce("clicks", key=b"user-%d" % (i % 40), value=b'{"page": "/home"}', partition=i % 6)
        if i < 300:
            producer.produce("orders", key=HOSTILE.encode(), value=HOSTILE_ATTR.encode(), partition=i % 3,
                             headers=[(HOSTILE, HOSTILE_ATTR.encode()), ("trace", b"t-%d" % i)])
    assert producer.flush(30) == 0
    for group, offsets in (("billing", [("orders", 0, 20), ("orders", 1, 95), ("orders", 2, 100)]),
                           (HOSTILE, [("orders", 0, 1)]), (HOSTILE_ATTR, [("clicks", 2, 3)])):
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
        consumer.close()
    return b


def assertSafe(dom):
    assert "data-pwned" not in dom.split("<body", 1)[1].split(">", 1)[0]
    assert 'id="pwned"' not in dom and "<img" not in dom
    assert dom.count("<script") == 1, "only the console's own script"


def page(broker, path, shots, name):
    dom = dumpDom(broker.http + path)
    assert "kafkatwist" in dom, dom[:500]
    screenshot(broker.http + path, os.path.join(shots, f"console-{name}.png"))
    assertSafe(dom)
    return dom


def test_overview(pagesBroker, shots):
    dom = page(pagesBroker, "/", shots, "overview")
    assert "Brokers" in dom and pagesBroker.bootstrap in dom and "controller" in dom
    for chart in ("chart-bytes", "chart-requests", "chart-latency"):
        assert f'id="{chart}"' in dom


def test_topics(pagesBroker, shots):
    dom = page(pagesBroker, "/topics", shots, "topics")
    assert 'href="/topics/clicks"' in dom and 'href="/topics/orders"' in dom
    dom = dumpDom(pagesBroker.http + "/topics?q=clic")
    assert 'href="/topics/clicks"' in dom and 'href="/topics/orders"' not in dom


def test_topic(pagesBroker, shots):
    dom = page(pagesBroker, "/topics/clicks", shots, "topic")
    assert '<h1 id="topic-name">clicks</h1>' in dom
    assert "cleanup.policy" in dom and "dynamic" in dom


def test_groups_with_hostile_ids(pagesBroker, shots):
    dom = page(pagesBroker, "/groups", shots, "groups")
    assert "billing" in dom
    assert "&lt;script&gt;document.body.setAttribute(" in dom
    assert "&lt;img id=pwned" in dom


def test_group_pages(pagesBroker, shots):
    dom = page(pagesBroker, "/groups/billing", shots, "group")
    assert '<h1 id="group-id">billing</h1>' in dom and ">80<" in dom  # 80 + 5 + 0 behind
    assert 'id="chart-lag"' in dom and 'data-group="billing"' in dom
    for i, group in enumerate((HOSTILE, HOSTILE_ATTR)):
        dom = page(pagesBroker, "/groups/" + urllib.parse.quote(group, safe=""), shots, f"hostile-group-{i}")
        assert "&lt;" in dom.split('<h1 id="group-id">', 1)[1].split("</h1>", 1)[0]


def test_missing_pages(pagesBroker):
    dom = dumpDom(pagesBroker.http + "/topics/" + urllib.parse.quote(HOSTILE, safe=""))
    assert "Not found" in dom
    assertSafe(dom)


def test_messages_page(pagesBroker, shots):
    dom = page(pagesBroker, "/topics/orders/messages?partition=0&limit=5", shots, "messages")
    assert dom.count('<tr class="rec') == 5
    assert "&lt;script&gt;document.body" in dom and "&lt;img id=pwned" in dom
    assert '<a class="btn" id="older"' in dom
    dom = page(pagesBroker, "/topics/clicks/messages?partition=2&mode=offset&offset=3&format=json", shots, "messages-json")
    assert '"page": "/home"' in dom.replace("&quot;", '"')
    dom = dumpDom(pagesBroker.http + "/topics/clicks/messages?partition=2&mode=oldest&format=hex&limit=1")
    assert "75 73 65 72 2d" in dom  # "user-" in hex


def test_live_overview(pagesBroker, shots):
    """
    After a few seconds of traffic the overview's charts have lines (the
    README's screenshot is this one, console-live.png).
    """
    import json
    import time
    import urllib.request

    from confluent_kafka import Consumer, Producer

    producer = Producer({"bootstrap.servers": pagesBroker.bootstrap, "linger.ms": 5})
    consumer = Consumer({"bootstrap.servers": pagesBroker.bootstrap, "group.id": "dashboard",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["clicks"])
    def samples():
        with urllib.request.urlopen(pagesBroker.http + "/api/history", timeout=20) as r:
            return json.loads(r.read())["series"]

    def lastAt():
        series = samples()
        return series[-1]["at"] if series else 0

    startedAt = time.time()
    deadline = time.monotonic() + 60
    i = 0
    while time.monotonic() < deadline:
        for _ in range(40):
            producer.produce("clicks", key=b"user-%d" % (i % 50), value=b'{"page": "/cart"}')
            i += 1
        producer.poll(0)
        consumer.poll(0.05)
        time.sleep(0.02)
        if i % 2000 == 0 and len([r for r in samples() if r["at"] > startedAt + 1]) >= 3:
            break
    producer.flush(30)
    consumer.close()
    assert lastAt() > startedAt
    dom = page(pagesBroker, "/", shots, "live")
    assert dom.count("<polyline") >= 3  # bytes in, out and requests at least


def test_hostile_client_id_of_a_live_member(pagesBroker, shots):
    import time

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": pagesBroker.bootstrap, "group.id": "watched",
                         "client.id": HOSTILE_ATTR, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["orders"])
        deadline = time.monotonic() + 30
        dom = ""
        while time.monotonic() < deadline:
            consumer.poll(0.3)
            dom = dumpDom(pagesBroker.http + "/groups/watched")
            if "Stable" in dom and "orders [0, 1, 2]" in dom:
                break
        assert "orders [0, 1, 2]" in dom
        assert "&lt;img id=pwned" in dom
        assertSafe(dom)
        screenshot(pagesBroker.http + "/groups/watched", os.path.join(shots, "console-hostile-member.png"))
    finally:
        consumer.close()
