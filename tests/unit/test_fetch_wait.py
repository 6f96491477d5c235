"""
Long-poll Fetch on a fake clock: woken by appends, min_bytes, expiry.
"""

import datetime

from kio.serial import entity_reader
from twisted.internet.task import Clock

from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches
from kafkatwist.util.purgatory import Purgatory
from tests.unit.fakes import handleLikeThePool
from tests.unit.fetchhelpers import (
    VERSION,
    Context,
    fetchServices,
)


def fetchRequest(offset, minBytes, maxWaitMs=500, isolationLevel=0):
    cls = requestType(1, VERSION)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    return make(
        cls, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=maxWaitMs),
        min_bytes=minBytes, max_bytes=1 << 20, isolation_level=isolationLevel, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(make(Topic, topic="t", partitions=(make(
            Partition, partition=0, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20,
        ),)),),
    )


def offsets(response):
    body = b"".join(response.chunks)
    decoded, _ = entity_reader(responseType(1, VERSION))(body, 0)
    data = decoded.responses[0].partitions[0].records
    return [r.offset for batch in decodeBatches(data) for r in batch.records]


def append(broker, n):
    batch = buildBatch([Record(value=b"x" * 100) for _ in range(n)])
    broker.logManager.getLog("t", 0).append(batch, 0)
    broker.fetchPurgatory.checkAndComplete(("t", 0))


def parkFetch(broker, clock, offset, minBytes, maxWaitMs=500, isolationLevel=0):
    """
    Send a fetch through the handler as the pool would.

    @return: the list its answer will be appended to.
    """
    deferred = handleLikeThePool(
        FetchHandler(broker), Context(clock),
        fetchRequest(offset, minBytes, maxWaitMs, isolationLevel),
    )
    answers = []
    deferred.addCallback(answers.append)
    return answers


def test_min_bytes_waits_until_enough_then_sends_what_it_read():
    broker = fetchServices()
    broker.logManager.createTopic("t", 1, {})
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 500)
    append(broker, 1)
    assert answers == []
    append(broker, 5)
    [response] = answers
    assert offsets(response) == list(range(6))
    clock.advance(1)
    assert len(answers) == 1


def test_read_committed_waits_for_the_last_stable_offset():
    """
    A read_committed long poll is not answered by records of an open
    transaction, only by the marker that moves the last stable offset
    past them.
    """
    broker = fetchServices()
    broker.logManager.createTopic("t", 1, {})
    log = broker.logManager.getLog("t", 0)
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 1, isolationLevel=1)
    batch = buildBatch(
        [Record(value=b"x" * 100) for _ in range(3)], producerId=7, producerEpoch=0,
        baseSequence=0, isTransactional=True,
    )
    log.append(batch, 0, verificationGuard=log.producerState.newGuard(7))
    broker.fetchPurgatory.checkAndComplete(("t", 0))
    assert answers == [] and log.lastStableOffset == 0
    log.appendMarker(7, 0, True, 0, 0)
    broker.fetchPurgatory.checkAndComplete(("t", 0))
    [response] = answers
    assert offsets(response) == [0, 1, 2, 3]  # the records and the marker


def test_expiry_answers_with_what_there_is():
    broker = fetchServices()
    broker.logManager.createTopic("t", 1, {})
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 10_000)
    append(broker, 1)
    clock.advance(0.4)
    assert answers == []
    clock.advance(0.2)
    assert offsets(answers[0]) == [0]


class CountingLog:
    """
    A partition log that counts its reads.
    """

    def __init__(self, log):
        self._log = log
        self.reads = 0

    def read(self, *args):
        self.reads += 1
        return self._log.read(*args)

    def __getattr__(self, name):
        return getattr(self._log, name)


def reapingBroker():
    broker = fetchServices()
    broker.reaped = []
    broker.fetchPurgatory = Purgatory("Fetch", reaper=broker.reaped.append)
    broker.logManager.createTopic("t", 1, {})
    counting = CountingLog(broker.logManager.getLog("t", 0))
    broker.logManager.getLog = lambda topic, partition: counting
    return broker, counting


def test_expiry_that_must_read_goes_to_a_handler_thread():
    """
    The timer fires on the connection's Processor, which must not read the
    log: the expiry is handed to the reaper (the handler threads).
    """
    broker, log = reapingBroker()
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 10_000)
    append(broker, 1)
    reads = log.reads
    clock.advance(0.6)
    assert log.reads == reads
    assert answers == []
    [expire] = broker.reaped
    expire()
    assert offsets(answers[0]) == [0]
    assert log.reads == reads + 1


def test_idle_expiry_is_answered_without_reading():
    """
    Nothing past the fetch offset: the answer needs no read, so it is given
    on the timer's thread without a hop.
    """
    broker, log = reapingBroker()
    append(broker, 2)
    clock = Clock()
    answers = parkFetch(broker, clock, 2, 1)
    reads = log.reads
    clock.advance(0.6)
    assert broker.reaped == []
    assert log.reads == reads
    [response] = answers
    body = b"".join(response.chunks)
    decoded, _ = entity_reader(responseType(1, VERSION))(body, 0)
    partition = decoded.responses[0].partitions[0]
    assert partition.high_watermark == 2
    assert offsets(response) == []


def test_completion_by_append_reads_in_the_appending_thread():
    broker, log = reapingBroker()
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 1)
    append(broker, 3)
    assert offsets(answers[0]) == [0, 1, 2]
    clock.advance(1)
    assert broker.reaped == []
    assert clock.getDelayedCalls() == []


def test_max_wait_is_capped_by_the_idle_limit():
    """
    A fetch asking to wait ~2^31 ms (24 days) is answered once
    connections.max.idle.ms has passed.
    """
    broker = fetchServices(maxIdleMs=60_000)
    broker.logManager.createTopic("t", 1, {})
    clock = Clock()
    answers = parkFetch(broker, clock, 0, 1, maxWaitMs=2**31 - 1)
    clock.advance(59.9)
    assert answers == []
    clock.advance(0.2)
    assert offsets(answers[0]) == []
    assert clock.getDelayedCalls() == []
