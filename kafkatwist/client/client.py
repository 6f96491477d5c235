"""
A small blocking Kafka client over the project's own protocol code: enough to
read and write records, look up metadata and manage topics, for the Spark
connector and for tests that drive a broker from plain threads.

It is deliberately not a full consumer or producer: no consumer groups, no
batching across calls.  Each call is one request (or one per partition
leader) and returns plain dataclasses.

Against a cluster it behaves as Kafka's clients do: it bootstraps from any
server of its list, sends each partition's requests to the partition's
leader (one connection per broker), stamps Fetch and ListOffsets with the
leader epoch it knows (KIP-320), and when a leader moves -- an answer of
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
LEADER_NOT_AVAILABLE, or a broken connection -- refreshes metadata and tries
again with a growing pause (C{retry.backoff.ms} 100 up to
C{retry.backoff.max.ms} 1000), until the call's timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kafkatwist.client.connection import (
    BrokerConnection,
    KafkaConnectionError,
    TLSSettings,
    responseError,
)
from kafkatwist.client.fetchresponse import (
    FIRST_VERSION as FIRST_FETCH_VERSION,
    LAST_VERSION as LAST_FETCH_VERSION,
    MalformedFetchResponse,
    readFetchPartition,
)
from kafkatwist.errors import KafkaError
from kafkatwist.protocol.apis import (
    CREATE_TOPICS,
    DELETE_TOPICS,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    requestType,
)
from kafkatwist.protocol.batch import PRODUCER_ID, PRODUCER_ID_AT
from kafkatwist.protocol.entities import has, make, ms, nested
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches

__all__ = [
    "BrokerMetadata",
    "ClusterMetadata",
    "EARLIEST",
    "FetchResult",
    "KafkaWireClient",
    "LATEST",
    "MAX_TIMESTAMP",
    "RawFetchResult",
    "TopicMetadata",
]


#: ListOffsets special timestamps
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3

_ZERO_UUID = uuid.UUID(int=0)

# Errors after which the partition's leader may have moved: refresh metadata
# and try again.
_LEADER_ERRORS = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
        ErrorCode.not_controller,
        ErrorCode.network_exception,  # KafkaConnectionError: the broker went away
        ErrorCode.broker_not_available,  # a leader Metadata has not listed yet
        # a new leader whose high watermark has not caught up (KIP-207)
        ErrorCode.offset_not_available,
    }
)

#: Produce answers after which the batch was certainly not appended
_NOT_APPENDED = _LEADER_ERRORS - {ErrorCode.network_exception}
#: everything a resend may cure (an idempotent batch cannot be duplicated)
_RETRIABLE = frozenset(code for code in ErrorCode if code.retriable) | _LEADER_ERRORS

#: the pause before the first retry, and the most it grows to (Kafka's
#: retry.backoff.ms and retry.backoff.max.ms defaults)
RETRY_BACKOFF = 0.1
RETRY_BACKOFF_MAX = 1.0



def _idempotent(payload: bytes) -> bool:
    """
    Whether a batch carries a producer id: the broker then recognises a
    resend by its sequence numbers, so sending it again cannot duplicate.
    """
    if len(payload) < PRODUCER_ID_AT + PRODUCER_ID.size:
        return False
    return PRODUCER_ID.unpack_from(payload, PRODUCER_ID_AT)[0] >= 0


@dataclass(frozen=True)
class BrokerMetadata:
    nodeId: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class TopicMetadata:
    """
    @ivar partitions: {partition index: leader node id (-1: none)}.
    @ivar error: the topic's error code (C{ErrorCode.none} if fine).
    @ivar topicId: the topic id (Metadata v10+), else C{None}.
    @ivar partitionErrors: {partition index: error code} for partitions
        whose error is not C{none}.
    @ivar leaderEpochs: {partition index: leader epoch} (Metadata v7+;
        -1 when unknown).
    """

    name: str
    partitions: dict[int, int]
    error: ErrorCode = ErrorCode.none
    topicId: uuid.UUID | None = None
    isInternal: bool = False
    partitionErrors: dict[int, ErrorCode] = field(default_factory=dict)
    leaderEpochs: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterMetadata:
    """
    @ivar brokers: {node id: L{BrokerMetadata}}.
    @ivar topics: {name: L{TopicMetadata}}.
    """

    brokers: dict[int, BrokerMetadata]
    controllerId: int
    clusterId: str | None
    topics: dict[str, TopicMetadata]


@dataclass
class FetchResult:
    """
    @ivar records: the records at or after the requested offset (records
        before it in the first batch, which a broker returns whole, are
        dropped; so are control records such as transaction markers).
    @ivar nextOffset: the offset to fetch next: just past the last complete
        batch returned, or the requested offset if none was.
    @ivar error: the partition's error code; C{ErrorCode.none} on success.
        Partition errors are reported here rather than raised so a caller can
        act on, say, C{OFFSET_OUT_OF_RANGE} with the watermarks in hand.
    """

    highWatermark: int
    logStartOffset: int
    records: list[Record]
    nextOffset: int
    error: ErrorCode = ErrorCode.none
    lastStableOffset: int = -1


@dataclass
class RawFetchResult:
    """
    A fetch answer with the record bytes as the broker sent them: whole
    batches, possibly with a trailing partial one (C{bytes}, or a read-only
    C{memoryview} of the received response for C{fetchRaw(view=True)}).
    """

    highWatermark: int
    logStartOffset: int
    records: bytes | memoryview
    error: ErrorCode = ErrorCode.none
    lastStableOffset: int = -1
    #: C{(producerId, firstOffset)} of the aborted transactions the records
    #: overlap (a read_committed fetch), else C{()}
    abortedTransactions: tuple = ()


def _parseAddress(address: str) -> tuple[str, int]:
    address = address.strip()
    if address.startswith("["):  # [IPv6]:port
        host, _, rest = address[1:].partition("]")
        port = rest.lstrip(":")
        return host, int(port) if port else 9092
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, 9092
    return host, int(port)


def _raiseFor(code, message: str | None = None) -> None:
    code = responseError(code)
    if code != ErrorCode.none:
        raise KafkaError(code, message)


class KafkaWireClient:
    """
    A blocking Kafka client.

    Connects to a bootstrap server at construction, learns the cluster from
    Metadata, and keeps one connection per broker node, opened on first use
    and reopened after a failure.  Each connection negotiates API versions
    with ApiVersions and uses, per API, the highest version both sides
    support.

    Thread-compatible, not thread-safe: use one client per thread (or guard
    a shared one with a lock).  Connections serialise their own round trips,
    but the metadata caches are not protected.

    @param bootstrapServers: C{"host:port,host:port"} or a list of
        C{"host:port"}.
    @param securityProtocol: C{'PLAINTEXT'} or C{'SSL'}.
    @param sslCafile: PEM CA bundle to verify brokers with (default: the
        system trust store).
    @param sslCertfile: PEM client certificate (chain), for mutual TLS.
    @param sslKeyfile: PEM key for C{sslCertfile} (default: in the certfile).
    @param sslPassword: the key's passphrase.
    @param sslCheckHostname: check the broker's certificate names the host
        or IP address connected to.
    @param timeout: seconds for connecting and for each request; also how
        long a call keeps retrying while a partition's leader moves.
    @param clock: C{time.monotonic}-like, and C{sleep}: injected by tests.
    @raise KafkaConnectionError: if no bootstrap server can be reached.
    """

    def __init__(
        self,
        bootstrapServers: str | list[str],
        clientId: str | None = "kafkatwist-client",
        securityProtocol: str = "PLAINTEXT",
        sslCafile: str | None = None,
        sslCertfile: str | None = None,
        sslKeyfile: str | None = None,
        sslPassword: str | None = None,
        sslCheckHostname: bool = True,
        timeout: float = 30.0,
        clock=time.monotonic,
        sleep=time.sleep,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        if isinstance(bootstrapServers, str):
            bootstrapServers = bootstrapServers.split(",")
        self.bootstrap = [_parseAddress(a) for a in bootstrapServers if a.strip()]
        if not self.bootstrap:
            raise ValueError("no bootstrap servers")
        self.clientId = clientId
        self.timeout = timeout
        protocol = securityProtocol.upper()
        if protocol == "SSL":
            self._tls: TLSSettings | None = TLSSettings(
                sslCafile, sslCertfile, sslKeyfile, sslPassword, sslCheckHostname
            )
            # One context for every connection: loading PEM files once.
            self._tlsContext = self._tls.context()
        elif protocol == "PLAINTEXT":
            self._tls = None
            self._tlsContext = None
        else:
            raise ValueError(f"unsupported security protocol {securityProtocol!r}")
        #: (host, port) -> connection; a node's connection is found through
        #: its address, so the bootstrap connection is reused when the
        #: bootstrap server turns out to be a node.
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._brokers: dict[int, BrokerMetadata] = {}
        self._topics: dict[str, TopicMetadata] = {}
        self._controllerId = -1
        self._closed = False
        self._bootstrapConnection()

    def __enter__(self) -> KafkaWireClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """
        Close every connection.  The client can not be used afterwards.
        """
        self._closed = True
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- connections ------------------------------------------------------

    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        if self._closed:
            raise KafkaConnectionError("client is closed")
        connection = self._connections.get(address)
        if connection is not None and connection.connected:
            return connection
        connection = BrokerConnection(
            address[0], address[1], self.clientId, self.timeout, self._tls, self._tlsContext
        )
        connection.connect()
        self._connections[address] = connection
        return connection

    def _bootstrapConnection(self) -> BrokerConnection:
        for connection in self._connections.values():
            if connection.connected:
                return connection
        errors: list[KafkaConnectionError] = []
        for address in self.bootstrap + [(b.host, b.port) for b in self._brokers.values()]:
            try:
                return self._connect(address)
            except KafkaConnectionError as e:
                errors.append(e)
        # Keep the failure's type when every server failed the same way, so
        # a caller can tell, say, a TLS name mismatch from a refused port.
        kind = type(errors[0]) if len({type(e) for e in errors}) == 1 else KafkaConnectionError
        raise kind(
            "no broker reachable: " + "; ".join(e.message or str(e) for e in errors)
        ) from errors[-1]

    def connection(self, nodeId: int | None = None) -> BrokerConnection:
        """
        The connection to broker C{nodeId} (opening it if needed), or to any
        broker if C{None}.
        """
        if nodeId is None:
            return self._bootstrapConnection()
        broker = self._brokers.get(nodeId)
        if broker is None:
            self.metadata([])
            broker = self._brokers.get(nodeId)
            if broker is None:
                raise KafkaError(ErrorCode.broker_not_available, f"no broker with node id {nodeId}")
        return self._connect((broker.host, broker.port))

    def apiVersion(self, apiKey: int, nodeId: int | None = None) -> int | None:
        """
        @return: the version of C{apiKey} negotiated with the broker, or
            C{None} if none is common.
        """
        return self.connection(nodeId).pick(apiKey)

    def brokerApiVersions(self, nodeId: int | None = None) -> dict[int, tuple[int, int]]:
        """
        @return: {apiKey: (min, max)} as the broker announced them.
        """
        return dict(self.connection(nodeId).brokerVersions)

    def _version(self, connection: BrokerConnection, apiKey: int, minimum: int = 0) -> int:
        version = connection.pick(apiKey)
        if version is None or version < minimum:
            raise KafkaError(
                ErrorCode.unsupported_version,
                f"{connection.host}:{connection.port} supports no usable version of api {apiKey} "
                f"(broker: {connection.brokerVersions.get(apiKey)})",
            )
        return version

    def _call(
        self, nodeId, apiKey, build, minimum=0, retry=True, expectResponse=True, timeout=None
    ):
        """
        Send one request built for the negotiated version.

        @param build: C{build(version, requestClass) -> entity}, or
            C{(version, entity)} to use a lower version than offered.
        @param retry: on a connection failure, reconnect and send once more
            (for requests that are safe to repeat).
        @return: (version, response entity).
        """
        attempts = 2 if retry else 1
        for attempt in range(attempts):
            connection = self.connection(nodeId)
            version = self._version(connection, apiKey, minimum)
            built = build(version, requestType(apiKey, version))
            if isinstance(built, tuple):
                version, entity = built
            else:
                entity = built
            try:
                return version, connection.request(
                    apiKey, version, entity, expectResponse=expectResponse, timeout=timeout
                )
            except KafkaConnectionError:
                if attempt + 1 == attempts:
                    raise

    # -- generic ---------------------------------------------------------

    def send(self, apiKey: int, entity, nodeId: int | None = None, timeout: float | None = None):
        """
        Send any request entity (a C{kio} request dataclass) at its own
        schema version, and return the decoded response entity.  Error codes
        in the response are not raised; this is the escape hatch.
        """
        version = int(type(entity).__version__)
        return self.connection(nodeId).request(apiKey, version, entity, timeout=timeout)

    def call(self, apiKey: int, build, nodeId: int | None = None, timeout: float | None = None):
        """
        Send one request of any API -- Kafka's, or a plugin's whose schemas
        were registered with L{kafkatwist.protocol.apis.registerSchema} in
        this process -- at the highest version both this codec and the
        broker (per its ApiVersions) speak.  Error codes in the response are
        not raised.  Not retried on a connection failure.

        @param build: C{build(version, requestClass) -> request entity}, or
            C{(version, entity)} to use a lower version than offered.
        @param nodeId: the broker to ask; C{None} for any.
        @return: (version used, response entity).
        @raise KafkaError: C{UNSUPPORTED_VERSION} if the broker does not
            serve C{apiKey} in a version this process knows.
        """
        return self._call(nodeId, apiKey, build, retry=False, timeout=timeout)

    def sendRaw(
        self,
        frame: bytes,
        nodeId: int | None = None,
        expectResponse: bool = True,
        timeout: float | None = None,
    ) -> bytes | None:
        """
        Write raw request bytes and read one response frame, for wire-level
        tests.

        @param frame: a whole request frame, size prefix included (what
            L{kafkatwist.protocol.codec.encodeRequestFrame} returns).
        @return: the response frame without its size prefix (correlation id
            first: what C{decodeResponseFrame} takes).
        @raise KafkaConnectionError: if the broker closes the connection.
        """
        return self.connection(nodeId).roundTrip(frame, expectResponse, timeout)

    # -- metadata --------------------------------------------------------

    def metadata(
        self, topics: Iterable[str] | None = None, allowAutoTopicCreation: bool = False
    ) -> ClusterMetadata:
        """
        Metadata for C{topics} (all topics if C{None}; none, brokers only,
        if empty).  Topic errors are reported in L{TopicMetadata.error}, not
        raised.  Also refreshes the client's broker and leader caches.
        """
        names = None if topics is None else list(topics)

        def build(version, cls):
            if names is None:
                requested = () if version == 0 else None
            else:
                topicCls = nested(cls, "MetadataRequestTopic")
                requested = tuple(make(topicCls, name=n, topic_id=None) for n in names)
            return make(
                cls,
                topics=requested,
                allow_auto_topic_creation=allowAutoTopicCreation,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        _, response = self._call(None, METADATA, build)
        brokers = {
            int(b.node_id): BrokerMetadata(
                int(b.node_id), b.host, int(b.port), getattr(b, "rack", None)
            )
            for b in response.brokers
        }
        topicsOut: dict[str, TopicMetadata] = {}
        for t in response.topics:
            if t.name is None:
                continue
            topicId = getattr(t, "topic_id", None)
            if topicId == _ZERO_UUID:
                topicId = None
            topicsOut[t.name] = TopicMetadata(
                name=t.name,
                partitions={int(p.partition_index): int(p.leader_id) for p in t.partitions},
                error=responseError(t.error_code),
                topicId=topicId,
                isInternal=bool(getattr(t, "is_internal", False)),
                partitionErrors={
                    int(p.partition_index): responseError(p.error_code)
                    for p in t.partitions
                    if p.error_code != ErrorCode.none
                },
                leaderEpochs={
                    int(p.partition_index): int(getattr(p, "leader_epoch", -1))
                    for p in t.partitions
                },
            )
        result = ClusterMetadata(
            brokers=brokers,
            controllerId=int(getattr(response, "controller_id", -1)),
            clusterId=getattr(response, "cluster_id", None),
            # v0 reads an empty topic list as "all topics": honour the
            # caller's "brokers only" anyway.
            topics=topicsOut if names != [] else {},
        )
        self._brokers.update(brokers)
        self._controllerId = result.controllerId
        for name, topic in topicsOut.items():
            if topic.error == ErrorCode.none:
                self._topics[name] = topic
            else:
                self._topics.pop(name, None)
        return result

    def _topic(self, topic: str, refresh: bool = False) -> TopicMetadata:
        cached = None if refresh else self._topics.get(topic)
        if cached is None:
            found = self.metadata([topic]).topics.get(topic)
            if found is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, topic)
            _raiseFor(found.error, topic)
            cached = found
        return cached

    def _leader(self, topic: str, partition: int, refresh: bool = False) -> int:
        return self._leaderAndEpoch(topic, partition, refresh)[0]

    def _leaderAndEpoch(
        self, topic: str, partition: int, refresh: bool = False
    ) -> tuple[int, int]:
        """
        @return: the partition's leader and leader epoch (-1: unknown), as
            the last Metadata said.
        """
        meta = self._topic(topic, refresh)
        leader = meta.partitions.get(partition)
        if leader is None or leader < 0:
            if not refresh:
                return self._leaderAndEpoch(topic, partition, refresh=True)
            if leader is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{partition}")
            raise KafkaError(ErrorCode.leader_not_available, f"{topic}-{partition}")
        return leader, meta.leaderEpochs.get(partition, -1)

    def _topicIdFor(self, topic: str) -> uuid.UUID | None:
        meta = self._topics.get(topic)
        return None if meta is None else meta.topicId

    def _retrying(self, run, retriable=_LEADER_ERRORS):
        """
        Call C{run(refresh)} until it succeeds, with a growing pause between
        attempts, while it fails with an error of C{retriable} (a
        L{KafkaError} raised, or an object returned with such an C{error});
        C{refresh} is true after a failure: re-read metadata first.  Gives
        up with the last failure once the client's timeout would pass.
        """
        deadline = self._clock() + self.timeout
        pause = RETRY_BACKOFF
        refresh = False
        while True:
            try:
                result = run(refresh)
            except KafkaError as e:
                if e.code not in retriable or self._clock() + pause > deadline:
                    raise
            else:
                error = getattr(result, "error", ErrorCode.none)
                if error not in retriable or self._clock() + pause > deadline:
                    return result
            self._sleep(pause)
            pause = min(pause * 2, RETRY_BACKOFF_MAX)
            refresh = True

    def _onLeader(self, topic: str, partition: int, attempt, retriable=_LEADER_ERRORS):
        """
        Run C{attempt(leaderNodeId, leaderEpoch)} on the partition's leader,
        following the leader as it moves (L{_retrying}).  C{attempt}
        signals errors by raising L{KafkaError} or by returning an object
        with an C{error} attribute.
        """
        return self._retrying(
            lambda refresh: attempt(*self._leaderAndEpoch(topic, partition, refresh)), retriable
        )

    # -- list offsets ----------------------------------------------------

    def listOffsets(
        self,
        topic: str,
        partitions: Iterable[int] | int,
        timestamp: int = LATEST,
        isolationLevel: int = 0,
    ) -> dict[int, tuple[int, int]]:
        """
        Offsets by time: C{EARLIEST} (-2), C{LATEST} (-1), C{MAX_TIMESTAMP}
        (-3: the offset of the record with the largest timestamp), or a
        timestamp in ms (the first offset whose timestamp is at or after
        it; -1 if none).  Each partition is asked of its leader, with the
        leader epoch known (KIP-320); partitions whose leader moved are
        asked again of the new one.

        @return: {partition: (offset, timestamp)}.
        @raise KafkaError: for a partition's error code.
        """
        if isinstance(partitions, int):
            partitions = [partitions]
        result: dict[int, tuple[int, int]] = {}
        remaining = list(dict.fromkeys(partitions))

        def run(refresh):
            if refresh:
                self._topic(topic, refresh=True)
            failures: list[KafkaError] = []
            byLeader: dict[int, list[tuple[int, int]]] = {}
            for p in remaining:
                leader, epoch = self._leaderAndEpoch(topic, p)
                byLeader.setdefault(leader, []).append((p, epoch))
            for leader, group in byLeader.items():
                try:
                    answers = self._listOffsetsOnce(
                        leader, topic, group, timestamp, isolationLevel
                    )
                except KafkaError as e:
                    failures.append(e)
                    continue
                for p, (code, offset, ts) in answers.items():
                    if code == ErrorCode.none:
                        result[p] = (offset, ts)
                        remaining.remove(p)
                    else:
                        failures.append(KafkaError(code, f"{topic}-{p}"))
            if failures:
                # What cannot be cured by waiting is reported at once.
                failures.sort(key=lambda e: e.code in _LEADER_ERRORS)
                raise failures[0]
            return result

        return self._retrying(run)

    def _listOffsetsOnce(self, leader, topic, group, timestamp, isolationLevel):
        """
        One ListOffsets to C{leader} for C{group} ([(partition, epoch)]).

        @return: {partition: (error code, offset, timestamp)}.
        """

        def build(version, cls):
            topicCls = nested(cls, "ListOffsetsTopic")
            partitionCls = nested(cls, "ListOffsetsPartition")
            return make(
                cls,
                replica_id=-1,
                isolation_level=isolationLevel,
                timeout=ms(self.timeout * 1000),
                topics=(
                    topicCls(
                        name=topic,
                        partitions=tuple(
                            make(
                                partitionCls,
                                partition_index=p,
                                current_leader_epoch=epoch,
                                timestamp=timestamp,
                            )
                            for p, epoch in group
                        ),
                    ),
                ),
            )

        _, response = self._call(leader, LIST_OFFSETS, build)
        answers = {}
        for t in response.topics:
            for p in t.partitions:
                answers[int(p.partition_index)] = (
                    responseError(p.error_code), int(p.offset), int(p.timestamp)
                )
        missing = {p for p, _ in group} - set(answers)
        if missing:
            raise KafkaError(
                ErrorCode.unknown_server_error,
                f"no offsets returned for partitions {sorted(missing)}",
            )
        return answers

    # -- fetch -----------------------------------------------------------

    def fetchRaw(
        self,
        topic: str,
        partition: int,
        offset: int,
        maxBytes: int = 1 << 20,
        maxWaitMs: int = 0,
        minBytes: int = 1,
        isolationLevel: int = 0,
        view: bool = False,
    ) -> RawFetchResult:
        """
        One partition's Fetch, records undecoded.  A full fetch (no fetch
        session), sent to the partition's leader.  Uses topic ids (Fetch
        v13+) when the broker has given the topic one.

        @param view: return the records as a read-only C{memoryview} into
            the buffer the response was received into, read out of the
            frame by hand (L{readFetchPartition}), rather than C{bytes}
            copied out by the general decoder: for a caller that decodes
            them at once (megabytes a Fetch, one copy fewer).
        """
        return self._onLeader(
            topic,
            partition,
            lambda leader, epoch: self._fetchOnce(
                leader, epoch, topic, partition, offset, maxBytes, maxWaitMs, minBytes,
                isolationLevel, view,
            ),
        )

    def _fetchOnce(
        self, leader, epoch, topic, partition, offset, maxBytes, maxWaitMs, minBytes,
        isolationLevel, view=False,
    ) -> RawFetchResult:
        topicId = self._topicIdFor(topic)

        def build(version, cls):
            if version >= 13 and topicId is None:
                version = 12  # the broker gave no topic id: fetch by name
                cls = requestType(FETCH, version)
            topicCls = nested(cls, "FetchTopic")
            partitionCls = nested(cls, "FetchPartition")
            fetchPartition = make(
                partitionCls,
                partition=partition,
                current_leader_epoch=epoch,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=maxBytes,
            )
            return version, make(
                cls,
                replica_id=-1,
                max_wait=ms(maxWaitMs),
                min_bytes=minBytes,
                max_bytes=maxBytes,
                isolation_level=isolationLevel,
                session_id=0,
                session_epoch=-1,
                topics=(
                    make(topicCls, topic=topic, topic_id=topicId, partitions=(fetchPartition,)),
                ),
                forgotten_topics_data=(),
                rack_id="",
            )

        # A long poll must not trip the socket timeout.
        timeout = self.timeout + maxWaitMs / 1000.0
        if view:
            answer = self._fetchFrame(leader, build, timeout, topic, topicId, partition)
            if answer is not NotImplemented:
                return answer
        _, response = self._call(leader, FETCH, build, timeout=timeout)
        _raiseFor(getattr(response, "error_code", ErrorCode.none), f"fetch {topic}")
        for t in response.responses:
            for p in t.partitions:
                if p.partition_index != partition:
                    continue
                return RawFetchResult(
                    highWatermark=int(p.high_watermark),
                    logStartOffset=int(getattr(p, "log_start_offset", -1)),
                    records=bytes(p.records or b""),
                    error=responseError(p.error_code),
                    lastStableOffset=int(getattr(p, "last_stable_offset", -1)),
                    abortedTransactions=tuple(
                        (int(a.producer_id), int(a.first_offset))
                        for a in (getattr(p, "aborted_transactions", None) or ())
                    ),
                )
        raise KafkaError(
            ErrorCode.unknown_server_error, f"fetch response lacks {topic}-{partition}"
        )

    def _fetchFrame(self, leader, build, timeout, topic, topicId, partition):
        """
        L{_fetchOnce} with the response read by hand (L{readFetchPartition}),
        the records a view of the frame; C{NotImplemented} if the version
        both sides speak is one it does not read (before v4).
        """
        for attempt in range(2):
            connection = self.connection(leader)
            version = self._version(connection, FETCH)
            version, entity = build(version, requestType(FETCH, version))
            if not FIRST_FETCH_VERSION <= version <= LAST_FETCH_VERSION:
                return NotImplemented
            try:
                frame = connection.requestFrame(FETCH, version, entity, timeout=timeout)
            except KafkaConnectionError:
                if attempt:
                    raise
                continue
            try:
                topLevelError, answer = readFetchPartition(
                    frame, version, None if version >= 13 else topic, topicId, partition
                )
            except MalformedFetchResponse as e:
                connection.close()
                raise KafkaConnectionError(
                    f"cannot decode Fetch v{version} response from "
                    f"{connection.host}:{connection.port}: {e}"
                ) from e
            _raiseFor(responseError(topLevelError), f"fetch {topic}")
            if answer is None:
                break
            records = answer.records
            return RawFetchResult(
                highWatermark=answer.highWatermark,
                logStartOffset=answer.logStartOffset,
                records=records if records is not None else memoryview(b""),
                error=responseError(answer.error),
                lastStableOffset=answer.lastStableOffset,
                abortedTransactions=answer.abortedTransactions,
            )
        raise KafkaError(
            ErrorCode.unknown_server_error, f"fetch response lacks {topic}-{partition}"
        )

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        maxBytes: int = 1 << 20,
        maxWaitMs: int = 0,
        minBytes: int = 1,
        isolationLevel: int = 0,
        checkCrc: bool = True,
    ) -> FetchResult:
        """
        Fetch and decode one partition's records from C{offset}.

        @raise CorruptRecordError: if the records do not decode (or a CRC
            does not match, when C{checkCrc}).
        """
        raw = self.fetchRaw(topic, partition, offset, maxBytes, maxWaitMs, minBytes, isolationLevel)
        records: list[Record] = []
        nextOffset = offset
        for batch in decodeBatches(raw.records, checkCrc=checkCrc):
            nextOffset = max(nextOffset, batch.nextOffset)
            if batch.isControl:
                continue
            if batch.baseOffset >= offset:
                records.extend(batch.records)
            else:
                records.extend(r for r in batch.records if r.offset >= offset)
        return FetchResult(
            highWatermark=raw.highWatermark,
            logStartOffset=raw.logStartOffset,
            records=records,
            nextOffset=nextOffset,
            error=raw.error,
            lastStableOffset=raw.lastStableOffset,
        )

    # -- produce ---------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: Iterable[Record] | bytes,
        acks: int = 1,
        compression: str = "none",
        timeoutMs: int = 30000,
        transactionalId: str | None = None,
    ) -> int:
        """
        Append records to one partition.

        @param records: L{Record}s (encoded as one batch with
            C{compression}), or prebuilt batch bytes sent as they are.
        @param acks: 0 (no answer: returns -1), 1 (leader) or -1 (all ISR).
        @return: the base offset the broker assigned.
        @raise KafkaError: for the partition's error code.

        Sent to the partition's leader, and again to the new leader if the
        leader moves before appending.  A batch with a producer id
        (idempotent or transactional) is also sent again after a lost
        connection or any retriable error, since the broker recognises it by
        its sequence numbers; a batch without one is not (it may have been
        appended): the caller decides.
        """
        if isinstance(records, (bytes, bytearray, memoryview)):
            payload = bytes(records)
        else:
            payload = buildBatch(records, compression)

        def attempt(leader, epoch):
            return self._produceOnce(
                leader, topic, partition, payload, acks, timeoutMs, transactionalId
            )

        retriable = _RETRIABLE if _idempotent(payload) else _NOT_APPENDED
        return self._onLeader(topic, partition, attempt, retriable)

    def _produceOnce(self, leader, topic, partition, payload, acks, timeoutMs, transactionalId):
        topicId = self._topicIdFor(topic)

        def build(version, cls):
            if version >= 13 and topicId is None:
                version = 12
                cls = requestType(PRODUCE, version)
            topicCls = nested(cls, "TopicProduceData")
            partitionCls = nested(cls, "PartitionProduceData")
            return version, make(
                cls,
                transactional_id=transactionalId,
                acks=acks,
                timeout=ms(timeoutMs),
                topic_data=(
                    make(
                        topicCls,
                        name=topic,
                        topic_id=topicId,
                        partition_data=(partitionCls(index=partition, records=payload),),
                    ),
                ),
            )

        # Magic 2 batches need Produce v3+.  Not retried on a connection
        # failure: the first attempt may have been appended.
        _, response = self._call(
            leader,
            PRODUCE,
            build,
            minimum=3,
            retry=False,
            expectResponse=acks != 0,
            timeout=self.timeout + timeoutMs / 1000.0,
        )
        if response is None:
            return -1
        for t in response.responses:
            for p in t.partition_responses:
                if p.index != partition:
                    continue
                message = getattr(p, "error_message", None)
                _raiseFor(p.error_code, message or f"{topic}-{partition}")
                return int(p.base_offset)
        raise KafkaError(
            ErrorCode.unknown_server_error, f"produce response lacks {topic}-{partition}"
        )

    # -- topics ----------------------------------------------------------

    def createTopics(
        self,
        topics: Mapping[str, tuple[int, Mapping[str, str] | None] | int],
        replicationFactor: int = -1,
        timeoutMs: int = 30000,
        validateOnly: bool = False,
        ignoreExisting: bool = False,
    ) -> dict[str, uuid.UUID | None]:
        """
        Create topics.

        @param topics: {name: (partitions, configs or None)}, or
            {name: partitions}.
        @param replicationFactor: -1 for the broker's default (CreateTopics
            v4+; older versions get 1 instead).
        @param ignoreExisting: do not raise C{TOPIC_ALREADY_EXISTS}.
        @return: {name: topic id (CreateTopics v7+) or None}.
        @raise KafkaError: for the first topic that failed.
        """
        specs = {}
        for name, spec in topics.items():
            if isinstance(spec, int):
                specs[name] = (spec, {})
            else:
                partitions, configs = spec
                specs[name] = (partitions, dict(configs or {}))

        def build(version, cls):
            topicCls = nested(cls, "CreatableTopic")
            configCls = nested(cls, "CreatableTopicConfig")
            factor = replicationFactor if replicationFactor > 0 or version >= 4 else 1
            return make(
                cls,
                topics=tuple(
                    topicCls(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=factor,
                        assignments=(),
                        configs=tuple(configCls(name=k, value=v) for k, v in configs.items()),
                    )
                    for name, (partitions, configs) in specs.items()
                ),
                timeout=ms(timeoutMs),
                validate_only=validateOnly,
            )

        response = self._toController(CREATE_TOPICS, build, timeoutMs)
        result = {}
        for t in response.topics:
            code = responseError(t.error_code)
            if code == ErrorCode.topic_already_exists and ignoreExisting:
                code = ErrorCode.none
            _raiseFor(code, getattr(t, "error_message", None) or t.name)
            topicId = getattr(t, "topic_id", None)
            result[t.name] = None if topicId == _ZERO_UUID else topicId
        for name in specs:
            self._topics.pop(name, None)
        return result

    def deleteTopics(
        self, names: Iterable[str], timeoutMs: int = 30000, ignoreMissing: bool = False
    ) -> None:
        """
        Delete topics by name.

        @param ignoreMissing: do not raise C{UNKNOWN_TOPIC_OR_PARTITION}.
        @raise KafkaError: for the first topic that failed.
        """
        names = list(names)

        def build(version, cls):
            if has(cls, "topic_names"):
                return make(cls, topic_names=tuple(names), timeout=ms(timeoutMs))
            stateCls = nested(cls, "DeleteTopicState")
            return make(
                cls,
                topics=tuple(stateCls(name=n, topic_id=_ZERO_UUID) for n in names),
                timeout=ms(timeoutMs),
            )

        response = self._toController(DELETE_TOPICS, build, timeoutMs)
        for t in response.responses:
            code = responseError(t.error_code)
            if code == ErrorCode.unknown_topic_or_partition and ignoreMissing:
                code = ErrorCode.none
            _raiseFor(code, getattr(t, "error_message", None) or t.name)
        for name in names:
            self._topics.pop(name, None)

    def _toController(self, apiKey, build, timeoutMs):
        """
        Admin requests go to the controller Metadata named (KRaft brokers
        forward them anyway); on NOT_CONTROLLER, refresh and retry once.
        """
        timeout = self.timeout + timeoutMs / 1000.0
        for attempt in range(2):
            if self._controllerId < 0 or attempt:
                self.metadata([])
            nodeId = self._controllerId if self._controllerId in self._brokers else None
            _, response = self._call(nodeId, apiKey, build, retry=False, timeout=timeout)
            results = getattr(response, "topics", None) or getattr(response, "responses", ())
            if any(r.error_code == ErrorCode.not_controller for r in results) and not attempt:
                continue
            return response
        return response
