"""
L{KafkaWireClient} against the in-process fake broker (L{fakebroker}):
version negotiation, framing, routing, reconnection and error mapping.
"""

import socket
import struct
import threading
import time

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.client import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    KafkaConnectionError,
    KafkaWireClient,
)
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import knownVersions, requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches

from .fakebroker import DEFAULT_RANGES, requestsFor

T0 = 1_700_000_000_000


def client(*brokers, **kwargs):
    kwargs.setdefault("timeout", 5.0)
    return KafkaWireClient([b.address for b in brokers], **kwargs)


# -- negotiation -------------------------------------------------------------


def test_negotiates_highest_common_versions(cluster, broker):
    """
    ApiVersions goes first at v3; each API then uses the highest version
    both sides know.
    """
    with client(broker, clientId="negotiator") as c:
        assert cluster.requests[0] == (1, 18, 3, "negotiator")
        assert c.connection().apiVersionsVersion == 3
        assert c.brokerApiVersions() == DEFAULT_RANGES
        assert c.apiVersion(3) == 12
        assert c.apiVersion(0) == 12
        assert c.apiVersion(1) == 17
        assert c.apiVersion(2) == 10
        c.metadata()
        assert requestsFor(cluster, 3) == [(1, 12)]


def test_versions_capped_to_ours(cluster):
    """
    A broker newer than kafkatwist's schemas: we use our newest version.
    A broker whose range is entirely unknown to us: that API is unusable
    and says so with UNSUPPORTED_VERSION.
    """
    ranges = dict(DEFAULT_RANGES)
    ranges[3] = (0, 99)
    ranges[2] = (50, 60)
    b = cluster.addBroker(apiRanges=ranges)
    cluster.createTopic("t")
    with client(b) as c:
        assert c.apiVersion(3) == knownVersions(3)[-1]
        c.metadata()
        assert requestsFor(cluster, 3) == [(1, knownVersions(3)[-1])]
        assert c.apiVersion(2) is None
        with pytest.raises(KafkaError) as info:
            c.listOffsets("t", 0)
        assert info.value.code == ErrorCode.unsupported_version


@pytest.mark.parametrize("apiVersionsMax", [0, 1, 2])
def test_api_versions_fallback(cluster, apiVersionsMax):
    """
    A broker that does not know ApiVersions v3 answers UNSUPPORTED_VERSION
    in the v0 layout with its own range; the client retries at the
    broker's highest version and negotiates from that answer.
    """
    ranges = dict(DEFAULT_RANGES)
    ranges[18] = (0, apiVersionsMax)
    b = cluster.addBroker(apiRanges=ranges)
    with client(b) as c:
        assert requestsFor(cluster, 18) == [(1, 3), (1, apiVersionsMax)]
        assert c.connection().apiVersionsVersion == apiVersionsMax
        assert c.brokerApiVersions() == ranges
        assert c.metadata().clusterId == "fake-cluster"


def test_old_metadata_version(cluster):
    """
    Metadata v0 (no cluster id, controller, or null topic list) still works.
    """
    ranges = dict(DEFAULT_RANGES)
    ranges[3] = (0, 0)
    b = cluster.addBroker(apiRanges=ranges)
    cluster.createTopic("a")
    cluster.createTopic("b", 3)
    with client(b) as c:
        meta = c.metadata()
        assert set(meta.topics) == {"a", "b"}
        assert meta.clusterId is None and meta.controllerId == -1
        assert c.metadata([]).topics == {}
        assert set(c.metadata(["b"]).topics) == {"b"}
        assert requestsFor(cluster, 3) == [(1, 0)] * 3


# -- metadata ------------------------------------------------------------------


def test_metadata(cluster):
    b1 = cluster.addBroker()
    b2 = cluster.addBroker(advertisedHost="127.0.0.1")
    cluster.createTopic("t", 3, leaders=[1, 2, 1])
    with client(b1) as c:
        meta = c.metadata()
        assert meta.clusterId == "fake-cluster"
        assert meta.controllerId == 1
        assert {n: (m.host, m.port) for n, m in meta.brokers.items()} == {
            1: ("127.0.0.1", b1.port),
            2: ("127.0.0.1", b2.port),
        }
        t = meta.topics["t"]
        assert t.partitions == {0: 1, 1: 2, 2: 1}
        assert t.error == ErrorCode.none
        assert t.topicId == cluster.topics["t"].topicId
        missing = c.metadata(["t", "nope"]).topics
        assert missing["nope"].error == ErrorCode.unknown_topic_or_partition
        assert missing["t"].error == ErrorCode.none
        assert c.metadata([]).topics == {}


# -- produce, fetch, list offsets ---------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_fetch(cluster, broker, codec):
    with client(broker) as c:
        first = [Record(timestamp=T0 + i, key=b"k%d" % i, value=b"v%d" % i) for i in range(5)]
        second = [
            Record(timestamp=T0 + 10, key=None, value=None, headers=[("h", b"x"), ("n", None)]),
            Record(timestamp=T0 + 11, key=b"x", value=b"y" * 5000),
        ]
        assert c.produce("t", 0, first, compression=codec) == 0
        assert c.produce("t", 0, second, compression=codec) == 5
        result = c.fetch("t", 0, 0)
        assert result.error == ErrorCode.none
        assert result.highWatermark == 7
        assert result.nextOffset == 7
        assert [r.offset for r in result.records] == list(range(7))
        assert [(r.key, r.value, r.headers, r.timestamp) for r in result.records] == [
            (r.key, r.value, r.headers, r.timestamp) for r in first + second
        ]
        # from the middle of the first batch: earlier records are dropped
        middle = c.fetch("t", 0, 3)
        assert [r.offset for r in middle.records] == [3, 4, 5, 6]
        # at the end: nothing, and the next offset stays put
        end = c.fetch("t", 0, 7)
        assert end.records == [] and end.nextOffset == 7
    # produce went to Produce v12, fetch to v13+ with topic ids
    assert {v for _, v in requestsFor(cluster, 0)} == {12}
    assert {v for _, v in requestsFor(cluster, 1)} == {17}


def test_fetch_by_name_on_older_brokers(cluster):
    """
    With Fetch v12 at most, topics go by name.
    """
    ranges = dict(DEFAULT_RANGES)
    ranges[1] = (4, 12)
    b = cluster.addBroker(apiRanges=ranges)
    cluster.createTopic("t")
    with client(b) as c:
        c.produce("t", 0, [Record(value=b"a")])
        assert [r.value for r in c.fetch("t", 0, 0).records] == [b"a"]
    assert requestsFor(cluster, 1) == [(1, 12)]


def test_newest_versions_use_topic_ids(cluster):
    """
    Produce v13 and Fetch v18 name topics by id only; the client takes the
    id from Metadata.
    """
    ranges = dict(DEFAULT_RANGES)
    ranges[0] = (3, 13)
    ranges[1] = (4, 18)
    b = cluster.addBroker(apiRanges=ranges)
    cluster.createTopic("t")
    with client(b) as c:
        assert c.produce("t", 0, [Record(value=b"by id")], compression="zstd") == 0
        assert [r.value for r in c.fetch("t", 0, 0).records] == [b"by id"]
    assert requestsFor(cluster, 0) == [(1, 13)]
    assert requestsFor(cluster, 1) == [(1, 18)]


def test_fetch_partial_trailing_batch(cluster, broker):
    """
    A size-limited fetch returns whole batches and a cut one; the cut one
    is skipped and the next offset points at it.
    """
    with client(broker) as c:
        for i in range(3):
            c.produce("t", 1, [Record(timestamp=T0, value=bytes([i]) * 1000)] * 4)
        batchSize = len(cluster.topics["t"].partitions[1].batches[0])
        raw = c.fetchRaw("t", 1, 0, maxBytes=batchSize + 100)
        assert len(raw.records) == batchSize + 100
        assert raw.highWatermark == 12
        assert [b.baseOffset for b in decodeBatches(raw.records)] == [0]
        result = c.fetch("t", 1, 0, maxBytes=batchSize + 100)
        assert [r.offset for r in result.records] == [0, 1, 2, 3]
        assert result.nextOffset == 4
        # a limit below one batch still yields the first batch whole
        result = c.fetch("t", 1, 4, maxBytes=10)
        assert [r.offset for r in result.records] == [4, 5, 6, 7]


def test_fetched_records_are_bytes(cluster, broker):
    """
    Responses are decoded from the buffer they were received into, not a
    copy of it; the records handed back are still C{bytes} of their own.
    """
    with client(broker) as c:
        c.produce("t", 1, [Record(timestamp=T0, value=b"v" * 1000)] * 4)
        raw = c.fetchRaw("t", 1, 0)
        assert type(raw.records) is bytes
        assert [b.baseOffset for b in decodeBatches(raw.records)] == [0]
        assert [r.value for r in c.fetch("t", 1, 0).records] == [b"v" * 1000] * 4


def test_fetch_error(cluster, broker):
    """
    Partition errors come back in the result, with the watermarks.
    """
    with client(broker) as c:
        c.produce("t", 0, [Record(value=b"a")])
        result = c.fetch("t", 0, 50)
        assert result.error == ErrorCode.offset_out_of_range
        assert result.records == [] and result.nextOffset == 50


def test_produce_prebuilt_batch_and_acks_zero(cluster, broker):
    with client(broker) as c:
        batch = buildBatch([Record(timestamp=T0, value=b"pre%d" % i) for i in range(3)], "lz4")
        assert c.produce("t", 0, batch) == 0
        assert c.produce("t", 0, [Record(value=b"fire and forget")], acks=0) == -1
        # acks=0 has no answer; the next request's answer must still match
        result = c.fetch("t", 0, 0)
        assert [r.value for r in result.records] == [b"pre0", b"pre1", b"pre2", b"fire and forget"]


def test_list_offsets(cluster, broker):
    with client(broker) as c:
        c.produce("t", 0, [Record(timestamp=T0 + t, value=b"x") for t in (5, 50, 20)])
        c.produce("t", 0, [Record(timestamp=T0 + 30, value=b"y")])
        assert c.listOffsets("t", [0, 1], EARLIEST) == {0: (0, -1), 1: (0, -1)}
        assert c.listOffsets("t", [0, 1], LATEST) == {0: (4, -1), 1: (0, -1)}
        assert c.listOffsets("t", 0, MAX_TIMESTAMP) == {0: (1, T0 + 50)}
        assert c.listOffsets("t", 0, T0 + 21) == {0: (1, T0 + 50)}
        assert c.listOffsets("t", 0, T0 + 1000) == {0: (-1, -1)}
        with pytest.raises(KafkaError) as info:
            c.listOffsets("t", [7])
        assert info.value.code == ErrorCode.unknown_topic_or_partition


# -- routing -------------------------------------------------------------------


def test_one_connection_per_node(cluster):
    """
    Requests go to each partition's leader, over one connection per node;
    the bootstrap connection is reused for its node.
    """
    b1 = cluster.addBroker()
    b2 = cluster.addBroker()
    cluster.createTopic("t", 4, leaders=[1, 2, 1, 2])
    with client(b1) as c:
        for p in range(4):
            for _ in range(3):
                c.produce("t", p, [Record(value=b"%d" % p)])
        for p in range(4):
            assert [r.value for r in c.fetch("t", p, 0).records] == [b"%d" % p] * 3
        assert c.listOffsets("t", range(4)) == {p: (3, -1) for p in range(4)}
        assert b1.accepted == 1 and b2.accepted == 1
    produced = requestsFor(cluster, 0)
    assert sorted({node for node, _ in produced}) == [1, 2]
    assert [node for node, _ in produced] == [1] * 3 + [2] * 3 + [1] * 3 + [2] * 3
    # one ListOffsets request per leader
    assert sorted(node for node, _ in requestsFor(cluster, 2)) == [1, 2]


def test_leader_moved(cluster):
    """
    After NOT_LEADER_OR_FOLLOWER the client refreshes metadata and retries
    on the new leader.
    """
    b1 = cluster.addBroker()
    cluster.addBroker()
    cluster.createTopic("t", 1, leaders=[1])
    with client(b1) as c:
        assert c.produce("t", 0, [Record(value=b"a")]) == 0
        cluster.topics["t"].partitions[0].leader = 2
        assert c.produce("t", 0, [Record(value=b"b")]) == 1
        assert [r.value for r in c.fetch("t", 0, 0).records] == [b"a", b"b"]
    assert [node for node, _ in requestsFor(cluster, 0)] == [1, 1, 2]


# -- errors --------------------------------------------------------------------


def test_produce_errors(cluster, broker):
    with client(broker) as c:
        with pytest.raises(KafkaError) as info:
            c.produce("nope", 0, [Record(value=b"a")])
        assert info.value.code == ErrorCode.unknown_topic_or_partition
        with pytest.raises(KafkaError) as info:
            c.produce("t", 9, [Record(value=b"a")])
        assert info.value.code == ErrorCode.unknown_topic_or_partition
        cluster.failNext[0] = ErrorCode.corrupt_message
        with pytest.raises(KafkaError) as info:
            c.produce("t", 0, [Record(value=b"a")])
        assert info.value.code == ErrorCode.corrupt_message
        assert "corrupt_message" in str(info.value)
        # nothing was appended; the client is still usable
        assert c.produce("t", 0, [Record(value=b"b")]) == 0


def test_create_and_delete_topics(cluster, broker):
    with client(broker) as c:
        ids = c.createTopics({"new": (3, {"cleanup.policy": "compact"}), "other": 1})
        assert ids == {
            "new": cluster.topics["new"].topicId,
            "other": cluster.topics["other"].topicId,
        }
        assert c.metadata(["new"]).topics["new"].partitions == {0: 1, 1: 1, 2: 1}
        with pytest.raises(KafkaError) as info:
            c.createTopics({"new": (1, None)})
        assert info.value.code == ErrorCode.topic_already_exists
        c.createTopics({"new": (1, None)}, ignoreExisting=True)
        with pytest.raises(KafkaError) as info:
            c.createTopics({"bad": (0, None)})
        assert info.value.code == ErrorCode.invalid_partitions
        c.deleteTopics(["new", "other"])
        assert "new" not in cluster.topics
        with pytest.raises(KafkaError) as info:
            c.deleteTopics(["new"])
        assert info.value.code == ErrorCode.unknown_topic_or_partition
        c.deleteTopics(["new"], ignoreMissing=True)
        # the client forgets deleted topics: producing now fails cleanly
        with pytest.raises(KafkaError):
            c.produce("new", 0, [Record(value=b"a")])
    assert {v for _, v in requestsFor(cluster, 19)} == {7}
    assert {v for _, v in requestsFor(cluster, 20)} == {6}


def test_old_delete_topics_version(cluster):
    ranges = dict(DEFAULT_RANGES)
    ranges[20] = (1, 5)
    ranges[19] = (2, 3)
    b = cluster.addBroker(apiRanges=ranges)
    with client(b) as c:
        assert c.createTopics({"x": 1}) == {"x": None}
        c.deleteTopics(["x"])
    assert requestsFor(cluster, 20) == [(1, 5)]
    assert requestsFor(cluster, 19) == [(1, 3)]


# -- generic and raw requests ----------------------------------------------------


def test_send_entity(cluster, broker):
    """
    C{send} takes any request entity at its own version.
    """
    cls = requestType(3, 1)
    with client(broker) as c:
        response = c.send(3, cls(topics=None))
        assert type(response).__version__ == 1
        assert [t.name for t in response.topics] == ["t"]
        assert requestsFor(cluster, 3)[-1] == (1, 1)


def test_send_raw(cluster, broker):
    """
    C{sendRaw} writes bytes as given and returns the response frame; the
    correlation id is the caller's.
    """
    cls = requestType(3, 9)
    frame = encodeRequestFrame(3, 9, 424242, "raw-client", cls(
        topics=None,
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    ))
    with client(broker) as c:
        response = c.sendRaw(frame)
        assert type(response) is bytes
        assert struct.unpack_from(">i", response)[0] == 424242
        correlationId, body = decodeResponseFrame(3, 9, response)
        assert correlationId == 424242
        assert body.cluster_id == "fake-cluster"
        # the connection stays in step for typed requests afterwards
        assert c.metadata().clusterId == "fake-cluster"
    assert cluster.requests[-2][3] == "raw-client"


def test_null_client_id(cluster, broker):
    with client(broker, clientId=None) as c:
        c.metadata()
    assert {r[3] for r in cluster.requests} == {None}


# -- connection failures ---------------------------------------------------------


def test_reconnect_after_drop(cluster, broker):
    """
    A broker closing the connection mid-request: reads retry once on a new
    connection.
    """
    with client(broker) as c:
        c.metadata()
        cluster.closeOnNext = 3
        assert c.metadata().clusterId == "fake-cluster"
        assert broker.accepted == 2
        # a connection dropped while idle is noticed on the next request
        broker.dropConnections()
        time.sleep(0.05)
        assert c.fetch("t", 0, 0).records == []
        assert broker.accepted == 3


def test_produce_not_retried_on_connection_failure(cluster, broker):
    """
    A produce whose connection fails is not resent (it may have been
    appended); it raises, and the next call reconnects.
    """
    with client(broker) as c:
        c.metadata(["t"])
        cluster.closeOnNext = 0
        with pytest.raises(KafkaConnectionError) as info:
            c.produce("t", 0, [Record(value=b"a")])
        assert isinstance(info.value, KafkaError)
        assert isinstance(info.value, ConnectionError)
        assert info.value.code == ErrorCode.network_exception
        assert c.produce("t", 0, [Record(value=b"b")]) == 0


def _unusedPort():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_connection_refused():
    with pytest.raises(KafkaConnectionError, match="no broker reachable"):
        KafkaWireClient(f"127.0.0.1:{_unusedPort()}", timeout=2)


def test_bootstrap_falls_through(cluster, broker):
    """
    Unreachable bootstrap servers are skipped; a comma-separated string
    works as well as a list.
    """
    with KafkaWireClient(f"127.0.0.1:{_unusedPort()}, {broker.address}", timeout=2) as c:
        assert c.metadata().clusterId == "fake-cluster"


def test_timeout():
    """
    A broker that accepts but never answers: the request times out, within
    the configured time, as a connection error.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    try:
        started = time.monotonic()
        with pytest.raises(KafkaConnectionError, match="timed out"):
            KafkaWireClient(f"127.0.0.1:{listener.getsockname()[1]}", timeout=0.5)
        assert time.monotonic() - started < 3
    finally:
        listener.close()
        for conn, _ in held:
            conn.close()


def test_garbage_response():
    """
    A peer that answers with something that is not a Kafka frame (here an
    absurd size) is a connection error, not a hang or a huge allocation.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve():
        conn, _ = listener.accept()
        conn.recv(1024)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        time.sleep(1)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        with pytest.raises(KafkaConnectionError, match="frame of size"):
            KafkaWireClient(f"127.0.0.1:{listener.getsockname()[1]}", timeout=2)
    finally:
        listener.close()


def test_closed_client(cluster, broker):
    c = client(broker)
    c.close()
    with pytest.raises(KafkaConnectionError):
        c.metadata()


def test_one_client_per_thread(cluster):
    """
    The documented threading model: a client per thread, all at once.
    """
    b = cluster.addBroker()
    cluster.createTopic("t", 4)
    errors = []

    def work(partition):
        try:
            with client(b) as c:
                for i in range(20):
                    c.produce("t", partition, [Record(value=b"%d" % i)] * 2, compression="lz4")
                got = c.fetch("t", partition, 0).records
                assert [r.value for r in got] == [b"%d" % (i // 2) for i in range(40)]
        except Exception as e:  # reported below, with the thread's traceback lost
            errors.append(e)

    threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
