"""
Topic admin APIs: CreateTopics, DeleteTopics, CreatePartitions,
DeleteRecords, and DescribeCluster.

One broker is the whole cluster, so it is also the controller these
requests go to.  Errors are per topic (or per partition for DeleteRecords)
with Kafka's codes and, where the version has one, Kafka's message; checks
run in the order Kafka's controller runs them (name, existence, configs,
then partitions and replication), so a request with several faults gets the
error Kafka would give.

With an authorizer they check what Kafka's C{KafkaApis} checks: CREATE on
the cluster or the topic, DESCRIBE then DELETE on a topic to delete it,
ALTER to add partitions, DELETE to delete records; refusals are
TOPIC_AUTHORIZATION_FAILED for the topic (or its partitions).

The configuration APIs (DescribeConfigs, IncrementalAlterConfigs,
AlterConfigs) are in L{kafkatwist.plugins.admin_configs}.
"""

from __future__ import annotations

import uuid
from collections import Counter

from twisted.logger import Logger

from kafkatwist.cluster.answers import brokerEndpoints
from kafkatwist.config import KEYS
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.log.config import (
    TOPIC_CONFIGS,
    describeTopicConfig,
    unknownTopicConfig,
    validateTopicConfigs,
)
from kafkatwist.log.records import TopicInfo
from kafkatwist.log.topics import validateTopicName
from kafkatwist.plugins.admin_configs import describeTopic, describeTopicEntries
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS
from kafkatwist.plugins.clusterwrites import ClusterWrites
from kafkatwist.protocol.apis import (
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    responseType,
)
from kafkatwist.protocol.entities import NO_THROTTLE, OPERATIONS_OMITTED, durationMs, make, nested
from kafkatwist.replication.records import DelayedDeleteRecords, Trimming
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkatwist.security.checks import clusterOperations, filterAuthorized

__all__ = [
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_RECORDS",
    "DELETE_TOPICS",
    "DESCRIBE_CLUSTER",
]

log = Logger()


ZERO_UUID = uuid.UUID(int=0)
#: the KRaft metadata log's name: Kafka refuses to create it as a topic
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
#: DeleteRecords' "up to the high watermark"
HIGH_WATERMARK = -1
#: DescribeCluster endpoint types
_BROKERS, _CONTROLLERS = 1, 2


def _knownTopics(broker) -> dict:
    """
    The topics as this broker answers for them: the cluster's (from
    ZooKeeper) in a cluster, else the log's.

    @return: C{dict} name -> L{TopicInfo}.
    """
    cluster = _cluster(broker)
    if cluster is None:
        return broker.logManager.topics()
    image = cluster.image
    return {
        name: TopicInfo(name, a.topicId, len(a.partitions), dict(image.configs.get(name, {})))
        for name, a in image.topics.items()
        if name not in image.deleting
    }


def _timeoutSeconds(request) -> float:
    """
    A request's C{timeout_ms} in seconds: how long Kafka's controller
    waits for the change to reach the metadata before answering anyway.
    """
    timeout = getattr(request, "timeout", None)
    return max(durationMs(timeout), 1) / 1000.0 if timeout is not None else 30.0


def _goneFromMetadata(image, name: str) -> bool:
    # Metadata leaves out a topic as soon as it is queued for deletion, as
    # Kafka's brokers drop it when the controller starts deleting it.
    return name not in image.topics or name in image.deleting


def _hasLeaders(image, name: str) -> bool:
    assignment = image.topics.get(name)
    return assignment is not None and all(
        image.leader(name, p) != -1 for p in assignment.partitions
    )


def _failure(error: KafkaError) -> tuple[ErrorCode, str]:
    return error.code, error.message or error.code.name


def _internal(name: str, what: str) -> str:
    # kafka-topics.sh's words, and why kafkatwist enforces them broker side.
    return (
        f"Topic {name} is a kafka internal topic and is not allowed to be {what}: "
        "kafkatwist's group coordinator keeps its state there and would lose it"
    )


def _requestLimitError(broker, requested: int) -> KafkaError | None:
    """
    C{max.partitions.per.request}: Kafka's controller refuses a CreateTopics
    asking for more than 10,000 partitions in all (a fixed limit there,
    C{MAX_PARTITIONS_PER_BATCH}) with POLICY_VIOLATION for every topic;
    kafkatwist makes the limit a setting and applies it to CreatePartitions
    too.

    @return: the error to answer every topic with, or C{None}.
    """
    config = broker.config
    limit = config.get("max.partitions.per.request") if hasattr(config, "get") else None
    if limit is None:
        limit = KEYS["max.partitions.per.request"].defaultValue()
    if requested <= limit:
        return None
    return KafkaError(
        ErrorCode.policy_violation,
        f"Excessively large number of partitions per request. ({requested} requested, "
        f"max.partitions.per.request={limit})",
    )


def _singleBrokerRF(replicationFactor: int) -> KafkaError:
    # Kafka's StripedReplicaPlacer message, wrapped as its controller wraps it.
    return KafkaError(
        ErrorCode.invalid_replication_factor,
        f"Unable to replicate the partition {replicationFactor} time(s): The target "
        f"replication factor of {replicationFactor} cannot be reached because only 1 "
        "broker(s) are registered.",
    )


def _cluster(broker):
    """
    The broker's L{kafkatwist.cluster.service.ClusterService}, or C{None}
    for a broker that is a cluster of one.
    """
    return broker.cluster


def _registered(broker) -> frozenset:
    cluster = _cluster(broker)
    return cluster.aliveBrokers() if cluster is not None else frozenset({broker.nodeId})


class _Write:
    """
    A ZooKeeper write a request makes (see L{ClusterWrites}): C{method(*args,
    onDone)}; C{done(result)} gives what a success means to the request.
    """

    __slots__ = ("method", "args", "done")

    def __init__(self, method, args, done) -> None:
        self.method = method
        self.args = args
        self.done = done


def _checkAssignments(registered, brokerLists, expectedReplicas: int | None = None) -> None:
    """
    Kafka's C{validateManualPartitionAssignment}.

    @param registered: the ids of the registered brokers.
    @param brokerLists: the replica list of each new partition.
    @param expectedReplicas: the replication factor the lists must have
        (existing partitions'), or C{None} to take the first list's.
    @raise KafkaError: INVALID_REPLICA_ASSIGNMENT.
    """
    for brokerIds in brokerLists:
        brokerIds = list(brokerIds)
        if not brokerIds:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                "The manual partition assignment includes an empty replica list.",
            )
        duplicate = next((b for b, n in Counter(brokerIds).items() if n > 1), None)
        if duplicate is not None:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {duplicate} more than once.",
            )
        for brokerId in brokerIds:
            if brokerId not in registered:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"The manual partition assignment includes broker {brokerId}, but no such "
                    "broker is registered.",
                )
        if expectedReplicas is None:
            expectedReplicas = len(brokerIds)
        elif len(brokerIds) != expectedReplicas:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes a partition with {len(brokerIds)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{expectedReplicas} replica(s).",
            )


class CreateTopicsHandler(Handler):
    """
    CreateTopics v0-7 (librdkafka uses up to v4, kafka-python up to v7).
    v1 adds validate_only and the error message, v5+ answers with the
    created topic's partition count, replication factor and configs; v7
    with its topic id.
    """

    apiKey = CREATE_TOPICS
    minVersion = 0
    maxVersion = 7

    def handle(self, context, request):
        cls = responseType(CREATE_TOPICS, context.apiVersion)
        Result = nested(cls, "CreatableTopicResult")
        Config = nested(cls, "CreatableTopicConfigs") if context.apiVersion >= 5 else None
        counts = Counter(topic.name for topic in request.topics)
        validateOnly = bool(getattr(request, "validate_only", False))
        results = []
        answered = set()
        created = []
        writes = ClusterWrites(self.broker, context)
        tooMany = _requestLimitError(
            self.broker, sum(self._requested(topic) for topic in request.topics)
        )
        # Kafka: CREATE on the cluster, else on each topic; the configs in
        # the answer need DESCRIBE_CONFIGS on the topic.
        creatable = set(counts)
        if not self.allowed(context, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, logIfDenied=False):
            creatable = filterAuthorized(self.authorizer, context, AclOperation.CREATE, ResourceType.TOPIC, counts)
        describable = filterAuthorized(
            self.authorizer, context, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts, logIfDenied=False
        )
        for topic in request.topics:
            name = topic.name
            if name in answered:
                continue
            answered.add(name)
            if tooMany is not None:
                error = tooMany
            elif counts[name] > 1:
                # Kafka answers a name given twice once, and refuses it.
                error = KafkaError(ErrorCode.invalid_request, "Duplicate topic name.")
            elif name not in creatable:
                error = KafkaError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            else:
                try:
                    info, replicationFactor = self._create(topic, validateOnly)
                except KafkaError as e:
                    error = e
                else:
                    if isinstance(info, _Write):
                        # ZooKeeper's answer goes in its place; no handler
                        # thread waits for it.
                        writes.add(
                            info.method, *info.args,
                            then=self._written(
                                Result, Config, results, len(results), created, name,
                                name in describable, info.done,
                            ),
                        )
                        results.append(None)
                        continue
                    results.append(self._success(
                        Result, Config, info, validateOnly, name in describable, replicationFactor
                    ))
                    created.append(name)
                    continue
            results.append(self._failed(Result, name, error))
        if not writes:
            return self._awaitLeaders(
                request, cls, results, created, validateOnly, lambda: context.respondLater()
            )
        return writes.run(
            lambda respondLater: self._awaitLeaders(
                request, cls, results, created, validateOnly, respondLater
            )
        )

    @staticmethod
    def _failed(Result, name, error):
        code, message = _failure(error)
        return make(
            Result,
            name=name,
            topic_id=ZERO_UUID,
            error_code=code,
            error_message=message,
            topic_config_error_code=0,
            num_partitions=-1,
            replication_factor=-1,
            configs=None,
        )

    def _written(self, Result, Config, results, slot, created, name, mayDescribeConfigs, done):
        """
        What a topic's creation in ZooKeeper answered, in its place.
        """

        def then(topicId, error):
            if error is not None:
                results[slot] = self._failed(Result, name, error)
                return
            info, replicationFactor = done(topicId)
            results[slot] = self._success(
                Result, Config, info, False, mayDescribeConfigs, replicationFactor
            )
            created.append(name)

        return then

    def _awaitLeaders(self, request, cls, results, created, validateOnly, respondLater):
        response = make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))
        cluster = _cluster(self.broker)
        if cluster is None or validateOnly or not created:
            return response
        # Kafka answers once the new partitions have leaders (or at the
        # request's timeout): clients produce right after.
        pending = respondLater()
        cluster.waitFor(
            lambda image: all(_hasLeaders(image, name) for name in created),
            _timeoutSeconds(request),
            lambda _: pending.complete(response),
        )
        return pending.deferred

    def _requested(self, topic) -> int:
        # Kafka's count (validateTotalNumberOfPartitions): assignments, or
        # the partition count with -1 as num.partitions; invalid counts add
        # nothing (they are refused on their own).
        if topic.assignments:
            return len(topic.assignments)
        if topic.num_partitions == -1:
            return self.broker.logManager.brokerDefaults.numPartitions
        return max(topic.num_partitions, 0)

    def _create(self, topic, validateOnly: bool):
        name = topic.name
        logManager = self.broker.logManager
        if name == CLUSTER_METADATA_TOPIC:
            # Kafka leaves it out of the authorized set: this is its answer.
            raise KafkaError(
                ErrorCode.topic_authorization_failed,
                f"Authorization failed: {CLUSTER_METADATA_TOPIC} is the cluster metadata log",
            )
        validateTopicName(name)
        cluster = _cluster(self.broker)
        existing = cluster.image.topics if cluster is not None else logManager.topics()
        if cluster is not None and name in cluster.image.deleting:
            # Kafka's AdminZkClient.validateTopicCreate: the old topic's
            # replicas are not all deleted yet.
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' is marked for deletion.")
        if name in existing:
            raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        configs = {}
        nulls = []
        for config in topic.configs:
            if config.value is None:
                nulls.append(config.name)
            configs[config.name] = config.value
        if nulls:
            raise KafkaError(
                ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {', '.join(nulls)}",
            )
        for key in configs:
            if key not in TOPIC_CONFIGS:
                raise unknownTopicConfig(key)
        validateTopicConfigs(configs)
        numPartitions = topic.num_partitions
        replicationFactor = topic.replication_factor
        if topic.assignments:
            if replicationFactor != -1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but replication factor was "
                    "not set to -1.",
                )
            if numPartitions != -1:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "A manual partition assignment was specified, but numPartitions was not "
                    "set to -1.",
                )
            indexes = [a.partition_index for a in topic.assignments]
            duplicate = next((i for i, n in Counter(indexes).items() if n > 1), None)
            if duplicate is not None:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Found multiple manual partition assignments for partition {duplicate}",
                )
            _checkAssignments(_registered(self.broker), (a.broker_ids for a in topic.assignments))
            if sorted(indexes) != list(range(len(indexes))):
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            numPartitions = len(indexes)
        elif replicationFactor < -1 or replicationFactor == 0:
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                "Replication factor must be larger than 0, or -1 to use the default value.",
            )
        elif numPartitions < -1 or numPartitions == 0:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                "Number of partitions was set to an invalid non-positive value.",
            )
        elif replicationFactor > 1 and cluster is None:
            raise _singleBrokerRF(replicationFactor)
        if cluster is not None:
            return self._createInCluster(cluster, topic, name, numPartitions, replicationFactor, configs, validateOnly)
        # The log manager logs the creation (with the topic id), once.
        return logManager.createTopic(name, numPartitions, configs, validateOnly=validateOnly), 1

    def _createInCluster(self, cluster, topic, name, numPartitions, replicationFactor, configs, validateOnly):
        """
        Kafka's ZooKeeper-mode creation: the assignment (given, or Kafka's
        over the live brokers) and configs are written to ZooKeeper; the
        controller elects the leaders, each replica's broker creates its log.
        """
        config = self.broker.config
        if topic.assignments:
            assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        else:
            if numPartitions == -1:
                numPartitions = config["num.partitions"]
            if replicationFactor == -1:
                replicationFactor = config["default.replication.factor"]
            assignment = cluster.assign(numPartitions, replicationFactor)
        replicationFactor = len(next(iter(assignment.values())))
        # The log's checks of the configs (combinations, limits), with nothing written.
        self.broker.logManager.createTopic(name, len(assignment), configs, validateOnly=True)
        if validateOnly:
            return TopicInfo(name, ZERO_UUID, len(assignment), dict(configs)), replicationFactor
        return _Write(
            cluster.createTopic,
            (name, assignment, {k: str(v) for k, v in configs.items()}),
            lambda topicId: (TopicInfo(name, topicId, len(assignment), dict(configs)), replicationFactor),
        ), replicationFactor

    def _success(self, Result, Config, info, validateOnly: bool, mayDescribeConfigs: bool = True,
                 replicationFactor: int = 1):
        configs = None
        configError = ErrorCode.none
        if Config is not None and not mayDescribeConfigs:
            configError = ErrorCode.topic_authorization_failed
        elif Config is not None:
            try:
                if validateOnly or _cluster(self.broker) is not None:
                    # Nothing to ask the log about (or the log of this
                    # broker may hold no replica): describe what the topic
                    # gets, its overrides over the broker's defaults.
                    logManager = self.broker.logManager
                    entries = describeTopicConfig(info.configs, logManager.brokerDefaults)
                    described = describeTopicEntries(self.broker, entries)
                else:
                    described = describeTopic(self.broker, info.name)
            except KafkaError as e:
                # Deleted again before we could describe it: the topic was
                # created, only its configs are missing, which is what this
                # field is for.
                configError, described = e.code, None
            configs = None if described is None else tuple(
                Config(
                    name=d.name,
                    value=d.value,
                    read_only=d.readOnly,
                    config_source=d.source,
                    is_sensitive=d.isSensitive,
                )
                for d in described
            )
        return make(
            Result,
            name=info.name,
            topic_id=info.topicId,
            error_code=ErrorCode.none,
            error_message=None,
            topic_config_error_code=configError,
            num_partitions=info.numPartitions,
            replication_factor=replicationFactor,
            configs=configs,
        )


class DeleteTopicsHandler(Handler):
    """
    DeleteTopics v0-6 (v0 has no throttle time); v6 may name topics by id.

    C{delete.topic.enable=false} refuses every topic: TOPIC_DELETION_DISABLED,
    or INVALID_REQUEST below v3, as Kafka.

    Internal topics are refused with INVALID_REQUEST.  Kafka's controller
    would delete them (only C{kafka-topics.sh} refuses, client side), and
    its group coordinator recreates C{__consumer_offsets} on demand; here
    the coordinator's store creates it once at startup, so deleting it
    would lose every group's offsets and leave the coordinator failing
    until a restart.
    """

    apiKey = DELETE_TOPICS
    minVersion = 0
    maxVersion = 6

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(DELETE_TOPICS, version)
        Result = nested(cls, "DeletableTopicResult")
        if hasattr(request, "topics"):
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        results = []

        def answer(name, topicId, code, message=None, slot=None):
            result = make(
                Result,
                name=name,
                topic_id=topicId or ZERO_UUID,
                error_code=code,
                error_message=message,
            )
            if slot is None:
                results.append(result)
            else:
                results[slot] = result

        config = self.broker.config
        if config is not None and not config["delete.topic.enable"]:
            code = ErrorCode.topic_deletion_disabled if version >= 3 else ErrorCode.invalid_request
            for name, topicId in wanted:
                answer(name, topicId, code, "Topic deletion is disabled.")
            return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))

        logManager = self.broker.logManager
        cluster = _cluster(self.broker)
        known = _knownTopics(self.broker)
        byId = {info.topicId: name for name, info in known.items()}
        deleted = []
        writes = ClusterWrites(self.broker, context)
        names = Counter(name for name, topicId in wanted if name is not None and not topicId)
        ids = Counter(topicId for name, topicId in wanted if name is None and topicId)
        # A topic named once by name and once by id is ambiguous: Kafka
        # refuses it rather than guess which entry to answer.
        namedTwice = {byId[i] for i in ids if i in byId} & set(names)
        seen = set()
        for name, topicId in wanted:
            topicId = topicId if topicId and topicId != ZERO_UUID else None
            if name is None and topicId is None:
                answer(
                    None, None, ErrorCode.invalid_request,
                    "Neither topic name nor id were specified.",
                )
                continue
            if name is not None and topicId is not None:
                answer(
                    name, topicId, ErrorCode.invalid_request,
                    "You may not specify both topic name and topic id.",
                )
                continue
            key = name if name is not None else topicId
            if key in seen:
                continue
            seen.add(key)
            if name is not None and names[name] > 1:
                answer(name, None, ErrorCode.invalid_request, "Duplicate topic name.")
                continue
            if topicId is not None and ids[topicId] > 1:
                answer(None, topicId, ErrorCode.invalid_request, "Duplicate topic id.")
                continue
            if topicId is not None:
                name = byId.get(topicId)
                if name is None:
                    answer(
                        None, topicId, ErrorCode.unknown_topic_id,
                        "This server does not host this topic ID.",
                    )
                    continue
            if name in namedTwice:
                answer(
                    name, topicId, ErrorCode.invalid_request,
                    "The provided topic name maps to an ID that was already supplied.",
                )
                continue
            # Kafka: DESCRIBE before existence (which is not disclosed
            # otherwise), then DELETE.
            if not self.allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                answer(name, topicId, ErrorCode.topic_authorization_failed, "Authorization failed.")
                continue
            info = known.get(name)
            if info is None:
                answer(
                    name, None, ErrorCode.unknown_topic_or_partition,
                    "This server does not host this topic-partition.",
                )
                continue
            if not self.allowed(context, AclOperation.DELETE, ResourceType.TOPIC, name):
                answer(name, topicId, ErrorCode.topic_authorization_failed, "Authorization failed.")
                continue
            if name in INTERNAL_TOPICS:
                answer(name, info.topicId, ErrorCode.invalid_request, _internal(name, "deleted"))
                continue
            if cluster is not None:
                # Queued in ZooKeeper: the controller removes the topic,
                # each broker then deletes its replicas.  Its answer's place
                # is kept; no handler thread waits for ZooKeeper.
                writes.add(
                    cluster.deleteTopic, name,
                    then=self._queued(answer, deleted, name, info, len(results)),
                )
                results.append(None)
                continue
            try:
                logManager.deleteTopic(name)
            except KafkaError as e:
                answer(name, info.topicId, *_failure(e))
                continue
            self._wakeFetches(name, info.numPartitions)
            answer(name, info.topicId, ErrorCode.none)
        if not writes:
            return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))
        return writes.run(
            lambda respondLater: self._awaitDeletion(
                request, cls, Result, cluster, results, deleted, respondLater
            )
        )

    def _queued(self, answer, deleted, name, info, slot):
        """
        What a topic's deletion in ZooKeeper answered, in its place.
        """

        def then(result, error):
            if error is not None:
                answer(name, info.topicId, *_failure(error), slot=slot)
                return
            deleted.append(name)
            self._wakeFetches(name, info.numPartitions)
            answer(name, info.topicId, ErrorCode.none, slot=slot)

        return then

    def _awaitDeletion(self, request, cls, Result, cluster, results, deleted, respondLater):
        response = make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))
        if not deleted:
            return response
        # Kafka's DelayedDeleteTopics: the answer once the topics are gone
        # from this broker's metadata, or REQUEST_TIMED_OUT for those that
        # are not at the request's timeout.
        pending = respondLater()

        def done(inTime):
            if inTime:
                pending.complete(response)
                return
            image = cluster.image
            late = {name for name in deleted if not _goneFromMetadata(image, name)}
            answers = tuple(
                make(Result, name=r.name, topic_id=getattr(r, "topic_id", None),
                     error_code=ErrorCode.request_timed_out,
                     error_message="The request timed out.")
                if r.name in late else r
                for r in results
            )
            pending.complete(make(cls, throttle_time=NO_THROTTLE, responses=answers))

        cluster.waitFor(
            lambda image: all(_goneFromMetadata(image, name) for name in deleted),
            _timeoutSeconds(request),
            done,
        )
        return pending.deferred

    def _wakeFetches(self, name: str, numPartitions: int) -> None:
        # Long-poll fetches parked on the deleted partitions answer now
        # (with UNKNOWN_TOPIC_OR_PARTITION) rather than at their timeout.
        purgatory = self.broker.fetchPurgatory
        if purgatory is None:
            return
        for partition in range(numPartitions):
            purgatory.checkAndComplete((name, partition))


class CreatePartitionsHandler(Handler):
    """
    CreatePartitions v0-3: add partitions to a topic, optionally with a
    manual assignment (which can only name this broker).  Internal topics
    are refused (INVALID_REQUEST), see L{DeleteTopicsHandler}.
    """

    apiKey = CREATE_PARTITIONS
    minVersion = 0
    maxVersion = 3

    def handle(self, context, request):
        cls = responseType(CREATE_PARTITIONS, context.apiVersion)
        Result = nested(cls, "CreatePartitionsTopicResult")
        counts = Counter(topic.name for topic in request.topics)
        validateOnly = bool(request.validate_only)
        results = []
        answered = set()
        tooMany = _requestLimitError(
            self.broker, sum(self._added(topic) for topic in request.topics)
        )
        writes = ClusterWrites(self.broker, context)
        for topic in request.topics:
            if topic.name in answered:
                continue
            answered.add(topic.name)
            try:
                if tooMany is not None:
                    raise tooMany
                if counts[topic.name] > 1:
                    raise KafkaError(ErrorCode.invalid_request, "Duplicate topic name.")
                if not self.allowed(context, AclOperation.ALTER, ResourceType.TOPIC, topic.name):
                    raise KafkaError(ErrorCode.topic_authorization_failed, "The topic authorization is failed.")
                write = self._grow(topic, validateOnly)
                code, message = ErrorCode.none, None
            except KafkaError as e:
                code, message = _failure(e)
            else:
                if write is not None:
                    # ZooKeeper's answer goes in its place; no handler
                    # thread waits for it.
                    method, args, then = write
                    writes.add(
                        method, *args, then=self._grown(Result, results, len(results), topic.name, then)
                    )
                    results.append(None)
                    continue
            results.append(make(Result, name=topic.name, error_code=code, error_message=message))
        if not writes:
            return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))
        return writes.run(lambda respondLater: make(cls, throttle_time=NO_THROTTLE, results=tuple(results)))

    @staticmethod
    def _grown(Result, results, slot, name, then):
        def answer(result, error):
            code, message = ErrorCode.none, None
            if error is not None:
                code, message = _failure(error)
            else:
                then()
            results[slot] = make(Result, name=name, error_code=code, error_message=message)

        return answer

    def _added(self, topic) -> int:
        info = _knownTopics(self.broker).get(topic.name)
        return max(topic.count - info.numPartitions, 0) if info is not None else 0

    def _grow(self, topic, validateOnly: bool):
        """
        Check and make the change; in a cluster, return the ZooKeeper write
        that makes it, C{(method, args, then)}, C{then()} once it was made.
        """
        logManager = self.broker.logManager
        cluster = _cluster(self.broker)
        info = _knownTopics(self.broker).get(topic.name)
        if info is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition,
                "This server does not host this topic-partition.",
            )
        if topic.name in INTERNAL_TOPICS:
            # A group's partition is hash % partition count: growing the
            # topic would move groups away from their stored state.
            raise KafkaError(ErrorCode.invalid_request, _internal(topic.name, "repartitioned"))
        current = info.numPartitions
        if topic.count == current:
            raise KafkaError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partition(s)."
            )
        if topic.count < current:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"The topic {topic.name} currently has {current} partition(s); {topic.count} "
                "would not be an increase.",
            )
        expectedReplicas = 1
        if cluster is not None:
            existing = cluster.image.topics[topic.name].partitions
            expectedReplicas = len(existing[min(existing)])
        if topic.assignments is not None:
            added = topic.count - current
            if len(topic.assignments) != added:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"Attempted to add {added} additional partition(s), but only "
                    f"{len(topic.assignments)} assignment(s) were specified.",
                )
            _checkAssignments(
                _registered(self.broker), (a.broker_ids for a in topic.assignments),
                expectedReplicas=expectedReplicas,
            )
        if cluster is not None:
            if topic.assignments is not None:
                assignment = {
                    current + i: tuple(a.broker_ids) for i, a in enumerate(topic.assignments)
                }
            else:
                assignment = cluster.assign(topic.count - current, expectedReplicas, firstPartition=current)
        else:
            logManager.createPartitions(topic.name, topic.count, validateOnly=validateOnly)

        def grown() -> None:
            log.info(
                "Topic {topic} grew from {old} to {new} partitions",
                topic=topic.name,
                old=current,
                new=topic.count,
            )

        if validateOnly:
            return None
        if cluster is not None:
            return cluster.addPartitions, (topic.name, assignment), grown
        grown()
        return None


class DeleteRecordsHandler(Handler):
    """
    DeleteRecords v0-2: move partitions' log start offsets forward.

    Offset -1 means the high watermark; an offset below the current log
    start offset changes nothing and answers the current one; past the high
    watermark is OFFSET_OUT_OF_RANGE.  Internal topics and topics whose
    cleanup policy lacks C{delete} are refused, as Kafka refuses them.

    In a cluster only the leader deletes (NOT_LEADER_OR_FOLLOWER elsewhere,
    also on a broker without a replica), and its answer waits until every
    live replica's log start offset reached the offset
    (L{kafkatwist.replication.records.DelayedDeleteRecords}).
    """

    apiKey = DELETE_RECORDS
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        cls = responseType(DELETE_RECORDS, context.apiVersion)
        TopicResult = nested(cls, "DeleteRecordsTopicResult")
        PartitionResult = nested(cls, "DeleteRecordsPartitionResult")
        logManager = self.broker.logManager
        replicaManager = self.broker.replicaManager
        results = []
        waiting = []
        for topic in request.topics:
            partitions = []
            refused = not self.allowed(context, AclOperation.DELETE, ResourceType.TOPIC, topic.name)
            for partition in topic.partitions:
                index = partition.partition_index
                try:
                    if refused:
                        raise KafkaError(ErrorCode.topic_authorization_failed)
                    partitionLog, requested = self._delete(logManager, topic.name, partition)
                    lowWatermark = partitionLog.logStartOffset
                    if replicaManager is not None:
                        lowWatermark = replicaManager.lowWatermark(topic.name, index, partitionLog)
                    if lowWatermark < requested:
                        waiting.append(Trimming((topic.name, index), partitionLog, requested, lowWatermark))
                    code = ErrorCode.none
                except KafkaError as e:
                    lowWatermark, code = -1, e.code
                partitions.append((index, lowWatermark, code))
            results.append((topic.name, partitions))

        def answer(late=None):
            # late: {key: (ErrorCode, lowWatermark)} of the partitions waited for
            late = late or {}
            topics = []
            for name, partitions in results:
                entries = []
                for index, lowWatermark, code in partitions:
                    if (name, index) in late:
                        code, lowWatermark = late[(name, index)]
                    entries.append(PartitionResult(partition_index=index, low_watermark=lowWatermark,
                                                   error_code=code))
                topics.append(TopicResult(name=name, partitions=tuple(entries)))
            return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

        if not waiting:
            return answer()
        pending = context.respondLater()
        operation = DelayedDeleteRecords(context.clock, waiting, replicaManager.lowWatermark, answer, pending)
        self.broker.producePurgatory.tryCompleteElseWatch(operation, operation.keys(), _timeoutSeconds(request))
        return pending.deferred

    def _delete(self, logManager, topic: str, partition):
        """
        @return: (the leader's log, the offset asked for).
        """
        if topic in INTERNAL_TOPICS:
            raise KafkaError(
                ErrorCode.invalid_topic_exception,
                f"Cannot delete records of internal topic {topic}",
            )
        index = partition.partition_index
        partitionLog = logManager.getLog(topic, index)
        if partitionLog is None:
            cluster = _cluster(self.broker)
            assignment = cluster.image.topics.get(topic) if cluster is not None else None
            if assignment is not None and index in assignment.partitions:
                # Kafka's answer where the partition exists on other brokers.
                raise KafkaError(ErrorCode.not_leader_or_follower, f"{topic}-{index}")
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
        if not partitionLog.isLeader:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"{topic}-{index}")
        offset = partition.offset
        if offset == HIGH_WATERMARK:
            offset = partitionLog.highWatermark
        if offset < 0:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"The offset {offset} for partition {topic}-{index} is not valid",
            )
        if not partitionLog.config.deletes:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"Records of partition {topic}-{index} can not be deleted due to the "
                "configured policy",
            )
        if offset > partitionLog.highWatermark:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"Cannot increment the log start offset to {offset} of partition "
                f"{topic}-{index} since it is larger than the high watermark "
                f"{partitionLog.highWatermark}",
            )
        partitionLog.deleteRecordsBefore(offset)
        return partitionLog, offset


class DescribeClusterHandler(Handler):
    """
    DescribeCluster v0-2 (confluent-kafka's C{describe_cluster}, KIP-700):
    this broker, which is also the controller.
    """

    apiKey = DESCRIBE_CLUSTER
    minVersion = 0
    maxVersion = 2

    def handle(self, context, request):
        cls = responseType(DESCRIBE_CLUSTER, context.apiVersion)
        Broker = nested(cls, "DescribeClusterBroker")
        broker = self.broker
        endpointType = getattr(request, "endpoint_type", _BROKERS)
        values = dict(
            throttle_time=NO_THROTTLE,
            endpoint_type=endpointType,
            cluster_id=broker.clusterId,
            controller_id=broker.nodeId,
            cluster_authorized_operations=OPERATIONS_OMITTED,
        )
        if endpointType != _BROKERS:
            code = (
                ErrorCode.unsupported_endpoint_type
                if endpointType == _CONTROLLERS
                else ErrorCode.invalid_request
            )
            message = (
                "The broker does not serve controller endpoints: kafkatwist has no separate "
                "controller"
                if endpointType == _CONTROLLERS
                else f"Unsupported endpoint type {endpointType}"
            )
            return make(cls, error_code=code, error_message=message, brokers=(), **values)
        cluster = _cluster(broker)
        if cluster is not None:
            image = cluster.image
            values["controller_id"] = image.controllerId
            brokers = tuple(
                make(Broker, broker_id=brokerId, host=host, port=port, rack=rack, is_fenced=False)
                for brokerId, host, port, rack in brokerEndpoints(image, context.listenerName)
            )
        else:
            endpoint = broker.advertisedListenerFor(context.listenerName)
            brokers = (
                make(
                    Broker,
                    broker_id=broker.nodeId,
                    host=endpoint.host,
                    port=endpoint.port,
                    rack=broker.config["broker.rack"],
                    is_fenced=False,
                ),
            )
        if request.include_cluster_authorized_operations:
            values["cluster_authorized_operations"] = clusterOperations(self.authorizer, context)
        return make(cls, error_code=ErrorCode.none, error_message=None, brokers=brokers, **values)


createTopics = HandlerPlugin(
    "builtin.create_topics", CREATE_TOPICS, CreateTopicsHandler, priority=0
)
deleteTopics = HandlerPlugin(
    "builtin.delete_topics", DELETE_TOPICS, DeleteTopicsHandler, priority=0
)
deleteRecords = HandlerPlugin(
    "builtin.delete_records", DELETE_RECORDS, DeleteRecordsHandler, priority=0
)
createPartitions = HandlerPlugin(
    "builtin.create_partitions", CREATE_PARTITIONS, CreatePartitionsHandler, priority=0
)
describeCluster = HandlerPlugin(
    "builtin.describe_cluster", DESCRIBE_CLUSTER, DescribeClusterHandler, priority=0
)
