"""
Long-poll Fetch on a fake clock: woken by appends, min_bytes, expiry.
"""

import datetime

from kio.serial import entity_reader
from twisted.internet.task import Clock

from kafkatwist.clock import ThreadSafeClock
from kafkatwist.log import MemoryLogManager
from kafkatwist.metrics import TopicBytes
from kafkatwist.plugins.fetch import FetchHandler
from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.records import Record, buildBatch, decodeBatches
from kafkatwist.purgatory import Purgatory
from tests.unit.fakes import RespondsLater, handleLikeThePool

VERSION = 12


class FakeBroker:
    def __init__(self):
        self.logManager = MemoryLogManager()
        self.fetchPurgatory = Purgatory("Fetch")
        self.topicBytes = TopicBytes()

    def afterResponse(self, f, *args):
        f(*args)


class Context(RespondsLater):
    apiVersion = VERSION

    def __init__(self, clock):
        self.clock = ThreadSafeClock(clock)


def fetchRequest(offset, minBytes, maxWaitMs=500):
    cls = requestType(1, VERSION)
    Topic, Partition = nested(cls, "FetchTopic"), nested(cls, "FetchPartition")
    return make(
        cls, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=maxWaitMs),
        min_bytes=minBytes, max_bytes=1 << 20, isolation_level=0, session_id=0,
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


def test_min_bytes_waits_until_enough_then_sends_what_it_read():
    broker = FakeBroker()
    broker.logManager.createTopic("t", 1, {})
    clock = Clock()
    deferred = handleLikeThePool(FetchHandler(broker), Context(clock), fetchRequest(0, minBytes=500))
    answers = []
    deferred.addCallback(answers.append)
    append(broker, 1)
    assert answers == []
    append(broker, 5)
    [response] = answers
    assert offsets(response) == list(range(6))
    clock.advance(1)
    assert len(answers) == 1


def test_expiry_answers_with_what_there_is():
    broker = FakeBroker()
    broker.logManager.createTopic("t", 1, {})
    clock = Clock()
    deferred = handleLikeThePool(FetchHandler(broker), Context(clock), fetchRequest(0, minBytes=10_000))
    answers = []
    deferred.addCallback(answers.append)
    append(broker, 1)
    clock.advance(0.4)
    assert answers == []
    clock.advance(0.2)
    assert offsets(answers[0]) == [0]
