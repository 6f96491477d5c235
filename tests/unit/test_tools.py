"""
python -m kafkatwist.tools: dump-log, check-data-dir and describe-config on
a data directory written by the real log manager, then damaged on purpose.
"""

import io
import os
import struct
import subprocess
import sys

import pytest

from kafkatwist.log import LogManager
from kafkatwist.tools.__main__ import main
from kafkatwist.testing.broker import ROOT
from tests.log.batches import makeBatch

NOW = 1_700_000_000_000


def run(*args):
    out = io.StringIO()
    status = main(list(args), out)
    return status, out.getvalue()


@pytest.fixture
def dataDir(tmp_path):
    directory = str(tmp_path / "data")
    manager = LogManager([directory])
    manager.createTopic("t", 1, {"segment.bytes": "400", "index.interval.bytes": "60"})
    log = manager.getLog("t", 0)
    for i in range(12):
        log.append(makeBatch(2, values=[b"v%d" % i, b"w%d" % i], baseTimestamp=NOW + i,
                             producerId=7, producerEpoch=0, baseSequence=2 * i), NOW)
    manager.close()
    return directory


def segment(dataDir, base, suffix):
    return os.path.join(dataDir, "t-0", f"{base:020d}.{suffix}")


def bases(dataDir):
    return sorted(int(n[:20]) for n in os.listdir(os.path.join(dataDir, "t-0")) if n.endswith(".log"))


def test_a_sound_directory(dataDir):
    status, out = run("check-data-dir", dataDir)
    assert status == 0, out
    assert "In use: no" in out and "Last shutdown: clean" in out
    assert "t-0: " in out and "offsets up to 23" in out
    assert out.rstrip().endswith("batches checked: no problems")


def test_dump_log_batches_and_records(dataDir):
    path = segment(dataDir, 0, "log")
    status, out = run("dump-log", path)
    assert status == 0
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 "
        "producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false position: 0 "
        f"CreateTime: {NOW + 1} size: "
    )
    assert lines[2].endswith("magic: 2 compresscodec: none crc: %d isvalid: true" % struct.unpack(
        ">I", open(path, "rb").read()[17:21])[0])
    status, out = run("dump-log", "--deep-iteration", "--print-data-log", path)
    assert f"| offset: 1 CreateTime: {NOW + 1} keySize: -1 valueSize: 2 sequence: 1 headerKeys: [] payload: w0" in out


def test_dump_indexes_and_snapshot(dataDir):
    second = bases(dataDir)[1]
    status, out = run("dump-log", segment(dataDir, 0, "index"), segment(dataDir, 0, "timeindex"))
    assert status == 0, out
    assert "offset: " in out and "position: " in out and "timestamp: " in out
    status, out = run("dump-log", "--verify-index-only", segment(dataDir, 0, "index"))
    assert status == 0 and "offset: " not in out
    status, out = run("dump-log", segment(dataDir, second, "snapshot"))
    assert status == 0, out
    assert "producerId: 7 producerEpoch: 0" in out


def test_damage_is_reported(dataDir):
    first, second = bases(dataDir)[:2]
    # A flipped byte inside the second batch of the first segment.
    log = segment(dataDir, first, "log")
    data = bytearray(open(log, "rb").read())
    size = 12 + struct.unpack(">i", data[8:12])[0]
    data[size + 70] ^= 0xFF
    open(log, "wb").write(bytes(data))
    # An index entry that points into the middle of a batch.
    with open(segment(dataDir, second, "index"), "ab") as f:
        f.write(struct.pack(">ii", 1, 7))
    # A torn snapshot.
    snapshot = segment(dataDir, second, "snapshot")
    open(snapshot, "r+b").truncate(10)

    status, out = run("check-data-dir", dataDir)
    assert status == 1
    problems = [l for l in out.splitlines() if l.startswith("PROBLEM ")]
    assert any(f"{first:020d}.log: CRC mismatch at {size}" in p for p in problems), out
    assert any(f"{second:020d}.index" in p and "no sound batch" in p for p in problems), out
    assert any(f"{second:020d}.snapshot" in p for p in problems), out
    assert out.rstrip().endswith(f"{len(problems)} problems")

    status, out = run("dump-log", "--verify-index-only", segment(dataDir, second, "index"))
    assert status == 1 and "Mismatch:" in out
    status, out = run("dump-log", "--index-sanity-check", segment(dataDir, second, "index"))
    assert status == 1 and "failed sanity check" in out
    status, out = run("dump-log", log)
    assert status == 1 and f"Found a batch that is not sound at position {size}" in out


def test_a_live_directory_is_only_read(dataDir):
    from kafkatwist.util.dirlock import DataDirLock

    lock = DataDirLock([dataDir])
    lock.acquire()
    try:
        before = {n: os.stat(os.path.join(dataDir, n)).st_mtime_ns for n in os.listdir(dataDir)}
        status, out = run("check-data-dir", dataDir)
        assert f"In use: yes, by a running broker (pid {os.getpid()})" in out
        assert {n: os.stat(os.path.join(dataDir, n)).st_mtime_ns for n in os.listdir(dataDir)} == before
    finally:
        lock.release()


def test_describe_config(tmp_path):
    properties = tmp_path / "server.properties"
    properties.write_text("num.io.threads=4\nssl.key.password=hunter2-not-shown\n")
    status, out = run("describe-config", "--config", str(properties), "--override", "node.id=3")
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "All configs for broker 3 are:"
    assert "  num.io.threads=4 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.io.threads=4}" in lines
    assert "  num.network.threads=1 sensitive=false synonyms={DEFAULT_CONFIG:num.network.threads=1}" in lines
    assert "hunter2-not-shown" not in out


def test_as_a_command():
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-m", "kafkatwist.tools", "describe-config", "-o", "num.io.threads=x"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr == "kafkatwist: Invalid value for num.io.threads: 'x' is not an integer\n"
    result = subprocess.run([sys.executable, "-m", "kafkatwist.tools", "--help"],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0 and "check-data-dir" in result.stdout


def test_transaction_index(tmp_path):
    from kafkatwist.log.txnindex import AbortedTxn, TransactionIndex

    directory = str(tmp_path / "data")
    manager = LogManager([directory])
    manager.createTopic("t", 1, {})
    log = manager.getLog("t", 0)
    batch = makeBatch(1, producerId=9, producerEpoch=0, baseSequence=0, attributes=0x10,
                      baseTimestamp=NOW)
    log.append(batch, NOW, verificationGuard=log.verificationGuard(9))
    log.appendMarker(9, 0, False, 3, NOW)
    manager.close()
    path = os.path.join(directory, "t-0", f"{0:020d}.txnindex")
    status, out = run("dump-log", path)
    assert status == 0, out
    assert "version: 0 producerId: 9 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in out
    status, out = run("dump-log", os.path.join(directory, "t-0", f"{2:020d}.snapshot"))
    assert "producerId: 9 producerEpoch: 0 coordinatorEpoch: 3 currentTxnFirstOffset: -1" in out
    status, out = run("check-data-dir", directory)
    assert status == 0, out
    with open(path, "ab") as f:
        f.write(b"\x00\x01")
    status, out = run("check-data-dir", directory)
    assert status == 1 and "00000000000000000000.txnindex" in out
    assert TransactionIndex(0).entries == () and AbortedTxn(1, 2, 3, 4).lastOffset == 3
