"""
A few minutes of the broker's figures, kept in memory for the console's
rates and charts: every C{interval} seconds the main reactor adds up the
counters the request path already keeps (per-Processor request shards, the
per-topic byte counters) -- in memory only, no disk, no lock held by the
request path -- and keeps the last C{keep} samples.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from twisted.internet.task import LoopingCall

from kafkatwist.metrics.stats import BUCKETS, PHASES
from kafkatwist.protocol.apis import FETCH, PRODUCE

_TOTAL = PHASES.index("total")


@dataclass(frozen=True)
class Sample:
    at: float
    requests: int
    bytesIn: int
    bytesOut: int
    messagesIn: dict = field(default_factory=dict)
    #: cumulative histogram counts of the total request time, per ApiKey
    latency: dict = field(default_factory=dict)


def p99(before: list[int] | None, after: list[int] | None) -> float | None:
    """
    The 99th percentile, in milliseconds, of the requests counted between
    two cumulative histograms (the bucket's upper bound, as Prometheus'
    histogram_quantile reads a bucket), or C{None} without requests.
    """
    if after is None:
        return None
    counts = [a - (before[i] if before else 0) for i, a in enumerate(after)]
    total = sum(counts)
    if total <= 0:
        return None
    rank = 0.99 * total
    seen = 0
    for i, count in enumerate(counts):
        seen += count
        if seen >= rank:
            bound = BUCKETS[i] if i < len(BUCKETS) else BUCKETS[-1] * 2
            return round(bound * 1000, 3)
    return None


class History:
    """
    @param server: the L{kafkatwist.network.server.SocketServer} (its
        C{requestStats()}), or C{None}.
    @param broker: the broker (its C{topicBytes}).
    """

    def __init__(self, broker, server, interval: float = 5.0, keep: int = 120, clock=None) -> None:
        self.broker = broker
        self.server = server
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=keep)
        #: per group, (time, total lag) samples, added by whoever computes lag
        self.groupLag: dict[str, deque] = {}
        self._keep = keep
        self._loop = LoopingCall(self.sample)
        if clock is not None:
            self._loop.clock = clock

    def start(self) -> None:
        if not self._loop.running:
            self._loop.start(self.interval, now=True)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def sample(self) -> None:
        requests = 0
        latency: dict[int, list[int]] = {}
        if self.server is not None:
            for stats in self.server.requestStats():
                requests += sum(list(stats.requests.values()))
                for key in (PRODUCE, FETCH):
                    histograms = stats.phases.get(key)
                    if histograms is None:
                        continue
                    counts = list(histograms[_TOTAL].counts)
                    mine = latency.setdefault(key, [0] * len(counts))
                    for i, c in enumerate(counts):
                        mine[i] += c
        bytesIn, bytesOut, messagesIn = self.broker.topicBytes.snapshot()
        self.samples.append(
            Sample(time.time(), requests, sum(bytesIn.values()), sum(bytesOut.values()), messagesIn, latency)
        )
        if self.broker.groupCoordinator is not None and self.broker.logManager is not None:
            # Lag needs the logs' high watermarks: read on a handler thread.
            self.broker.callInHandlerThread(self._sampleLag)

    def _sampleLag(self) -> None:
        """
        On a request handler thread: every group's total lag from its
        published committed offsets and the logs this broker holds; handed
        to the main reactor to keep.
        """
        from kafkatwist.console.source import replicaTest

        logManager = self.broker.logManager
        hosts = replicaTest(self.broker)
        totals = {}
        for groupId, published in list(self.broker.groupCoordinator.publishedGroups().items()):
            total = 0
            for (topic, partition), committed in list(published.offsets.items()):
                if committed < 0:
                    continue
                log = logManager.getLog(topic, partition) if hosts(topic, partition) else None
                if log is None:
                    total = None  # part of its lag is on other brokers
                    break
                total += max(0, log.highWatermark - committed)
            if total is not None:
                totals[groupId] = total
        reactor = getattr(self._loop.clock, "callFromThread", None)
        if reactor is None:
            self._storeLag(totals)
        else:
            reactor(self._storeLag, totals)

    def _storeLag(self, totals: dict) -> None:
        for groupId in [g for g in self.groupLag if g not in totals]:
            del self.groupLag[groupId]
        for groupId, total in totals.items():
            self.noteLag(groupId, total)

    def noteLag(self, groupId: str, total: int) -> None:
        series = self.groupLag.get(groupId)
        if series is None:
            series = self.groupLag[groupId] = deque(maxlen=self._keep)
        now = time.time()
        if series and now - series[-1][0] < self.interval / 2:
            series[-1] = (now, total)
        else:
            series.append((now, total))

    def rates(self) -> dict:
        """
        Over the last interval: requests/s, bytes in/out per second and each
        topic's records/s (zeros until two samples were taken).
        """
        if len(self.samples) < 2:
            return {"requestsPerSec": 0.0, "bytesInPerSec": 0.0, "bytesOutPerSec": 0.0, "recordsPerSec": {}}
        a, b = self.samples[-2], self.samples[-1]
        return _rate(a, b)

    def series(self) -> list[dict]:
        """
        The rates between consecutive samples, oldest first, for charts.
        """
        out = []
        samples = list(self.samples)
        for a, b in zip(samples, samples[1:]):
            rate = _rate(a, b)
            rate.pop("recordsPerSec")
            rate["at"] = round(b.at, 3)
            rate["produceP99Ms"] = p99(a.latency.get(PRODUCE), b.latency.get(PRODUCE))
            rate["fetchP99Ms"] = p99(a.latency.get(FETCH), b.latency.get(FETCH))
            out.append(rate)
        return out


def _rate(a: Sample, b: Sample) -> dict:
    elapsed = max(b.at - a.at, 1e-6)
    records = {}
    for topic, count in b.messagesIn.items():
        records[topic] = round(max(0, count - a.messagesIn.get(topic, 0)) / elapsed, 2)
    return {
        "requestsPerSec": round(max(0, b.requests - a.requests) / elapsed, 2),
        "bytesInPerSec": round(max(0, b.bytesIn - a.bytesIn) / elapsed, 1),
        "bytesOutPerSec": round(max(0, b.bytesOut - a.bytesOut) / elapsed, 1),
        "recordsPerSec": records,
    }
