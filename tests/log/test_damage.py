"""
Damaged files, table-driven (issue 11: of 21 corruption cases, 7 were
silently wrong).

Every file type the log keeps is truncated, bit-flipped, partly zeroed and
overwritten with garbage, then the broker's storage starts again (the
cluster id, then the log manager, as the daemon starts them) and everything
is read back.  For each case the outcome must be one of:

  - C{refused}: start-up raises L{StorageError}, one line naming the file;
  - C{repaired}: start-up succeeds and a log line names the file; whatever
    is served afterwards is what was written -- records, offsets, topic id
    and configs, time lookups, producer state -- except that a repair may
    lose a damaged tail, never anything silently;
  - C{clientDetected}: the one case the broker does not look for, as in
    Kafka: a flipped payload byte in a batch below the recovery point after
    a clean shutdown is served as stored, and its CRC-32C tells every
    client (checked here).

Never: a traceback, a wrong byte served with a good CRC, an offset that
silently disappears, a changed topic id or config, a new cluster id.
"""

from __future__ import annotations

import glob
import os
import time
from dataclasses import dataclass, field

import pytest

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.log import LogManager
from kafkatwist.log.errors import StorageError
from kafkatwist.log.meta import loadOrCreateClusterId
from kafkatwist.protocol.batch import HEADER_SIZE, batchError, iterBatchHeaders

from .batches import makeBatch, records

NODE = 1
NOW = int(time.time() * 1000)
T0 = NOW - 1_000_000
CONFIGS = {"retention.ms": "-1", "segment.bytes": "1500", "index.interval.bytes": "100"}
PRODUCER = 7


# -- the data ---------------------------------------------------------------------------


@dataclass
class Original:
    clusterId: str
    topicId: object
    batches: dict = field(default_factory=dict)  # partition -> {baseOffset: bytes}

    def timestamps(self, partition):
        return {
            base: _header(data).maxTimestamp for base, data in self.batches[partition].items()
        }


def _header(data: bytes):
    return next(iterBatchHeaders(data)).header


def start(directory: str):
    clusterId = loadOrCreateClusterId([directory], NODE, None)
    return clusterId, LogManager([directory])


def populate(directory: str, clean: bool) -> Original:
    clusterId, manager = start(directory)
    info = manager.createTopic("t", 2, CONFIGS)
    for i in range(40):
        manager.getLog("t", 0).append(
            makeBatch(3, baseTimestamp=T0 + 10 * i, producerId=PRODUCER, producerEpoch=0,
                      baseSequence=3 * i),
            NOW,
        )
    for i in range(5):
        manager.getLog("t", 1).append(makeBatch(2, baseTimestamp=T0 + i), NOW)
    original = Original(clusterId, info.topicId)
    for partition in (0, 1):
        original.batches[partition] = dict(readBack(manager.getLog("t", partition))[0])
    if clean:
        manager.close()
    else:
        manager.getLog("t", 0).flush()  # a recovery point inside the log
        manager.writeCheckpoints()
        manager.getLog("t", 0).append(makeBatch(1, baseTimestamp=T0 + 500), NOW)
        original.batches[0].update(readBack(manager.getLog("t", 0))[0])
        manager.abandon()
    return original


def readBack(log):
    """
    @return: every batch served, C{[(baseOffset, bytes)]}, and the offsets
        that answered an error.
    """
    served, errors = [], []
    offset = log.logStartOffset
    while offset < log.logEndOffset:
        try:
            data = records(log.read(offset, 1 << 20).records)
        except KafkaError as e:
            errors.append((offset, e.code))
            later = [s.baseOffset for s in log.segments if s.baseOffset > offset]
            if not later:
                break
            offset = later[0]
            continue
        if not data:
            break
        for position, header in iterBatchHeaders(data):
            if header.lastOffset >= offset:
                served.append((header.baseOffset, data[position : position + header.size]))
                offset = header.lastOffset + 1
    return served, errors


# -- the damage -------------------------------------------------------------------------


def _partitionFile(directory, pattern, which=0, partition=0):
    paths = sorted(glob.glob(os.path.join(directory, f"t-{partition}", pattern)))
    return paths[which]


FILES = {
    "old-segment": lambda d: _partitionFile(d, "*.log", 0),
    "active-segment": lambda d: _partitionFile(d, "*.log", -1),
    "index": lambda d: _partitionFile(d, "*.index", 0),
    "timeindex": lambda d: _partitionFile(d, "*.timeindex", 0),
    "snapshot": lambda d: _partitionFile(d, "*.snapshot", -1),
    "meta.properties": lambda d: os.path.join(d, "meta.properties"),
    "topic-metadata": lambda d: os.path.join(d, "t-0", "topic-metadata.json"),
    "recovery-checkpoint": lambda d: os.path.join(d, "recovery-point-offset-checkpoint"),
    "start-checkpoint": lambda d: os.path.join(d, "log-start-offset-checkpoint"),
}


def _rewrite(path, change):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data = change(data)
    with open(path, "wb") as f:
        f.write(data)


def _secondBatchLength(data):
    # The high byte of the second batch's batchLength field (the first's if
    # there is one batch).
    first = next(iterBatchHeaders(bytes(data))).header.size
    return (first if first < len(data) else 0) + 8


def truncate(path, kind):
    _rewrite(path, lambda data: data[: len(data) // 2])


def flip(path, kind):
    def change(data):
        at = _secondBatchLength(data) if kind.endswith("segment") else len(data) // 2
        data[at] ^= 0x80
        return data

    _rewrite(path, change)


def flipPayload(path, kind):
    def change(data):
        # A record byte of the first batch: its header stays sound.
        data[HEADER_SIZE + 3] ^= 0x01
        return data

    _rewrite(path, change)


def zero(path, kind):
    def change(data):
        at = len(data) // 2
        data[at : at + 16] = bytes(len(data[at : at + 16]))
        return data

    _rewrite(path, change)


def garbage(path, kind):
    _rewrite(path, lambda data: bytearray((i * 151 + 89) % 251 for i in range(max(len(data), 40))))


def empty(path, kind):
    _rewrite(path, lambda data: bytearray())


def missing(path, kind):
    os.unlink(path)


OPS = {"truncate": truncate, "flip": flip, "zero": zero, "garbage": garbage, "empty": empty}

# (file, damage, clean restart) -> expected outcome
REFUSED, REPAIRED, CLIENT = "refused", "repaired", "clientDetected"
CASES = {
    **{(f, op, True): REPAIRED for f in FILES for op in OPS},
    **{(f, op, False): REPAIRED for f in ("old-segment", "active-segment") for op in OPS},
    **{("meta.properties", op, True): REFUSED for op in OPS},
    ("meta.properties", "missing", True): REFUSED,
    ("topic-metadata", "missing", True): REPAIRED,
    # Payload bytes below the recovery point are not re-read at start (nor
    # by Kafka): the batch CRC tells every client.  Zeroing the middle of
    # the first segment lands in a payload.
    ("old-segment", "flipPayload", True): CLIENT,
    ("old-segment", "zero", True): CLIENT,
    ("old-segment", "zero", False): CLIENT,
    # In the active segment's last KiB a clean start finds it and says so,
    # but does not truncate the sound, acknowledged batches after it.
    ("active-segment", "zero", True): CLIENT,
    ("active-segment", "flipPayload", True): CLIENT,
    ("active-segment", "flipPayload", False): REPAIRED,
}
DAMAGE = {**OPS, "missing": missing, "flipPayload": flipPayload}


# -- the oracle -------------------------------------------------------------------------


def check(directory, original: Original, path: str, capturedLog, kind: str = "") -> str:
    try:
        clusterId, manager = start(directory)
    except StorageError as e:
        text = str(e)
        assert "\n" not in text and os.path.basename(path) in text, text
        return REFUSED
    try:
        assert clusterId == original.clusterId
        info = manager.topics()["t"]
        assert (info.topicId, info.configs, info.numPartitions) == (
            original.topicId, CONFIGS, 2
        )
        lost = False
        clientDetected = False
        for partition in (0, 1):
            log = manager.getLog("t", partition)
            served, errors = readBack(log)
            expected = original.batches[partition]
            for base, data in served:
                assert base in expected, f"offset {base} was never written"
                if data != expected[base]:
                    # Only damage every client detects, never a good CRC.
                    _, error = batchError(memoryview(data), 0, len(data))
                    assert error is not None, f"batch {base} served wrong with a good CRC"
                    clientDetected = True
            servedBases = {base for base, _ in served}
            missingBases = [base for base in expected if base not in servedBases]
            if missingBases:
                lost = True
            if errors:
                assert all(code == ErrorCode.kafka_storage_error for _, code in errors)
            # Time lookups land on the batch that was written there.
            timestamps = original.timestamps(partition)
            for base in sorted(servedBases):
                found = log.offsetForTimestamp(timestamps[base])
                assert found is not None and found[0] == base, (base, found)
            # Retention sees the segments' true max timestamps.
            segments = log.segments
            for i, segment in enumerate(segments):
                end = segments[i + 1].baseOffset if i + 1 < len(segments) else log.logEndOffset
                inside = [timestamps[b] for b in servedBases if segment.baseOffset <= b < end]
                if inside and not errors:
                    assert segment.largestTimestamp == max(inside), segment
            if partition == 0 and servedBases:
                last = max(servedBases)
                if _header(expected[last]).producerId == PRODUCER:
                    entry = log.producerState.get(PRODUCER)
                    assert entry is not None and entry.lastOffset == _header(expected[last]).lastOffset
        assert capturedLog.failures == []
        if clientDetected:
            if kind == "active-segment":
                assert [line for line in capturedLog.lines if path in line and "damaged" in line]
            return CLIENT
        named = [line for line in capturedLog.lines if path in line]
        assert named, f"nothing logged about {path}"
        assert not lost or named
        return REPAIRED
    finally:
        manager.close()


@pytest.mark.parametrize(
    "kind,damage,clean", sorted(CASES), ids=lambda v: str(v) if not isinstance(v, bool) else (
        "clean" if v else "unclean")
)
def test_damage(tmp_path, kind, damage, clean, capturedLog):
    directory = str(tmp_path / "logs")
    original = populate(directory, clean)
    path = FILES[kind](directory)
    DAMAGE[damage](path, kind)
    capturedLog.events.clear()
    assert check(directory, original, path, capturedLog, kind) == CASES[(kind, damage, clean)]


def test_every_copy_of_topic_metadata_damaged(tmp_path, capturedLog):
    directory = str(tmp_path / "logs")
    populate(directory, True)
    for partition in (0, 1):
        truncate(os.path.join(directory, f"t-{partition}", "topic-metadata.json"), "json")
    with pytest.raises(StorageError) as e:
        start(directory)
    assert "topic-metadata.json" in str(e.value) and "\n" not in str(e.value)


def test_empty_directory_gets_new_meta_properties(tmp_path):
    directory = str(tmp_path / "logs")
    os.makedirs(directory)
    clusterId, manager = start(directory)
    manager.close()
    again, manager = start(directory)
    manager.close()
    assert again == clusterId


def test_damaged_old_segment_logged_once(tmp_path, capturedLog):
    # The case: a corrupt batchLength in an old segment made every
    # fetch there answer KAFKA_STORAGE_ERROR with nothing logged.
    directory = str(tmp_path / "logs")
    original = populate(directory, True)
    path = FILES["old-segment"](directory)
    flip(path, "old-segment")
    capturedLog.events.clear()
    _, manager = start(directory)
    try:
        log = manager.getLog("t", 0)
        first, second, *_ = sorted(original.batches[0])
        for _ in range(5):
            with pytest.raises(KafkaError) as e:
                log.read(second, 1 << 20)
            assert e.value.code == ErrorCode.kafka_storage_error
        # Before the damage, and in later segments, everything is served.
        assert records(log.read(first, 1).records) == original.batches[0][first]
        later = log.segments[1].baseOffset
        assert records(log.read(later, 1).records) == original.batches[0][later]
        assert len(capturedLog.matching(f"{path}: unreadable data from byte")) == 1
        assert capturedLog.failures == []
    finally:
        manager.close()


def test_log_directories_of_different_clusters(tmp_path):
    first, second = str(tmp_path / "a"), str(tmp_path / "b")
    loadOrCreateClusterId([first], NODE, None)
    loadOrCreateClusterId([second], NODE, None)
    with pytest.raises(StorageError) as e:
        loadOrCreateClusterId([first, second], NODE, None)
    assert "meta.properties" in str(e.value) and "differs" in str(e.value)
    # A new directory beside an existing one joins its cluster.
    third = str(tmp_path / "c")
    assert loadOrCreateClusterId([first, third], NODE, None) == loadOrCreateClusterId(
        [third], NODE, None
    )


def test_swapped_in_segment_is_not_damage(tmp_path, capturedLog):
    # The cleaner swaps a shorter log file and new index files in by
    # rename, leaving the old .indexcrc: a record of another file, not
    # damage -- nothing is reported lost or rebuilt.
    directory = str(tmp_path / "logs")
    original = populate(directory, True)
    path = FILES["old-segment"](directory)
    stem = path[: -len(".log")]
    with open(path, "rb") as f:
        data = f.read()
    size = next(iterBatchHeaders(data)).header.size
    for suffix, content in ((".log", data[:size]), (".index", b""), (".timeindex", b"")):
        with open(stem + suffix + ".swap", "wb") as f:
            f.write(content)
        os.replace(stem + suffix + ".swap", stem + suffix)
    capturedLog.events.clear()
    _, manager = start(directory)
    try:
        log = manager.getLog("t", 0)
        first = min(original.batches[0])
        assert records(log.read(first, 1).records) == original.batches[0][first]
        assert capturedLog.matching("lost") == [] and capturedLog.matching("Rebuilding") == []
    finally:
        manager.close()
