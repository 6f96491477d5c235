"""
The cluster's admin paths without brokers: DeleteTopics timing out while
the topic is still in the metadata, DeleteRecords waiting for the low
watermark (L{DelayedDeleteRecords}), and AlterPartitionReassignments /
ListPartitionReassignments on one broker without ZooKeeper.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from twisted.internet import task

from kafkatwist.cluster.image import ClusterImage, freeze
from kafkatwist.cluster.zkdata import TopicAssignment
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import admin, reassignments
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.entities import make
from kafkatwist.util.purgatory import Purgatory
from kafkatwist.replication.records import DelayedDeleteRecords, Trimming
from tests.unit.adminhelpers import FakeContext, call, makeBroker, req, roundTrip


class Pending:
    def __init__(self):
        self.results = []
        self.deferred = object()

    def complete(self, result):
        self.results.append(result)


@dataclass
class LaterContext(FakeContext):
    pending: Pending = None

    def respondLater(self):
        self.pending = Pending()
        return self.pending


class StuckCluster:
    """
    A cluster whose deletions never reach the metadata.
    """

    brokerId = 1

    def __init__(self):
        self.image = ClusterImage(topics=freeze({"t": TopicAssignment("t", uuid.UUID(int=3), {0: (1,)})}))

    def deleteTopic(self, name, onDone):
        onDone(None, None)

    def waitFor(self, predicate, timeout, onDone):
        onDone(predicate(self.image))

    def aliveBrokers(self):
        return frozenset({1})


def test_delete_topics_times_out_while_the_topic_is_in_the_metadata():
    broker = makeBroker()
    broker.cluster = StuckCluster()
    handler = admin.DeleteTopicsHandler(broker)
    request = roundTrip(make(requestType(20, 6), topics=(
        req(20, 6, "DeleteTopicState", name="t", topic_id=uuid.UUID(int=0)),), timeout=datetime.timedelta(milliseconds=100)))
    context = LaterContext(20, 6)
    handler.handle(context, request)
    [response] = context.pending.results
    [result] = roundTrip(response).responses
    assert (result.name, result.error_code) == ("t", ErrorCode.request_timed_out)


class FakeLog:
    def __init__(self):
        self.isLeader = True
        self.leaderEpoch = 4
        self.logStartOffset = 10


def test_delayed_delete_records():
    clock = task.Clock()
    purgatory = Purgatory("delete-records")
    log = FakeLog()
    followers = {"min": 3}
    answers = []

    def lowWatermark(topic, partition, partitionLog):
        return min(partitionLog.logStartOffset, followers["min"])

    def trim(offset):
        operation = DelayedDeleteRecords(clock, [Trimming(("t", 0), log, offset, 3)], lowWatermark,
                                         lambda results: results, Pending())
        operation.pending.complete = answers.append
        purgatory.tryCompleteElseWatch(operation, operation.keys(), 5.0)

    trim(10)
    assert answers == []
    followers["min"] = 10
    purgatory.checkAndComplete(("t", 0))
    assert answers == [{("t", 0): (ErrorCode.none, 10)}]
    # Short at the timeout: REQUEST_TIMED_OUT with the low watermark of the request.
    log.logStartOffset = 20
    trim(20)
    clock.advance(5)
    assert answers[-1] == {("t", 0): (ErrorCode.request_timed_out, 3)}
    # The replica stops leading meanwhile.
    trim(20)
    log.isLeader = False
    purgatory.checkAndComplete(("t", 0))
    assert answers[-1] == {("t", 0): (ErrorCode.not_leader_or_follower, -1)}


def test_reassignments_on_one_broker():
    broker = makeBroker()
    broker.logManager.createTopic("t", 1)
    partitions = lambda replicas: (req(45, 0, "ReassignablePartition", partition_index=0, replicas=replicas),)
    topics = (req(45, 0, "ReassignableTopic", name="t", partitions=partitions((1,))),
              req(45, 0, "ReassignableTopic", name="u", partitions=partitions((1,))))
    response = call(reassignments.AlterPartitionReassignmentsHandler, broker, 0, topics=topics,
                    timeout=datetime.timedelta(seconds=1))
    assert [(t.name, t.partitions[0].error_code) for t in response.responses] == [
        ("t", ErrorCode.none), ("u", ErrorCode.unknown_topic_or_partition)]
    for replicas, code in (((1, 2), ErrorCode.invalid_replica_assignment),
                           (None, ErrorCode.no_reassignment_in_progress)):
        response = call(reassignments.AlterPartitionReassignmentsHandler, broker, 0, timeout=datetime.timedelta(seconds=1),
                        topics=(req(45, 0, "ReassignableTopic", name="t", partitions=partitions(replicas)),))
        assert response.responses[0].partitions[0].error_code == code
    # A cancel with nothing to cancel, on an unknown partition too (Kafka's maybeBuildReassignment).
    response = call(reassignments.AlterPartitionReassignmentsHandler, broker, 0, timeout=datetime.timedelta(seconds=1),
                    topics=(req(45, 0, "ReassignableTopic", name="nosuch", partitions=partitions(None)),))
    assert response.responses[0].partitions[0].error_code == ErrorCode.no_reassignment_in_progress
    listed = call(reassignments.ListPartitionReassignmentsHandler, broker, 0, topics=None,
                  timeout=datetime.timedelta(seconds=1))
    assert (listed.error_code, listed.topics) == (ErrorCode.none, ())


class SilentCluster:
    """
    A cluster layer that answers only when told (a slow ZooKeeper).
    """

    def __init__(self):
        self.onDone = None

    def alterReassignments(self, wanted, onDone):
        self.onDone = onDone

    def electLeaders(self, electionType, wanted, onDone):
        self.onDone = onDone


def test_cluster_admin_answers_never_park_a_handler_thread():
    """
    AlterPartitionReassignments and ElectLeaders hand their answer over
    instead of waiting on the handler thread: REQUEST_TIMED_OUT by the
    context's clock at the request's timeout, and a late answer from the
    cluster layer is dropped.
    """
    from kafkatwist.plugins import elect_leaders

    for handlerType, apiKey, request in (
        (reassignments.AlterPartitionReassignmentsHandler, 45, make(requestType(45, 0), timeout=datetime.timedelta(seconds=2), topics=(
            req(45, 0, "ReassignableTopic", name="t", partitions=(
                req(45, 0, "ReassignablePartition", partition_index=0, replicas=(1, 2)),)),))),
        (elect_leaders.ElectLeadersHandler, 43, make(requestType(43, 2), election_type=0, timeout=datetime.timedelta(seconds=2),
            topic_partitions=(req(43, 2, "TopicPartitions", topic="t", partitions=(0,)),))),
    ):
        broker = makeBroker()
        broker.cluster = SilentCluster()
        context = LaterContext(apiKey, 0 if apiKey == 45 else 2, clock=task.Clock())
        handlerType(broker).handle(context, roundTrip(request))
        assert context.pending.results == []  # returned at once, unanswered
        context.clock.advance(2)
        [response] = context.pending.results
        assert _codes(roundTrip(response)) == [ErrorCode.request_timed_out]
        broker.cluster.onDone(ErrorCode.none if apiKey == 43 else [])
        assert len(context.pending.results) == 1


def _codes(response):
    codes = []
    for topic in getattr(response, "responses", None) or getattr(response, "replica_election_results", ()):
        for p in getattr(topic, "partitions", None) or getattr(topic, "partition_result", ()):
            codes.append(p.error_code)
    return codes
