"""
DescribeLogDirs (35), v0-v4 as Kafka 3.9 serves it (KafkaApis and
ReplicaManager.describeLogDirs): for each data directory, the requested
partitions it holds with their size on disk, an offset lag of 0 and
C{is_future_key} false (no replica is ever being moved between
directories here), and from v4 the file system's total and usable bytes.

A null topic list asks for every partition.  Partitions the broker does not
hold -- of unknown topics, or past a topic's partition count -- are left
out, as Kafka leaves them out (no error), and so is a topic with none of
its partitions left.  A directory whose file system cannot be read answers
KAFKA_STORAGE_ERROR alone.  Without DESCRIBE on the cluster the answer is
CLUSTER_AUTHORIZATION_FAILED (v3+) and no directory.

Runs on a handler thread: C{statvfs} is a system call on the data
directory, and the sizes are the logs' published segment sizes.
"""

from __future__ import annotations

import os

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import DESCRIBE_LOG_DIRS, responseType
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType


class DescribeLogDirsHandler(Handler):
    apiKey = DESCRIBE_LOG_DIRS
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        cls = responseType(self.apiKey, context.apiVersion)
        if not self.allowed(context, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
            return make(
                cls, throttle_time=NO_THROTTLE, results=(),
                error_code=ErrorCode.cluster_authorization_failed,
            )
        logManager = self.broker.logManager
        topics = logManager.topics()
        if request.topics is None:
            wanted = {name: range(info.numPartitions) for name, info in topics.items()}
        else:
            wanted = {}
            for topic in request.topics:
                info = topics.get(topic.topic)
                if info is None:
                    continue
                partitions = wanted.setdefault(topic.topic, set())
                partitions.update(p for p in topic.partitions if 0 <= p < info.numPartitions)
        held: dict[str, dict[str, list[tuple[int, int]]]] = {d: {} for d in logManager.logDirs}
        for name in sorted(wanted):
            for partition in sorted(wanted[name]):
                logDir = logManager.directoryOf(name, partition)
                log = logManager.getLog(name, partition)
                if logDir in held and log is not None:
                    held[logDir].setdefault(name, []).append((partition, log.size))
        results = tuple(self._result(cls, logDir, byTopic) for logDir, byTopic in held.items())
        return make(cls, throttle_time=NO_THROTTLE, results=results, error_code=ErrorCode.none)

    @staticmethod
    def _result(cls, logDir, byTopic):
        Result = nested(cls, "DescribeLogDirsResult")
        Topic = nested(cls, "DescribeLogDirsTopic")
        Partition = nested(cls, "DescribeLogDirsPartition")
        try:
            stats = os.statvfs(logDir)
        except OSError:
            return make(Result, error_code=ErrorCode.kafka_storage_error, log_dir=logDir, topics=())
        return make(
            Result,
            error_code=ErrorCode.none,
            log_dir=logDir,
            topics=tuple(
                make(Topic, name=name, partitions=tuple(
                    make(Partition, partition_index=p, partition_size=size, offset_lag=0,
                         is_future_key=False)
                    for p, size in partitions
                ))
                for name, partitions in byTopic.items()
            ),
            total_bytes=stats.f_blocks * stats.f_frsize,
            usable_bytes=stats.f_bavail * stats.f_frsize,
        )


describeLogDirs = HandlerPlugin(
    "builtin.describe_log_dirs", DESCRIBE_LOG_DIRS, DescribeLogDirsHandler, priority=0
)
