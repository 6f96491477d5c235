"""
Client quotas: Kafka's precedence and shared usage, the sampled rate and
throttle time, the describe filter, the store's checks and durability, and
a throttled connection reading nothing until the throttle has passed.
"""

from __future__ import annotations

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    describeQuotas,
    throttledFetchResponse,
)
from kafkatwist.quota.manager import ClientQuotas
from kafkatwist.quota.rate import SampledRate
from kafkatwist.quota.store import ClientQuotaStore, checkEntity, checkQuota

P = "producer_byte_rate"
U, C = "user", "client-id"


def entity(**names):
    return checkEntity([(U if k == "user" else C, v) for k, v in names.items()])


def quotas(*settings, clock=None):
    store = ClientQuotaStore(None)
    store.alter([(e, [(P, v)]) for e, v in settings])
    return ClientQuotas(store, samples=11, windowSeconds=1, clock=clock)


@pytest.mark.parametrize(
    "present, expected",
    [
        ((("alice", "app"), ("alice", None), ("alice",), (None, "app"), (None, None), (None,)), 1),
        ((("alice", None), ("alice",), (None, "app"), (None, None), (None,)), 2),
        ((("alice",), (None, "app"), (None, None), (None,)), 3),
        (((None, "app"), (None, None), (None,)), 4),
        (((None, None), (None,)), 5),
        (((None,),), 6),
    ],
)
def test_precedence(present, expected):
    """
    The first entity in Kafka's order that sets the key applies; its value
    here is its rank.
    """
    ranks = {
        ("alice", "app"): 1, ("alice", None): 2, ("alice",): 3, (None, "app"): 4, (None, None): 5, (None,): 6,
    }
    settings = []
    for names in present:
        if len(names) == 2:
            settings.append((entity(user=names[0], client=names[1]), float(ranks[names])))
        else:
            settings.append((entity(user=names[0]), float(ranks[names])))
    found = quotas(*settings).quotaFor(P, "alice", "app")
    assert found[0] == expected


def test_client_id_levels_and_tags():
    q = quotas((entity(client="app"), 7.0), (entity(client=None), 8.0))
    assert q.quotaFor(P, "bob", "app") == (7.0, ("", "app"))
    assert q.quotaFor(P, "bob", "other") == (8.0, ("", "other"))
    q = quotas((entity(user="alice"), 3.0))
    # A user quota is shared by all of the user's clients.
    assert q.quotaFor(P, "alice", "x")[1] == q.quotaFor(P, "alice", "y")[1] == ("alice", "")
    assert q.quotaFor(P, "bob", "x") is None


def test_throttle_is_kafkas():
    now = [100_000]
    q = quotas((entity(client="app"), 1000.0), clock=lambda: now[0])
    # 10 full windows are assumed: 5000 bytes at once is 500 B/s.
    assert q.record(P, "User:ANONYMOUS", "app", 5000) == 0
    # 15000 bytes over 10 s: 1500 B/s, 50 % over: half the 10 s window.
    assert q.record(P, "User:ANONYMOUS", "app", 10000) == 5000
    assert q.record(P, "User:ANONYMOUS", "other", 10000) == 0
    # Once the samples age out, the client is within its quota again.
    now[0] += 12_000
    assert q.throttle(P, "User:ANONYMOUS", "app") == 0


def test_sampled_rate_window():
    rate = SampledRate(3, 1000)
    rate.record(300, 0)
    assert rate.windowSizeMs(0) == 2000 and rate.measure(0) == 150
    rate.record(300, 2500)
    # Oldest sample at 0: 2.5 s, at least 2 full windows.
    assert rate.windowSizeMs(2500) == 2500 and rate.measure(2500) == 240
    # Samples older than 3 windows are forgotten.
    assert rate.measure(10_000) == 0


def test_describe_filter():
    store = ClientQuotaStore(None)
    everyone = [
        entity(user="alice"), entity(user=None), entity(client="app"), entity(client=None),
        entity(user="alice", client="app"), entity(user=None, client=None),
    ]
    store.alter([(e, [(P, 1.0)]) for e in everyone])
    q = store.quotas()

    def names(components, strict=False):
        return [dict(e) for e, _ in describeQuotas(q, components, strict)]

    assert len(names([])) == 6
    assert names([], strict=True) == []
    assert names([(U, MATCH_EXACT, "alice")], strict=True) == [{U: "alice"}]
    assert sorted(map(repr, names([(U, MATCH_EXACT, "alice")]))) == sorted(
        map(repr, [{U: "alice"}, {C: "app", U: "alice"}]))
    assert names([(U, MATCH_DEFAULT, None)], strict=True) == [{U: None}]
    assert names([(C, MATCH_SPECIFIED, None)], strict=True) == [{C: "app"}]
    assert names([(U, MATCH_DEFAULT, None), (C, MATCH_DEFAULT, None)]) == [{C: None, U: None}]
    with pytest.raises(KafkaError) as e:
        describeQuotas(q, [(U, MATCH_EXACT, "a"), (U, MATCH_DEFAULT, None)], False)
    assert e.value.code == ErrorCode.invalid_request
    with pytest.raises(KafkaError):
        describeQuotas(q, [(U, MATCH_EXACT, None)], False)


@pytest.mark.parametrize(
    "components, words",
    [
        ([], "Invalid empty client quota entity"),
        ([(U, "a"), (U, "b")], "Duplicate user entity type"),
        ([("ip", "1.2.3.4"), (U, "a")], "IP entity should not be combined with User or ClientId"),
        ([("ip", "no.such.host.invalid")], "no.such.host.invalid is not a valid IP or resolvable host."),
        ([(U, "")], "Empty user not supported"),
        ([("group", "g")], "Unhandled client quota entity type: group"),
    ],
)
def test_bad_entities(components, words):
    with pytest.raises(KafkaError) as e:
        checkEntity(components)
    assert e.value.code == ErrorCode.invalid_request and words in e.value.message


def test_store_is_durable(tmp_path):
    path = str(tmp_path / "quotas.json")
    store = ClientQuotaStore(path)
    store.alter([(entity(user="alice", client=None), [(P, 1000.0), ("request_percentage", 12.5)])])
    store.alter([(entity(user="alice", client=None), [("request_percentage", None)])])
    again = ClientQuotaStore(path)
    again.load()
    assert dict(again.quotas()) == {(("client-id", None), ("user", "alice")): {P: 1000.0}}
    # Removing the last key forgets the entity.
    again.alter([(entity(user="alice", client=None), [(P, None)])])
    assert dict(again.quotas()) == {}


def test_throttled_fetch_answers():
    assert throttledFetchResponse(0, 250).chunks == [b"\0\0\0\0"]
    assert throttledFetchResponse(2, 250).chunks == [(250).to_bytes(4, "big") + b"\0\0\0\0"]
    body = b"".join(throttledFetchResponse(12, 250, 77).chunks)
    assert body[:10] == (250).to_bytes(4, "big") + b"\0\0" + (77).to_bytes(4, "big")


class _Context:
    principal = "User:ANONYMOUS"
    clientId = "reader"
    apiVersion = 12
    throttleMs = 0


class _Fetch:
    minVersion, maxVersion = 0, 17

    def __init__(self, body):
        self.body = body

    def handle(self, context, request):
        from kafkatwist.protocol.codec import EncodedResponse

        return EncodedResponse([self.body])


def test_fetch_over_its_quota_is_answered_empty():
    from types import SimpleNamespace

    from kafkatwist.plugins.client_quotas import FetchQuotaHandler

    now = [50_000]
    store = ClientQuotaStore(None)
    store.alter([(entity(client="reader"), [("consumer_byte_rate", 1000.0)])])
    q = ClientQuotas(store, samples=2, windowSeconds=1, clock=lambda: now[0])
    # throttle 0, error 0, session 9, then 3000 bytes of "data"
    body = (0).to_bytes(4, "big") + b"\0\0" + (9).to_bytes(4, "big") + b"d" * 3000
    handler = FetchQuotaHandler(SimpleNamespace(clientQuotas=q), _Fetch(body))
    assert (handler.minVersion, handler.maxVersion) == (0, 17)
    context = _Context()
    answer = handler.handle(context, None)
    assert context.throttleMs > 0
    head = b"".join(answer.chunks)
    assert head[:4] == context.throttleMs.to_bytes(4, "big")
    assert head[4:10] == b"\0\0" + (9).to_bytes(4, "big")
    assert answer.size < 100
    # The bytes were taken back: the client's usage is as before.
    assert q.throttle("consumer_byte_rate", "User:ANONYMOUS", "reader") == 0


@pytest.mark.parametrize(
    "entity, key, value, words",
    [
        ((("ip", "1.2.3.4"),), "producer_byte_rate", 5.0, "Invalid configuration key producer_byte_rate"),
        ((("user", "a"),), "connection_creation_rate", 5.0, "Invalid configuration key connection_creation_rate"),
        ((("ip", None),), "connection_creation_rate", 2.5, "must be an integer"),
        ((("ip", None),), "connection_creation_rate", 2.0**31, "too large for an INT"),
    ],
)
def test_ip_quota_keys(entity, key, value, words):
    with pytest.raises(KafkaError) as e:
        checkQuota(entity, key, value)
    assert e.value.code == ErrorCode.invalid_request and words in e.value.message


def test_ip_entities_are_normalised():
    assert checkEntity([("ip", "127.0.0.1")]) == (("ip", "127.0.0.1"),)
    assert checkEntity([("ip", None)]) == (("ip", None),)
    checkQuota((("ip", "::1"),), "connection_creation_rate", 10.0)


def test_quotas_loaded_at_start_up_are_enforced(tmp_path):
    path = str(tmp_path / "quotas.json")
    ClientQuotaStore(path).alter([(entity(user=None, client=None), [(P, 100.0)])])
    store = ClientQuotaStore(path)
    quotas = ClientQuotas(store, 2, 1, clock=lambda: 0)  # built before the load, as in the broker
    store.load()
    assert quotas.active(P)
    assert quotas.record(P, "User:alice", "c", 10_000, nowMs=0) > 0


def test_ip_quota_by_host_name_survives_a_start_up_without_a_resolver(tmp_path, monkeypatch):
    """
    A quota on a host-named ip entity, acknowledged when the name resolved,
    is kept when the broker starts while it does not (only its form is
    checked then), and a later change of another entity keeps it on disk.
    """
    import socket

    store = ClientQuotaStore.inDirectory(str(tmp_path))
    store.load()
    store.alter([(checkEntity([("ip", "localhost")]), [("connection_creation_rate", 5.0)])])

    def down(*args, **kw):
        raise socket.gaierror(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", down)
    again = ClientQuotaStore.inDirectory(str(tmp_path))
    again.load()
    assert dict(again.quotas()[(("ip", "localhost"),)]) == {"connection_creation_rate": 5.0}
    again.alter([(checkEntity([("user", "bob")]), [("producer_byte_rate", 1000.0)])])
    monkeypatch.undo()
    third = ClientQuotaStore.inDirectory(str(tmp_path))
    third.load()
    assert set(third.quotas()) == {(("ip", "localhost"),), (("user", "bob"),)}
    # A request still needs the name to resolve; a stored name only its form.
    monkeypatch.setattr(socket, "getaddrinfo", down)
    with pytest.raises(KafkaError):
        checkEntity([("ip", "localhost")])
    with pytest.raises(KafkaError):
        checkEntity([("ip", "not a host!")], resolve=False)
