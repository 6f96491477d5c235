"""
The transaction markers' way to the partitions' leaders: the sans-io
coordinator's handling of each partition's answer (retried, dropped, or
the sending stopped by a newer coordinator or producer), and the
L{MarkerChannel} shell with fakes for the cluster's metadata, the
in-process writer and the connections to other brokers (one WriteTxnMarkers
per destination broker, markers of several transactions in one request,
lost connections, partitions without a leader, deleted topics); the
leader's acks=-1 marker append; and KIP-890 part 1's verification asked of
the transactional id's coordinator on another broker (L{RemoteVerifier}).
"""

from __future__ import annotations

import datetime
import threading
from types import MappingProxyType

import pytest

from kafkatwist.client.connection import KafkaConnectionError
from kafkatwist.cluster.image import ClusterImage
from kafkatwist.cluster.zkdata import BrokerInfo, PartitionState, TopicAssignment
from kafkatwist.coordinator.effects import Append
from kafkatwist.coordinator.transaction.channel import (
    WRITE_TXN_MARKERS_VERSION,
    MarkerChannel,
)
from kafkatwist.coordinator.transaction.coordinator import MARKER_RETRY, TransactionCoordinator
from kafkatwist.coordinator.transaction.effects import WriteMarkers
from kafkatwist.coordinator.transaction.formats import decodeValue
from kafkatwist.coordinator.transaction.state import TxnState
from kafkatwist.coordinator.effects import SetTimer
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol.apis import WRITE_TXN_MARKERS, responseType
from kafkatwist.protocol.entities import make, nested

E = ErrorCode
S = TxnState
T0 = 1_700_000_000_000
A, B, C = ("a", 0), ("b", 0), ("b", 1)

# -- the machine -------------------------------------------------------------------------


def _apply(machine, fx):
    """
    Complete every append at once; return the other effects.
    """
    out = []
    while fx:
        effect = fx.pop(0)
        if isinstance(effect, Append):
            fx.extend(machine.appendCompleted(T0, effect.token, E.none))
        else:
            out.append(effect)
    return out


def _prepared(partitions=(A, B, C), clustered=False):
    """
    A machine whose transaction "tx" has just written PrepareCommit.
    """
    machine = TransactionCoordinator(numPartitions=1, ownsAllPartitions=not clustered)
    if clustered:
        _apply(machine, machine.load(T0, []))
        _apply(machine, machine.loadPartition(T0, 0, [], 5))
    else:
        _apply(machine, machine.load(T0, []))
    answers = []
    _apply(machine, machine.initProducerId(T0, answers.append, "tx", 60000, -1, -1, 7))
    _apply(machine, machine.addPartitions(T0, answers.append, "tx", 7, 0, list(partitions)))
    fx = _apply(machine, machine.endTxn(T0, answers.append, "tx", 7, 0, True))
    (markers,) = [e for e in fx if isinstance(e, WriteMarkers)]
    return machine, markers


def _completed(machine, fx) -> bool:
    return any(
        isinstance(e, Append) and decodeValue(e.records[0][1]).state is S.COMPLETE_COMMIT
        for e in fx
    )


def test_retriable_answers_are_asked_again_others_dropped():
    machine, markers = _prepared()
    assert markers.partitions == {A, B, C}
    fx = machine.markersWritten(T0, markers.token, {
        A: E.none,
        # the leader moved, or its broker could not be reached, or the
        # replica does not have the partition yet: asked again
        B: E.unknown_topic_or_partition,
        C: E.network_exception,
    })
    (timer,) = fx
    assert isinstance(timer, SetTimer) and timer.key == (MARKER_RETRY, "tx")
    (again,) = machine.timerFired(T0 + 100, timer.key)
    assert again.partitions == {B, C} and again.coordinatorEpoch == markers.coordinatorEpoch
    # A deleted topic's partition (None) needs no marker.
    fx = machine.markersWritten(T0, again.token, {B: None, C: E.none})
    assert _completed(machine, fx)


@pytest.mark.parametrize("error", [E.transaction_coordinator_fenced, E.invalid_producer_epoch])
def test_fenced_coordinator_or_producer_stops_the_sending(error):
    machine, markers = _prepared(clustered=True)
    assert markers.coordinatorEpoch == 5
    fx = machine.markersWritten(
        T0, markers.token, {A: E.none, B: error, C: E.not_leader_or_follower}
    )
    # No Complete record, no retry: the newer coordinator finishes it.
    assert fx == []
    assert machine.metadata("tx").state is S.PREPARE_COMMIT
    assert machine.timerFired(T0 + 100, (MARKER_RETRY, "tx")) == []


def test_unloaded_partition_ignores_late_answers_and_reload_sends_again():
    machine, markers = _prepared(clustered=True)
    assert machine.unloadPartition(T0, 0) == []
    assert machine.markersWritten(T0, markers.token, {A: E.none, B: E.none, C: E.none}) == []
    # Loaded again (at a newer leader epoch), from the PrepareCommit record.
    from kafkatwist.coordinator.transaction.formats import TxnLogValue

    value = TxnLogValue(
        producerId=7, producerEpoch=0, txnTimeoutMs=60000, state=S.PREPARE_COMMIT,
        partitions=frozenset({A, B, C}), lastUpdateTimestampMs=T0, startTimestampMs=T0,
    )
    fx = machine.loadPartition(T0, 0, [("tx", 0, value)], 6)
    (again,) = [e for e in fx if isinstance(e, WriteMarkers)]
    assert again.partitions == {A, B, C} and again.coordinatorEpoch == 6
    # The old request's answers changed nothing.
    assert machine.markersWritten(T0, markers.token, {A: E.none}) == []
    fx = machine.markersWritten(T0, again.token, {A: E.none, B: E.none, C: E.none})
    assert _completed(machine, fx)


# -- the channel ---------------------------------------------------------------------------


def _image(leaders: dict, deleting=()) -> ClusterImage:
    topics = {}
    for (topic, partition) in leaders:
        topics.setdefault(topic, {})[partition] = (1, 2, 3)
    return ClusterImage(
        brokers=MappingProxyType(
            {i: BrokerInfo(i, (("PLAINTEXT", "127.0.0.1", 9000 + i),)) for i in (1, 2, 3)}
        ),
        topics=MappingProxyType({t: TopicAssignment(t, None, ps) for t, ps in topics.items()}),
        states=MappingProxyType(
            {tp: PartitionState(leader, 3, (1, 2, 3), 1) for tp, leader in leaders.items()}
        ),
        deleting=frozenset(deleting),
    )


class FakeWriter:
    def __init__(self) -> None:
        self.calls = []

    def write(self, producerId, producerEpoch, commit, coordinatorEpoch, partitions, onDone):
        self.calls.append((producerId, tuple(partitions)))
        onDone({tp: E.none for tp in partitions})


class FakeConnectionBase:
    """
    A connection to a fake broker; the first request may be held until
    C{hold} is set.
    """

    def __init__(self, hold=None) -> None:
        self.hold = hold
        self.requests = []
        self.connected = True
        self.arrived = threading.Event()

    def close(self) -> None:
        self.connected = False

    def took(self, entity) -> None:
        self.requests.append(entity)
        self.arrived.set()
        if self.hold is not None and len(self.requests) == 1:
            self.hold.wait(10)


class FakeConnection(FakeConnectionBase):
    """
    Answers WriteTxnMarkers with C{errors} per partition (default NONE).
    """

    def __init__(self, brokerId, errors=None, hold=None) -> None:
        super().__init__(hold)
        self.brokerId = brokerId
        self.errors = errors or {}

    def request(self, apiKey, version, entity, timeout=None):
        assert (apiKey, version) == (WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION)
        self.took(entity)
        cls = responseType(WRITE_TXN_MARKERS, version)
        Result = nested(cls, "WritableTxnMarkerResult")
        Topic = nested(cls, "WritableTxnMarkerTopicResult")
        Partition = nested(cls, "WritableTxnMarkerPartitionResult")
        return make(cls, markers=tuple(
            make(Result, producer_id=m.producer_id, topics=tuple(
                make(Topic, name=t.name, partitions=tuple(
                    make(Partition, partition_index=p,
                         error_code=self.errors.get((t.name, p), E.none))
                    for p in t.partition_indexes))
                for t in m.topics))
            for m in entity.markers))


class Results:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value = None

    def __call__(self, results) -> None:
        self.value = results
        self.done.set()

    def get(self):
        assert self.done.wait(10), "no answer"
        return self.value


@pytest.fixture
def channel():
    state = {"image": _image({A: 1, B: 2, C: 3}), "connections": {}, "failing": set()}
    writer = FakeWriter()

    def connect(brokerId):
        if brokerId in state["failing"]:
            raise KafkaConnectionError(f"broker {brokerId} is gone")
        return state["connections"].setdefault(brokerId, FakeConnection(brokerId))

    ch = MarkerChannel(1, lambda: state["image"], writer, lambda b: None, connect=connect)
    ch.state = state
    ch.fakeWriter = writer
    yield ch
    ch.stop()


def test_channels_provide_the_interface(channel):
    from zope.interface.verify import verifyObject

    from kafkatwist.coordinator.transaction.channel import LocalMarkerChannel
    from kafkatwist.interfaces import ITxnMarkerChannel

    assert verifyObject(ITxnMarkerChannel, channel)
    assert verifyObject(ITxnMarkerChannel, LocalMarkerChannel(FakeWriter()))


def test_local_partitions_written_in_process_others_sent_to_their_leaders(channel):
    results = Results()
    channel.write(7, 0, True, 5, [A, B, C], results)
    assert results.get() == {A: E.none, B: E.none, C: E.none}
    assert channel.fakeWriter.calls == [(7, (A,))]
    for broker, tp in ((2, B), (3, C)):
        (request,) = channel.state["connections"][broker].requests
        (marker,) = request.markers
        assert (marker.producer_id, marker.producer_epoch, marker.transaction_result,
                marker.coordinator_epoch) == (7, 0, True, 5)
        assert [(t.name, tuple(t.partition_indexes)) for t in marker.topics] == [(tp[0], (tp[1],))]


def test_markers_queued_for_one_broker_go_in_one_request(channel):
    release = threading.Event()
    channel.state["connections"][2] = FakeConnection(2, hold=release)
    first, second, third = Results(), Results(), Results()
    channel.write(7, 0, True, 5, [B], first)
    assert channel.state["connections"][2].arrived.wait(10)
    # While the first request is out, two more transactions' markers queue.
    channel.write(8, 1, False, 5, [B, C], second)
    channel.write(9, 0, True, 5, [("b", 0)], third)
    import time

    time.sleep(0.2)
    release.set()
    for r in (first, second, third):
        assert set(r.get().values()) == {E.none}
    requests = channel.state["connections"][2].requests
    assert len(requests) == 2
    assert sorted(m.producer_id for m in requests[1].markers) == [8, 9]
    (abort,) = [m for m in requests[1].markers if m.producer_id == 8]
    assert abort.transaction_result is False and abort.producer_epoch == 1


def test_partition_answers_and_lost_connections(channel):
    channel.state["connections"][2] = FakeConnection(2, errors={B: E.not_leader_or_follower})
    channel.state["failing"].add(3)
    results = Results()
    channel.write(7, 0, True, 5, [B, C], results)
    assert results.get() == {B: E.not_leader_or_follower, C: E.network_exception}


def test_metadata_decides_each_attempt(channel):
    # No leader now: asked again later.  Deleted, or being deleted: no
    # marker needed.
    channel.state["image"] = _image({A: 1, B: -1, ("gone", 0): 2}, deleting={"gone"})
    results = Results()
    channel.write(7, 0, True, 5, [B, C, ("gone", 0)], results)
    assert results.get() == {B: E.not_leader_or_follower, C: None, ("gone", 0): None}
    assert not channel.state["connections"]
    # The next attempt finds B's new leader.
    channel.state["image"] = _image({A: 1, B: 3})
    results = Results()
    channel.write(7, 0, True, 5, [B], results)
    assert results.get() == {B: E.none}
    assert len(channel.state["connections"][3].requests) == 1


# -- the leader's side: the writer the handler and the local path share -----------------------


def test_writer_appends_with_acks_all():
    from kafkatwist.coordinator.transaction.markers import MarkerWriter
    from kafkatwist.log import MemoryLogManager

    logs = MemoryLogManager()
    logs.createTopic("t", 1, {"min.insync.replicas": "2"})
    partitionLog = logs.getLog("t", 0)
    waits = []
    writer = MarkerWriter(logs, clock=lambda: T0)
    writer.awaitReplication = lambda topic, partition, offset, onDone: waits.append(
        ((topic, partition, offset), onDone)
    )
    answers = []
    # An ISR below min.insync.replicas refuses the marker, as a produce
    # with acks=all.
    partitionLog.inSyncReplicas = frozenset(range(1))
    writer.write(7, 0, True, 3, [("t", 0)], answers.append)
    assert answers == [{("t", 0): E.not_enough_replicas}] and partitionLog.logEndOffset == 0
    # Otherwise it is appended, and answered once the ISR has it.
    partitionLog.inSyncReplicas = frozenset(range(2))
    writer.write(7, 0, True, 3, [("t", 0)], answers.append)
    assert partitionLog.logEndOffset == 1 and len(answers) == 1
    ((key, onDone),) = waits
    assert key == ("t", 0, 1)
    onDone(E.not_enough_replicas_after_append)
    assert answers[1] == {("t", 0): E.not_enough_replicas_after_append}


# -- verification across brokers ---------------------------------------------------------------


class FakeCoordinatorConnection(FakeConnectionBase):
    """
    A coordinator answering AddPartitionsToTxn v5 verify-only: C{inTxn}
    partitions are in the transaction; C{error} answers for all.
    """

    def __init__(self, inTxn=(), error=None, hold=None) -> None:
        super().__init__(hold)
        self.inTxn = set(inTxn)
        self.error = error

    def request(self, apiKey, version, entity, timeout=None):
        from kafkatwist.coordinator.transaction.verifier import VERIFY_VERSION
        from kafkatwist.protocol.apis import ADD_PARTITIONS_TO_TXN

        assert (apiKey, version) == (ADD_PARTITIONS_TO_TXN, VERIFY_VERSION)
        assert all(t.verify_only for t in entity.transactions)
        self.took(entity)
        cls = responseType(apiKey, version)
        Result = nested(cls, "AddPartitionsToTxnResult")
        Topic = nested(cls, "AddPartitionsToTxnTopicResult")
        Partition = nested(cls, "AddPartitionsToTxnPartitionResult")

        def code(tp):
            if self.error is not None:
                return self.error
            return E.none if tp in self.inTxn else E.transaction_abortable

        return make(cls, throttle_time=datetime.timedelta(0), error_code=E.none,
                    results_by_transaction=tuple(
                        Result(transactional_id=t.transactional_id, topic_results=tuple(
                            Topic(name=topic.name, results_by_partition=tuple(
                                Partition(partition_index=p,
                                          partition_error_code=code((topic.name, p)))
                                for p in topic.partitions))
                            for topic in t.topics))
                        for t in entity.transactions))


def _stateImage(leader):
    from kafkatwist.coordinator.transaction.formats import TRANSACTION_STATE_TOPIC

    return _image({(TRANSACTION_STATE_TOPIC, p): leader for p in range(3)})


@pytest.fixture
def verifier():
    from kafkatwist.coordinator.transaction.verifier import RemoteVerifier

    state = {"image": _stateImage(2), "connections": {}, "failing": set()}

    def connect(brokerId):
        if brokerId in state["failing"]:
            raise KafkaConnectionError(f"broker {brokerId} is gone")
        return state["connections"].setdefault(brokerId, FakeCoordinatorConnection())

    v = RemoteVerifier(1, lambda: state["image"], lambda b: None, 3, connect=connect)
    v.state = state
    yield v
    v.stop()


def test_verification_asks_the_ids_coordinator(verifier):
    verifier.state["connections"][2] = FakeCoordinatorConnection(inTxn={A})
    results = Results()
    verifier.verify(results, "tx", 7, 0, [A, B])
    assert results.get() == {A: E.none, B: E.transaction_abortable}
    ((txn,),) = [r.transactions for r in verifier.state["connections"][2].requests]
    assert (txn.transactional_id, txn.producer_id, txn.producer_epoch) == ("tx", 7, 0)


def test_verification_questions_for_one_coordinator_share_requests(verifier):
    release = threading.Event()
    connection = verifier.state["connections"][2] = FakeCoordinatorConnection(
        inTxn={A, B}, hold=release)
    first, second, third = Results(), Results(), Results()
    verifier.verify(first, "tx", 7, 0, [A])
    assert connection.arrived.wait(10)
    verifier.verify(second, "other", 8, 0, [B])
    verifier.verify(third, "other", 8, 0, [A])
    import time

    time.sleep(0.2)
    release.set()
    assert (first.get(), second.get(), third.get()) == ({A: E.none}, {B: E.none}, {A: E.none})
    # The two ids queued meanwhile: one request each time an id appears once.
    assert [[t.transactional_id for t in r.transactions] for r in connection.requests] == [
        ["tx"], ["other"], ["other"]]


def test_verification_retriable_answers(verifier):
    # The coordinator moved: asked again later by the client.
    verifier.state["connections"][2] = FakeCoordinatorConnection(error=E.not_coordinator)
    results = Results()
    verifier.verify(results, "tx", 7, 0, [A])
    assert results.get() == {A: E.coordinator_not_available}
    # Unreachable, or no coordinator at all.
    verifier.state["failing"].add(3)
    verifier.state["image"] = _stateImage(3)
    results = Results()
    verifier.verify(results, "tx", 7, 0, [A])
    assert results.get() == E.coordinator_not_available
    verifier.state["image"] = _stateImage(-1)
    results = Results()
    verifier.verify(results, "tx", 7, 0, [A])
    assert results.get() == E.coordinator_not_available


def test_coordinator_asks_remotely_only_for_ids_it_does_not_coordinate():
    from kafkatwist.coordinator.transaction.service import TransactionCoordinatorService
    from kafkatwist.coordinator.transaction.logstore import TransactionStateLog
    from kafkatwist.coordinator.transaction.markers import MarkerWriter
    from kafkatwist.log import MemoryLogManager
    from twisted.internet import task

    from .helpers import Synchronous

    class Remote:
        asked = []

        def verify(self, replyTo, *args):
            self.asked.append(args)
            replyTo({A: E.none})

        def stop(self):
            pass

    logs = MemoryLogManager()
    service = TransactionCoordinatorService(
        task.Clock(), TransactionStateLog(logs, 3), MarkerWriter(logs), remoteVerifier=Remote(),
        ownsAllPartitions=False,
    )
    service.load(partitions=())
    sync = Synchronous(service)
    # Not coordinated here: the id's coordinator answers.
    assert sync.verifyPartitions("tx", 7, 0, [A]) == {A: E.none}
    assert Remote.asked == [("tx", 7, 0, [A])]
    # Coordinated here, but unknown: this broker's answer.
    from kafkatwist.coordinator.transaction.formats import partitionOf

    service.loadPartition(partitionOf("tx", 3), 0)
    assert sync.verifyPartitions("tx", 7, 0, [A]) == E.invalid_producer_id_mapping
    assert len(Remote.asked) == 1
    # Another broker's question is answered here, never passed on.
    answers = []
    service.unloadPartition(partitionOf("tx", 3))
    service.verifyPartitions(answers.append, "tx", 7, 0, [A], forward=False)
    import time

    deadline = time.monotonic() + 5
    while not answers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert answers == [E.not_coordinator] and len(Remote.asked) == 1
