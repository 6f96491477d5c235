"""
A tiny in-memory Kafka broker for client tests: one thread per listening
socket and per connection, speaking the wire protocol through kafkatwist's
own codec.  It answers ApiVersions (with the UNSUPPORTED_VERSION fallback
layout), Metadata, Produce, Fetch, ListOffsets, CreateTopics and
DeleteTopics -- just enough state to check the client's framing, version
negotiation, routing and error handling.  Not a model of Kafka beyond that.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
import sys
import threading
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kafkatwist.protocol.apis import responseType
from kafkatwist.protocol.codec import decodeRequest, encodeResponseFrame
from kafkatwist.protocol.header import parseRequestHeader
from kafkatwist.protocol.records import decodeBatches

_ZERO = datetime.timedelta(0)
_ZERO_UUID = uuid.UUID(int=0)

#: {apiKey: (min, max)} the fake announces unless told otherwise
DEFAULT_RANGES = {
    0: (3, 12),  # Produce
    1: (4, 17),  # Fetch
    2: (1, 10),  # ListOffsets
    3: (0, 12),  # Metadata
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
}


def make(cls, **values):
    """
    Build a kio entity from the keyword arguments its version has.
    """
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in values.items() if k in names})


def nested(cls, name):
    return getattr(sys.modules[cls.__module__], name)


@dataclass
class FakePartition:
    leader: int
    batches: list[bytes] = field(default_factory=list)
    #: bumped by L{FakeCluster.moveLeader}; checked against a request's
    #: current_leader_epoch as KIP-320 says
    leaderEpoch: int = 0
    baseOffsets: list[int] = field(default_factory=list)
    highWatermark: int = 0


@dataclass
class FakeTopic:
    name: str
    partitions: dict[int, FakePartition]
    topicId: uuid.UUID = field(default_factory=uuid.uuid4)


class FakeCluster:
    """
    State shared by the fake brokers of one cluster.

    @ivar requests: (nodeId, apiKey, apiVersion, clientId) of every request.
    @ivar failNext: {apiKey: ErrorCode} to answer the next such request's
        partitions with (once).
    @ivar closeOnNext: an apiKey whose next request makes the broker drop
        the connection without answering.
    """

    def __init__(self, clusterId: str = "fake-cluster") -> None:
        self.clusterId = clusterId
        self.brokers: dict[int, FakeBroker] = {}
        self.topics: dict[str, FakeTopic] = {}
        self.controllerId = -1
        self.requests: list[tuple[int, int, int, str | None]] = []
        self.failNext: dict[int, ErrorCode] = {}
        self.closeOnNext: int | None = None
        #: (nodeId, apiKey, partition, current_leader_epoch) of every
        #: Fetch and ListOffsets partition
        self.epochsSeen: list[tuple[int, int, int, int]] = []
        #: {nodeId: times left} brokers whose leadership Metadata already
        #: shows but who answer NOT_LEADER_OR_FOLLOWER for now (a new
        #: leader that has not heard yet)
        self.notYetLeader: dict[int, int] = {}
        self.lock = threading.RLock()

    def moveLeader(self, topic: str, partition: int, leader: int) -> None:
        with self.lock:
            p = self.topics[topic].partitions[partition]
            p.leader = leader
            p.leaderEpoch += 1

    def addBroker(self, **kwargs) -> FakeBroker:
        nodeId = kwargs.pop("nodeId", len(self.brokers) + 1)
        broker = FakeBroker(self, nodeId, **kwargs)
        self.brokers[nodeId] = broker
        if self.controllerId < 0:
            self.controllerId = nodeId
        return broker

    def createTopic(self, name: str, partitions: int = 1, leaders=None) -> FakeTopic:
        nodes = sorted(self.brokers)
        topic = FakeTopic(
            name,
            {
                p: FakePartition(leaders[p] if leaders else nodes[p % len(nodes)])
                for p in range(partitions)
            },
        )
        self.topics[name] = topic
        return topic

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.close()


class FakeBroker:
    """
    One listening socket on 127.0.0.1 answering as node C{nodeId}.

    @param apiRanges: {apiKey: (min, max)} announced in ApiVersions, and
        enforced for ApiVersions itself: a higher ApiVersions version gets
        UNSUPPORTED_VERSION in the v0 layout, as a real broker answers.
    @param tlsContext: an C{ssl.SSLContext} (server side) to wrap
        connections in.
    @param advertisedHost: the host name Metadata gives for this broker.
    """

    def __init__(
        self,
        cluster: FakeCluster,
        nodeId: int,
        apiRanges: dict[int, tuple[int, int]] | None = None,
        tlsContext: ssl.SSLContext | None = None,
        advertisedHost: str = "127.0.0.1",
    ) -> None:
        self.cluster = cluster
        self.nodeId = nodeId
        self.apiRanges = dict(DEFAULT_RANGES if apiRanges is None else apiRanges)
        self.tlsContext = tlsContext
        self.advertisedHost = advertisedHost
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.accepted = 0
        self.handshakeErrors: list[Exception] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.close()
        except OSError:
            pass
        self.dropConnections()

    def dropConnections(self) -> None:
        for conn in list(self.connections):
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self.connections.clear()

    # -- I/O -------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.tlsContext is not None:
            try:
                conn = self.tlsContext.wrap_socket(conn, server_side=True)
            except (ssl.SSLError, OSError) as e:
                self.handshakeErrors.append(e)
                conn.close()
                return
        self.connections.append(conn)
        try:
            while True:
                head = _recvExactly(conn, 4)
                if head is None:
                    return
                (size,) = struct.unpack(">i", head)
                frame = _recvExactly(conn, size)
                if frame is None:
                    return
                reply = self.handle(frame)
                if reply is None:
                    continue
                if reply is _CLOSE:
                    return
                conn.sendall(b"".join(bytes(c) for c in reply))
        except OSError:
            return
        finally:
            try:
                conn.close()
            except OSError:
                pass

    # -- dispatch --------------------------------------------------------

    def handle(self, frame: bytes):
        header = parseRequestHeader(frame)
        key, version = header.apiKey, header.apiVersion
        cluster = self.cluster
        with cluster.lock:
            cluster.requests.append((self.nodeId, key, version, header.clientId))
            if cluster.closeOnNext == key:
                cluster.closeOnNext = None
                return _CLOSE
        if key == 18:
            return self._apiVersions(header)
        request = decodeRequest(key, version, frame, header.bodyOffset)
        handler = {
            0: self._produce,
            1: self._fetch,
            2: self._listOffsets,
            3: self._metadata,
            19: self._createTopics,
            20: self._deleteTopics,
        }[key]
        with cluster.lock:
            injected = cluster.failNext.pop(key, None)
            response = handler(request, version, injected)
        if response is None:
            return None
        return encodeResponseFrame(key, version, header.correlationId, response)

    def _apiVersions(self, header):
        low, high = self.apiRanges[18]
        version = header.apiVersion
        if version > high:
            # Kafka answers a version it does not know in the v0 layout, so
            # that any client can read the error and the ranges.
            cls = responseType(18, 0)
            body = make(
                cls,
                error_code=ErrorCode.unsupported_version,
                api_keys=(
                    make(nested(cls, "ApiVersion"), api_key=18, min_version=low, max_version=high),
                ),
            )
            return encodeResponseFrame(18, 0, header.correlationId, body)
        cls = responseType(18, version)
        apiCls = nested(cls, "ApiVersion")
        body = make(
            cls,
            error_code=ErrorCode.none,
            api_keys=tuple(
                make(apiCls, api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(self.apiRanges.items())
            ),
            throttle_time=_ZERO,
        )
        return encodeResponseFrame(18, version, header.correlationId, body)

    def _metadata(self, request, version, injected):
        cls = responseType(3, version)
        brokerCls = nested(cls, "MetadataResponseBroker")
        topicCls = nested(cls, "MetadataResponseTopic")
        partitionCls = nested(cls, "MetadataResponsePartition")
        cluster = self.cluster
        if request.topics is None or (version == 0 and not request.topics):
            names = sorted(cluster.topics)
        else:
            names = [t.name for t in request.topics]
        topics = []
        for name in names:
            topic = cluster.topics.get(name)
            if topic is None:
                topics.append(
                    make(
                        topicCls,
                        error_code=injected or ErrorCode.unknown_topic_or_partition,
                        name=name,
                        topic_id=_ZERO_UUID,
                        is_internal=False,
                        partitions=(),
                    )
                )
                continue
            topics.append(
                make(
                    topicCls,
                    error_code=injected or ErrorCode.none,
                    name=name,
                    topic_id=topic.topicId,
                    is_internal=False,
                    partitions=tuple(
                        make(
                            partitionCls,
                            error_code=ErrorCode.none,
                            partition_index=index,
                            leader_id=p.leader,
                            leader_epoch=p.leaderEpoch,
                            replica_nodes=(p.leader,),
                            isr_nodes=(p.leader,),
                            offline_replicas=(),
                        )
                        for index, p in sorted(topic.partitions.items())
                    ),
                )
            )
        return make(
            cls,
            throttle_time=_ZERO,
            brokers=tuple(
                make(brokerCls, node_id=n, host=b.advertisedHost, port=b.port, rack=None)
                for n, b in sorted(cluster.brokers.items())
            ),
            cluster_id=cluster.clusterId,
            controller_id=cluster.controllerId,
            topics=tuple(topics),
            error_code=ErrorCode.none,
        )

    def _lookup(self, name=None, topicId=None):
        for topic in self.cluster.topics.values():
            if topic.name == name or (topicId is not None and topic.topicId == topicId):
                return topic
        return None

    def _partitionError(self, topic, index, injected, apiKey=None, epoch=-1):
        if apiKey is not None:
            self.cluster.epochsSeen.append((self.nodeId, apiKey, index, epoch))
        if injected:
            return injected
        if topic is None or index not in topic.partitions:
            return ErrorCode.unknown_topic_or_partition
        partition = topic.partitions[index]
        if partition.leader != self.nodeId:
            return ErrorCode.not_leader_or_follower
        if self.cluster.notYetLeader.get(self.nodeId, 0) > 0:
            self.cluster.notYetLeader[self.nodeId] -= 1
            return ErrorCode.not_leader_or_follower
        if epoch >= 0 and epoch < partition.leaderEpoch:
            return ErrorCode.fenced_leader_epoch
        if epoch > partition.leaderEpoch:
            return ErrorCode.unknown_leader_epoch
        return ErrorCode.none

    def _produce(self, request, version, injected):
        cls = responseType(0, version)
        topicCls = nested(cls, "TopicProduceResponse")
        partitionCls = nested(cls, "PartitionProduceResponse")
        out = []
        for t in request.topic_data:
            topic = self._lookup(getattr(t, "name", None), getattr(t, "topic_id", None))
            parts = []
            for pd in t.partition_data:
                error = self._partitionError(topic, pd.index, injected)
                baseOffset = -1
                if error == ErrorCode.none:
                    baseOffset = self._append(topic.partitions[pd.index], pd.records)
                parts.append(
                    make(
                        partitionCls,
                        index=pd.index,
                        error_code=error,
                        base_offset=baseOffset,
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None if error == ErrorCode.none else error.name,
                    )
                )
            out.append(
                make(
                    topicCls,
                    name=getattr(t, "name", None),
                    topic_id=getattr(t, "topic_id", None),
                    partition_responses=tuple(parts),
                )
            )
        if request.acks == 0:
            return None
        return make(cls, responses=tuple(out), throttle_time=_ZERO)

    @staticmethod
    def _append(partition: FakePartition, records: bytes) -> int:
        first = partition.highWatermark
        view = memoryview(records)
        pos = 0
        for batch in decodeBatches(records, checkCrc=True, decodeRecords=False):
            raw = bytearray(view[pos : pos + batch.sizeInBytes])
            # the base offset is outside the CRC: a broker rewrites it freely
            struct.pack_into(">q", raw, 0, partition.highWatermark)
            partition.batches.append(bytes(raw))
            partition.baseOffsets.append(partition.highWatermark)
            partition.highWatermark += batch.lastOffsetDelta + 1
            pos += batch.sizeInBytes
        return first

    def _fetch(self, request, version, injected):
        cls = responseType(1, version)
        topicCls = nested(cls, "FetchableTopicResponse")
        partitionCls = nested(cls, "PartitionData")
        out = []
        for t in request.topics:
            topic = self._lookup(getattr(t, "topic", None), getattr(t, "topic_id", None))
            parts = []
            for fp in t.partitions:
                error = self._partitionError(
                    topic, fp.partition, injected, 1, fp.current_leader_epoch
                )
                records = b""
                hwm = -1
                if error == ErrorCode.none:
                    partition = topic.partitions[fp.partition]
                    hwm = partition.highWatermark
                    if fp.fetch_offset > hwm or fp.fetch_offset < 0:
                        error = ErrorCode.offset_out_of_range
                    else:
                        records = self._read(partition, fp.fetch_offset, fp.partition_max_bytes)
                parts.append(
                    make(
                        partitionCls,
                        partition_index=fp.partition,
                        error_code=error,
                        high_watermark=hwm,
                        last_stable_offset=hwm,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            out.append(
                make(
                    topicCls,
                    topic=getattr(t, "topic", None),
                    topic_id=getattr(t, "topic_id", None),
                    partitions=tuple(parts),
                )
            )
        return make(
            cls, throttle_time=_ZERO, error_code=ErrorCode.none, session_id=0, responses=tuple(out)
        )

    @staticmethod
    def _read(partition: FakePartition, offset: int, maxBytes: int) -> bytes:
        # From the batch containing offset on, cut at maxBytes -- which may
        # cut a batch in two, as a real broker does -- but never less than
        # the first whole batch (KIP-74).
        chosen = []
        for base, batch in zip(partition.baseOffsets, partition.batches):
            (lastDelta,) = struct.unpack_from(">i", batch, 23)
            if base + lastDelta >= offset:
                chosen.append(batch)
        if not chosen:
            return b""
        data = b"".join(chosen)
        return data[: max(maxBytes, len(chosen[0]))]

    def _listOffsets(self, request, version, injected):
        cls = responseType(2, version)
        topicCls = nested(cls, "ListOffsetsTopicResponse")
        partitionCls = nested(cls, "ListOffsetsPartitionResponse")
        out = []
        for t in request.topics:
            topic = self._lookup(t.name)
            parts = []
            for p in t.partitions:
                error = self._partitionError(
                    topic, p.partition_index, injected, 2, p.current_leader_epoch
                )
                offset, timestamp = -1, -1
                if error == ErrorCode.none:
                    offset, timestamp = self._offsetFor(
                        topic.partitions[p.partition_index], p.timestamp
                    )
                parts.append(
                    make(
                        partitionCls,
                        partition_index=p.partition_index,
                        error_code=error,
                        timestamp=timestamp,
                        offset=offset,
                        leader_epoch=0,
                    )
                )
            out.append(make(topicCls, name=t.name, partitions=tuple(parts)))
        return make(cls, throttle_time=_ZERO, topics=tuple(out))

    @staticmethod
    def _offsetFor(partition: FakePartition, timestamp: int) -> tuple[int, int]:
        if timestamp == -2:
            return 0, -1
        if timestamp == -1:
            return partition.highWatermark, -1
        records = [r for b in decodeBatches(b"".join(partition.batches)) for r in b.records]
        if timestamp == -3:
            if not records:
                return -1, -1
            best = max(records, key=lambda r: (r.timestamp, -r.offset))
            return best.offset, best.timestamp
        for r in records:
            if r.timestamp >= timestamp:
                return r.offset, r.timestamp
        return -1, -1

    def _createTopics(self, request, version, injected):
        cls = responseType(19, version)
        resultCls = nested(cls, "CreatableTopicResult")
        out = []
        for t in request.topics:
            error = injected or ErrorCode.none
            topicId = _ZERO_UUID
            if not error and t.name in self.cluster.topics:
                error = ErrorCode.topic_already_exists
            if not error and t.num_partitions < 1:
                error = ErrorCode.invalid_partitions
            if not error:
                topicId = self.cluster.createTopic(t.name, t.num_partitions).topicId
            out.append(
                make(
                    resultCls,
                    name=t.name,
                    topic_id=topicId,
                    error_code=error,
                    error_message=None if not error else f"{error.name} ({t.name})",
                    num_partitions=t.num_partitions,
                    replication_factor=1,
                    configs=None,
                )
            )
        return make(cls, throttle_time=_ZERO, topics=tuple(out))

    def _deleteTopics(self, request, version, injected):
        cls = responseType(20, version)
        resultCls = nested(cls, "DeletableTopicResult")
        if hasattr(request, "topic_names"):
            names = list(request.topic_names)
        else:
            names = [t.name for t in request.topics]
        out = []
        for name in names:
            error = injected or ErrorCode.none
            if not error and self.cluster.topics.pop(name, None) is None:
                error = ErrorCode.unknown_topic_or_partition
            out.append(
                make(
                    resultCls, name=name, topic_id=_ZERO_UUID, error_code=error, error_message=None
                )
            )
        return make(cls, throttle_time=_ZERO, responses=tuple(out))


_CLOSE = object()


def _recvExactly(conn, size: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < size:
        try:
            chunk = conn.recv(size - len(buf))
        except (OSError, ssl.SSLError):
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def requestsFor(cluster, apiKey):
    """
    (node id, version) of each request of C{apiKey} the cluster's brokers
    received, in order.
    """
    return [(node, version) for node, key, version, _ in cluster.requests if key == apiKey]
