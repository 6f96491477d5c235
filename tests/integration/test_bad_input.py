"""
Bad input on one connection closes that connection with a log line; a
client on another connection keeps getting answers.
"""

import os
import socket
import ssl
import struct

import pytest

from tests.rawclient import RawConnection


@pytest.fixture(scope="module")
def tlsBroker(tmp_path_factory, pki):
    from kafkatwist.testing import Broker

    b = Broker(
        str(tmp_path_factory.mktemp("badinput")),
        {
            "ssl.keystore.location": pki.serverKeystore,
            "socket.request.max.bytes": "1048576",
        },
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    )
    b.start()
    yield b
    b.stop()


@pytest.fixture
def bystander(tlsBroker):
    connection = RawConnection(tlsBroker.port)
    assert connection.apiVersions().error_code == 0
    yield connection
    # Still served after the bad client did its worst.
    assert connection.apiVersions().error_code == 0
    assert connection.request(3, 12, topics=None, allow_auto_topic_creation=False,
                              include_topic_authorized_operations=False).brokers
    connection.close()


def _closedAfter(port, payload):
    bad = RawConnection(port)
    bad.send(payload)
    return bad.isClosedByPeer()


def test_oversized_size_prefix(tlsBroker, bystander):
    assert _closedAfter(tlsBroker.port, struct.pack(">i", 1048577) + b"\x00" * 100)
    assert "invalid request size 1048577" in tlsBroker.output()


def test_negative_size(tlsBroker, bystander):
    assert _closedAfter(tlsBroker.port, struct.pack(">i", -1))
    assert "invalid request size -1" in tlsBroker.output()


def test_truncated_header(tlsBroker, bystander):
    assert _closedAfter(tlsBroker.port, struct.pack(">i", 6) + b"\x00\x12\x00\x00\x00\x01")


def test_garbage_bytes(tlsBroker, bystander):
    assert _closedAfter(tlsBroker.port, os.urandom(4096))


def test_garbage_body_with_valid_header(tlsBroker, bystander):
    body = struct.pack(">hhih", 3, 12, 9, -1) + b"\x00" + b"\xff" * 7
    assert _closedAfter(tlsBroker.port, struct.pack(">i", len(body)) + body)
    assert "malformed metadata v12 request" in tlsBroker.output()


def test_unknown_api_key(tlsBroker, bystander):
    body = struct.pack(">hhih", 9999, 0, 1, -1)
    assert _closedAfter(tlsBroker.port, struct.pack(">i", len(body)) + body)
    assert "no handler for ApiKey 9999" in tlsBroker.output()


def test_unsupported_version_closes(tlsBroker, bystander):
    body = struct.pack(">hhih", 3, 99, 1, -1) + b"\x00"
    assert _closedAfter(tlsBroker.port, struct.pack(">i", len(body)) + body)
    assert "unsupported version 99 of metadata" in tlsBroker.output()


def test_api_versions_too_new_answers_v0_layout(tlsBroker, bystander):
    connection = RawConnection(tlsBroker.port)
    body = struct.pack(">hhih", 18, 77, 42, -1) + b"\x00\x00\x00\x00"
    connection.send(struct.pack(">i", len(body)) + body)
    frame = connection.readFrame()
    correlationId, errorCode, count = struct.unpack_from(">ihi", frame)
    assert (correlationId, errorCode) == (42, 35)
    keys = {struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)}
    assert (18, 0, 3) in keys
    # The connection stays usable: the client retries lower.
    assert connection.apiVersions(3).error_code == 0
    connection.close()


def test_tls_handshake_garbage(tlsBroker, bystander):
    assert _closedAfter(tlsBroker.ports["SSL"], b"\x16\x03\x01\x00\x05" + os.urandom(2000))


def test_plaintext_client_on_ssl_port(tlsBroker, bystander):
    from tests.unit.fakes import apiVersionsFrame

    assert _closedAfter(tlsBroker.ports["SSL"], apiVersionsFrame(1))


def test_tls_client_on_plaintext_port(tlsBroker, bystander, pki):
    context = ssl.create_default_context(cafile=pki.caFile)
    sock = socket.create_connection(("127.0.0.1", tlsBroker.port), timeout=5)
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        context.wrap_socket(sock, server_hostname="localhost")


# -- lengths and nulls the schema cannot hold (issue 11) ----------------------


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def test_compact_count_of_2_to_the_35(tlsBroker, bystander):
    from tests.unit.helpers import METADATA_V12_ABORT

    # kio's native reader used to reserve 2^35 elements and abort the process.
    assert _closedAfter(tlsBroker.port, bytes.fromhex(METADATA_V12_ABORT))
    assert tlsBroker.process.poll() is None
    assert "malformed metadata v12 request: topics: 34359738366 elements cannot fit" in (
        tlsBroker.output()
    )


def test_legacy_count_of_2_to_the_31(tlsBroker, bystander):
    body = struct.pack(">hhih", 3, 1, 7, 1) + b"x" + struct.pack(">i", 2**31 - 1)
    assert _closedAfter(tlsBroker.port, _frame(body))
    assert tlsBroker.process.poll() is None


def test_null_topic_list_in_delete_topics_v1(tlsBroker, bystander):
    body = struct.pack(">hhih", 20, 1, 7, 1) + b"x" + struct.pack(">ii", -1, 1000)
    assert _closedAfter(tlsBroker.port, _frame(body))
    log = tlsBroker.output()
    assert "topic_names: null where an array is required" in log
    assert "Traceback" not in log
