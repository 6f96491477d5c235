"""
The on-disk L{ILogManager}: Kafka's layout under each of C{log.dirs}.

Each log directory holds one directory per partition,
C{<topic>-<partition>/}, with the segment files, plus
C{recovery-point-offset-checkpoint}, C{log-start-offset-checkpoint}, the
C{.kafka_cleanshutdown} marker (written by L{LogManager.close}, removed once
the next start has loaded) and a C{.lock} held with C{flock} so two brokers
cannot share a directory.

Topic metadata: Kafka keeps topic ids and configs in its controller; here
every partition directory holds a copy in C{topic-metadata.json} (topic
name, id, config overrides and an epoch that each change bumps), written
atomically.  At start the copy with the highest epoch wins.

File handles: active segments stay open (one descriptor per partition);
inactive segments share a bounded LRU (C{maxOpenSegments}, see
L{kafkatwist.log.handles}); index files are never held open.  So a broker
with P partitions uses about P + maxOpenSegments descriptors, plus one per
in-flight fetch region.

Topic deletion renames each partition directory to
C{<topic>-<partition>.<uuid>-delete} (Kafka's convention) and then removes
it; a start finding such directories finishes the job.  Fetches already
holding a region keep reading it through their duplicate descriptor.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.errors import KafkaError
from kafkatwist.interfaces import ILogManager
from kafkatwist.log.checkpoint import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    readCheckpoint,
    writeCheckpoint,
)
from kafkatwist.log.config import LogConfig, validateTopicConfigs
from kafkatwist.log.filelog import FilePartitionLog
from kafkatwist.log.handles import HandleCache
from kafkatwist.log.producerstate import producerIdExpirationMs
from kafkatwist.log.topics import BaseLogManager, TopicState, validateTopicName

__all__ = ["TOPIC_METADATA", "LogManager"]

log = Logger()

TOPIC_METADATA = "topic-metadata.json"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETE_SUFFIX = "-delete"


@implementer(ILogManager)
class LogManager(BaseLogManager):
    """
    All topics' logs under C{logDirs}, loaded (and recovered) on
    construction.

    @param logDirs: directories (C{log.dirs}); created if missing.
    @param defaults: broker-level settings: C{log.segment.bytes},
        C{log.roll.ms}, C{log.retention.ms}, C{log.retention.bytes},
        C{log.index.interval.bytes}, C{log.index.size.max.bytes},
        C{log.flush.interval.messages}, C{log.flush.interval.ms},
        C{message.max.bytes}, C{log.message.timestamp.type},
        C{log.cleanup.policy}, C{min.insync.replicas}, C{compression.type},
        C{num.partitions}, C{producer.id.expiration.ms} (other keys are
        ignored).
    @param maxOpenSegments: descriptors kept open for inactive segments.
    @param clock: milliseconds since the epoch.
    """

    def __init__(
        self,
        logDirs: list[str],
        defaults: Mapping[str, Any] | None = None,
        *,
        maxOpenSegments: int = 256,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(defaults, clock=clock)
        self.producerIdExpirationMs = producerIdExpirationMs(defaults)
        if not logDirs:
            raise ValueError("at least one log directory is required")
        self.logDirs = [os.path.abspath(d) for d in logDirs]
        self.cache = HandleCache(maxOpenSegments)
        self._dirOf: dict[tuple[str, int], str] = {}
        self._lockFds: list[int] = []
        self._closed = False
        # flushDirty and runRetention may run on different threads.
        self._checkpointLock = threading.Lock()
        try:
            for logDir in self.logDirs:
                os.makedirs(logDir, exist_ok=True)
                self._lockDir(logDir)
            self._loadAll()
        except BaseException:
            self._releaseDirs()
            raise

    # -- startup ---------------------------------------------------------------

    def _lockDir(self, logDir: str) -> None:
        fd = os.open(os.path.join(logDir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise RuntimeError(f"log directory {logDir} is in use by another process") from None
        self._lockFds.append(fd)

    def _releaseDirs(self) -> None:
        for fd in self._lockFds:
            os.close(fd)
        self._lockFds = []

    def _loadAll(self) -> None:
        now = self.clock()
        found: dict[str, dict[int, str]] = {}
        metadata: dict[str, list[dict]] = {}
        state: dict[str, tuple[bool, dict, dict]] = {}
        for logDir in self.logDirs:
            clean = os.path.exists(os.path.join(logDir, CLEAN_SHUTDOWN))
            state[logDir] = (
                clean,
                readCheckpoint(os.path.join(logDir, RECOVERY_POINT)),
                readCheckpoint(os.path.join(logDir, LOG_START_OFFSET)),
            )
            firstPartition = True
            for name in sorted(os.listdir(logDir)):
                path = os.path.join(logDir, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(_DELETE_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                match = _PARTITION_DIR.match(name)
                if not match:
                    continue
                topic, partition = match.group(1), int(match.group(2))
                try:
                    validateTopicName(topic)
                except KafkaError:
                    log.warn("Ignoring directory {path}: not a partition directory", path=path)
                    continue
                if not clean and firstPartition:
                    # Only worth a warning if there is something to recover
                    # (a new, empty directory has no marker either).
                    log.warn(
                        "{dir}: no clean shutdown marker, recovering unflushed segments",
                        dir=logDir,
                    )
                firstPartition = False
                found.setdefault(topic, {})[partition] = path
                meta = _readMetadata(path)
                if meta is not None:
                    metadata.setdefault(topic, []).append(meta)
        for name, partitions in sorted(found.items()):
            self._loadTopic(name, partitions, metadata.get(name, []), state, now)
        for logDir in self.logDirs:
            marker = os.path.join(logDir, CLEAN_SHUTDOWN)
            if os.path.exists(marker):
                os.unlink(marker)
        self.writeCheckpoints()

    def _loadTopic(
        self, name: str, partitions: dict[int, str], metas: list[dict], state, now: int
    ) -> None:
        meta = max(metas, key=lambda m: m.get("epoch", 0), default=None)
        overrides = {}
        if meta is not None:
            for key, value in meta.get("configs", {}).items():
                try:
                    overrides.update(validateTopicConfigs({key: value}))
                except KafkaError as e:
                    log.warn("Topic {topic}: dropping stored config {error}", topic=name, error=e)
        topicId = uuid.UUID(meta["topicId"]) if meta and "topicId" in meta else uuid.uuid4()
        config = LogConfig.resolve(overrides, self.brokerDefaults)
        count = max(partitions) + 1
        topic = TopicState(
            name, topicId, count, overrides, config, epoch=meta.get("epoch", 0) if meta else 0
        )
        for partition in range(count):
            path = partitions.get(partition)
            if path is None:
                log.warn(
                    "Topic {topic}: partition {p} was missing, recreating it empty",
                    topic=name,
                    p=partition,
                )
                self._logs[(name, partition)] = self._createLog(topic, partition)
                continue
            logDir = os.path.dirname(path)
            clean, recoveryPoints, startOffsets = state[logDir]
            self._logs[(name, partition)] = FilePartitionLog.load(
                path,
                self.cache,
                name,
                partition,
                config,
                recoveryPoint=recoveryPoints.get((name, partition), 0),
                logStartOffset=startOffsets.get((name, partition), 0),
                clean=clean,
                nowMs=now,
                producerIdExpirationMs=self.producerIdExpirationMs,
            )
            self._dirOf[(name, partition)] = logDir
        self._topics[name] = topic
        self._persistTopic(topic)

    # -- storage hooks -------------------------------------------------------------

    def _partitionPath(self, logDir: str, topic: str, partition: int) -> str:
        return os.path.join(logDir, f"{topic}-{partition}")

    def _pickDir(self) -> str:
        # Kafka's rule: the directory holding the fewest partitions.
        counts = {d: 0 for d in self.logDirs}
        for logDir in self._dirOf.values():
            counts[logDir] += 1
        return min(self.logDirs, key=lambda d: counts[d])

    def _createLog(self, topic: TopicState, partition: int) -> FilePartitionLog:
        logDir = self._pickDir()
        path = self._partitionPath(logDir, topic.name, partition)
        if os.path.exists(path):
            # Leftovers of an unfinished delete or create: start afresh.
            shutil.rmtree(path)
        partitionLog = FilePartitionLog.create(
            path,
            self.cache,
            topic.name,
            partition,
            topic.config,
            self.clock(),
            producerIdExpirationMs=self.producerIdExpirationMs,
        )
        self._dirOf[(topic.name, partition)] = logDir
        _writeMetadata(path, topic)
        return partitionLog

    def _persistTopic(self, topic: TopicState) -> None:
        for partition in range(topic.numPartitions):
            logDir = self._dirOf.get((topic.name, partition))
            if logDir is not None:
                _writeMetadata(self._partitionPath(logDir, topic.name, partition), topic)

    def _deleteLogs(self, topic: TopicState, logs: list) -> None:
        for partitionLog in logs:
            partitionLog.close(flush=False)
            self._dirOf.pop((topic.name, partitionLog.partition), None)
            path = partitionLog.directory
            doomed = f"{path}.{uuid.uuid4().hex}{_DELETE_SUFFIX}"
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue
            shutil.rmtree(doomed, ignore_errors=True)

    # -- periodic work and shutdown ------------------------------------------------

    def writeCheckpoints(self) -> None:
        """
        Write the recovery point and log start offset checkpoints of every
        log directory.
        """
        recovery: dict[str, dict] = {d: {} for d in self.logDirs}
        starts: dict[str, dict] = {d: {} for d in self.logDirs}
        for key, logDir in list(self._dirOf.items()):
            partitionLog = self._logs.get(key)
            if partitionLog is None:
                continue
            recovery[logDir][key] = partitionLog.recoveryPoint
            starts[logDir][key] = partitionLog.logStartOffset
        with self._checkpointLock:
            for logDir in self.logDirs:
                writeCheckpoint(os.path.join(logDir, RECOVERY_POINT), recovery[logDir])
                writeCheckpoint(os.path.join(logDir, LOG_START_OFFSET), starts[logDir])

    def runRetention(self, now_ms: int) -> int:
        deleted = super().runRetention(now_ms)
        if deleted:
            self.writeCheckpoints()
        return deleted

    def flushDirty(self, now_ms: int) -> int:
        flushed = super().flushDirty(now_ms)
        self.writeCheckpoints()
        return flushed

    def close(self) -> None:
        """
        Flush everything, write checkpoints and the clean shutdown marker,
        release every descriptor and the directory locks.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for partitionLog in self.logs():
                partitionLog.close(flush=True)
            self.writeCheckpoints()
            for logDir in self.logDirs:
                with open(os.path.join(logDir, CLEAN_SHUTDOWN), "w") as f:
                    f.flush()
                    os.fsync(f.fileno())
            self._releaseDirs()

    def abandon(self) -> None:
        """
        Stop as a crash would: descriptors are released, nothing is flushed
        or written (no checkpoints, no clean shutdown marker).  For tests.
        """
        with self._lock:
            self._closed = True
            for partitionLog in self.logs():
                partitionLog.abandon()
            self._releaseDirs()


def _readMetadata(path: str) -> dict | None:
    try:
        with open(os.path.join(path, TOPIC_METADATA), encoding="utf-8") as f:
            meta = json.load(f)
        return meta if isinstance(meta, dict) else None
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warn(
            "Ignoring unreadable {path}: {error}", path=os.path.join(path, TOPIC_METADATA), error=e
        )
        return None


def _writeMetadata(path: str, topic: TopicState) -> None:
    meta = {
        "version": 1,
        "topic": topic.name,
        "topicId": str(topic.topicId),
        "epoch": topic.epoch,
        "configs": topic.overrides,
    }
    target = os.path.join(path, TOPIC_METADATA)
    temporary = target + ".tmp"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(meta, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, target)
