"""
The fuzz run: a real broker process, many raw connections each sending
mutated frames (one in flight, as clients do), and the oracle.

Oracle:
  - the broker process is alive (a death is a crash: its exit status, the
    frames in flight and the log's tail are kept, and the broker restarted);
  - its log has no unhandled traceback (each one kept with the frames last
    sent on the connection its log line names);
  - a real client (confluent-kafka) still produces and reads back a record,
    every few seconds and at the end;
  - its RSS stays bounded (sampled; before, after and peak reported).

Everything the run saw goes into one JSON-able dict (see L{FuzzRun.results}),
which C{bench/fuzz.py} prints.
"""

from __future__ import annotations

import collections
import os
import random
import re
import selectors
import socket
import struct
import threading
import time
import uuid

from kafkatwist.client import KafkaWireClient
from kafkatwist.testing import Broker
from tests.fuzz.mutate import Mutator
from tests.fuzz.seeds import generated, legacyProduceSeeds, produceSeeds, recorded

TOPICS = ["fuzz-0", "fuzz-1"]
CANARY = "fuzz-canary"
_PORT = re.compile(r"127\.0\.0\.1:\d+-127\.0\.0\.1:(\d+)-\d+")
_TRACEBACK = "Traceback (most recent call last)"
#: log lines that are unhandled failures even without a printed traceback
_UNHANDLED = ("Unhandled error in Deferred", "Unhandled Error")
#: keep at most this many bytes of broker log on disk (it is scanned, then cut)
_LOG_KEEP = 64 << 20


_EXCEPTION = re.compile(r"^\s*([\w.]+(Error|Exception|Exit|Interrupt)\b.*)$")
_FILE = re.compile(r'File "([^"]+)", line (\d+), in (\w+)')


def _signature(lines: list[str]) -> str:
    """
    Where a traceback ends and what it raised: C{file:line (function):
    Exception: message}, to count tracebacks by cause.
    """
    where = ours = "?"
    for line in lines:
        found = _FILE.search(line)
        if found:
            path, number, function = found.groups()
            where = f"{path[path.rfind('site-packages/') + 14:] if 'site-packages/' in path else path}:{number} ({function})"
            if "/kafkatwist/" in path and "site-packages" not in path:
                ours = f"{path[path.rfind('/kafkatwist/') + 1:]}:{number} ({function})"
            continue
        raised = _EXCEPTION.match(line)
        if raised and where != "?":
            # The deepest frame of ours says where to fix; the deepest of
            # all, what failed.
            place = where if ours == "?" or ours == where else f"{ours} -> {where}"
            return f"{place}: {raised.group(1)[:160]}"
    return where


def rssKiB(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class _Connection:
    __slots__ = ("sock", "out", "inbuf", "waiting", "sentAt", "correlationId", "port", "frame")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.out = bytearray()
        self.inbuf = bytearray()
        self.waiting = False
        self.sentAt = 0.0
        self.correlationId = 0
        self.port = sock.getsockname()[1]
        self.frame = b""


class RoundTrip:
    """
    A real client's view: produce one record to the canary topic with
    confluent-kafka and read it back at the offset the broker gave.
    """

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def check(self, timeout: float = 15.0) -> str | None:
        """
        @return: C{None} if the record came back, else why not.
        """
        from confluent_kafka import Consumer, Producer, TopicPartition

        value = uuid.uuid4().hex.encode()
        reports = []
        producer = Producer({"bootstrap.servers": self.bootstrap, "message.timeout.ms": int(timeout * 1000),
                             "log_level": 0})
        producer.produce(CANARY, value, partition=0, on_delivery=lambda e, m: reports.append((e, m)))
        producer.flush(timeout)
        if not reports:
            return "no delivery report"
        error, message = reports[0]
        if error is not None:
            return f"produce: {error}"
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "fuzz-canary",
                             "enable.auto.commit": False, "log_level": 0})
        try:
            consumer.assign([TopicPartition(CANARY, 0, message.offset())])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                got = consumer.poll(0.5)
                if got is None or got.error():
                    continue
                if got.value() == value:
                    return None
            return "record not read back"
        finally:
            consumer.close()


class FuzzRun:
    """
    @param frames: stop after this many mutated frames (or C{seconds}).
    @param connections: raw connections kept busy at once.
    @param timeout: seconds a request may stay unanswered before its
        connection is dropped (long polls and acks=0 produce never answer).
    """

    def __init__(
        self,
        directory: str,
        frames: int | None = None,
        seconds: float | None = None,
        connections: int = 32,
        seed: int = 0,
        timeout: float = 3.0,
        roundTripEvery: float = 20.0,
        overrides: dict | None = None,
        log=print,
    ) -> None:
        self.directory = directory
        self.maxFrames = frames
        self.maxSeconds = seconds
        self.connections = connections
        self.seed = seed
        self.timeout = timeout
        self.roundTripEvery = roundTripEvery
        # Topics the fuzz frames create are legitimate state, bounded here
        # so that RSS growth measures leaks rather than topics.
        self.overrides = {
            "group.initial.rebalance.delay.ms": "0",
            "max.broker.partitions": "500",
            **(overrides or {}),
        }
        self.say = log
        self.rng = random.Random(seed)
        self.mutator = Mutator(random.Random(seed + 1))
        self.broker: Broker | None = None
        self.restarts = 0
        self.stats = collections.Counter()
        self.crashes: list[dict] = []
        self.tracebacks: list[dict] = []
        self.signatures: collections.Counter = collections.Counter()
        self.errors: list[str] = []
        self.roundTrips = {"ok": 0, "failed": 0, "failures": []}
        self.recent: collections.deque = collections.deque(maxlen=256)
        self.byPort: dict[int, collections.deque] = {}
        self._logOffset = 0
        self._logCarry = ""
        self.rss: dict[str, int] = {}
        #: (seconds into the run, RSS KiB), every 30 s: a leak climbs, state plateaus
        self.rssSamples: list[tuple[int, int]] = []

    # -- broker ---------------------------------------------------------------

    def _startBroker(self) -> None:
        self.broker = Broker(os.path.join(self.directory, "broker"), dict(self.overrides))
        self.broker.start(60)
        self._logOffset = os.path.getsize(self.broker.logPath)
        with KafkaWireClient(self.broker.bootstrap) as client:
            # A restart finds them already there.
            client.createTopics({t: 2 for t in TOPICS + [CANARY]}, ignoreExisting=True)
            self.served = client.brokerApiVersions()

    def _pid(self) -> int:
        return self.broker.process.pid

    def _alive(self) -> bool:
        return self.broker.process.poll() is None

    # -- log ------------------------------------------------------------------

    def _scanLog(self) -> None:
        path = self.broker.logPath
        try:
            size = os.path.getsize(path)
        except OSError:
            return
        if size < self._logOffset:
            self._logOffset = 0
        with open(path, "rb") as f:
            f.seek(self._logOffset)
            chunk = f.read()
        self._logOffset += len(chunk)
        text = self._logCarry + chunk.decode("utf-8", "replace")
        # Keep a tail in case a traceback straddles two reads.
        cut = text.rfind("\n", 0, max(0, len(text) - 8192))
        scanned, self._logCarry = (text[: cut + 1], text[cut + 1 :]) if cut >= 0 else ("", text)
        if scanned:
            self._findFailures(scanned)
        if self._logOffset > _LOG_KEEP:
            os.truncate(path, 0)
            self._logOffset = 0

    def _findFailures(self, text: str) -> None:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if _TRACEBACK in line or any(marker in line for marker in _UNHANDLED):
                context = lines[max(0, i - 3) : i + 40]
                self.stats["tracebacks"] += 1
                signature = _signature(lines[i + 1 : i + 60])
                self.signatures[signature] += 1
                if self.signatures[signature] <= 2 and len(self.tracebacks) < 50:
                    evidence = self._evidence("\n".join(context))
                    evidence["signature"] = signature
                    self.tracebacks.append(evidence)
            elif "#critical]" in line or "#error]" in line:
                self.stats["errorLines"] += 1
                if len(self.errors) < 50:
                    self.errors.append(line[:500])

    def _evidence(self, text: str) -> dict:
        # The connection the failure names (its request context), else any.
        named = [line for line in text.split("\n") if "conn=" in line or "failed on" in line]
        ports = {int(p) for p in _PORT.findall("\n".join(named) or text)}
        frames = []
        for port in ports:
            frames.extend(h for _, h in self.byPort.get(port, ()))
        return {"log": text[-6000:], "frames": frames[-6:]}

    # -- connections ------------------------------------------------------------

    def _connect(self, sel) -> _Connection | None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.broker.port), timeout=5)
        except OSError:
            self.stats["connectFailures"] += 1
            return None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        connection = _Connection(sock)
        sel.register(sock, selectors.EVENT_READ, connection)
        return connection

    def _drop(self, sel, connection: _Connection) -> None:
        try:
            sel.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        connection.sock.close()

    def _send(self, sel, connection: _Connection, frame: bytes, now: float) -> None:
        self.stats["correlation"] += 1
        correlationId = self.stats["correlation"] & 0x7FFFFFFF
        if len(frame) >= 8:
            frame = frame[:4] + struct.pack(">i", correlationId) + frame[8:]
        connection.correlationId = correlationId
        connection.frame = frame
        connection.out += struct.pack(">i", len(frame)) + frame
        connection.waiting = True
        connection.sentAt = now
        record = (now, frame.hex() if len(frame) <= 4096 else frame[:4096].hex() + "...")
        self.recent.append((connection.port,) + record)
        self.byPort.setdefault(connection.port, collections.deque(maxlen=3)).append(record)
        self._flush(sel, connection)

    def _flush(self, sel, connection: _Connection) -> None:
        try:
            sent = connection.sock.send(connection.out)
            del connection.out[:sent]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            connection.out.clear()
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if connection.out else 0)
        try:
            sel.modify(connection.sock, events, connection)
        except (KeyError, ValueError):
            pass

    def _read(self, sel, connection: _Connection) -> bool:
        """
        @return: whether the connection is still open.
        """
        try:
            data = connection.sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            data = b""
        if not data:
            self.stats["closedByBroker"] += 1
            return False
        connection.inbuf += data
        while len(connection.inbuf) >= 4:
            (size,) = struct.unpack_from(">i", connection.inbuf)
            if len(connection.inbuf) < 4 + size:
                break
            response = bytes(connection.inbuf[4 : 4 + size])
            del connection.inbuf[: 4 + size]
            if len(response) >= 4 and struct.unpack_from(">i", response)[0] == connection.correlationId:
                self.stats["answered"] += 1
            else:
                self.stats["mismatchedAnswers"] += 1
            connection.waiting = False
        return True

    # -- the run ----------------------------------------------------------------

    def _corpus(self) -> list:
        corpus = (
            recorded() + produceSeeds(TOPICS) + legacyProduceSeeds(TOPICS)
            + generated(self.served, TOPICS, random.Random(self.seed))
        )
        self.stats["seeds"] = len(corpus)
        return corpus

    def run(self) -> dict:
        os.makedirs(self.directory, exist_ok=True)
        self._startBroker()
        corpus = self._corpus()
        self.seedsByOrigin = collections.Counter(s.origin.split("-")[0] for s in corpus)
        self.say(f"fuzz: {len(corpus)} seeds, broker on {self.broker.port}")
        roundTrip = RoundTrip(self.broker.bootstrap)
        failure = roundTrip.check()
        if failure:
            self.roundTrips["failed"] += 1
            self.roundTrips["failures"].append(f"before fuzzing: {failure}")
        else:
            self.roundTrips["ok"] += 1
        # The seeds once, unmutated: they warm the broker up (and must not
        # break it either).
        self._loop(corpus, mutate=False, limit=len(corpus), seconds=None, seedPass=True)
        self.rss["before"] = rssKiB(self._pid())
        self.rss["peak"] = self.rss["before"]
        started = time.monotonic()
        self._loop(corpus, mutate=True, limit=self.maxFrames, seconds=self.maxSeconds,
                   roundTrip=roundTrip)
        elapsed = time.monotonic() - started
        time.sleep(1.0)
        if self._alive():
            self._scanLog()
            self.rss["after"] = rssKiB(self._pid())
            roundTrip = RoundTrip(self.broker.bootstrap)
            failure = roundTrip.check()
            if failure:
                self.roundTrips["failed"] += 1
                self.roundTrips["failures"].append(f"after fuzzing: {failure}")
            else:
                self.roundTrips["ok"] += 1
        self.broker.stop()
        return self.results(elapsed)

    def _loop(self, corpus, mutate: bool, limit, seconds, seedPass=False, roundTrip=None) -> None:
        sel = selectors.DefaultSelector()
        connections: list[_Connection] = []
        sent = 0
        started = time.monotonic()
        nextCheck = started + 1.0
        nextRoundTrip = started + self.roundTripEvery
        nextSample = started
        checker: threading.Thread | None = None
        index = 0
        done = False
        while True:
            now = time.monotonic()
            if not done and (
                (limit is not None and sent >= limit) or (seconds is not None and now - started >= seconds)
            ):
                done = True
            if done and not any(c.waiting for c in connections):
                break
            if done and now - started > (seconds or 0) + 3 * self.timeout + 30 and limit is None:
                break
            while not done and len(connections) < self.connections:
                connection = self._connect(sel)
                if connection is None:
                    break
                connections.append(connection)
            for connection in list(connections):
                if connection.waiting and now - connection.sentAt > self.timeout:
                    self.stats["timeouts"] += 1
                    self._drop(sel, connection)
                    connections.remove(connection)
                elif not connection.waiting and not done:
                    if seedPass:
                        seed = corpus[index % len(corpus)]
                        index += 1
                        frame = seed.frame
                    else:
                        seed = corpus[self.rng.randrange(len(corpus))]
                        frame = self.mutator.mutate(seed.apiKey, seed.version, seed.frame)
                        self.stats["frames"] += 1
                    self._send(sel, connection, frame, now)
                    sent += 1
                    if done is False and limit is not None and sent >= limit:
                        done = True
            for key, events in sel.select(0.05):
                connection = key.data
                if events & selectors.EVENT_WRITE:
                    self._flush(sel, connection)
                if events & selectors.EVENT_READ and not self._read(sel, connection):
                    self._drop(sel, connection)
                    if connection in connections:
                        connections.remove(connection)
            if now >= nextCheck:
                nextCheck = now + 1.0
                self._scanLog()
                if self._alive():
                    rss = rssKiB(self._pid())
                    self.rss["peak"] = max(self.rss.get("peak", 0), rss)
                    if not seedPass and now >= nextSample:
                        nextSample = now + 30.0
                        self.rssSamples.append((round(now - started), rss))
                else:
                    self._crashed(sel, connections)
                    connections.clear()
                    roundTrip = RoundTrip(self.broker.bootstrap) if roundTrip else None
                if not seedPass and self.maxFrames and self.stats["frames"] % 50000 < 200:
                    self.say(self._progress(now - started))
                if len(self.byPort) > 20000:
                    live = {c.port for c in connections}
                    self.byPort = {p: d for p, d in self.byPort.items() if p in live}
            if roundTrip is not None and now >= nextRoundTrip and (checker is None or not checker.is_alive()):
                nextRoundTrip = now + self.roundTripEvery
                checker = threading.Thread(target=self._roundTrip, args=(roundTrip,), daemon=True)
                checker.start()
        for connection in connections:
            self._drop(sel, connection)
        if checker is not None:
            checker.join(30)
        sel.close()

    def _roundTrip(self, roundTrip: RoundTrip) -> None:
        try:
            # Mutated DeleteTopics frames delete them now and then.
            with KafkaWireClient(roundTrip.bootstrap) as client:
                client.createTopics({t: 2 for t in TOPICS}, ignoreExisting=True)
        except Exception:
            pass
        try:
            failure = roundTrip.check()
        except Exception as e:
            failure = f"{type(e).__name__}: {e}"
        if failure:
            self.roundTrips["failed"] += 1
            if len(self.roundTrips["failures"]) < 20:
                self.roundTrips["failures"].append(failure)
        else:
            self.roundTrips["ok"] += 1

    def _crashed(self, sel, connections) -> None:
        status = self.broker.process.returncode
        tail = self.broker.output()[-8000:]
        now = time.monotonic()
        self.crashes.append({
            "status": status,
            "frames": [h for port, t, h in self.recent if now - t < 5][-20:],
            "log": tail,
        })
        self.say(f"fuzz: broker died with status {status}; restarting")
        for connection in connections:
            self._drop(sel, connection)
        self.restarts += 1
        self._startBroker()

    def _progress(self, elapsed: float) -> str:
        frames = self.stats["frames"]
        return (
            f"fuzz: {frames} frames in {elapsed:.0f} s ({frames / max(elapsed, 1e-9):.0f}/s), "
            f"{len(self.crashes)} crashes, {self.stats['tracebacks']} tracebacks, "
            f"RSS {rssKiB(self._pid()) // 1024} MiB"
        )

    def results(self, elapsed: float) -> dict:
        frames = self.stats["frames"]
        return {
            "frames": frames,
            "seconds": round(elapsed, 1),
            "framesPerSecond": round(frames / elapsed, 1) if elapsed else 0,
            "answered": self.stats["answered"],
            "closedByBroker": self.stats["closedByBroker"],
            "timeouts": self.stats["timeouts"],
            "mismatchedAnswers": self.stats["mismatchedAnswers"],
            "connectFailures": self.stats["connectFailures"],
            "seeds": self.stats["seeds"],
            "seedsByOrigin": dict(self.seedsByOrigin),
            "mutations": dict(sorted(self.mutator.counts.items())),
            "crashes": self.crashes,
            "tracebacks": self.tracebacks,
            "tracebackCount": self.stats["tracebacks"],
            "tracebackSignatures": dict(self.signatures.most_common()),
            "errorLines": self.errors,
            "errorLineCount": self.stats["errorLines"],
            "roundTrips": self.roundTrips,
            "rssKiB": self.rss,
            "rssSamplesKiB": self.rssSamples,
            "seed": self.seed,
            "connections": self.connections,
        }
