"""
The console's limits against a real broker process: request bodies, page
sizes, redirect targets.
"""

import socket
import urllib.parse

import pytest

from kafkatwist.console.messages import MAX_PAGE
from kafkatwist.console.site import MAX_BODY
from kafkatwist.console.web import _safeNext
from tests.console.helpers import get

pytestmark = pytest.mark.integration


def exchange(broker, head: bytes, body=()) -> bytes:
    """
    Send C{head} then each of C{body}'s chunks on a raw connection (stopping
    when the broker closes it); everything it answers until it closes.
    """
    port = urllib.parse.urlsplit(broker.http).port
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(head)
        try:
            for chunk in body:
                s.sendall(chunk)
        except OSError:
            pass  # closed under us: the answer is already there
        answer = b""
        try:
            while data := s.recv(65536):
                answer += data
        except ConnectionResetError:
            pass
        return answer


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(consoleBroker):
    head = (
        b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
        b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)
    )
    # no body at all: the answer comes from the headers alone
    answer = exchange(consoleBroker, head)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_a_chunked_body_growing_past_the_limit_is_refused(consoleBroker):
    head = b"POST /login HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"x" * 65536
    chunks = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * (MAX_BODY // len(chunk) + 4) + [b"0\r\n\r\n"]
    answer = exchange(consoleBroker, head, chunks)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]


def test_a_small_chunked_body_is_still_read(consoleBroker):
    body = b"username=a&password=b"
    head = b"POST /login HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = exchange(consoleBroker, head, [b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)])
    assert not answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert answer.startswith(b"HTTP/1.1 "), answer[:200]


@pytest.mark.parametrize("target", [
    "/\t/evil.com", "/\n/evil.com", "/\r/evil.com", "/ /evil.com", "/\\evil.com", "/\x00x", "/\x7fx",
    "//evil.com", "https://evil.com", "evil.com", "/caf\u00e9",
])
def test_next_refuses_what_a_browser_could_read_as_another_origin(target):
    assert _safeNext(target) == ""


def test_next_keeps_paths_on_this_listener():
    assert _safeNext("/topics/orders?mode=oldest&limit=10") == "/topics/orders?mode=oldest&limit=10"


def test_a_redirect_to_a_non_ascii_path_is_percent_encoded():
    # Twisted's HTTP/1.1 parser refuses raw non-ASCII request lines, but a
    # path decoded from the request (or an HTTP/2 one) can hold any character
    from twisted.web.test.requesthelper import DummyRequest

    from kafkatwist.console.web import _redirect, _seeOther

    request = DummyRequest([b""])
    status, _, body = _redirect(request, "/topics/caf\u00e9?q=a b")
    assert status == 303 and body == b"see /topics/caf%C3%A9?q=a%20b"
    assert request.responseHeaders.getRawHeaders(b"location") == [b"/topics/caf%C3%A9?q=a%20b"]
    # bytes that are not UTF-8 (decoded with surrogateescape) go back as they came
    raw = b"/groups/g\xff".decode("utf-8", "surrogateescape")
    request = DummyRequest([b""])
    _redirect(request, raw)
    assert request.responseHeaders.getRawHeaders(b"location") == [b"/groups/g%FF"]
    # what is already escaped stays as it is
    request = DummyRequest([b""])
    _seeOther(request, "/topics/a%2Fb")
    assert request.responseHeaders.getRawHeaders(b"location") == [b"/topics/a%2Fb"]


def test_a_page_never_holds_more_than_its_limit(consoleBroker):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    partitions = MAX_PAGE + 50
    admin = AdminClient({"bootstrap.servers": consoleBroker.bootstrap})
    for f in admin.create_topics([NewTopic("wide", partitions, 1)]).values():
        f.result(60)
    producer = Producer({"bootstrap.servers": consoleBroker.bootstrap})
    for p in range(partitions):
        producer.produce("wide", value=b"v%d" % p, partition=p)
    assert producer.flush(60) == 0

    def page(**query):
        return get(consoleBroker, "/api/topics/wide/messages?" + urllib.parse.urlencode(query))

    first = page(mode="oldest")
    assert len(first["records"]) == MAX_PAGE
    second = page(mode="oldest", cursor=first["next"])
    seen = [(r["partition"], r["offset"]) for r in first["records"] + second["records"]]
    assert sorted(seen) == [(p, 0) for p in range(partitions)] and second["next"] is None

    newest = page()
    assert len(newest["records"]) == MAX_PAGE
    older = page(cursor=newest["older"])
    seen = [(r["partition"], r["offset"]) for r in newest["records"] + older["records"]]
    assert sorted(seen) == [(p, 0) for p in range(partitions)] and older["older"] is None
    assert len(page(mode="oldest", limit=7)["records"]) == 7
