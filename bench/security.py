"""
Security costs (issue 13):

  - SASL handshakes per second, per mechanism: connect, ApiVersions,
    SaslHandshake v1, SaslAuthenticate until done, close; several client
    threads at once.  The client's own PBKDF2 is done once per user and
    reused, so the broker is what is measured, with its CPU per handshake.
  - One authorization check (Produce's WRITE on a topic) in process, with
    10,000 ACLs: answered from the cache, computed, and without an
    authorizer -- figures a loaded machine does not blur.
  - Produce CPU per record with the built-in authorizer holding 10,000 ACLs,
    against the same broker without an authorizer (both on SASL_PLAINTEXT,
    so only authorization differs): small requests (one record each, where
    a per-request check shows most) and batched ones.  Goal: <= 1.05x.

    python -m bench security [--handshakes 2000] [--records 20000] [--threads 4]
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

from bench.brokers import startBroker
from kafkatwist.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from kafkatwist.security.authorizer import ACLS_FILE, StandardAuthorizer
from kafkatwist.security.format import formatDirectory
from kafkatwist.security.scram import MECHANISMS, saltedPassword

USER, PASSWORD = "bench", "bench-secret"
TOPIC = "bench-authz"
VALUE = b"x" * 100


class _Context:
    principal = "User:admin"
    clientAddress = ("127.0.0.1", 0)
    apiKey = 30


def prepare(directory: str, acls: int) -> str:
    """
    A data directory with the bench user (both SCRAM mechanisms) and, if
    asked, C{acls} ACLs: one ALLOW for the bench user on its topic and
    group, the rest for other principals and names, literal and prefixed.
    """
    data = os.path.join(directory, "data")
    formatDirectory(
        data, 1, None, [f"{m}=[name={USER},password={PASSWORD}]" for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")]
    )
    if acls:
        bindings = [
            AclBinding(ResourceType.TOPIC, TOPIC, PatternType.LITERAL, f"User:{USER}", "*", op, AclPermissionType.ALLOW)
            for op in (AclOperation.WRITE, AclOperation.CREATE)
        ]
        i = 0
        while len(bindings) < acls:
            pattern = PatternType.PREFIXED if i % 3 == 0 else PatternType.LITERAL
            bindings.append(AclBinding(
                ResourceType.TOPIC if i % 2 else ResourceType.GROUP, f"team{i % 97}-svc{i}", pattern,
                f"User:u{i % 500}", "*", AclOperation.READ if i % 4 else AclOperation.WRITE,
                AclPermissionType.ALLOW if i % 10 else AclPermissionType.DENY,
            ))
            i += 1
        errors = StandardAuthorizer(os.path.join(data, ACLS_FILE)).createAcls(_Context(), bindings)
        assert not any(errors)
    return data


# -- handshakes --------------------------------------------------------------------


def _request(apiKey, version, correlationId, body=b""):
    header = struct.pack(">hhih", apiKey, version, correlationId, 5) + b"bench"
    if version >= 2 and apiKey == 36:
        header += b"\x00"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _read(sock) -> bytes:
    def exactly(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _authenticate(sock, correlationId, token: bytes) -> bytes:
    sock.sendall(_request(36, 1, correlationId, struct.pack(">i", len(token)) + token))
    frame = _read(sock)
    (error,) = struct.unpack_from(">h", frame, 4)
    if error:
        raise RuntimeError(f"SaslAuthenticate error {error}")
    (messageLength,) = struct.unpack_from(">h", frame, 6)
    offset = 8 + max(messageLength, 0)
    (length,) = struct.unpack_from(">i", frame, offset)
    return frame[offset + 4 : offset + 4 + length]


class _ScramClient:
    """
    The client side of SCRAM, with the salted password kept per salt.
    """

    def __init__(self, mechanism: str) -> None:
        self.mechanism = MECHANISMS[mechanism]
        self.salted: dict[tuple[bytes, int], bytes] = {}

    def login(self, sock, correlationId: int) -> None:
        m = self.mechanism
        nonce = secrets.token_urlsafe(18)
        bare = f"n={USER},r={nonce}"
        first = _authenticate(sock, correlationId, f"n,,{bare}".encode()).decode()
        fields = dict(part.split("=", 1) for part in first.split(","))
        salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
        salted = self.salted.get((salt, iterations))
        if salted is None:
            salted = self.salted[(salt, iterations)] = saltedPassword(m, PASSWORD, salt, iterations)
        withoutProof = f"c=biws,r={fields['r']}"
        auth = f"{bare},{first},{withoutProof}".encode()
        clientKey = m.hmac(salted, b"Client Key")
        signature = m.hmac(m.hash(clientKey), auth)
        proof = base64.b64encode(bytes(a ^ b for a, b in zip(clientKey, signature))).decode()
        _authenticate(sock, correlationId + 1, f"{withoutProof},p={proof}".encode())


def _handshake(port: int, mechanism: str, client) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(_request(18, 0, 1))
        _read(sock)
        name = mechanism.encode()
        sock.sendall(_request(17, 1, 2, struct.pack(">h", len(name)) + name))
        _read(sock)
        if mechanism == "PLAIN":
            _authenticate(sock, 3, f"\0{USER}\0{PASSWORD}".encode())
        else:
            client.login(sock, 3)


def handshakes(broker, mechanism: str, count: int, threads: int) -> tuple[float, float]:
    """
    @return: (handshakes per second, broker CPU milliseconds per handshake).
    """
    clients = [_ScramClient(mechanism) if mechanism != "PLAIN" else None for _ in range(threads)]
    for client in clients:  # warm: the client's PBKDF2, the broker's caches
        _handshake(broker.port, mechanism, client)
    per = count // threads
    failures = []

    def run(client):
        try:
            for _ in range(per):
                _handshake(broker.port, mechanism, client)
        except Exception as e:  # pragma: no cover - reported below
            failures.append(e)

    workers = [threading.Thread(target=run, args=(c,)) for c in clients]
    cpu, started = broker.cpuSeconds(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed, cpu = time.perf_counter() - started, broker.cpuSeconds() - cpu
    if failures:
        raise failures[0]
    done = per * threads
    return done / elapsed, cpu / done * 1000


# -- produce with and without an authorizer ------------------------------------------


def produceCpu(broker, records: int, small: bool, mechanism: str = "SCRAM-SHA-256") -> float:
    """
    @return: broker CPU microseconds per record produced.
    """
    from confluent_kafka import Producer

    config = {
        "bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": PASSWORD, "acks": 1,
    }
    if small:
        config.update({"linger.ms": 0, "batch.num.messages": 1, "max.in.flight": 1})
    else:
        config.update({"linger.ms": 5, "batch.size": 1_000_000, "queue.buffering.max.messages": 2_000_000})
    producer = Producer(config)
    producer.produce(TOPIC, VALUE)
    producer.flush(30)
    cpu = broker.cpuSeconds()
    for _ in range(records):
        while True:
            try:
                producer.produce(TOPIC, VALUE)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(120):
        raise RuntimeError("records not delivered")
    return (broker.cpuSeconds() - cpu) / records * 1e6


def checkCost(data: str, checks: int = 100_000) -> tuple[float, float, float]:
    """
    @return: microseconds per check: cached, computed, no authorizer.
    """
    from types import SimpleNamespace

    from kafkatwist.security.checks import authorize

    authorizer = StandardAuthorizer(os.path.join(data, ACLS_FILE), superUsers={"User:admin"})
    context = SimpleNamespace(principal=f"User:{USER}", clientAddress=("127.0.0.1", 1), apiKey=0)
    write, topic = AclOperation.WRITE, ResourceType.TOPIC

    def timed(n, before=None, target=authorizer):
        started = time.perf_counter()
        for _ in range(n):
            if before:
                before()
            authorize(target, context, write, topic, TOPIC)
        return (time.perf_counter() - started) / n * 1e6

    cached = timed(checks)
    computed = timed(checks // 10, authorizer._snapshot.cache.clear)
    return cached, computed, timed(checks, target=None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench security", description=__doc__.split("\n\n")[0])
    parser.add_argument("--handshakes", type=int, default=2000, help="handshakes per mechanism")
    parser.add_argument("--threads", type=int, default=4, help="client threads for handshakes")
    parser.add_argument("--records", type=int, default=20000, help="records per produce run")
    parser.add_argument("--acls", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=2, help="produce runs per broker, alternated")
    args = parser.parse_args(argv)
    sasl = {"listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "connection.failed.authentication.delay.ms": "0"}
    authz = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
             "super.users": "User:admin"}
    with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as guarded:
        plainData, guardedData = prepare(plain, 0), prepare(guarded, args.acls)
        cached, computed, none = checkCost(guardedData)
        print(f"one authorization check with {args.acls:,} ACLs: {cached:.2f} us cached, "
              f"{computed:.2f} us computed; {none:.2f} us without an authorizer")
        print()
        with startBroker("kafkatwist", plain, {**sasl, "log.dir": plainData}) as open_, \
                startBroker("kafkatwist", guarded, {**sasl, **authz, "log.dir": guardedData}) as secured:
            print(f"{'mechanism':<14} {'handshakes/s':>13} {'broker CPU ms each':>19}")
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
                rate, cpuMs = handshakes(open_, mechanism, args.handshakes, args.threads)
                print(f"{mechanism:<14} {rate:>13,.0f} {cpuMs:>19.2f}", flush=True)
            print()
            print(f"produce, broker CPU us/record: none vs {args.acls:,} ACLs")
            for small, label in ((True, "1 record per request"), (False, "batched")):
                none, acl = [], []
                records = args.records if small else args.records * 10
                for _ in range(args.rounds):
                    none.append(produceCpu(open_, records, small))
                    acl.append(produceCpu(secured, records, small))
                a, b = min(none), min(acl)
                print(f"{label:<22} none {a:8.1f}   {args.acls:,} ACLs {b:8.1f}   ratio {b / a:.3f} (best of each); "
                      f"median of the {args.rounds} alternated pairs' ratios "
                      f"{statistics.median(y / x for x, y in zip(none, acl)):.3f}; "
                      f"none {' '.join(f'{x:.1f}' for x in none)}, ACLs {' '.join(f'{y:.1f}' for y in acl)}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
