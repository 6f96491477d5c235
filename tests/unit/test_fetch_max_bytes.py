"""
The broker's fetch.max.bytes caps what one Fetch answers, whatever the
request's max_bytes says (Kafka's KafkaApis takes the smaller of the two,
KIP-541), on the path a request is answered from its frame and on the
general one; the first batch still goes out whole so a consumer can make
progress.
"""

from __future__ import annotations

import datetime
import os

import pytest

from kafkatwist.network.handlers import HandlerPool
from kafkatwist.protocol.apis import FETCH, requestType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeRequestFrame
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record, buildBatch
from tests.fakeservices import FakeServices
from tests.unit.fakes import FakeOwner, connect

#: each batch: one 600-byte record (~670 bytes with its headers)
VALUE = b"v" * 600


def request(version, maxBytes):
    cls = requestType(FETCH, version)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    partition = make(
        Partition, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20,
    )
    fields = dict(
        replica_id=-1, max_wait=datetime.timedelta(milliseconds=500), min_bytes=1,
        max_bytes=maxBytes, isolation_level=0, session_id=0, session_epoch=-1,
        forgotten_topics_data=(), rack_id="",
        topics=(make(Topic, topic="t", partitions=(partition,)),),
    )
    if version >= 12:
        fields["cluster_id"] = None
    return make(cls, **fields)


def fetched(broker, version, maxBytes) -> int:
    """
    @return: the record bytes one Fetch of partition t-0 from offset 0
        answered.
    """
    owner = FakeOwner(supported={FETCH: (0, 16)})
    connection, _ = connect(owner)
    connection.dataReceived(encodeRequestFrame(FETCH, version, 5, "c", request(version, maxBytes)))
    [pending] = owner.submitted
    response = HandlerPool(None, broker, 1).handle(pending)
    assert not response.close
    frame = bytearray()
    for chunk in response.chunks:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            frame += chunk
        else:
            frame += os.pread(chunk.fileno(), chunk.length, chunk.position())
            chunk.close()
    _, answer = decodeResponseFrame(FETCH, version, bytes(frame[4:]))
    [topic] = answer.responses
    [partition] = topic.partitions
    assert partition.error_code == 0
    return len(partition.records or b"")


def brokerWith(tmp_path, value=VALUE, **settings):
    from kafkatwist.log import LogManager

    broker = FakeServices(settings, handlers=True, logManager=LogManager([str(tmp_path)], {}))
    broker.logManager.createTopic("t", 1, {})
    log = broker.logManager.getLog("t", 0)
    for i in range(4):
        log.append(buildBatch([Record(timestamp=1000 + i, value=value)]), 1000)
    return broker


@pytest.mark.parametrize("version", [11, 12])  # 12: answered from its frame; 11: the general path
def test_the_brokers_fetch_max_bytes_caps_a_fetch(tmp_path, version):
    whole = fetched(brokerWith(tmp_path / "default"), version, 50 << 20)
    capped = fetched(brokerWith(tmp_path / "capped", **{"fetch.max.bytes": 1500}), version, 50 << 20)
    batch = whole // 4
    assert whole == 4 * batch
    assert capped == 2 * batch  # two whole batches fit in 1,500 bytes, the third does not


@pytest.mark.parametrize("version", [11, 12])
def test_the_first_batch_goes_out_whole_above_the_cap(tmp_path, version):
    broker = brokerWith(tmp_path, value=b"w" * 2000, **{"fetch.max.bytes": 1024})
    one = fetched(broker, version, 50 << 20)
    assert 2000 < one < 2 * 2000  # the first batch, larger than the cap, and only it
