"""
Metadata: this broker, under the listener the request came in on, and the
topics the log holds (auto-creating requested ones when allowed).
"""

import uuid

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import METADATA, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, OPERATIONS_OMITTED, make, nested

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
#: every operation a topic / the cluster supports, as Kafka encodes them
ALL_TOPIC_OPERATIONS = 0b0000_1101_1111_1000
ALL_CLUSTER_OPERATIONS = 0b0001_1110_1111_1100


class MetadataHandler(Handler):
    apiKey = METADATA
    minVersion = 0
    maxVersion = 12

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(METADATA, version)
        Broker = nested(cls, "MetadataResponseBroker")
        Topic = nested(cls, "MetadataResponseTopic")
        Partition = nested(cls, "MetadataResponsePartition")
        broker = self.broker
        nodeId = broker.nodeId
        endpoint = broker.advertisedListenerFor(context.listenerName)
        brokers = (make(Broker, node_id=nodeId, host=endpoint.host, port=endpoint.port, rack=None),)

        logManager = broker.logManager
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
        topics = invalid
        for name, unknownId in wanted:
            if name is None:
                topics.append(self._errorTopic(Topic, None, unknownId, ErrorCode.unknown_topic_id))
                continue
            info = known.get(name)
            if info is None and allowCreate and logManager is not None and name not in INTERNAL_TOPICS:
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
            partitions = tuple(
                make(
                    Partition,
                    error_code=ErrorCode.none,
                    partition_index=index,
                    leader_id=nodeId,
                    leader_epoch=0,
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
                    topic_authorized_operations=ALL_TOPIC_OPERATIONS if includeOps else OPERATIONS_OMITTED,
                )
            )
        includeClusterOps = getattr(request, "include_cluster_authorized_operations", False)
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            brokers=brokers,
            cluster_id=broker.clusterId,
            controller_id=nodeId,
            topics=tuple(topics),
            cluster_authorized_operations=(
                ALL_CLUSTER_OPERATIONS if includeClusterOps else OPERATIONS_OMITTED
            ),
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


metadata = HandlerPlugin("builtin.metadata", METADATA, MetadataHandler, priority=0)
