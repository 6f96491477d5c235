"""
Metadata: this broker, under the listener the request came in on, and the
topics the log holds (auto-creating requested ones when allowed).

With an authorizer (Kafka's C{handleTopicMetadataRequest}): only topics the
principal may DESCRIBE are listed; one asked for by name that it may not is
answered TOPIC_AUTHORIZATION_FAILED, as is auto-creation without CREATE on
the cluster or the topic; the authorized-operations fields are computed.
"""

import uuid

from kafkatwist.cluster.answers import autoCreate, brokerEndpoints, clusterPartitions
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import METADATA, responseType
from kafkatwist.protocol.codec import EncodedResponse, encodeBody
from kafkatwist.protocol.errorcounts import errorCounts
from kafkatwist.protocol.entities import NO_THROTTLE, OPERATIONS_OMITTED, make, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkatwist.security.checks import authorize, authorizedOperations, clusterOperations, filterAuthorized
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS


DESCRIBE, CREATE = AclOperation.DESCRIBE, AclOperation.CREATE
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER


class _WouldCreate(Exception):
    """
    Answering needs a topic auto-created (disk or ZooKeeper): not on a
    network thread.
    """


class MetadataHandler(Handler):
    apiKey = METADATA
    minVersion = 0
    maxVersion = 12

    #: cached answers kept at most (each a few hundred bytes)
    CACHE_SIZE = 256

    def __init__(self, broker, wrapped=None) -> None:
        super().__init__(broker, wrapped)
        #: request shape -> (what the answer was computed from, its body)
        self._cache: dict = {}

    def handle(self, context, request):
        # The entity: a drop-in wrapping this handler may change it.
        return self._answer(context, request, True)

    def handleOnNetworkThread(self, context, request):
        """
        The answer, given on the Processor's thread (no hand-off to a request
        handler thread and back): the metadata image and the logs' epochs
        are read from memory.  C{None} when a requested topic would be
        auto-created, which writes to disk or ZooKeeper: a request handler
        thread answers then.
        """
        try:
            return self._cachedAnswer(context, request)
        except _WouldCreate:
            return None

    def _cachedAnswer(self, context, request):
        """
        (On the Processor's thread, so only when this handler is not wrapped
        by a drop-in, which may change the entity L{handle} returns.)  A
        standalone broker without an authorizer answers the same request
        from the same topics, listener and leader epochs with the same
        bytes: those are encoded once and kept (building and encoding the
        entities cost a Metadata request four times what the network did).
        Anything else -- a cluster, an authorizer, a throttled response --
        is computed every time.
        """
        broker = self.broker
        cluster = broker.cluster
        if (
            broker.authorizer is not None
            or (cluster is not None and cluster.image is not None)
            or getattr(context, "throttleMs", 0) > 0
        ):
            return self._answer(context, request, False)
        requested = request.topics
        key = (
            context.apiVersion,
            context.listenerName,
            None if requested is None else tuple((t.name, getattr(t, "topic_id", None)) for t in requested),
            getattr(request, "allow_auto_topic_creation", True),
            getattr(request, "include_topic_authorized_operations", False),
            getattr(request, "include_cluster_authorized_operations", False),
        )
        source = self._source(context, requested)
        cached = self._cache.get(key)
        if cached is not None and cached[0] == source:
            return cached[1]
        entity = self._answer(context, request, False)
        answer = EncodedResponse([encodeBody(entity)], errors=errorCounts(entity))
        if self._source(context, requested) == source:
            # (Not an answer that auto-created a topic: the same sources
            # later, the topic deleted again, would not have it.)
            if len(self._cache) >= self.CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = (source, answer)
        return answer

    def _source(self, context, requested) -> tuple:
        """
        What a standalone broker's answer is computed from: its topics, the
        listener's endpoint, the leader epochs of the partitions answered.
        """
        broker = self.broker
        logManager = broker.logManager
        known = logManager.topics() if logManager is not None else {}
        named = known if requested is None else [t.name for t in requested]
        return (
            known,
            broker.advertisedListenerFor(context.listenerName),
            broker.config["broker.rack"],
            broker.config["auto.create.topics.enable"],
            broker.nodeId,
            broker.clusterId,
            tuple(
                _leaderEpoch(logManager, name, index)
                for name in named
                if name in known
                for index in range(known[name].numPartitions)
            ),
        )

    def _answer(self, context, request, mayCreate: bool):
        version = context.apiVersion
        cls = responseType(METADATA, version)
        Broker = nested(cls, "MetadataResponseBroker")
        Topic = nested(cls, "MetadataResponseTopic")
        Partition = nested(cls, "MetadataResponsePartition")
        broker = self.broker
        nodeId = broker.nodeId
        cluster = broker.cluster
        image = cluster.image if cluster is not None else None
        controllerId = nodeId
        if image is not None:
            brokers = tuple(
                make(Broker, node_id=brokerId, host=host, port=port, rack=rack)
                for brokerId, host, port, rack in brokerEndpoints(image, context.listenerName)
            )
            controllerId = image.controllerId
            known = {name: a for name, a in image.topics.items() if name not in image.deleting}
        else:
            endpoint = broker.advertisedListenerFor(context.listenerName)
            brokers = (
                make(Broker, node_id=nodeId, host=endpoint.host, port=endpoint.port,
                     rack=broker.config["broker.rack"]),
            )

        logManager = broker.logManager
        if image is None:
            known = logManager.topics() if logManager is not None else {}
        requested = request.topics
        invalid = []
        if requested is None or (version == 0 and not requested):
            wanted = [(name, None) for name in sorted(known)]
        else:
            byId = {info.topicId: name for name, info in known.items()}
            wanted = []
            for topic in requested:
                name = topic.name
                topicId = getattr(topic, "topic_id", None)
                if name is None and version < 12:
                    # v10-11 have a nullable name but can neither answer a
                    # null one nor look topics up by id: Kafka refuses them.
                    invalid.append(self._errorTopic(Topic, "", topicId, ErrorCode.invalid_request))
                    continue
                if name is None and topicId is not None:
                    name = byId.get(topicId)
                    if name is None:
                        wanted.append((None, topicId))
                        continue
                wanted.append((name, None))

        allowCreate = getattr(request, "allow_auto_topic_creation", True) and bool(
            broker.config["auto.create.topics.enable"]
        )
        includeOps = getattr(request, "include_topic_authorized_operations", False)
        authorizer = self.authorizer
        allTopics = requested is None or (version == 0 and not requested)
        # Topics the principal may not describe are left out of an
        # all-topics answer, and refused by name otherwise, before their
        # existence is looked at (Kafka does not disclose it).
        describable = filterAuthorized(
            authorizer, context, DESCRIBE, TOPIC, (n for n, _ in wanted if n is not None), logIfDenied=not allTopics
        )
        topics = invalid
        for name, unknownId in wanted:
            if name is None:
                topics.append(self._errorTopic(Topic, None, unknownId, ErrorCode.unknown_topic_id))
                continue
            if name not in describable:
                if not allTopics:
                    topics.append(self._errorTopic(Topic, name, None, ErrorCode.topic_authorization_failed))
                continue
            info = known.get(name)
            if info is None and allowCreate and logManager is not None and name not in INTERNAL_TOPICS:
                if not mayCreate:
                    raise _WouldCreate(name)
                if not self._mayCreate(context, name):
                    topics.append(self._errorTopic(Topic, name, None, ErrorCode.topic_authorization_failed))
                    continue
                if image is not None:
                    # Kafka's auto-creation in a cluster: the topic is
                    # written to ZooKeeper, its leaders come later.
                    code = autoCreate(cluster, broker.config, name)
                    topics.append(self._errorTopic(Topic, name, None, code))
                    continue
                try:
                    info = logManager.createTopic(name, broker.config["num.partitions"], {})
                except KafkaError as e:
                    if e.code != ErrorCode.topic_already_exists:
                        topics.append(self._errorTopic(Topic, name, None, e.code))
                        continue
                    info = logManager.topics().get(name)
            if info is None:
                topics.append(
                    self._errorTopic(Topic, name, None, ErrorCode.unknown_topic_or_partition)
                )
                continue
            if image is not None:
                partitions = clusterPartitions(Partition, image, name, info)
            else:
                partitions = tuple(
                    make(
                        Partition,
                        error_code=ErrorCode.none,
                        partition_index=index,
                        leader_id=nodeId,
                        # The epoch the log is in (0 unless a controller
                        # gave it one): what KIP-320 clients fence with.
                        leader_epoch=_leaderEpoch(logManager, name, index),
                        replica_nodes=(nodeId,),
                        isr_nodes=(nodeId,),
                        offline_replicas=(),
                    )
                    for index in range(info.numPartitions)
                )
            topics.append(
                make(
                    Topic,
                    error_code=ErrorCode.none,
                    name=name,
                    topic_id=info.topicId,
                    is_internal=name in INTERNAL_TOPICS,
                    partitions=partitions,
                    topic_authorized_operations=(
                        authorizedOperations(authorizer, context, TOPIC, name) if includeOps else OPERATIONS_OMITTED
                    ),
                )
            )
        includeClusterOps = getattr(request, "include_cluster_authorized_operations", False)
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            brokers=brokers,
            cluster_id=broker.clusterId,
            controller_id=controllerId,
            topics=tuple(topics),
            cluster_authorized_operations=(
                clusterOperations(authorizer, context) if includeClusterOps else OPERATIONS_OMITTED
            ),
        )

    def _mayCreate(self, context, name: str) -> bool:
        """
        Auto-creation needs CREATE on the cluster or on the topic.
        """
        authorizer = self.authorizer
        return authorizer is None or (
            authorize(authorizer, context, CREATE, CLUSTER, CLUSTER_NAME, logIfDenied=False)
            or authorize(authorizer, context, CREATE, TOPIC, name)
        )

    @staticmethod
    def _errorTopic(Topic, name, topicId, code):
        return make(
            Topic,
            error_code=code,
            name=name,
            topic_id=topicId or uuid.UUID(int=0),
            is_internal=False,
            partitions=(),
            topic_authorized_operations=OPERATIONS_OMITTED,
        )


def _leaderEpoch(logManager, topic: str, partition: int) -> int:
    log = logManager.getLog(topic, partition) if logManager is not None else None
    return log.leaderEpoch if log is not None else 0


metadata = HandlerPlugin("builtin.metadata", METADATA, MetadataHandler, priority=0)
