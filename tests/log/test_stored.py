"""
Stored batches are checked and inflated within a bound when decoded (issue
11: ListOffsets by timestamp over a CRC-valid batch with a garbage payload
closed the connection with a traceback; a 262 KB zstd batch inflated to
8 GiB).
"""

from __future__ import annotations

import resource
import struct

import pytest
from crc32c import crc32c

from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.log.stored import StoredBatchError, decodeStoredBatches
from kafkatwist.plugins.list_offsets import ListOffsetsHandler
from kafkatwist.protocol import batch as batch_module
from kafkatwist.protocol.batch import HEADER
from kafkatwist.protocol.records import Record, buildBatch, compress
from tests.fakeservices import FakeServices
from tests.unit.adminhelpers import call, req

from .batches import makeBatch

NOW = 1_700_000_000_000
LIMIT = 1 << 20


def rawBatch(payload: bytes, count: int = 1, codec: int = 0, timestamp: int = NOW) -> bytes:
    """
    A batch with a correct CRC around whatever C{payload} is.
    """
    header = bytearray(
        HEADER.pack(0, HEADER.size - 12 + len(payload), -1, 2, 0, codec, count - 1,
                    timestamp, timestamp, -1, -1, -1, count)
    )
    batch = header + payload
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def garbageBatch() -> bytes:
    # The input: CRC-valid, one record declared, payload not records.
    return rawBatch(b"\xff\xfe\x00garbage\x7f" * 3)


def bomb(codec: str) -> bytes:
    """
    One record whose value is 16 MiB of zeros, compressed: far past LIMIT
    once inflated.
    """
    return buildBatch([Record(timestamp=NOW, value=bytes(16 << 20))], compression=codec)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_good_batches_decode(codec):
    data = buildBatch([Record(timestamp=NOW + i, value=b"v%d" % i) for i in range(5)], codec)
    data += buildBatch([Record(timestamp=NOW, value=b"w")], codec, baseOffset=5)
    batches = list(decodeStoredBatches(data, maxDecompressedBytes=LIMIT))
    assert [r.value for b in batches for r in b.records] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"w"]
    assert batches[0].compression == codec


def test_garbage_payload():
    with pytest.raises(StoredBatchError) as e:
        list(decodeStoredBatches(makeBatch(2) + garbageBatch(), maxDecompressedBytes=LIMIT))
    assert e.value.code == ErrorCode.corrupt_message and e.value.offset == 0


def test_crc_flip():
    data = bytearray(makeBatch(3))
    data[-2] ^= 0x40
    with pytest.raises(StoredBatchError, match="CRC"):
        list(decodeStoredBatches(data, maxDecompressedBytes=LIMIT))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_bombs_are_bounded(codec):
    data = bomb(codec)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(StoredBatchError, match="decompress to more than"):
        list(decodeStoredBatches(data, maxDecompressedBytes=LIMIT))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown < 8 * 1024  # KiB: the bomb never inflates past the limit


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_corrupt_compressed_payload(codec):
    payload = bytearray(compress(codec, b"\x02" * 100))
    payload[len(payload) // 2 :] = b"\x00" * (len(payload) - len(payload) // 2)
    with pytest.raises(StoredBatchError):
        list(decodeStoredBatches(rawBatch(bytes(payload), codec=codec),
                                 maxDecompressedBytes=LIMIT))


# -- ListOffsets ------------------------------------------------------------------------


def listOffsets(broker, timestamp):
    topic = req(2, 7, "ListOffsetsTopic", name="t", partitions=(
        req(2, 7, "ListOffsetsPartition", partition_index=0, current_leader_epoch=-1,
            timestamp=timestamp),
    ))
    response = call(ListOffsetsHandler, broker, 7, replica_id=-1, isolation_level=0,
                    topics=(topic,))
    [partition] = response.topics[0].partitions
    return partition


@pytest.mark.parametrize("stored", [garbageBatch(), bomb("zstd")], ids=["garbage", "zstd-bomb"])
def test_list_offsets_answers_corrupt_message(stored, capturedLog, monkeypatch):
    # The real bound is 32 MiB at least; the 16 MiB bomb stands for an 8 GiB one.
    monkeypatch.setattr("kafkatwist.plugins.list_offsets.decompressedLimit", lambda maxMessageBytes: LIMIT)
    broker = FakeServices(logManager=MemoryLogManager())
    broker.logManager.createTopic("t", 1)
    log = broker.logManager.getLog("t", 0)
    log.append(makeBatch(2, baseTimestamp=NOW - 100), NOW)
    # Append refuses such batches now; store it as damage on disk would.
    with monkeypatch.context() as patched:
        patched.setattr(batch_module, "recordsError", lambda *args: None)
        log.append(stored, NOW)
    for _ in range(3):
        answer = listOffsets(broker, NOW - 1)
        assert answer.error_code == ErrorCode.corrupt_message
    assert capturedLog.count("t-0 offset 2: ListOffsets failed, the stored batch is corrupt") == 1
    assert capturedLog.failures == []
    # Offsets before the damage are still found.
    assert (listOffsets(broker, NOW - 100).error_code, listOffsets(broker, NOW - 100).offset) == (
        ErrorCode.none, 0)
