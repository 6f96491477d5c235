"""
ListOffsets on a leader just elected whose high watermark has not yet
reached the offset its epoch began at (it learnt the old leader's high
watermark late, and its followers have not fetched in the new epoch yet):
Kafka's C{Partition.fetchOffsetForTimestamp} answers OFFSET_NOT_AVAILABLE
(retriable) to consumers for "latest" and for a time past what is
fetchable, instead of an offset behind what a consumer of the old leader
may already have read.  Followers (replica id >= 0) and "earliest" are
answered as before.
"""

from __future__ import annotations

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.list_offsets import EARLIEST, LATEST, MAX_TIMESTAMP, ListOffsetsHandler
from kafkatwist.protocol.records import Record, buildBatch
from tests.unit.adminhelpers import call, makeBroker, req

NOW = 1_700_000_000_000
VERSION = 7


def listOffsets(broker, timestamp, replicaId=-1, epoch=-1):
    response = call(
        ListOffsetsHandler, broker, VERSION, replica_id=replicaId, isolation_level=0,
        topics=(req(2, VERSION, "ListOffsetsTopic", name="t", partitions=(
            req(2, VERSION, "ListOffsetsPartition", partition_index=0, timestamp=timestamp,
                current_leader_epoch=epoch),
        )),),
    )
    [p] = response.topics[0].partitions
    return ErrorCode(p.error_code), p.offset


def electedWithLaggingHighWatermark():
    """
    A log of 5 records (timestamps NOW..NOW+4) whose replica followed with
    a high watermark of 3, then was elected leader of epoch 2 at offset 5.
    """
    broker = makeBroker()
    broker.logManager.createTopic("t", 1)
    log = broker.logManager.getLog("t", 0)
    for i in range(5):
        log.append(buildBatch([Record(value=b"v%d" % i, timestamp=NOW + i)]), NOW)
    log.becomeFollower(1)
    log.setHighWatermark(3)
    assert log.becomeLeader(2) == 5
    return broker, log


def test_a_single_broker_is_never_lagging():
    broker = makeBroker()
    broker.logManager.createTopic("t", 1)
    log = broker.logManager.getLog("t", 0)
    log.append(buildBatch([Record(value=b"v", timestamp=NOW)]), NOW)
    assert listOffsets(broker, LATEST) == (ErrorCode.none, 1)
    assert listOffsets(broker, NOW + 10) == (ErrorCode.none, -1)


def test_latest_is_not_available_until_the_high_watermark_reaches_the_epoch():
    broker, log = electedWithLaggingHighWatermark()
    assert listOffsets(broker, LATEST) == (ErrorCode.offset_not_available, -1)
    assert listOffsets(broker, LATEST, epoch=2) == (ErrorCode.offset_not_available, -1)
    # A follower reads to the log end: it is answered.
    assert listOffsets(broker, LATEST, replicaId=3) == (ErrorCode.none, 5)
    # Earliest does not depend on the high watermark.
    assert listOffsets(broker, EARLIEST) == (ErrorCode.none, 0)
    log.setHighWatermark(5)
    assert listOffsets(broker, LATEST) == (ErrorCode.none, 5)


def test_times_past_the_high_watermark_are_not_available_while_lagging():
    broker, log = electedWithLaggingHighWatermark()
    # Below the high watermark: answered.
    assert listOffsets(broker, NOW + 1) == (ErrorCode.none, 1)
    # At or past it, or past every record: not yet known.
    assert listOffsets(broker, NOW + 3) == (ErrorCode.offset_not_available, -1)
    assert listOffsets(broker, NOW + 100) == (ErrorCode.offset_not_available, -1)
    assert listOffsets(broker, MAX_TIMESTAMP) == (ErrorCode.offset_not_available, -1)
    log.setHighWatermark(5)
    assert listOffsets(broker, NOW + 3) == (ErrorCode.none, 3)
    assert listOffsets(broker, NOW + 100) == (ErrorCode.none, -1)
    assert listOffsets(broker, MAX_TIMESTAMP) == (ErrorCode.none, 4)
