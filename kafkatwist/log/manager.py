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

File handles (see L{kafkatwist.log.handles}): nothing is opened before
it is used; active segments' descriptors are bounded by C{maxOpenActive},
inactive ones share an LRU of C{maxOpenSegments}; index files are never
held open.  So a broker uses at most maxOpenActive + maxOpenSegments
descriptors for its logs, plus one per in-flight fetch region, however many
partitions it hosts.

Topic creation is atomic.  Each new partition directory is first built
under a staging name, C{<topic>-<partition>.<uuid>-creating}, with its empty
first segment and its topic metadata (which records the partition count);
once every one is complete they are renamed to their real names.  The first
rename is the commit point: a start that finds staging directories renames
those whose topic's metadata (the newest copy among real directories)
counts them, and deletes the others -- a creation that failed or was cut
short leaves nothing behind.  CreatePartitions works the same way, the new
partitions' metadata carrying the grown count.

Topic deletion renames each partition directory to
C{<topic>-<partition>.<uuid>-delete} (Kafka's convention) and then removes
it; a start finding such directories finishes the job.  Fetches already
holding a region keep reading it through their duplicate descriptor.  (In
both marked names the topic is shortened if need be, so the name fits the
file system's 255 bytes; the metadata inside says which topic it is.)
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

from crc32c import crc32c
from twisted.logger import Logger
from zope.interface import implementer

from kafkatwist.errors import KafkaError
from kafkatwist.interfaces import ILogManager
from kafkatwist.errors import ErrorCode
from kafkatwist.log.checkpoint import (
    CLEAN_SHUTDOWN,
    LOG_START_OFFSET,
    RECOVERY_POINT,
    readCheckpoint,
    writeCheckpoint,
)
from kafkatwist.util.atomic import replaceFile, syncDirectory
from kafkatwist.log.config import LogConfig, validateTopicConfigs
from kafkatwist.log.errors import StorageError
from kafkatwist.log.filelog import FilePartitionLog
from kafkatwist.log.handles import HandleCache
from kafkatwist.log.producerstate import producerIdExpirationMs
from kafkatwist.log.segment import FileSegment
from kafkatwist.log.throttle import storageLog
from kafkatwist.log.topics import BaseLogManager, TopicState, validateTopicName

__all__ = ["TOPIC_METADATA", "LogManager"]

log = Logger()

TOPIC_METADATA = "topic-metadata.json"
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
_DELETE_SUFFIX = "-delete"
_CREATE_SUFFIX = "-creating"
_MAX_FILE_NAME = 255


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
        C{num.partitions}, C{max.broker.partitions},
        C{producer.id.expiration.ms} (other keys are ignored).
    @param maxOpenSegments: descriptors kept open for inactive segments.
    @param maxOpenActive: descriptors kept open for active segments (by
        default half the process's descriptor limit).
    @param clock: milliseconds since the epoch.
    """

    def __init__(
        self,
        logDirs: list[str],
        defaults: Mapping[str, Any] | None = None,
        *,
        maxOpenSegments: int = 256,
        maxOpenActive: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(defaults, clock=clock)
        self.producerIdExpirationMs = producerIdExpirationMs(defaults)
        if not logDirs:
            raise ValueError("at least one log directory is required")
        self.logDirs = [os.path.abspath(d) for d in logDirs]
        self.cache = HandleCache(maxOpenSegments, maxOpenActive)
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
            raise StorageError(
                logDir, "is in use by another process", "stop the other broker first"
            ) from None
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
        staged: list[str] = []
        # partition directory -> its metadata copy, or why it is unreadable
        copies: dict[str, dict | str] = {}
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
                if name.endswith(_CREATE_SUFFIX):
                    staged.append(path)
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
                    copies[path] = meta
                if isinstance(meta, dict):
                    metadata.setdefault(topic, []).append(meta)
        for path in staged:
            self._resolveStaged(path, found, metadata, copies)
        for name, partitions in sorted(found.items()):
            if name not in metadata:
                _refuseWithoutMetadata(name, partitions, copies)
        for name, partitions in sorted(found.items()):
            self._loadTopic(name, partitions, metadata.get(name, []), copies, state, now)
        with self._lock:
            self._publish()
        for logDir in self.logDirs:
            marker = os.path.join(logDir, CLEAN_SHUTDOWN)
            if os.path.exists(marker):
                os.unlink(marker)
        self.writeCheckpoints()

    def _loadTopic(
        self,
        name: str,
        partitions: dict[int, str],
        metas: list[dict],
        copies: dict[str, dict | str],
        state,
        now: int,
    ) -> None:
        meta = max(metas, key=lambda m: m.get("epoch", 0))
        overrides = {}
        for key, value in meta.get("configs", {}).items():
            try:
                overrides.update(validateTopicConfigs({key: value}))
            except KafkaError as e:
                log.warn("Topic {topic}: dropping stored config {error}", topic=name, error=e)
        config = LogConfig.resolve(overrides, self.brokerDefaults)
        count = max(max(partitions) + 1, meta.get("partitions", 0))
        topic = TopicState(
            name, uuid.UUID(meta["topicId"]), count, overrides, config, epoch=meta.get("epoch", 0)
        )
        source = next(
            path for path, copy in sorted(copies.items())
            if copy is meta
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
        # Bring the copies that are missing, unreadable or older up to date
        # (rewriting every copy at every start would cost two fsyncs per
        # partition).
        current = _metadata(topic)
        for partition in range(count):
            logDir = self._dirOf.get((name, partition))
            if logDir is None:
                continue
            path = self._partitionPath(logDir, name, partition)
            copy = copies.get(path)
            if isinstance(copy, dict):
                if "crc" in copy and {k: copy.get(k) for k in current} == current:
                    continue
                # Older (a change that did not reach every copy), or written
                # before checksums: brought up to date quietly.
            elif partitions.get(partition) is not None:
                log.warn(
                    "Repaired {path} ({problem}) from {source}",
                    path=os.path.join(path, TOPIC_METADATA),
                    problem="missing" if copy is None else copy,
                    source=os.path.join(source, TOPIC_METADATA),
                )
            _writeMetadata(path, topic)

    def _resolveStaged(self, path: str, found: dict, metadata: dict, copies: dict) -> None:
        """
        Finish or undo the creation that left staging directory C{path}.
        """
        meta = _readMetadata(path)
        if not isinstance(meta, dict):
            meta = None
        topic = meta.get("topic") if meta else None
        partition = meta.get("partition") if meta else None
        committed = max(metadata.get(topic, []), key=lambda m: m.get("epoch", 0), default=None)
        if (
            isinstance(partition, int)
            and committed is not None
            and committed.get("topicId") == meta.get("topicId")
            and partition < committed.get("partitions", 0)
            and partition not in found.get(topic, {})
        ):
            final = self._partitionPath(os.path.dirname(path), topic, partition)
            os.rename(path, final)
            log.warn(
                "Completed the creation of {topic}-{partition} from {path} "
                "(the broker stopped while creating it)",
                topic=topic,
                partition=partition,
                path=path,
            )
            found.setdefault(topic, {})[partition] = final
            metadata.setdefault(topic, []).append(meta)
            copies[final] = meta
            return
        shutil.rmtree(path, ignore_errors=True)
        log.warn(
            "Deleted {path}: a partition whose creation did not finish ({what})",
            path=path,
            what=f"{topic}-{partition}" if meta else "no readable topic metadata",
        )

    # -- storage hooks -------------------------------------------------------------

    def _partitionPath(self, logDir: str, topic: str, partition: int) -> str:
        return os.path.join(logDir, f"{topic}-{partition}")

    def directoryOf(self, topic: str, partition: int) -> str | None:
        """
        The log directory (of C{logDirs}) holding a partition, or C{None}.
        """
        return self._dirOf.get((topic, partition))

    def _pickDir(self, counts: dict[str, int] | None = None) -> str:
        # Kafka's rule: the directory holding the fewest partitions.
        if counts is None:
            counts = self._dirCounts()
        return min(self.logDirs, key=lambda d: counts[d])

    def _dirCounts(self) -> dict[str, int]:
        counts = {d: 0 for d in self.logDirs}
        for logDir in self._dirOf.values():
            counts[logDir] += 1
        return counts

    def _createLogs(self, topic: TopicState, partitions: range) -> list[FilePartitionLog]:
        """
        Stage every partition directory, then commit them by renaming (see
        the module docstring).

        @raise KafkaError: KAFKA_STORAGE_ERROR, with nothing left behind.
        """
        token = uuid.uuid4().hex
        counts = self._dirCounts()
        staged: list[tuple[str, str, str, int]] = []
        try:
            for partition in partitions:
                logDir = self._pickDir(counts)
                counts[logDir] += 1
                path = os.path.join(
                    logDir, _markedName(topic.name, partition, token, _CREATE_SUFFIX)
                )
                os.mkdir(path)
                staged.append((path, self._partitionPath(logDir, topic.name, partition),
                               logDir, partition))
                FileSegment.createFile(path, 0)
                _writeMetadata(path, topic, partition)
        except OSError as e:
            for path, _, _, _ in staged:
                shutil.rmtree(path, ignore_errors=True)
            raise _creationFailed(topic, partitions, e) from None
        committed: list[tuple[str, str]] = []
        try:
            for path, final, _, _ in staged:
                if os.path.lexists(final):
                    log.warn("Replacing leftover directory {path}", path=final)
                    shutil.rmtree(final)
                os.rename(path, final)
                committed.append((path, final))
            for logDir in {logDir for _, _, logDir, _ in staged}:
                syncDirectory(logDir)
        except OSError as e:
            for path, final in committed:
                try:
                    os.rename(final, path)
                except OSError as undo:
                    log.error(
                        "Could not undo the creation of {path} ({error}): the next start "
                        "completes it",
                        path=final,
                        error=undo,
                    )
            for path, _, _, _ in staged:
                shutil.rmtree(path, ignore_errors=True)
            raise _creationFailed(topic, partitions, e) from None
        now = self.clock()
        logs = []
        for _, final, logDir, partition in staged:
            logs.append(
                FilePartitionLog.create(
                    final,
                    self.cache,
                    topic.name,
                    partition,
                    topic.config,
                    now,
                    producerIdExpirationMs=self.producerIdExpirationMs,
                    prepared=True,
                )
            )
            self._dirOf[(topic.name, partition)] = logDir
        return logs

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
            doomed = os.path.join(
                os.path.dirname(path),
                _markedName(topic.name, partitionLog.partition, uuid.uuid4().hex, _DELETE_SUFFIX),
            )
            try:
                os.rename(path, doomed)
            except FileNotFoundError:
                continue
            shutil.rmtree(doomed, ignore_errors=True)

    # -- periodic work and shutdown ------------------------------------------------

    def writeCheckpoints(self) -> bool:
        """
        Write the recovery point and log start offset checkpoints of every
        log directory.

        @return: whether every one was written.
        """
        ok = True
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
                for name, entries in ((RECOVERY_POINT, recovery), (LOG_START_OFFSET, starts)):
                    path = os.path.join(logDir, name)
                    try:
                        writeCheckpoint(path, entries[logDir])
                    except OSError as e:
                        # A full disk: the previous checkpoint stands (it
                        # only makes recovery longer); say so once a minute.
                        ok = False
                        storageLog.warn(
                            ("checkpoint", path),
                            "Could not write {path}: {error}",
                            path=path,
                            error=e,
                        )
                    else:
                        if storageLog.clear(("checkpoint", path)):
                            log.info("Wrote {path} again", path=path)
        return ok

    def runRetention(self, nowMs: int) -> int:
        deleted = super().runRetention(nowMs)
        if deleted:
            self.writeCheckpoints()
        return deleted

    def flushDirty(self, nowMs: int) -> int:
        flushed = super().flushDirty(nowMs)
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
            clean = self.writeCheckpoints() and all(p.closedClean for p in self.logs())
            if clean:
                for logDir in self.logDirs:
                    try:
                        replaceFile(os.path.join(logDir, CLEAN_SHUTDOWN), b"")
                    except OSError as e:
                        log.warn("Could not mark {dir} as cleanly shut down: {error}",
                                 dir=logDir, error=e)
            else:
                log.warn("Not everything could be flushed: the next start recovers the logs")
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


def _readMetadata(path: str) -> dict | str | None:
    """
    @return: the metadata in partition directory C{path}; why it is
        unusable; or C{None} if it is missing.
    """
    try:
        with open(os.path.join(path, TOPIC_METADATA), "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"unreadable: {e.strerror}"
    try:
        meta = json.loads(raw)
    except ValueError as e:
        return f"not valid JSON: {e}"
    if not isinstance(meta, dict):
        return "not a JSON object"
    if "crc" in meta and meta["crc"] != _checksum(
        {key: value for key, value in meta.items() if key != "crc"}
    ):
        return "checksum mismatch"
    try:
        uuid.UUID(meta["topicId"])
        if not isinstance(meta.get("configs", {}), dict):
            raise ValueError("configs")
    except (KeyError, TypeError, ValueError, AttributeError):
        return "no valid topicId or configs"
    return meta


def _checksum(meta: dict) -> int:
    return crc32c(json.dumps(meta, sort_keys=True).encode("utf-8"))


def checkTopicMetadata(logDirs: list[str]) -> None:
    """
    What L{LogManager} would refuse at start-up, read only: a topic none of
    whose partition directories has usable metadata.  A broker checks this
    before it binds a port, so a port-based health check never sees a
    broker that is about to refuse its directory as up.

    @raise StorageError: as L{LogManager} would.
    """
    found: dict[str, dict[int, str]] = {}
    copies: dict[str, dict | str] = {}
    usable: set[str] = set()
    for logDir in logDirs:
        try:
            names = sorted(os.listdir(logDir))
        except FileNotFoundError:
            continue
        for name in names:
            path = os.path.join(logDir, name)
            if name.endswith((_DELETE_SUFFIX, _CREATE_SUFFIX)) or not os.path.isdir(path):
                continue
            match = _PARTITION_DIR.match(name)
            if not match:
                continue
            topic = match.group(1)
            try:
                validateTopicName(topic)
            except KafkaError:
                continue
            found.setdefault(topic, {})[int(match.group(2))] = path
            meta = _readMetadata(path)
            if meta is not None:
                copies[path] = meta
            if isinstance(meta, dict):
                usable.add(topic)
    for name, partitions in sorted(found.items()):
        if name not in usable:
            _refuseWithoutMetadata(name, partitions, copies)


def _refuseWithoutMetadata(topic: str, partitions: dict[int, str], copies: dict) -> None:
    """
    No partition directory of C{topic} has usable metadata: starting would
    give the topic a new id and drop its configs (retention among them).
    """
    paths = [os.path.join(partitions[p], TOPIC_METADATA) for p in sorted(partitions)]
    problems = [(path, copies.get(os.path.dirname(path))) for path in paths]
    damaged = [(path, problem) for path, problem in problems if problem is not None]
    path, problem = damaged[0] if damaged else (paths[0], None)
    raise StorageError(
        path,
        f"topic metadata {'is ' + problem if problem else 'is missing'}, and no other "
        f"partition directory of topic {topic} has a usable copy",
        "restore it from a backup, or remove the topic's directories to drop the topic "
        "(the broker will not give it a new id and default configs)",
    )


def _markedName(topic: str, partition: int, token: str, suffix: str) -> str:
    """
    C{<topic>-<partition>.<token><suffix>}, the topic shortened so the name
    fits in 255 bytes (topic names are ASCII).
    """
    tail = f"-{partition}.{token}{suffix}"
    return topic[: _MAX_FILE_NAME - len(tail)] + tail


def _creationFailed(topic: TopicState, partitions: range, error: OSError) -> KafkaError:
    log.error(
        "Could not create partitions {first}-{last} of {topic}, nothing was created: {error}",
        topic=topic.name,
        first=partitions.start,
        last=partitions.stop - 1,
        error=error,
    )
    return KafkaError(
        ErrorCode.kafka_storage_error,
        f"could not create the partitions of {topic.name}: {error.strerror or error}",
    )


def _metadata(topic: TopicState) -> dict:
    return {
        "version": 1,
        "topic": topic.name,
        "topicId": str(topic.topicId),
        "epoch": topic.epoch,
        "partitions": topic.numPartitions,
        "configs": topic.overrides,
    }


def _writeMetadata(path: str, topic: TopicState, partition: int | None = None) -> None:
    meta = _metadata(topic)
    if partition is not None:
        meta["partition"] = partition
    meta["crc"] = _checksum(meta)
    data = json.dumps(meta, sort_keys=True).encode("utf-8")
    replaceFile(os.path.join(path, TOPIC_METADATA), data)
