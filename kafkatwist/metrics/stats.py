"""
Broker metrics, rendered in Prometheus' text format.

Kafka's request metrics split each request's life into the same phases:
request queue (framed -> taken by a handler thread), local (handler work),
response queue (handler done -> its Processor picks the response up), send
(picked up -> last byte written).  Each Processor records its own requests
in its own shard, so the hot path takes no lock; a scrape adds the shards.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import defaultdict

from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import apiName

#: histogram bucket bounds, in seconds
BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PHASES = ("request_queue", "local", "response_queue", "send", "total")
_FIRST = BUCKETS[0]
_bisect = bisect.bisect_left


def _bucket(v: float, b: tuple = BUCKETS) -> int:
    """
    C{bisect_left(BUCKETS, v)} for a C{v} above the first bound: the next
    few bounds compared inline (a float comparison is a few machine
    instructions in CPython 3.11, a C{bisect} call hundreds), the rest by
    bisect.
    """
    if v <= b[1]:
        return 1
    if v <= b[2]:
        return 2
    if v <= b[3]:
        return 3
    if v <= b[4]:
        return 4
    if v <= b[5]:
        return 5
    return _bisect(b, v)


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, value)] += 1
        self.sum += value

    def add(self, other: "_Histogram") -> None:
        for i, c in enumerate(other.counts):
            self.counts[i] += c
        self.sum += other.sum


class RequestStats:
    """
    One Processor's shard: per ApiKey, a count and a histogram per phase.
    Only its own thread writes it.
    """

    def __init__(self) -> None:
        self.requests: dict[int, int] = defaultdict(int)
        self.phases: dict[int, list[_Histogram]] = {}

    def record(self, request, pickedUpAt: float, sentAt: float) -> None:
        key = request.header.apiKey
        histograms = self.phases.get(key)
        if histograms is None:
            histograms = self.phases[key] = [_Histogram() for _ in PHASES]
        self.requests[key] += 1
        received = request.receivedAt
        dequeued = request.dequeuedAt or received
        completed = request.completedAt or dequeued
        # _Histogram.observe, inline: every request of every Processor
        # comes here, five times.  Most phases of a small request take
        # less than the first bound: that bucket is found without bisect.
        queue, local, responseQueue, send, total = histograms
        v = dequeued - received
        queue.counts[0 if v <= _FIRST else _bucket(v)] += 1
        queue.sum += v
        v = completed - dequeued
        local.counts[0 if v <= _FIRST else _bucket(v)] += 1
        local.sum += v
        v = pickedUpAt - completed
        if v < 0.0:
            v = 0.0
        responseQueue.counts[0 if v <= _FIRST else _bucket(v)] += 1
        responseQueue.sum += v
        v = sentAt - pickedUpAt
        send.counts[0 if v <= _FIRST else _bucket(v)] += 1
        send.sum += v
        v = sentAt - received
        total.counts[0 if v <= _FIRST else _bucket(v)] += 1
        total.sum += v


class IdleClock:
    """
    Wraps a reactor's epoll object to measure the time spent waiting in
    C{poll}: the Processor idle ratio.
    """

    def __init__(self, poller) -> None:
        self._poller = poller
        self.idle = 0.0
        self.started = time.monotonic()

    def poll(self, *args):
        before = time.monotonic()
        try:
            return self._poller.poll(*args)
        finally:
            self.idle += time.monotonic() - before

    def __getattr__(self, name):
        return getattr(self._poller, name)

    def ratio(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.idle / elapsed if elapsed > 0 else 1.0


class HandlerIdle:
    """
    Kafka's C{RequestHandlerAvgIdlePercent} (C{kafka.server:type=
    KafkaRequestHandlerPool}): the time each request handler thread waits
    for the RequestChannel, over the time it ran, averaged over the pool.

    One L{IdleSlot} per thread, written by that thread only (two stores a
    wait); a scrape reads them and adds the wait in progress.  Slots of
    threads that ended stay (a counter never goes back).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: list[IdleSlot] = []

    def slot(self) -> "IdleSlot":
        """
        A new thread's slot (called once, by that thread, as it starts).
        """
        slot = IdleSlot(time.monotonic())
        with self._lock:
            self._slots.append(slot)
        return slot

    def totals(self, now: float | None = None) -> tuple[float, float]:
        """
        C{(idle, lifetime)}: the seconds the threads waited (the waits in
        progress too) and the seconds they ran, each summed over the
        threads, ended ones included.
        """
        if now is None:
            now = time.monotonic()
        with self._lock:
            slots = list(self._slots)
        idle = lifetime = 0.0
        for slot in slots:
            while True:
                state = slot.state
                since = slot.since
                if slot.state is state:
                    # (no wait ended between the reads: C{since} is the
                    # start of the one C{state} counted or of a later one)
                    break
            waited, counted = state
            if since > counted and now > since:
                waited += now - since
            idle += waited
            ended = slot.ended
            lifetime += (ended if ended else now) - slot.started
        return idle, lifetime

    def ratio(self) -> float:
        """
        The pool's average idle ratio: idle seconds over running seconds.
        """
        idle, lifetime = self.totals()
        return min(1.0, idle / lifetime) if lifetime > 0 else 1.0


class IdleSlot:
    """
    One handler thread's part of L{HandlerIdle}, written by its thread
    only: C{since}, the start of its latest wait (set as it begins);
    C{state}, C{(seconds waited, the start of the last wait counted in
    them)}, replaced whole as each wait ends.  While C{since} is later than
    the start in C{state}, the thread waits.
    """

    __slots__ = ("state", "since", "started", "ended")

    def __init__(self, started: float) -> None:
        self.started = started
        self.ended = 0.0
        self.since = 0.0
        self.state = (0.0, 0.0)


#: append errors Kafka's FailedProduceRequestsPerSec leaves out: known
#: answers, not a failure of the broker (ReplicaManager.appendToLocalLog)
_EXPECTED_APPEND_ERRORS = frozenset((
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower, ErrorCode.message_too_large,
    ErrorCode.record_list_too_large, ErrorCode.corrupt_message, ErrorCode.kafka_storage_error,
    ErrorCode.invalid_required_acks,
))


class TopicBytes:
    """
    Bytes in (produced) and out (fetched) per topic, from handler threads;
    and the partitions' appends that failed, per topic.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.bytesIn: dict[str, int] = defaultdict(int)
        self.bytesOut: dict[str, int] = defaultdict(int)
        self.messagesIn: dict[str, int] = defaultdict(int)
        self.failedProduce: dict[str, int] = defaultdict(int)

    def produceFailed(self, topic: str, error: int) -> None:
        """
        A partition's append refused with C{error} (Kafka's
        FailedProduceRequestsPerSec: counted unless the error is one of
        the known answers, unknown partition, not the leader, too large,
        corrupt, storage error).  Only on the error path.
        """
        if error in _EXPECTED_APPEND_ERRORS:
            return
        with self._lock:
            self.failedProduce[topic] += 1

    def failures(self) -> dict[str, int]:
        with self._lock:
            return dict(self.failedProduce)

    def produced(self, topic: str, size: int, records: int) -> None:
        with self._lock:
            self.bytesIn[topic] += size
            self.messagesIn[topic] += records

    def fetched(self, topic: str, size: int) -> None:
        with self._lock:
            self.bytesOut[topic] += size

    def snapshot(self):
        with self._lock:
            return dict(self.bytesIn), dict(self.bytesOut), dict(self.messagesIn)


class RequestErrors:
    """
    Kafka's C{ErrorsPerSec} request metric (C{kafka.network:type=
    RequestMetrics,name=ErrorsPerSec,request=...,error=...}): per ApiKey
    and error code, the errors of every response, as Kafka's
    C{RequestChannel.updateErrorMetrics} counts them (C{errorCounts}: each
    place of the response that carries an error code, NONE too), and those
    of a request whose connection is closed in place of an answer (an
    acks=0 Produce that failed: Kafka's C{closeConnection(request,
    errorCounts)}).

    Counted on every request's path: each thread adds to a table of its
    own (no lock, no contention); a scrape sums them.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._lock = threading.Lock()
        self._tables: list[dict[tuple[int, int], int]] = []

    def _table(self) -> dict[tuple[int, int], int]:
        try:
            return self._local.table
        except AttributeError:
            table: dict[tuple[int, int], int] = {}
            self._local.table = table
            with self._lock:
                # (kept after its thread ends: the counts stay counted)
                self._tables.append(table)
            return table

    def record(self, apiKey: int, errorCounts: dict[int, int]) -> None:
        table = self._table()
        for error, count in errorCounts.items():
            key = (apiKey, int(error))
            table[key] = table.get(key, 0) + count

    def count(self, apiKey: int, error: int, times: int = 1) -> None:
        """
        One error code, C{times} times (a response answered from its frame).
        """
        table = self._table()
        key = (apiKey, error)
        table[key] = table.get(key, 0) + times

    def snapshot(self) -> dict[tuple[int, int], int]:
        with self._lock:
            tables = list(self._tables)
        total: dict[tuple[int, int], int] = defaultdict(int)
        for table in tables:
            # (a dict's copy is one step under the GIL: its thread may be
            # adding to it meanwhile)
            for key, count in table.copy().items():
                total[key] += count
        return dict(total)


def _escape(value) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Writer:
    """
    Collects families and samples in any order and writes each family as one
    block -- HELP, TYPE, then all its samples -- as the text format requires
    (strict parsers drop the type of a family whose samples are split).
    """

    #: sample name suffixes that belong to a histogram's family
    _HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def declare(self, name: str, kind: str, doc: str) -> None:
        if name not in self._families:
            self._families[name] = (kind, doc, [])

    def _familyOf(self, name: str) -> list[str]:
        family = self._families.get(name)
        if family is None:
            for suffix in self._HISTOGRAM_SUFFIXES:
                base = self._families.get(name[: -len(suffix)]) if name.endswith(suffix) else None
                if base is not None and base[0] == "histogram":
                    family = base
                    break
            else:
                raise KeyError(f"metric {name} sampled before it was declared")
        return family[2]

    def sample(self, name: str, value, **labels) -> None:
        if labels:
            text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            line = f"{name}{{{text}}} {value}"
        else:
            line = f"{name} {value}"
        self._familyOf(name).append(line)

    def text(self) -> str:
        lines = []
        for name, (kind, doc, samples) in self._families.items():
            lines.append(f"# HELP {name} {_escapeHelp(doc)}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"


def _escapeHelp(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace("\n", "\\n")


def render(broker, server) -> str:
    """
    The whole exposition, read from the live broker (gauges) and the
    counters kept as requests pass.
    """
    w = _Writer()
    requests: dict[int, int] = defaultdict(int)
    phases: dict[int, list[_Histogram]] = {}
    for stats in server.requestStats():
        for key, count in list(stats.requests.items()):
            requests[key] += count
        for key, histograms in list(stats.phases.items()):
            total = phases.setdefault(key, [_Histogram() for _ in PHASES])
            for mine, theirs in zip(total, histograms):
                mine.add(theirs)

    w.declare("kafka_network_requests_total", "counter", "Requests answered, per API.")
    for key in sorted(requests):
        w.sample("kafka_network_requests_total", requests[key], request=apiName(key), api_key=key)
    w.declare(
        "kafka_network_request_time_seconds",
        "histogram",
        "Time per request phase: request_queue, local, response_queue, send, total.",
    )
    for key in sorted(phases):
        for phase, histogram in zip(PHASES, phases[key]):
            cumulative = 0
            for bound, count in zip((*BUCKETS, "+Inf"), histogram.counts):
                cumulative += count
                w.sample(
                    "kafka_network_request_time_seconds_bucket", cumulative,
                    request=apiName(key), phase=phase, le=bound,
                )
            w.sample("kafka_network_request_time_seconds_sum", f"{histogram.sum:.6f}",
                     request=apiName(key), phase=phase)
            w.sample("kafka_network_request_time_seconds_count", cumulative,
                     request=apiName(key), phase=phase)

    w.declare("kafka_network_request_errors_total", "counter",
              "Errors per API and error code of every response (Kafka's ErrorsPerSec: each "
              "place a response carries an error code, NONE too), and of requests whose "
              "connection was closed in place of an answer (an acks=0 Produce that failed).")
    for (key, error), count in sorted(broker.requestErrors.snapshot().items()):
        w.sample("kafka_network_request_errors_total", count, request=apiName(key), api_key=key,
                 error=_errorName(error))
    w.declare("kafka_network_request_queue_size", "gauge", "Requests waiting in the RequestChannel.")
    w.sample("kafka_network_request_queue_size", len(server.channel))
    w.declare("kafka_network_memory_pool_used_bytes", "gauge", "Bytes held by queued requests.")
    w.sample("kafka_network_memory_pool_used_bytes", server.memoryPool.used)
    w.declare("kafka_network_processor_idle_ratio", "gauge", "Share of time each Processor waits in epoll.")
    for processor in server.processors:
        w.sample("kafka_network_processor_idle_ratio", f"{processor.idleClock.ratio():.4f}",
                 processor=processor.index)
    handlerPool = server.handlerPool
    handlerIdle, handlerLifetime = handlerPool.idle.totals()
    w.declare("kafka_server_request_handler_avg_idle_ratio", "gauge",
              "Share of time the request handler threads waited for the RequestChannel since "
              "they started, averaged over the pool (Kafka's RequestHandlerAvgIdlePercent).")
    w.sample("kafka_server_request_handler_avg_idle_ratio",
             f"{min(1.0, handlerIdle / handlerLifetime) if handlerLifetime > 0 else 1.0:.4f}")
    w.declare("kafka_server_request_handler_idle_seconds_total", "counter",
              "Seconds the request handler threads waited for the RequestChannel, summed over "
              "the threads: its rate over kafka_server_request_handler_threads is the pool's "
              "average idle ratio (Kafka's RequestHandlerAvgIdlePercent).")
    w.sample("kafka_server_request_handler_idle_seconds_total", f"{handlerIdle:.6f}")
    w.declare("kafka_server_request_handler_threads", "gauge", "Request handler threads (num.io.threads).")
    w.sample("kafka_server_request_handler_threads", handlerPool.numThreads)
    w.declare("kafka_network_connections", "gauge", "Open connections per listener.")
    for listener in server.listeners:
        w.sample("kafka_network_connections", server.connectionsByListener[listener.name],
                 listener=listener.name)

    topicBytes = broker.topicBytes
    bytesIn, bytesOut, messagesIn = topicBytes.snapshot()
    w.declare("kafka_server_bytes_in_total", "counter", "Record bytes produced, per topic.")
    for topic in sorted(bytesIn):
        w.sample("kafka_server_bytes_in_total", bytesIn[topic], topic=topic)
    w.declare("kafka_server_messages_in_total", "counter", "Records produced, per topic (Kafka's MessagesInPerSec).")
    for topic in sorted(messagesIn):
        w.sample("kafka_server_messages_in_total", messagesIn[topic], topic=topic)
    w.declare("kafka_server_bytes_out_total", "counter", "Record bytes fetched, per topic.")
    for topic in sorted(bytesOut):
        w.sample("kafka_server_bytes_out_total", bytesOut[topic], topic=topic)
    failedProduce = topicBytes.failures()
    w.declare("kafka_server_failed_produce_requests_total", "counter",
              "Partition appends refused, per topic, other than the known answers (unknown partition, "
              "not the leader, too large, corrupt) (Kafka's FailedProduceRequestsPerSec): records that "
              "break the topic's rules, NOT_ENOUGH_REPLICAS, producer sequence and epoch errors.")
    for topic in sorted(failedProduce):
        w.sample("kafka_server_failed_produce_requests_total", failedProduce[topic], topic=topic)

    _renderFetchSessions(w, broker.fetchSessions.published)

    replication = broker.replicationQuotas
    if replication is not None:
        # Kafka's LeaderReplication / FollowerReplication byte-rate.
        w.declare("kafka_server_replication_throttled_byte_rate", "gauge",
                  "Bytes per second of the partitions each side's replication throttle counts "
                  "(leader/follower.replication.throttled.replicas).")
        for quota in (replication.leader, replication.follower):
            w.sample("kafka_server_replication_throttled_byte_rate", f"{quota.rate():.1f}", side=quota.side)

    _renderReplicaManager(w, broker.replicaManager)
    _renderController(w, broker.cluster, broker.logManager)

    logManager = broker.logManager
    endOffsets: dict[tuple[str, int], int] = {}
    if logManager is not None:
        w.declare("kafka_log_log_end_offset", "gauge", "Next offset of each partition.")
        w.declare("kafka_log_log_start_offset", "gauge", "First readable offset of each partition.")
        w.declare("kafka_log_size_bytes", "gauge", "Bytes on disk of each partition.")
        for name, info in sorted(logManager.topics().items()):
            for p in range(info.numPartitions):
                log = logManager.getLog(name, p)
                if log is None:
                    continue
                end = log.logEndOffset
                endOffsets[(name, p)] = end
                w.sample("kafka_log_log_end_offset", end, topic=name, partition=p)
                w.sample("kafka_log_log_start_offset", log.logStartOffset, topic=name, partition=p)
                w.sample("kafka_log_size_bytes", log.size, topic=name, partition=p)

    cleaner = broker.logCleaner
    if cleaner is not None:
        _renderCleaner(w, cleaner.metrics())

    coordinator = broker.groupCoordinator
    if coordinator is not None:
        # What the coordinator's owner last published: immutable, so this
        # neither waits for nor disturbs the groups.
        w.declare("kafka_consumergroup_lag", "gauge", "Log end offset minus the committed offset.")
        w.declare("kafka_consumergroup_committed_offset", "gauge", "Committed offset.")
        for groupId, published in sorted(coordinator.publishedGroups().items()):
            for (topic, partition), committed in sorted(published.offsets.items()):
                if committed < 0:
                    continue
                labels = dict(group=groupId, topic=topic, partition=partition)
                w.sample("kafka_consumergroup_committed_offset", committed, **labels)
                end = endOffsets.get((topic, partition))
                if end is not None:
                    w.sample("kafka_consumergroup_lag", max(0, end - committed), **labels)
    _renderProcess(w)
    return w.text()


def _errorName(code: int) -> str:
    # Kafka's Errors name, as the JMX tag says it (CORRUPT_MESSAGE)
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _procFields(path: str) -> list[str]:
    try:
        with open(path, "rb") as f:
            return f.read().decode("ascii", "replace").split()
    except OSError:
        return []


def _renderProcess(w: _Writer) -> None:
    """
    The standard process and Python families, with prometheus_client's
    names (what every Python exporter serves), read from C{/proc} (Linux).
    """
    import gc
    import resource

    times = os.times()
    w.declare("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
    w.sample("process_cpu_seconds_total", f"{times.user + times.system:.2f}")
    pageSize = resource.getpagesize()
    statm = _procFields("/proc/self/statm")
    if len(statm) >= 2:
        w.declare("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
        w.sample("process_virtual_memory_bytes", int(statm[0]) * pageSize)
        w.declare("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
        w.sample("process_resident_memory_bytes", int(statm[1]) * pageSize)
    # Fields after the command (which may hold spaces) in parentheses.
    try:
        with open("/proc/self/stat", "rb") as f:
            afterName = f.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as f:
            bootTime = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
        ticks = os.sysconf("SC_CLK_TCK")
        startTime = bootTime + int(afterName[19]) / ticks
    except (OSError, IndexError, ValueError, StopIteration):
        startTime = None
    if startTime is not None:
        w.declare("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.")
        w.sample("process_start_time_seconds", f"{startTime:.2f}")
    try:
        openFds = len(os.listdir("/proc/self/fd"))
    except OSError:
        openFds = None
    if openFds is not None:
        w.declare("process_open_fds", "gauge", "Number of open file descriptors.")
        w.sample("process_open_fds", openFds)
    w.declare("process_max_fds", "gauge", "Maximum number of open file descriptors.")
    w.sample("process_max_fds", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    status = _procFields("/proc/self/status")
    if "Threads:" in status:
        w.declare("process_threads", "gauge", "OS threads of the process.")
        w.sample("process_threads", status[status.index("Threads:") + 1])
    w.declare("python_threads", "gauge", "Python threads alive (threading.active_count()).")
    w.sample("python_threads", threading.active_count())
    w.declare("python_gc_objects_collected_total", "counter", "Objects collected during gc.")
    w.declare("python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC.")
    w.declare("python_gc_collections_total", "counter", "Number of times this generation was collected.")
    for generation, stats in enumerate(gc.get_stats()):
        w.sample("python_gc_objects_collected_total", stats["collected"], generation=generation)
        w.sample("python_gc_objects_uncollectable_total", stats["uncollectable"], generation=generation)
        w.sample("python_gc_collections_total", stats["collections"], generation=generation)


def _renderFetchSessions(w: _Writer, stats) -> None:
    # kafka.server:type=FetchSessionCache, as the JMX exporter names it
    w.declare("kafka_server_fetchsessioncache_numincrementalfetchsessions", "gauge",
              "Incremental fetch sessions kept.")
    w.sample("kafka_server_fetchsessioncache_numincrementalfetchsessions", stats.sessions)
    w.declare("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", "gauge",
              "Partitions in all incremental fetch sessions.")
    w.sample("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", stats.partitions)
    w.declare("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", "counter",
              "Fetch sessions evicted to make room for another.")
    w.sample("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", stats.evictions)
    w.declare("kafka_server_fetch_session_requests_total", "counter",
              "Fetch requests with session metadata, by kind: full (opens a session), incremental, "
              "sessionless (closes one) and error (FETCH_SESSION_ID_NOT_FOUND and the like).")
    for kind, count in sorted(stats.requests.items()):
        w.sample("kafka_server_fetch_session_requests_total", count, kind=kind)


#: Kafka's log cleaner gauges: (JMX type, name) -> help
_CLEANER_GAUGES = {
    ("LogCleanerManager", "max-dirty-percent"): "Dirty share of the dirtiest compacted log, in percent.",
    ("LogCleanerManager", "time-since-last-run-ms"): "Milliseconds since a cleaner thread last looked for a log to clean.",
    ("LogCleaner", "max-buffer-utilization-percent"): "Dedupe buffer use of the last passes, highest of the cleaner threads.",
    ("LogCleaner", "cleaner-recopy-percent"): "Bytes written per byte read by the last passes, in percent.",
    ("LogCleaner", "max-clean-time-secs"): "Duration of the longest of the cleaner threads' last passes.",
    ("LogCleaner", "max-compaction-delay-secs"): "How far past max.compaction.lag.ms the most overdue log is.",
    ("LogCleaner", "DeadThreadCount"): "Cleaner threads that died.",
}


def _metricName(jmxType: str, name: str) -> str:
    # kafka.log:type=LogCleaner,name=max-clean-time-secs -> the JMX
    # exporter's kafka_log_logcleaner_max_clean_time_secs.
    snake = "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(name))
    return f"kafka_log_{jmxType.lower()}_{snake.replace('-', '_')}"


def _renderCleaner(w: _Writer, metrics: dict) -> None:
    for (jmxType, name), doc in _CLEANER_GAUGES.items():
        metric = _metricName(jmxType, name)
        w.declare(metric, "gauge", doc)
        w.sample(metric, metrics[name])
    for direction in ("read", "written"):
        metric = f"kafka_log_logcleaner_bytes_{direction}_total"
        w.declare(metric, "counter", f"Bytes the log cleaner {direction} in its passes.")
        w.sample(metric, metrics[f"bytes-{direction}"])
    w.declare("kafka_log_logcleanermanager_uncleanable_partitions_count", "gauge",
              "Partitions the cleaner gave up on (a damaged batch), per log directory.")
    w.declare("kafka_log_logcleanermanager_uncleanable_bytes", "gauge",
              "Bytes of those partitions, per log directory.")
    for logDir, (count, size) in sorted(metrics["uncleanable"].items()):
        w.sample("kafka_log_logcleanermanager_uncleanable_partitions_count", count, logDirectory=logDir)
        w.sample("kafka_log_logcleanermanager_uncleanable_bytes", size, logDirectory=logDir)


#: Kafka's ReplicaManager gauges (kafka.server:type=ReplicaManager), by
#: their JMX exporter names -> help
_REPLICA_GAUGES = {
    "PartitionCount": "Partitions on this broker (Kafka's PartitionCount).",
    "LeaderCount": "Partitions this broker leads (Kafka's LeaderCount).",
    "UnderReplicatedPartitions": "Partitions led here whose ISR is smaller than their replicas "
                                 "(Kafka's UnderReplicatedPartitions).",
    "UnderMinIsrPartitionCount": "Partitions led here whose ISR is below min.insync.replicas: "
                                 "acks=all produces are refused (Kafka's UnderMinIsrPartitionCount).",
    "AtMinIsrPartitionCount": "Partitions led here whose ISR is at min.insync.replicas: one more "
                              "replica lost refuses acks=all produces (Kafka's AtMinIsrPartitionCount).",
}

#: Kafka's ReplicaManager meters' counts -> (the manager's counter, help)
_REPLICA_COUNTERS = {
    "isrshrinks": ("isrShrinks", "ISR shrinks the controller accepted (Kafka's IsrShrinksPerSec)."),
    "isrexpands": ("isrExpands", "ISR expansions the controller accepted (Kafka's IsrExpandsPerSec)."),
    "failedisrupdates": ("failedIsrUpdates",
                         "ISR changes the controller refused (Kafka's FailedIsrUpdatesPerSec)."),
}


def _renderReplicaManager(w: _Writer, replicaManager) -> None:
    if replicaManager is None:
        return
    counts = replicaManager.partitionCounts()
    for name, doc in _REPLICA_GAUGES.items():
        metric = f"kafka_server_replicamanager_{name.lower()}"
        w.declare(metric, "gauge", doc)
        w.sample(metric, counts[name])
    for name, (attribute, doc) in _REPLICA_COUNTERS.items():
        metric = f"kafka_server_replicamanager_{name}_total"
        w.declare(metric, "counter", doc)
        w.sample(metric, getattr(replicaManager, attribute))
    w.declare("kafka_server_replicafetchermanager_maxlag", "gauge",
              "The largest lag, in records, of the partitions this broker follows: the leader's high "
              "watermark minus this replica's log end at its last fetch (Kafka's ReplicaFetcherManager MaxLag).")
    w.sample("kafka_server_replicafetchermanager_maxlag", replicaManager.maxLag(), clientId="Replica")


#: Kafka's controller gauges (kafka.controller:type=KafkaController), by
#: their JMX exporter names -> help; as in Kafka, only the active
#: controller reports counts (the others 0), so a sum over the brokers is
#: the cluster's
_CONTROLLER_GAUGES = {
    "ActiveControllerCount": "1 on the broker that is the active controller, else 0 (a broker "
                             "without zookeeper.connect is its own). The sum over a cluster "
                             "should be 1.",
    "OfflinePartitionsCount": "Partitions without a live leader (topics being deleted aside): "
                              "nobody can produce to or consume from them.",
    "PreferredReplicaImbalanceCount": "Partitions whose leader is not their preferred (first) replica.",
    "GlobalTopicCount": "Topics in the cluster.",
    "GlobalPartitionCount": "Partitions in the cluster.",
}


def controllerCounts(cluster, logManager, brokerId: int | None = None) -> dict:
    """
    The controller gauges from the published L{ClusterImage} (no
    ZooKeeper read, no wait on the cluster's owner): zero on a broker that
    is not the controller.  A broker without a cluster controls itself.
    """
    counts = dict.fromkeys(_CONTROLLER_GAUGES, 0)
    if cluster is None:
        topics = logManager.topics() if logManager is not None else {}
        counts["ActiveControllerCount"] = 1
        counts["GlobalTopicCount"] = len(topics)
        counts["GlobalPartitionCount"] = sum(info.numPartitions for info in topics.values())
        return counts
    image = cluster.image
    if image.controllerId < 0 or image.controllerId != cluster.brokerId:
        return counts
    counts["ActiveControllerCount"] = 1
    counts["GlobalTopicCount"] = len(image.topics)
    for topic, partition, replicas, state in image.partitions():
        counts["GlobalPartitionCount"] += 1
        if topic in image.deleting or state is None:
            continue
        if state.leader not in image.brokers:
            counts["OfflinePartitionsCount"] += 1
        if replicas and state.leader != replicas[0]:
            counts["PreferredReplicaImbalanceCount"] += 1
    return counts


def _renderController(w: _Writer, cluster, logManager) -> None:
    counts = controllerCounts(cluster, logManager)
    for name, doc in _CONTROLLER_GAUGES.items():
        metric = f"kafka_controller_kafkacontroller_{name.lower()}"
        w.declare(metric, "gauge", doc)
        w.sample(metric, counts[name])
    if cluster is None:
        return
    w.declare("kafka_controller_controllerstats_uncleanleaderelections_total", "counter",
              "Leaders this broker, as the controller, elected from outside the ISR "
              "(Kafka's UncleanLeaderElectionsPerSec): records acknowledged by the old ISR may be lost.")
    w.sample("kafka_controller_controllerstats_uncleanleaderelections_total", cluster.uncleanLeaderElections)
    _renderSession(w, cluster)


#: kazoo's session events -> Kafka's SessionExpireListener meter, help
_SESSION_EVENTS = {
    "CONNECTED": ("zookeepersyncconnects", "ZooKeeper sessions connected (Kafka's ZooKeeperSyncConnectsPerSec)."),
    "SUSPENDED": ("zookeeperdisconnects",
                  "Connections to ZooKeeper lost, the session kept for now (Kafka's ZooKeeperDisconnectsPerSec)."),
    "LOST": ("zookeeperexpires", "ZooKeeper sessions expired: the broker registers again under a new one "
                                 "(Kafka's ZooKeeperExpiresPerSec)."),
}
#: kazoo's states as ZooKeeper's client names them (Kafka's SessionState)
_SESSION_STATES = {"CONNECTED": "CONNECTED", "SUSPENDED": "CONNECTING", "LOST": "CLOSED"}


def _renderSession(w: _Writer, cluster) -> None:
    events = dict(cluster.sessionEvents)
    for state, (name, doc) in _SESSION_EVENTS.items():
        metric = f"kafka_server_sessionexpirelistener_{name}_total"
        w.declare(metric, "counter", doc)
        w.sample(metric, events.get(state, 0))
    current = _SESSION_STATES.get(str(getattr(cluster.zk, "state", "")), "")
    w.declare("kafka_server_sessionexpirelistener_sessionstate", "gauge",
              "1 for the state the broker's ZooKeeper session is in, 0 for the others "
              "(Kafka's SessionState: CONNECTED, CONNECTING, CLOSED).")
    for state in ("CONNECTED", "CONNECTING", "CLOSED"):
        w.sample("kafka_server_sessionexpirelistener_sessionstate", int(state == current), state=state)
