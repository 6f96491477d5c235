"""
What only the on-disk log does: layout, restart, recovery, descriptors.
"""

from __future__ import annotations

import os
import struct

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import LogManager
from kafkatwist.log.checkpoint import CLEAN_SHUTDOWN, RECOVERY_POINT, readCheckpoint
from kafkatwist.log.errors import StorageError
from kafkatwist.protocol.batch import iterBatchHeaders, validateRecordSet

from .batches import makeBatch, records
from .helpers import NOW, offsets, openFds, readAll


def partitionDir(disk, topic="t", partition=0):
    return os.path.join(disk.directory, f"{topic}-{partition}")


def segmentPath(disk, base, suffix=".log", topic="t"):
    return os.path.join(partitionDir(disk, topic), f"{base:020d}{suffix}")


def slurp(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_layout(disk):
    manager = disk.make()
    manager.createTopic("t", 2, {"segment.bytes": "300", "index.interval.bytes": "50"})
    log = manager.getLog("t", 0)
    for _ in range(10):
        log.append(makeBatch(2), NOW)
    manager.close()
    names = sorted(os.listdir(partitionDir(disk)))
    bases = [s for s in names if s.endswith(".log")]
    assert bases[0] == "00000000000000000000.log"
    assert len(bases) > 2
    for base in bases:
        stem = base[: -len(".log")]
        assert f"{stem}.index" in names and f"{stem}.timeindex" in names
    index = slurp(segmentPath(disk, 0, ".index"))
    assert len(index) % 8 == 0 and len(index) > 0
    relative, position = struct.unpack(">ii", index[:8])
    data = slurp(segmentPath(disk, 0))
    assert [h.baseOffset for p, h in iterBatchHeaders(data) if p == position] == [relative]
    timeindex = slurp(segmentPath(disk, 0, ".timeindex"))
    assert len(timeindex) % 12 == 0 and len(timeindex) > 0
    assert os.path.exists(os.path.join(disk.directory, CLEAN_SHUTDOWN))
    assert readCheckpoint(os.path.join(disk.directory, RECOVERY_POINT)) == {
        ("t", 0): 20,
        ("t", 1): 0,
    }
    assert slurp(os.path.join(disk.directory, RECOVERY_POINT)).decode().splitlines()[:3] == [
        "0",
        "2",
        "t 0 20",
    ]


def test_clean_restart_keeps_everything(disk):
    manager = disk.make({"log.retention.ms": 5000})
    info = manager.createTopic(
        "t", 2, {"segment.bytes": "300", "message.timestamp.type": "LogAppendTime"}
    )
    log = manager.getLog("t", 0)
    for i in range(20):
        log.append(makeBatch(1 + i % 3), NOW + i)
    log.deleteRecordsBefore(3)
    before = readAll(log, 3)
    segments = len(log.segments)
    manager = disk.restart(manager)
    assert manager.topics() == {"t": info}
    assert manager.topics()["t"].configs == {
        "segment.bytes": "300",
        "message.timestamp.type": "LogAppendTime",
    }
    log = manager.getLog("t", 0)
    assert (log.logStartOffset, log.logEndOffset, len(log.segments)) == (3, 39, segments)
    assert readAll(log, 3) == before
    assert log.maxTimestamp() == (38, NOW + 19)
    assert log.append(makeBatch(1), NOW + 100).firstOffset == 39
    assert manager.getLog("t", 1).logEndOffset == 0
    assert manager.describeTopicConfig("t")["retention.ms"].value == "5000"


def test_unclean_restart_truncates_torn_tail(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {})
    log = manager.getLog("t", 0)
    for _ in range(5):
        log.append(makeBatch(3), NOW)
    size = log.size
    manager.abandon()
    with open(segmentPath(disk, 0), "ab") as f:
        f.write(makeBatch(4)[:40])  # a write cut short by the crash
    manager = disk.restart(manager, clean=False)
    log = manager.getLog("t", 0)
    assert (log.logEndOffset, log.size) == (15, size)
    assert os.path.getsize(segmentPath(disk, 0)) == size
    assert log.append(makeBatch(1), NOW).firstOffset == 15
    validateRecordSet(readAll(log, 0))


def test_corrupt_byte_detected_at_recovery(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "1000"})
    log = manager.getLog("t", 0)
    for _ in range(20):
        log.append(makeBatch(2, valueSize=30), NOW)
    segments = log.segments
    assert len(segments) >= 3
    first = segments[0]
    batchSize = len(makeBatch(2, valueSize=30))
    manager.abandon()
    with open(first.logPath, "r+b") as f:
        f.seek(batchSize * 2 + 70)  # inside the third batch's records
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x01]))
    manager = disk.restart(manager, clean=False)
    log = manager.getLog("t", 0)
    assert log.logEndOffset == 4
    assert [s.baseOffset for s in log.segments] == [0]
    assert not os.path.exists(segments[1].logPath)
    assert offsets(readAll(log, 0)) == [(0, 1), (2, 3)]
    with pytest.raises(KafkaError) as e:
        log.read(5, 100)
    assert e.value.code == ErrorCode.offset_out_of_range
    log.append(makeBatch(1), NOW)
    manager = disk.restart(manager, clean=False)
    assert manager.getLog("t", 0).logEndOffset == 5


def test_recovery_starts_at_recovery_point(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "500"})
    log = manager.getLog("t", 0)
    for _ in range(10):
        log.append(makeBatch(2, valueSize=30), NOW)
    manager.flushDirty(NOW)  # fsyncs rolled segments: recovery point moves up
    assert log.recoveryPoint == log.activeSegment.baseOffset > 0
    first = log.segments[0]
    manager.abandon()
    # Damage below the recovery point is not looked for (as in Kafka) ...
    with open(first.logPath, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    manager = disk.restart(manager, clean=False)
    assert manager.getLog("t", 0).logEndOffset == 20


def test_missing_index_rebuilt(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "2000", "index.interval.bytes": "100"})
    log = manager.getLog("t", 0)
    for _ in range(60):
        log.append(makeBatch(2, valueSize=20), NOW + 1)
    expected = {o: offsets(records(log.read(o, 1).records)) for o in range(120)}
    manager.close()
    original = slurp(segmentPath(disk, 0, ".index"))
    os.unlink(segmentPath(disk, 0, ".index"))
    os.unlink(segmentPath(disk, 0, ".timeindex"))
    with open(segmentPath(disk, log.segments[1].baseOffset, ".index"), "r+b") as f:
        f.write(b"\xff" * 20)  # corrupt: torn, not increasing
    manager = disk.make(disk.defaults)
    log = manager.getLog("t", 0)
    assert {o: offsets(records(log.read(o, 1).records)) for o in range(120)} == expected
    assert slurp(segmentPath(disk, 0, ".index")) == original
    assert os.path.exists(segmentPath(disk, 0, ".timeindex"))
    assert log.offsetForTimestamp(1000) == (0, 1001)


def test_index_pointing_inside_batch_rebuilt(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "2000", "index.interval.bytes": "100"})
    log = manager.getLog("t", 0)
    for _ in range(60):
        log.append(makeBatch(2, valueSize=20), NOW)
    manager.close()
    path = segmentPath(disk, 0, ".index")
    entries = bytearray(slurp(path))
    relative, position = struct.unpack_from(">ii", entries, 8)
    struct.pack_into(">ii", entries, 8, relative, position + 5)
    with open(path, "wb") as f:
        f.write(entries)
    manager = disk.make(disk.defaults)
    log = manager.getLog("t", 0)
    assert offsets(records(log.read(relative, 1).records)) == [(relative, relative + 1)]


def test_fsync_before_ack_calls_fsync(disk, monkeypatch):
    manager = disk.make()
    manager.createTopic("t", 1, {"flush.messages": "1"})
    log = manager.getLog("t", 0)
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    log.append(makeBatch(1), NOW)
    assert synced
    manager.alterTopicConfigs("t", [("flush.messages", "DELETE", None)])
    synced.clear()
    log.append(makeBatch(1), NOW)
    assert not synced


def test_region_survives_retention(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"segment.bytes": "300", "retention.bytes": "0"})
    log = manager.getLog("t", 0)
    for _ in range(10):
        log.append(makeBatch(2, baseTimestamp=NOW), NOW)
    region = log.read(0, 1000).records
    expected = os.pread(region.fileno(), region.length, region.position())
    assert manager.runRetention(NOW) > 0
    assert not os.path.exists(segmentPath(disk, 0))
    assert region.read() == expected
    validateRecordSet(expected)
    region.close()
    region.close()


def test_many_partitions_bounded_descriptors(disk):
    before = openFds()
    manager = disk.make(maxOpenSegments=16)
    manager.createTopic("many", 300, {"segment.bytes": "200"})
    for p in range(300):
        log = manager.getLog("many", p)
        for _ in range(4):
            log.append(makeBatch(1, valueSize=50), NOW)
    for p in range(300):
        log = manager.getLog("many", p)
        assert len(log.segments) == 4
        for offset in range(4):
            assert offsets(records(log.read(offset, 1).records)) == [(offset, offset)]
    # One per active segment, the bounded LRU, and the directory lock.
    assert openFds() - before <= 300 + 16 + 1
    manager = disk.restart(manager)
    assert openFds() - before <= 300 + 16 + 1
    assert manager.getLog("many", 299).logEndOffset == 4


def test_log_dir_locked(disk):
    disk.make()
    with pytest.raises(StorageError):
        LogManager([disk.directory])


def test_multiple_log_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    manager = LogManager(dirs)
    manager.createTopic("t", 4, {})
    assert sorted(n for n in os.listdir(dirs[0]) if n.startswith("t-")) == ["t-0", "t-2"]
    assert sorted(n for n in os.listdir(dirs[1]) if n.startswith("t-")) == ["t-1", "t-3"]
    manager.getLog("t", 3).append(makeBatch(2), NOW)
    manager.close()
    manager = LogManager(dirs)
    assert manager.topics()["t"].numPartitions == 4
    assert manager.getLog("t", 3).logEndOffset == 2
    manager.close()


def test_delete_topic_removes_files(disk):
    manager = disk.make()
    manager.createTopic("t", 2, {})
    manager.getLog("t", 0).append(makeBatch(1), NOW)
    region = manager.getLog("t", 0).read(0, 100).records
    manager.deleteTopic("t")
    assert [
        n for n in os.listdir(disk.directory) if not n.startswith((".", "log-", "recovery-"))
    ] == []
    assert validateRecordSet(region.read())  # a pending send still works
    region.close()
    os.makedirs(os.path.join(disk.directory, "t-0.0123456789abcdef0123456789abcdef-delete"))
    manager = disk.restart(manager)
    assert manager.topics() == {}
    assert os.listdir(disk.directory) == [
        n for n in os.listdir(disk.directory) if not n.endswith("-delete")
    ]


def test_unclean_restart_keeps_configs_and_start_offset(disk):
    manager = disk.make()
    manager.createTopic("t", 1, {"retention.bytes": "100000"})
    log = manager.getLog("t", 0)
    for _ in range(4):
        log.append(makeBatch(2), NOW)
    log.deleteRecordsBefore(3)
    manager.flushDirty(NOW)  # writes the checkpoints, like the broker's timer
    manager = disk.restart(manager, clean=False)
    log = manager.getLog("t", 0)
    assert manager.topics()["t"].configs == {"retention.bytes": "100000"}
    assert (log.logStartOffset, log.logEndOffset) == (3, 8)


def test_unreadable_checkpoint_does_not_stop_startup(disk):
    """
    A checkpoint that cannot be read (here a directory where the file should
    be: EISDIR, as EIO or EACCES would be) costs a full recovery, like a
    malformed one, and start-up goes on with every record.
    """
    manager = disk.make()
    manager.createTopic("t", 1)
    log = manager.getLog("t", 0)
    for _ in range(3):
        log.append(makeBatch(2), NOW)
    manager.abandon()
    path = os.path.join(disk.directory, RECOVERY_POINT)
    if os.path.exists(path):
        os.remove(path)
    os.mkdir(path)
    assert readCheckpoint(path) == {}
    manager = disk.restart(manager, clean=False)
    assert manager.getLog("t", 0).logEndOffset == 6
