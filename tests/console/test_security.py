"""
The console under an authorizer: a login with the broker's SASL users, and
every page, API answer and action authorized as that user by the same ACLs
as the Kafka port.
"""

import base64
import json
import urllib.error
import urllib.request

import pytest

from kafkatwist.security.format import formatDirectory
from kafkatwist.testing import Broker
from tests.console.helpers import consolePort
from tests.console.formclient import FormClient, flash

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def saslConfig(broker, user):
    return {
        "bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user, "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import (
        AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic, ResourcePatternType, ResourceType,
    )

    b = Broker(
        str(tmp_path_factory.mktemp("secured")),
        {
            "metrics.http.listener": "127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "group.initial.rebalance.delay.ms": "0",
        },
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
    )
    formatDirectory(b.overrides["log.dir"], 1, None, [
        f"{m}=[name={user},password={password}]" for user, password in USERS.items()
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    ])
    b.start()
    b.http = f"http://127.0.0.1:{consolePort(b)}"
    try:
        admin = AdminClient(saslConfig(b, "admin"))
        for f in admin.create_topics([NewTopic("shared", 2, 1), NewTopic("secret", 1, 1)]).values():
            f.result(30)
        allow = lambda rt, name, op: AclBinding(  # noqa: E731
            rt, name, ResourcePatternType.LITERAL, "User:alice", "*", op, AclPermissionType.ALLOW)
        for f in admin.create_acls([
            allow(ResourceType.TOPIC, "shared", AclOperation.ALL),
            allow(ResourceType.GROUP, "alice-app", AclOperation.ALL),
            AclBinding(ResourceType.TOPIC, "<script>t</script>", ResourcePatternType.PREFIXED,
                       "User:<img src=x>", "*", AclOperation.READ, AclPermissionType.DENY),
        ]).values():
            f.result(30)
        producer = Producer(saslConfig(b, "admin"))
        for i in range(50):
            producer.produce("shared", key=b"s%d" % i, value=b"shared value", partition=i % 2)
            producer.produce("secret", key=b"x", value=b"top secret")
        assert producer.flush(30) == 0
        for group, offsets in (("alice-app", [("shared", 0, 5), ("shared", 1, 25)]), ("admin-app", [("secret", 0, 1)])):
            consumer = Consumer({**saslConfig(b, "admin"), "group.id": group})
            consumer.commit(offsets=[TopicPartition(t, p, o) for t, p, o in offsets], asynchronous=False)
            consumer.close()
        yield b
    finally:
        b.stop()


def login(broker, user, password=None):
    client = FormClient(broker.http)
    status, body, url = client.post("/login", {"username": user, "password": password or USERS[user], "next": "/topics"})
    return client, status, body, url


def apiGet(broker, path, user=None, password=None):
    request = urllib.request.Request(broker.http + path)
    if user:
        token = base64.b64encode(f"{user}:{password or USERS[user]}".encode()).decode()
        request.add_header("Authorization", "Basic " + token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_pages_ask_for_a_login(secured):
    client = FormClient(secured.http)
    status, body = client.get("/groups")
    assert status == 200 and 'id="login"' in body and 'name="next" value="/groups"' in body
    assert apiGet(secured, "/api/topics")[0] == 401
    assert apiGet(secured, "/api/topics", "alice", "wrong")[0] == 401
    # Prometheus still scrapes without one.
    with urllib.request.urlopen(secured.http + "/metrics", timeout=30) as response:
        assert b"kafka_network_requests_total" in response.read()


def test_wrong_password_and_unknown_user(secured):
    for user, password in (("alice", "nope"), ("mallory", "x")):
        client, status, body, _ = login(secured, user, password)
        assert status == 401 and "Invalid username or password" in body
        assert client.get("/topics")[1].count('id="login"') == 1


def test_alice_sees_what_her_acls_give(secured):
    client, status, body, url = login(secured, "alice")
    assert status == 200 and url.endswith("/topics"), (status, body[:300])
    assert 'href="/topics/shared"' in body and "secret" not in body
    assert "Signed in as" in body and "<b>alice</b>" in body
    assert client.get("/topics/secret")[0] == 403
    status, page = client.get("/topics/shared/messages?partition=0&limit=3")
    assert status == 200 and page.count('<tr class="rec') == 3
    assert client.get("/topics/secret/messages")[0] == 403
    status, groups = client.get("/groups")
    assert "alice-app" in groups and "admin-app" not in groups
    status, group = client.get("/groups/alice-app")
    assert status == 200 and ">20<" in group  # 20 + 0 behind
    assert client.get("/groups/admin-app")[0] == 403
    status, security = client.get("/security")
    assert "CLUSTER_AUTHORIZATION_FAILED" in security or "Not authorized" in security
    # The API answers the same, as alice.
    status, topics = apiGet(secured, "/api/topics", "alice")
    assert status == 200 and [t["name"] for t in topics["topics"]] == ["shared"]
    assert apiGet(secured, "/api/topics/secret", "alice")[0] == 403
    assert apiGet(secured, "/api/groups/admin-app", "alice")[0] == 403


def test_actions_are_authorized_as_the_user(secured):
    bob, status, _, _ = login(secured, "bob")
    assert status == 200
    status, body, _ = bob.post("/topics", {"action": "create", "name": "bobs", "partitions": "1"}, page="/topics")
    assert flash(body) == "err: Not authorized: create topic bobs (TOPIC_AUTHORIZATION_FAILED)"
    alice, _, _, _ = login(secured, "alice")
    # Reset offsets of her group: allowed (READ on the group and topic).
    status, body, _ = alice.post("/groups/alice-app", {"action": "reset", "strategy": "latest"})
    assert flash(body).startswith("ok: Offsets of alice-app reset (latest)")
    status, body, _ = alice.post("/topics/shared", {"action": "produce", "partition": "0", "value": "hi"})
    assert flash(body).startswith("ok: Produced to shared partition 0")
    # Not another's group, not a topic she may not alter.
    csrf = alice.csrf("/topics")
    status, body, _ = alice.post("/groups/admin-app", {"action": "delete", "confirm": "admin-app"}, csrf=csrf)
    assert flash(body) == "err: Not authorized: delete group admin-app (GROUP_AUTHORIZATION_FAILED)"
    status, body, _ = alice.post("/topics/secret", {"action": "config", "key": "retention.ms", "value": "1"}, csrf=csrf)
    assert flash(body).startswith("err: Not authorized: change retention.ms of secret")


def test_admin_sees_acls_and_scram_users_without_secrets(secured):
    admin, status, _, _ = login(secured, "admin")
    status, page = admin.get("/security")
    assert status == 200 and "User:alice" in page and "SCRAM-SHA-512" in page
    status, data = apiGet(secured, "/api/security", "admin")
    assert {(a["principal"], a["resourceType"], a["resourceName"], a["operation"], a["permission"]) for a in data["acls"]} == {
        ("User:alice", "TOPIC", "shared", "ALL", "ALLOW"), ("User:alice", "GROUP", "alice-app", "ALL", "ALLOW"),
        ("User:<img src=x>", "TOPIC", "<script>t</script>", "READ", "DENY"),
    }
    assert "User:&lt;img src=x&gt;" in page and "&lt;script&gt;t&lt;/script&gt;" in page
    assert "<img" not in page and "<script>t" not in page
    users = {u["user"]: u for u in data["scramUsers"]}
    assert sorted(users) == ["admin", "alice", "bob"]
    assert sorted(m["mechanism"] for m in users["bob"]["mechanisms"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    text = json.dumps(data)
    assert "salt" not in text.lower() and "key" not in text.lower()
    status, topics = apiGet(secured, "/api/topics", "admin")
    assert {"shared", "secret"} <= {t["name"] for t in topics["topics"]}


def test_a_user_without_acls_sees_and_changes_nothing(secured):
    bob, status, body, _ = login(secured, "bob")
    assert status == 200 and "No topics yet." in body
    assert "alice-app" not in bob.get("/groups")[1]
    assert bob.get("/groups/alice-app")[0] == 403
    assert bob.get("/topics/shared")[0] == 403
    assert bob.get("/topics/shared/messages")[0] == 403
    csrf = bob.csrf("/topics")
    status, body, _ = bob.post("/groups/alice-app", {"action": "reset", "strategy": "earliest"}, csrf=csrf)
    assert flash(body).startswith("err: Not authorized")
    status, body, _ = bob.post("/topics/shared", {"action": "produce", "value": "x", "partition": "0"}, csrf=csrf)
    assert flash(body).startswith("err: Not authorized")
    assert apiGet(secured, "/api/groups", "bob")[1]["groups"] == []


def test_logout(secured):
    client, _, _, _ = login(secured, "alice")
    csrf = client.csrf("/topics")
    status, body, url = client.post("/logout", {}, csrf=csrf)
    assert url.endswith("/login") and 'id="login"' in body
    assert 'id="login"' in client.get("/topics")[1]


def test_login_page_in_a_browser(secured, tmp_path):
    import os

    from tests.console.browser import chromium, dumpDom, screenshot

    chromium()
    dom = dumpDom(secured.http + "/topics")
    assert '<form method="post" action="/login"' in dom and 'type="password"' in dom
    shots = os.environ.get("CONSOLE_SCREENSHOTS") or str(tmp_path)
    os.makedirs(shots, exist_ok=True)
    screenshot(secured.http + "/login", os.path.join(shots, "console-login.png"))


def test_https_listener_and_secure_login(tmp_path, pki):
    """
    metrics.http.listener=https://...: the console (and /metrics) over TLS
    with the broker's keystore; the session cookie is Secure.
    """
    import re
    import ssl

    b = Broker(str(tmp_path / "tls"), {
        "metrics.http.listener": "https://127.0.0.1:0",
        "ssl.keystore.location": pki.serverKeystore,
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }, listeners="SASL_PLAINTEXT://127.0.0.1:0")
    formatDirectory(b.overrides["log.dir"], 1, None, ["SCRAM-SHA-256=[name=admin,password=admin-secret]"])
    b.start()
    try:
        port = int(re.search(r"web console on https://127\.0\.0\.1:(\d+)/", b.output()).group(1))
        context = ssl.create_default_context(cafile=pki.caFile)
        base = f"https://127.0.0.1:{port}"
        with urllib.request.urlopen(base + "/metrics", context=context, timeout=30) as response:
            assert b"kafka_network_requests_total" in response.read()
        import http.client

        with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):  # no plain HTTP
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        with opener.open(base + "/login", timeout=30) as response:
            cookie = response.headers["Set-Cookie"]
            page = response.read().decode()
        assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        token = base64.b64encode(b"admin:admin-secret").decode()
        request = urllib.request.Request(base + "/api/brokers", headers={"Authorization": "Basic " + token})
        with opener.open(request, timeout=30) as response:
            assert json.loads(response.read())["brokers"]
        assert 'type="password"' in page
    finally:
        b.stop()
