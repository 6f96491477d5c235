"""
C{twistd kafkatwist} as an operator meets it: configuration errors, quotas,
idle expiry, clean shutdown.
"""

import os
import re
import signal
import subprocess
import time

import pytest

from kafkatwist.util.atomic import TEMPORARY_SUFFIX
from kafkatwist.testing import Broker
from kafkatwist.testing.broker import ROOT, TWISTD
from tests.rawclient import RawConnection
from tests.integration.helpers import runTwistd

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "override, message",
    [
        ("num.network.threads=zero", "Invalid value for num.network.threads: 'zero' is not an integer"),
        ("listeners=PLAINTEXT:/127.0.0.1", "Invalid value for listeners: 'PLAINTEXT:/127.0.0.1' is not NAME://host:port"),
        ("ssl.client.auth=sometimes", "Invalid value for ssl.client.auth: 'sometimes' is not one of none, requested, required"),
        ("listeners=SSL://127.0.0.1:0", "Invalid value for ssl.keystore.location"),
        ("queued.max.requests=0", "Invalid value for queued.max.requests: 0 is outside"),
        ("request.threads.cpu.affinity=99999", "Invalid value for request.threads.cpu.affinity: CPU 99999 is not one"),
    ],
)
def test_bad_value_refuses_to_start_with_one_line(tmp_path, override, message):
    result = runTwistd(tmp_path, "--override", override, "--override", f"log.dir={tmp_path}/d")
    assert result.returncode != 0
    errorLines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(errorLines) == 1, result.stderr
    assert message in errorLines[0]


def test_config_file_and_override(tmp_path):
    properties = tmp_path / "server.properties"
    properties.write_text(
        "# a comment\nnode.id=7\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        "num.network.threads = 2\nsome.unknown.key=1\n"
    )
    broker = Broker(str(tmp_path / "b"), {"node.id": "9"}, config=str(properties))
    broker.overrides.pop("listeners")
    with broker:
        output = broker.output()
        assert "kafkatwist node 9" in output
        assert "2 network threads" in output
        assert "Unknown configuration key 'some.unknown.key' ignored" in output


def test_unknown_key_names_the_key_it_is_close_to(tmp_path):
    result = runTwistd(tmp_path, "--override", "num.io.thread=2", "--describe-config")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "kafkatwist: Unknown configuration key 'num.io.thread' ignored; did you mean 'num.io.threads'?"
    ]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--override", "num.io.threads"], "kafkatwist: --override wants key=value, not 'num.io.threads'"),
        (["--no-such-option"], "kafkatwist: option --no-such-option not recognized"),
    ],
)
def test_argument_errors_are_one_line(tmp_path, args, expected):
    result = runTwistd(tmp_path, *args)
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(expected)


def assertOneLine(result, expected):
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if l.strip()]
    assert lines == [expected], result.stderr


def test_port_in_use(tmp_path, broker):
    result = runTwistd(
        tmp_path, "--override", f"listeners=PLAINTEXT://127.0.0.1:{broker.port}",
        "--override", f"log.dir={tmp_path}/d",
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: cannot listen on PLAINTEXT://127.0.0.1:{broker.port} "
        "(listeners): Address already in use",
    )
    # Nothing is written before the ports are bound.
    assert not os.path.exists(tmp_path / "d")


def test_second_listener_in_use_is_the_one_named(tmp_path, broker):
    result = runTwistd(
        tmp_path,
        "--override", "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "--override", f"listeners=PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:{broker.port}",
        "--override", f"log.dir={tmp_path}/d",
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: cannot listen on INTERNAL://127.0.0.1:{broker.port} "
        "(listeners): Address already in use",
    )


def test_metrics_port_in_use(tmp_path, brokerFactory):
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    result = runTwistd(
        tmp_path, "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", f"metrics.http.listener=127.0.0.1:{port}", "--override", f"log.dir={tmp_path}/d",
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: cannot listen on 127.0.0.1:{port} (metrics.http.listener): "
        "Address already in use",
    )
    assert not os.path.exists(tmp_path / "d")


def test_metrics_port_in_use_when_daemonized(tmp_path, brokerFactory):
    """
    Without -n twistd forks into the background; the refusal must still be
    one whole line on the terminal, not a traceback in the log.
    """
    b = brokerFactory({"metrics.http.listener": "127.0.0.1:0"}).start()
    port = int(re.search(r"metrics on http://[^:]+:(\d+)/metrics", b.output()).group(1))
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [TWISTD, f"--pidfile={tmp_path}/twistd.pid", f"--logfile={tmp_path}/twistd.log", "kafkatwist",
         "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"metrics.http.listener=127.0.0.1:{port}", "--override", f"log.dir={tmp_path}/d"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: cannot listen on 127.0.0.1:{port} (metrics.http.listener): "
        "Address already in use",
    )


def test_second_broker_on_the_same_data_dir(tmp_path, brokerFactory):
    first = brokerFactory().start()
    dataDir = first.overrides["log.dir"]
    # The first broker's own checkpoints come and go as temporary files.
    listing = lambda: sorted(n for n in os.listdir(dataDir) if not n.endswith(TEMPORARY_SUFFIX))
    before = listing()
    result = runTwistd(
        tmp_path, "--override", "listeners=PLAINTEXT://127.0.0.1:0", "--override", f"log.dir={dataDir}"
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: data directory {dataDir} is in use by another broker "
        f"(pid {first.process.pid} holds its .lock)",
    )
    assert listing() == before
    assert RawConnection(first.port).apiVersions().error_code == 0
    first.stop()
    # Once the first has stopped, the directory is free again.
    second = brokerFactory({"log.dir": dataDir}).start()
    assert RawConnection(second.port).apiVersions().error_code == 0


def test_sigterm_finishes_inflight_and_exits_quickly(brokerFactory):
    b = brokerFactory({"num.network.threads": "2", "num.io.threads": "2"}).start()
    connections = [RawConnection(b.port) for _ in range(20)]
    for c in connections:
        assert c.apiVersions().error_code == 0
    status, elapsed = b.stop(signal.SIGTERM)
    # twistd re-raises the signal that stopped it once shutdown is done.
    assert status in (0, -signal.SIGTERM), b.output()
    assert "Server Shut Down." in b.output()
    assert elapsed < 5
    assert "kafkatwist stopped" in b.output()
    for c in connections:
        assert c.isClosedByPeer(2)


@pytest.mark.parametrize("inheritedIgnored", [False, True], ids=["foreground", "background"])
def test_sigint_also_stops(brokerFactory, inheritedIgnored):
    # In the background (a shell's `&`, CI, service managers) SIGINT arrives
    # ignored; the broker must still stop on it.
    b = brokerFactory(ignoreSigint=inheritedIgnored).start()
    status, elapsed = b.stop(signal.SIGINT)
    assert status in (0, -signal.SIGINT, 1)
    assert "kafkatwist stopped" in b.output()
    assert elapsed < 5


def _caughtSignals(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    raise AssertionError("no SigCgt")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_started_line_comes_after_the_signal_handlers(brokerFactory):
    for _ in range(3):
        b = brokerFactory(ignoreSigint=True)
        b.pollInterval = 0.002
        b.start()
        caught = _caughtSignals(b.process.pid)
        for sig in (signal.SIGINT, signal.SIGTERM):
            assert caught & (1 << (sig - 1)), f"{sig.name} not handled when 'started' was logged"
        status, elapsed = b.stop(signal.SIGINT)
        assert "kafkatwist stopped" in b.output()
        assert elapsed < 5


def test_connection_quota_per_ip(brokerFactory):
    b = brokerFactory({"max.connections.per.ip": "3"}).start()
    kept = [RawConnection(b.port) for _ in range(3)]
    for c in kept:
        assert c.apiVersions().error_code == 0
    refused = RawConnection(b.port)
    assert refused.isClosedByPeer(5)
    assert "max.connections.per.ip=3 reached" in b.output()
    kept[0].close()
    deadline = time.monotonic() + 5
    while True:
        again = RawConnection(b.port)
        try:
            assert again.apiVersions().error_code == 0
            break
        except (ConnectionError, OSError):
            # the slot is freed once the Processor has seen the close
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_idle_connections_are_closed(brokerFactory):
    b = brokerFactory({"connections.max.idle.ms": "300"}).start()
    idle = RawConnection(b.port)
    busy = RawConnection(b.port)
    started = time.monotonic()
    while time.monotonic() - started < 1.0:
        assert busy.apiVersions().error_code == 0
        time.sleep(0.05)
    assert idle.isClosedByPeer(3)
    assert busy.apiVersions().error_code == 0
    assert "idle for more than 300 ms" in b.output()


def _threadCpus(pid: int) -> list[str]:
    lists = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            lists += [l.split(":", 1)[1].strip() for l in f if l.startswith("Cpus_allowed_list:")]
    return lists


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux and at least two CPUs",
)
def test_request_threads_share_one_cpu_unless_told_otherwise(brokerFactory):
    last = str(max(os.sched_getaffinity(0)))
    pinned = brokerFactory({"num.network.threads": "2", "num.io.threads": "3"}).start()
    free = brokerFactory({"request.threads.cpu.affinity": "none"}).start()
    # The 2 Processors and 3 handler threads; the main thread and its pool
    # stay where the OS puts them.
    assert _threadCpus(pinned.process.pid).count(last) == 5
    assert f"request handler threads run on CPU {last}" in pinned.output()
    assert last not in _threadCpus(free.process.pid)
    for b in (pinned, free):
        assert RawConnection(b.port).apiVersions().error_code == 0


def test_plugin_that_fails_to_import_refuses_to_start(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "audit_sink.py").write_text("import kafkatwist_no_such_sink\n")
    result = runTwistd(
        tmp_path, "--override", "listeners=PLAINTEXT://127.0.0.1:0",
        "--override", f"plugin.paths={plugins}", "--override", f"log.dir={tmp_path}/d",
    )
    assertOneLine(
        result,
        f"kafkatwist: cannot start: plugin {plugins / 'audit_sink.py'}:1 failed to load: "
        "ModuleNotFoundError: No module named 'kafkatwist_no_such_sink' "
        "(plugin.load.failure.policy=skip starts without it)",
    )
    assert not os.path.exists(tmp_path / "d")


def test_plugin_failure_policy_skip_starts_without_it(tmp_path, brokerFactory):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "audit_sink.py").write_text("import kafkatwist_no_such_sink\n")
    (plugins / "my-plugin.py").write_text("")
    b = brokerFactory({"plugin.paths": str(plugins), "plugin.load.failure.policy": "skip"}).start()
    output = b.output()
    assert "audit_sink.py:1 failed to load: ModuleNotFoundError" in output
    assert "my-plugin.py is not loaded: 'my-plugin' is not a Python module name" in output
    assert "Traceback" not in output
    assert RawConnection(b.port).apiVersions().error_code == 0


def test_refused_tls_client_does_not_flood_the_log(brokerFactory, pki):
    """
    A client without a certificate on ssl.client.auth=required reconnects at
    once, forever; the log shows a few of its attempts and says the rest
    were not logged (it was ~310 lines in 8 s).
    """
    from confluent_kafka import Producer

    b = brokerFactory(
        {"ssl.keystore.location": pki.serverKeystore, "ssl.truststore.location": pki.caFile,
         "ssl.client.auth": "required"},
        listeners="PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
    ).start()
    before = len(b.output().splitlines())
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{b.ports['SSL']}", "security.protocol": "SSL",
                         "ssl.ca.location": pki.caFile, "log_level": 0})
    producer.produce("t", b"x")
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        producer.poll(0.2)
    lines = b.output().splitlines()[before:]
    closed = [l for l in lines if " closed: " in l]
    assert 1 <= len(closed) <= 5, "\n".join(lines)
    # In words, not OpenSSL's tuple list.
    assert "SSL handshake failed: the client sent no certificate (ssl.client.auth=required)" in closed[0]
    assert "SSL routines" not in "\n".join(lines)
    assert "(more like this in the next 10 s are not logged)" in closed[-1] or len(closed) < 5
    assert len(lines) <= 12, "\n".join(lines)


def test_describe_config_prints_and_exits(tmp_path):
    result = runTwistd(tmp_path, "--override", "num.io.threads=4", "--override", f"log.dir={tmp_path}/d",
                       "--describe-config")
    assert result.returncode == 0, result.stderr
    assert "  num.io.threads=4 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.io.threads=4}" in result.stdout
    assert not os.path.exists(tmp_path / "d")


def test_systemd_notify(brokerFactory, tmp_path):
    """
    Type=notify: READY=1 once serving, WATCHDOG=1 while alive, STOPPING=1 on
    SIGTERM, all on the datagram socket systemd passes in NOTIFY_SOCKET.
    """
    import socket

    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    with sock:
        b = brokerFactory(env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "400000"}).start()
        messages = []
        while not any(m.startswith("READY=1") for m in messages):
            messages.append(sock.recv(4096).decode())
        ready = next(m for m in messages if m.startswith("READY=1")).split("\n")
        assert f"MAINPID={b.process.pid}" in ready
        assert any(l.startswith("STATUS=serving node 1 of cluster ") for l in ready)
        assert RawConnection(b.port).apiVersions().error_code == 0
        assert sock.recv(4096) == b"WATCHDOG=1"
        b.stop(signal.SIGTERM)
        rest = []
        while b"STOPPING=1" not in rest:
            rest.append(sock.recv(4096).split(b"\n")[0])


def test_topic_creation_and_deletion_are_logged_once(brokerFactory):
    from confluent_kafka.admin import AdminClient, NewTopic

    b = brokerFactory().start()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("logged-once", 3)])["logged-once"].result(15)
    deadline = time.monotonic() + 5
    while "Created topic logged-once" not in b.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.output().count("Created topic logged-once") == 1, b.output()
    admin.delete_topics(["logged-once"])["logged-once"].result(15)
    deadline = time.monotonic() + 5
    while "Deleted topic logged-once" not in b.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.output().count("Deleted topic logged-once") == 1, b.output()


def test_start_up_names_the_handler_chain_in_one_line(broker, brokerFactory):
    output = broker.output()
    [summary] = [l for l in output.splitlines() if "Request handlers:" in l]
    assert "ApiKeys served, all by built-in handlers" in summary
    assert "ApiKey " not in output and "#debug" not in output
    verbose = brokerFactory({"logger.level": "debug"}).start()
    assert re.search(r"#debug\] ApiKey\s+0 produce\s+v0-\d+\s+builtin\.produce", verbose.output())
