"""
The transaction request handlers (C{kafkatwist.plugins.transactions},
InitProducerId, Produce's verification) against real coordinators on a fake
clock, every request and response through the wire codec, for every
version served.
"""

from __future__ import annotations

import datetime

import pytest

from kafkatwist.coordinator.formats import OFFSETS_TOPIC, partitionFor
from kafkatwist.coordinator.transaction.logstore import TransactionStateLog
from kafkatwist.coordinator.transaction.markers import MarkerWriter
from kafkatwist.coordinator.transaction.service import TransactionCoordinatorService
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import init_producer_id, transactions
from kafkatwist.protocol.apis import knownVersions
from kafkatwist.protocol.entities import make

from tests.coordinator.grouphelpers import HANDLERS, GroupBroker, fired

E = ErrorCode
MINUTE = datetime.timedelta(minutes=1)

TXN_HANDLERS = {
    22: init_producer_id.InitProducerIdHandler,
    24: transactions.AddPartitionsToTxnHandler,
    25: transactions.AddOffsetsToTxnHandler,
    26: transactions.EndTxnHandler,
    27: transactions.WriteTxnMarkersHandler,
    28: transactions.TxnOffsetCommitHandler,
    61: transactions.DescribeProducersHandler,
    65: transactions.DescribeTransactionsHandler,
    66: transactions.ListTransactionsHandler,
}


class TxnBroker(GroupBroker):
    def __init__(self, tmp_path) -> None:
        super().__init__(settings={"log.dir": str(tmp_path)})
        self.transactionCoordinator = TransactionCoordinatorService(
            self.fakeClock,
            TransactionStateLog(self.logManager, 3),
            MarkerWriter(self.logManager, lambda: self.groupCoordinator),
        )
        self.transactionCoordinator.load()
        self.handlers.update({key: cls(self) for key, cls in TXN_HANDLERS.items()})

    def result(self, apiKey, version, **fields):
        response = self.call(apiKey, version, **fields)
        if not hasattr(response, "throttle_time") and not hasattr(response, "markers"):
            response = fired(response)
        return response

    def init(self, version=4, tid="tx", **fields):
        fields.setdefault("transaction_timeout", MINUTE)
        fields.setdefault("producer_id", -1)
        fields.setdefault("producer_epoch", -1)
        return self.result(22, version, transactional_id=tid, enable2_pc=False,
                           keep_prepared_txn=False, **fields)

    def addPartitions(self, version, pid, epoch, topics, tid="tx"):
        from kafkatwist.protocol.apis import requestType
        from kafkatwist.protocol.entities import nested

        Topic = nested(requestType(24, version), "AddPartitionsToTxnTopic")
        return self.result(
            24, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=tuple(Topic(name=t, partitions=tuple(p)) for t, p in topics),
        )

    def endTxn(self, version, pid, epoch, commit=True, tid="tx"):
        return self.result(26, version, transactional_id=tid, producer_id=pid,
                           producer_epoch=epoch, committed=commit)


@pytest.fixture
def broker(tmp_path):
    return TxnBroker(tmp_path)


def partitionErrors(response):
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


@pytest.mark.parametrize("version", range(0, 6))
def test_init_producer_id(broker, version):
    r = broker.init(version)
    assert (r.error_code, r.producer_epoch) == (E.none, 0)
    again = broker.init(version)
    assert (again.producer_id, again.producer_epoch) == (r.producer_id, 1)
    assert broker.init(version, tid="").error_code == E.invalid_request
    r = broker.init(version, transaction_timeout=datetime.timedelta(hours=1))
    assert r.error_code == E.invalid_transaction_timeout


@pytest.mark.parametrize("version", range(3, 6))
def test_init_producer_id_fenced_by_version(broker, version):
    r = broker.init(version)
    fenced = broker.init(version, producer_id=r.producer_id + 9, producer_epoch=0)
    expected = E.producer_fenced if version >= 4 else E.invalid_producer_epoch
    assert fenced.error_code == expected
    assert broker.init(version, producer_id=5, producer_epoch=-1).error_code == E.invalid_request


@pytest.mark.parametrize("version", range(0, 4))
def test_add_partitions(broker, version):
    r = broker.init()
    pid, epoch = r.producer_id, r.producer_epoch
    ok = broker.addPartitions(version, pid, epoch, [("t1", [0, 1]), ("t2", [0])])
    assert set(partitionErrors(ok).values()) == {E.none}
    # An unknown partition fails; the others are not attempted.
    bad = broker.addPartitions(version, pid, epoch, [("t1", [0, 9])])
    assert partitionErrors(bad) == {
        ("t1", 0): E.operation_not_attempted, ("t1", 9): E.unknown_topic_or_partition,
    }
    fenced = broker.addPartitions(version, pid, epoch + 1, [("t1", [0])])
    expected = E.producer_fenced if version >= 2 else E.invalid_producer_epoch
    assert partitionErrors(fenced) == {("t1", 0): expected}


@pytest.mark.parametrize("version", range(0, 5))
def test_end_txn(broker, version):
    r = broker.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert broker.endTxn(version, pid, epoch).error_code == E.invalid_txn_state
    broker.addPartitions(0, pid, epoch, [("t1", [0])])
    expected = E.producer_fenced if version >= 2 else E.invalid_producer_epoch
    assert broker.endTxn(version, pid, epoch + 1).error_code == expected
    assert broker.endTxn(version, pid, epoch).error_code == E.none
    assert broker.endTxn(version, pid, epoch).error_code == E.none  # a retry


@pytest.mark.parametrize("version", range(0, 5))
def test_offsets_in_transaction(broker, version):
    r = broker.init()
    pid, epoch = r.producer_id, r.producer_epoch
    added = broker.result(25, min(version, 4), transactional_id="tx", producer_id=pid,
                          producer_epoch=epoch, group_id="g")
    assert added.error_code == E.none
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested

    cls = requestType(28, version)
    Topic = nested(cls, "TxnOffsetCommitRequestTopic")
    Partition = nested(cls, "TxnOffsetCommitRequestPartition")

    def commit(topics):
        return broker.result(
            28, version, transactional_id="tx", group_id="g", producer_id=pid,
            producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=tuple(
                Topic(name=name, partitions=tuple(
                    make(Partition, partition_index=p, committed_offset=o,
                         committed_leader_epoch=-1, committed_metadata="m")
                    for p, o in parts
                ))
                for name, parts in topics
            ),
        )

    response = commit([("t1", [(0, 42)]), ("nope", [(0, 1)])])
    errors = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
    assert errors == {("t1", 0): E.none, ("nope", 0): E.unknown_topic_or_partition}
    # Pending: not visible, and unstable for require_stable.
    FetchTopic = nested(requestType(9, 7), "OffsetFetchRequestTopic")
    wanted = (FetchTopic(name="t1", partition_indexes=(0,)),)
    fetched = broker.result(9, 7, group_id="g", topics=wanted, require_stable=True)
    assert [p.error_code for t in fetched.topics for p in t.partitions] == [
        E.unstable_offset_commit
    ]
    assert broker.endTxn(0, pid, epoch).error_code == E.none
    fetched = broker.result(9, 7, group_id="g", topics=wanted, require_stable=True)
    assert [(p.committed_offset, p.error_code) for t in fetched.topics for p in t.partitions] == [
        (42, E.none)
    ]


def test_offsets_of_a_partition_not_in_the_transaction(broker):
    r = broker.init()
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested

    cls = requestType(28, 3)
    Topic = nested(cls, "TxnOffsetCommitRequestTopic")
    Partition = nested(cls, "TxnOffsetCommitRequestPartition")
    response = broker.result(
        28, 3, transactional_id="tx", group_id="g", producer_id=r.producer_id,
        producer_epoch=r.producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
        topics=(Topic(name="t1", partitions=(Partition(partition_index=0, committed_offset=1,
                                                       committed_leader_epoch=-1,
                                                       committed_metadata=None),)),),
    )
    assert response.topics[0].partitions[0].error_code == E.invalid_txn_state


def test_describe_list_and_producers(broker, monkeypatch):
    r = broker.init()
    # An id without a transaction has start time -1, as Kafka answers
    # (kio, as a client, cannot read that back: look at the bytes).
    from kafkatwist.protocol.codec import encodeResponseFrame
    from tests.coordinator import grouphelpers

    def describe(*ids):
        with monkeypatch.context() as patched:
            patched.setattr(grouphelpers, "wire", lambda apiKey, version, r: r)
            response = broker.result(65, 0, transactional_ids=ids)
        frame = b"".join(bytes(c) for c in encodeResponseFrame(65, 0, 1, response))
        return response.transaction_states, frame

    (empty,), frame = describe("tx")
    assert (empty.error_code, empty.transaction_state) == (E.none, "Empty")
    assert b"Empty" + (60000).to_bytes(4, "big") + b"\xff" * 8 in frame
    broker.addPartitions(0, r.producer_id, r.producer_epoch, [("t1", [0])])
    described, _ = describe("tx", "zz", "")
    assert [d.error_code for d in described] == [
        E.none, E.transactional_id_not_found, E.invalid_request,
    ]
    assert described[0].transaction_state == "Ongoing"
    assert [(t.topic, t.partitions) for t in described[0].topics] == [("t1", (0,))]
    for version in (0, 1):
        fields = {"duration_filter": -1} if version else {}
        listed = broker.result(66, version, state_filters=("Ongoing", "Nope"),
                               producer_id_filters=(), **fields)
        assert listed.unknown_state_filters == ("Nope",)
        assert [t.transactional_id for t in listed.transaction_states] == ["tx"]
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested

    TopicRequest = nested(requestType(61, 0), "TopicRequest")
    producers = broker.result(61, 0, topics=(TopicRequest(name="t1", partition_indexes=(0, 7)),))
    (known, missing) = producers.topics[0].partitions
    assert known.error_code == E.none and known.active_producers == ()
    assert missing.error_code == E.unknown_topic_or_partition


@pytest.mark.parametrize("version", [0, 1])
def test_write_txn_markers(broker, version):
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested

    cls = requestType(27, version)
    Marker = nested(cls, "WritableTxnMarker")
    Topic = nested(cls, "WritableTxnMarkerTopic")
    group = (OFFSETS_TOPIC, partitionFor("g", broker.groupCoordinator.log.numPartitions))
    response = broker.result(27, version, markers=(
        Marker(producer_id=77, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
               topics=(Topic(name="t1", partition_indexes=(0, 9)),
                       Topic(name=group[0], partition_indexes=(group[1],)))),
    ))
    errors = {
        (t.name, p.partition_index): p.error_code
        for m in response.markers for t in m.topics for p in t.partitions
    }
    assert errors == {("t1", 0): E.none, ("t1", 9): E.unknown_topic_or_partition, group: E.none}
    assert broker.logManager.getLog("t1", 0).logEndOffset == 1


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_batched(broker, version):
    """
    The brokers' form: several transactions, added or only verified.
    """
    from kafkatwist.protocol.apis import requestType
    from kafkatwist.protocol.entities import nested

    cls = requestType(24, version)
    Txn = nested(cls, "AddPartitionsToTxnTransaction")
    Topic = nested(cls, "AddPartitionsToTxnTopic")
    a = broker.init(tid="a")
    b = broker.init(tid="b")
    response = broker.result(24, version, transactions=(
        Txn(transactional_id="a", producer_id=a.producer_id, producer_epoch=a.producer_epoch,
            verify_only=False, topics=(Topic(name="t1", partitions=(0,)),)),
        Txn(transactional_id="b", producer_id=b.producer_id, producer_epoch=b.producer_epoch,
            verify_only=True, topics=(Topic(name="t1", partitions=(1,)),)),
    ))
    assert response.error_code == E.none
    got = {
        r.transactional_id: [p.partition_error_code for t in r.topic_results
                             for p in t.results_by_partition]
        for r in response.results_by_transaction
    }
    abortable = E.transaction_abortable if version >= 5 else E.invalid_txn_state
    assert got == {"a": [E.none], "b": [abortable]}
    response = broker.result(24, version, transactions=(
        Txn(transactional_id="a", producer_id=a.producer_id, producer_epoch=a.producer_epoch,
            verify_only=True, topics=(Topic(name="t1", partitions=(0,)),)),
    ))
    assert response.results_by_transaction[0].topic_results[0].results_by_partition[
        0].partition_error_code == E.none


def test_every_version_is_known_to_the_codec():
    for key, cls in TXN_HANDLERS.items():
        assert cls.minVersion in knownVersions(key) and cls.maxVersion in knownVersions(key)
    assert set(TXN_HANDLERS).isdisjoint(HANDLERS)
