"""
Topic management shared by the on-disk and in-memory log managers: Kafka's
topic name rules, topic metadata, and the L{ILogManager} operations that do
not depend on storage.
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from twisted.logger import Logger

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log.config import (
    BrokerLogDefaults,
    ConfigEntry,
    LogConfig,
    applyConfigChanges,
    checkCombination,
    describeTopicConfig,
    validateTopicConfigs,
)
from kafkatwist.log.records import TopicInfo
from kafkatwist.log.throttle import storageLog

__all__ = ["MAX_TOPIC_NAME_LENGTH", "BaseLogManager", "TopicState", "validateTopicName"]

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")

_log = Logger()


def validateTopicName(name: Any) -> None:
    """
    Kafka's topic name rules.

    @raise KafkaError: INVALID_TOPIC_EXCEPTION.
    """
    if not isinstance(name, str) or not name:
        raise KafkaError(
            ErrorCode.invalid_topic_exception, "topic name is illegal, it can't be empty"
        )
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name cannot be '.' or '..'")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters",
        )
    if not _LEGAL_NAME.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'",
        )


def _unified(name: str) -> str:
    # Kafka refuses topics that differ only by '.' vs '_' (metric names clash).
    return name.replace(".", "_")


@dataclass
class TopicState:
    """
    A topic's metadata as the manager keeps it.

    @ivar epoch: bumped on every config change, so the newest copy wins when
        copies (one per partition directory) disagree after a crash.
    """

    name: str
    topicId: uuid.UUID
    numPartitions: int
    overrides: dict[str, str]
    config: LogConfig
    epoch: int = 0
    extra: dict = field(default_factory=dict)

    def info(self) -> TopicInfo:
        return TopicInfo(self.name, self.topicId, self.numPartitions, dict(self.overrides))


def _wallClockMs() -> int:
    return int(time.time() * 1000)


class BaseLogManager:
    """
    Topic bookkeeping over storage hooks: C{_createLog(topic, partition)},
    C{_persistTopic(topic)}, C{_deleteLogs(topic, logs)}.

    @param defaults: broker-level settings (C{log.segment.bytes},
        C{log.retention.ms}, C{num.partitions}, ...).
    @param clock: milliseconds since the epoch, for segment creation times
        (appends and retention are given the time explicitly).
    """

    #: whether a log created here leads its partition at once (a single
    #: broker); in a cluster it waits for the controller's word
    newLogsLead = True

    def __init__(
        self, defaults: Mapping[str, Any] | None = None, *, clock: Callable[[], int] | None = None
    ) -> None:
        self.brokerDefaults = BrokerLogDefaults(defaults)
        self.clock = clock or _wallClockMs
        self._lock = threading.RLock()
        self._topics: dict[str, TopicState] = {}
        #: name -> TopicInfo of every topic: a table never changed once
        #: published, replaced whole (L{_publish}, under C{_lock}) after
        #: each change of C{_topics}; read without the lock (L{topics}), so
        #: a Metadata answer on a Processor's thread never waits behind a
        #: topic creation's disk work
        self._published: dict[str, TopicInfo] = {}
        self._logs: dict[tuple[str, int], Any] = {}
        #: topic id -> name, as of its last rebuild (see L{topicName})
        self._namesById: dict[uuid.UUID, str] = {}
        #: called with the topic name after a topic's logs are deleted
        #: (the log cleaner forgets their checkpoints)
        self.deletionListeners: list[Callable[[str], None]] = []

    # -- queries ---------------------------------------------------------------

    def topics(self) -> dict[str, TopicInfo]:
        """
        See L{ILogManager.topics}: the last published table (a copy of
        it), without taking the lock a topic operation holds across its
        disk work.  Any thread.
        """
        return dict(self._published)

    def _publish(self) -> None:
        """
        Publish the topic table again after a change of C{_topics} or of a
        topic's partition count or overrides.  Under C{_lock}.
        """
        self._published = {name: topic.info() for name, topic in self._topics.items()}

    def topicName(self, topicId: uuid.UUID | None) -> str | None:
        """
        See L{ILogManager.topicName}: a look-up in a map of ids to names,
        checked against the topic now of that name (a deleted or recreated
        topic never answers for an old id), rebuilt whole when it does not
        know the id.
        """
        name = self._namesById.get(topicId)
        if name is not None:
            topic = self._topics.get(name)
            if topic is not None and topic.topicId == topicId:
                return name
        self._namesById = names = {t.topicId: n for n, t in self._published.items()}
        return names.get(topicId)

    def getLog(self, topic: str, partition: int):
        return self._logs.get((topic, partition))

    def logs(self) -> list:
        """
        @return: every partition log.
        """
        return list(self._logs.values())

    def describeTopicConfig(self, name: str) -> dict[str, ConfigEntry]:
        """
        The effective configuration of topic C{name}, with each value's
        source (DescribeConfigs).

        @raise KafkaError: UNKNOWN_TOPIC_OR_PARTITION.
        """
        topic = self._topic(name)
        return describeTopicConfig(topic.overrides, self.brokerDefaults)

    def _topic(self, name: str) -> TopicState:
        topic = self._topics.get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        return topic

    # -- topic operations --------------------------------------------------------

    def createTopic(
        self,
        name: str,
        numPartitions: int = -1,
        configs: Mapping[str, Any] | None = None,
        *,
        validateOnly: bool = False,
        topicId: uuid.UUID | None = None,
    ) -> TopicInfo:
        """
        See L{ILogManager.createTopic}.  C{numPartitions} -1 means
        C{num.partitions}.
        """
        validateTopicName(name)
        if numPartitions is None or numPartitions == -1:
            numPartitions = self.brokerDefaults.numPartitions
        if numPartitions < 1:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"number of partitions must be at least 1, not {numPartitions}",
            )
        overrides = validateTopicConfigs(configs or {})
        config = LogConfig.resolve(overrides, self.brokerDefaults)
        checkCombination(config)
        with self._lock:
            if name in self._topics:
                raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
            unified = _unified(name)
            for existing in self._topics:
                if _unified(existing) == unified:
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception,
                        f"topic {name!r} collides with existing topic {existing!r} "
                        "('.' and '_' are equivalent)",
                    )
            self._checkBrokerPartitions(numPartitions)
            topic = TopicState(name, topicId or uuid.uuid4(), numPartitions, overrides, config)
            if validateOnly:
                return topic.info()
            for log in self._createLogs(topic, range(numPartitions)):
                if not self.newLogsLead:
                    log.isLeader = False
                self._logs[(name, log.partition)] = log
            self._topics[name] = topic
            self._publish()
        _log.info(
            "Created topic {topic} ({topicId}) with {partitions} partitions, configs {configs}",
            topic=name, topicId=str(topic.topicId), partitions=numPartitions, configs=overrides,
        )
        return topic.info()

    def deleteTopic(self, name: str) -> None:
        with self._lock:
            topic = self._topic(name)
            del self._topics[name]
            self._publish()
            logs = [
                self._logs.pop((name, p))
                for p in range(topic.numPartitions)
                if (name, p) in self._logs
            ]
        self._deleteLogs(topic, logs)
        for listener in list(self.deletionListeners):
            listener(name)
        _log.info("Deleted topic {topic} ({topicId})", topic=name, topicId=str(topic.topicId))

    def adoptTopicId(self, name: str, topicId: uuid.UUID) -> TopicInfo:
        """
        See L{ILogManager.adoptTopicId}: topic C{name} takes the id
        C{topicId}, its logs untouched.  The topic's metadata copies are
        rewritten with the new id in a newer epoch, one file at a time: a
        crash between two leaves the newer copies, with the new id, to win
        at the next start (which brings the others up to date).  The new
        id is published only once every copy is written: if a write fails,
        the topic keeps its old id and epoch in memory (copies already
        written carry the new one, which wins at the next start) and the
        error is raised; a later call rewrites them all.

        @raise KafkaError: UNKNOWN_TOPIC_OR_PARTITION; INCONSISTENT_TOPIC_ID
            if another topic has that id.
        @raise OSError: a copy could not be written.
        """
        with self._lock:
            topic = self._topic(name)
            old = topic.topicId
            if old == topicId:
                return topic.info()
            for other, state in self._topics.items():
                if state.topicId == topicId:
                    raise KafkaError(
                        ErrorCode.inconsistent_topic_id,
                        f"topic {other!r} already has the id {topicId}",
                    )
            # Written first, published after: a write that fails part way
            # leaves the old id (and epoch) in memory, so the caller's next
            # attempt finds the ids still differ and rewrites every copy.
            topic.topicId = topicId
            topic.epoch += 1
            try:
                self._persistTopic(topic)
            except BaseException:
                topic.topicId = old
                topic.epoch -= 1
                raise
            self._publish()
        _log.info(
            "Topic {topic} now has the id {topicId} (was {old}); its data is kept",
            topic=name, topicId=str(topicId), old=str(old),
        )
        return topic.info()

    def createPartitions(
        self, name: str, totalCount: int, *, validateOnly: bool = False
    ) -> TopicInfo:
        with self._lock:
            topic = self._topic(name)
            if totalCount <= topic.numPartitions:
                raise KafkaError(
                    ErrorCode.invalid_partitions,
                    f"topic currently has {topic.numPartitions} partitions, "
                    f"{totalCount} would not be an increase",
                )
            self._checkBrokerPartitions(totalCount - topic.numPartitions)
            if validateOnly:
                return TopicInfo(name, topic.topicId, totalCount, dict(topic.overrides))
            grown = dataclasses.replace(topic, numPartitions=totalCount, epoch=topic.epoch + 1)
            for log in self._createLogs(grown, range(topic.numPartitions, totalCount)):
                if not self.newLogsLead:
                    log.isLeader = False
                self._logs[(name, log.partition)] = log
            topic.numPartitions, topic.epoch = totalCount, grown.epoch
            self._publish()
            self._persistTopic(topic)
        _log.info("Topic {topic} now has {partitions} partitions", topic=name, partitions=totalCount)
        return topic.info()

    def alterTopicConfigs(self, name: str, changes, *, validateOnly: bool = False) -> TopicInfo:
        """
        See L{ILogManager.alterTopicConfigs}; changes apply to every
        partition at once (the next append sees the new config).
        """
        with self._lock:
            topic = self._topic(name)
            overrides = applyConfigChanges(topic.overrides, changes, self.brokerDefaults)
            config = LogConfig.resolve(overrides, self.brokerDefaults)
            checkCombination(config)
            if validateOnly:
                return TopicInfo(name, topic.topicId, topic.numPartitions, overrides)
            topic.overrides, topic.config = overrides, config
            topic.epoch += 1
            self._publish()
            for partition in range(topic.numPartitions):
                log = self._logs.get((name, partition))
                if log is not None:
                    log.config = config
            self._persistTopic(topic)
        _log.info("Topic {topic} configs now {configs}", topic=name, configs=overrides)
        return topic.info()

    def setBrokerDefaults(self, defaults: Mapping[str, Any]) -> None:
        """
        New broker-level settings (a dynamic broker config update): every
        topic's config is resolved again, so a topic inheriting a changed
        default sees it on its next append, retention or cleaning pass.
        Overrides were validated on their own and stay valid.

        @raise KafkaError: INVALID_CONFIG for a bad broker value; nothing
            changed.
        """
        brokerDefaults = BrokerLogDefaults(defaults)
        with self._lock:
            configs = {
                name: LogConfig.resolve(topic.overrides, brokerDefaults)
                for name, topic in self._topics.items()
            }
            self.brokerDefaults = brokerDefaults
            for name, topic in self._topics.items():
                topic.config = configs[name]
                for partition in range(topic.numPartitions):
                    log = self._logs.get((name, partition))
                    if log is not None:
                        log.config = configs[name]

    # -- periodic work -------------------------------------------------------------

    def runRetention(self, nowMs: int) -> int:
        """
        Apply retention to every partition (the broker calls this on a
        timer, e.g. every C{log.retention.check.interval.ms}).

        @return: segments deleted.
        """
        return sum(self._each("retention", lambda log: log.deleteOldSegments(nowMs)))

    def flushDirty(self, nowMs: int) -> int:
        """
        Flush what the flush policy says is due (the broker calls this on a
        timer, e.g. every C{log.flush.scheduler.interval.ms}).

        @return: partitions whose active segment was flushed.
        """
        return sum(self._each("periodic flush", lambda log: log.maybeFlush(nowMs)))

    def _each(self, what: str, work):
        """
        Yield C{work(log)} for every partition log; one that fails on its
        storage (a full disk) is logged once a minute and skipped, the
        others carry on.
        """
        for log in self.logs():
            try:
                yield work(log)
            except (OSError, KafkaError) as e:
                name = f"{log.topic}-{log.partition}"
                storageLog.warn(
                    (what, name), "{partition}: {what} failed: {error}",
                    partition=name, what=what, error=e,
                )

    def _checkBrokerPartitions(self, adding: int) -> None:
        """
        C{max.broker.partitions} (KIP-578's name): every partition costs
        memory, descriptors and start-up time.  Call with the lock held.

        @raise KafkaError: POLICY_VIOLATION.
        """
        limit = self.brokerDefaults.maxBrokerPartitions
        hosted = len(self._logs)
        if hosted + adding > limit:
            raise KafkaError(
                ErrorCode.policy_violation,
                f"Adding {adding} partition(s) to the {hosted} this broker hosts would exceed "
                f"max.broker.partitions={limit}.",
            )

    # -- storage hooks ---------------------------------------------------------------

    def _createLogs(self, topic: TopicState, partitions: range) -> list:
        """
        Create the logs of C{partitions} of C{topic} (whose
        C{numPartitions} and C{epoch} are what the topic will have): all of
        them, or -- raising -- none.
        """
        created = []
        try:
            for partition in partitions:
                created.append(self._createLog(topic, partition))
        except BaseException:
            self._deleteLogs(topic, created)
            raise
        return created

    def _createLog(self, topic: TopicState, partition: int):
        raise NotImplementedError

    def _persistTopic(self, topic: TopicState) -> None:
        pass

    def _deleteLogs(self, topic: TopicState, logs: list) -> None:
        for log in logs:
            log.deleteAll()
