"""
The transaction coordinator, run synchronously on a fake clock over
in-memory logs: the record formats of C{__transaction_state}, InitProducerId
(epochs, fencing, the abort of an open transaction, timeouts), adding
partitions, verification, EndTxn and the markers that follow, the abort of
transactions past their timeout, the expiry of idle ids, loading after a
restart (prepared transactions completed, damaged records skipped), and
Describe/ListTransactions.
"""

from __future__ import annotations

import pytest
from twisted.internet import task

from kafkatwist.coordinator.effects import Append
from kafkatwist.coordinator.transaction.coordinator import (
    ABORT_SWEEP,
    TransactionCoordinator,
)
from kafkatwist.coordinator.transaction.effects import WriteMarkers
from kafkatwist.coordinator.transaction.formats import (
    TRANSACTION_STATE_TOPIC,
    CorruptTxnRecord,
    TxnLogValue,
    decodeKey,
    decodeValue,
    encodeKey,
    encodeValue,
)
from kafkatwist.coordinator.transaction.logstore import TransactionStateLog, loadTransactions
from kafkatwist.coordinator.transaction.markers import MarkerWriter
from kafkatwist.coordinator.transaction.service import TransactionCoordinatorService
from kafkatwist.coordinator.transaction.state import TxnState
from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.protocol.batch import iterBatchHeaders
from kafkatwist.protocol.markers import readMarker

from .helpers import Synchronous

E = ErrorCode
S = TxnState
T0 = 1_700_000_000_000
TP = ("t", 0)
TP1 = ("t", 1)


class Txn:
    """
    A coordinator service with its logs, on a fake clock (milliseconds).
    """

    def __init__(self, logManager=None, **settings) -> None:
        self.clock = task.Clock()
        self.clock.advance(T0 / 1000)
        self.logManager = logManager or MemoryLogManager()
        if "t" not in self.logManager.topics():
            self.logManager.createTopic("t", 2, {})
        self.stateLog = TransactionStateLog(self.logManager, 3, clock=self.nowMs)
        self.writer = MarkerWriter(self.logManager, clock=self.nowMs)
        self.service = TransactionCoordinatorService(
            self.clock, self.stateLog, self.writer, **settings
        )
        self.sync = Synchronous(self.service)
        self.service.load()
        self.nextId = 1000

    def nowMs(self) -> int:
        return int(self.clock.seconds() * 1000)

    def advance(self, ms: float) -> None:
        self.clock.advance(ms / 1000)

    def restart(self, **settings) -> "Txn":
        self.service.shutdown()
        return Txn(self.logManager, **settings)

    def init(self, tid="tx", timeoutMs=60000, expected=(-1, -1)):
        self.nextId += 1
        return self.sync.initProducerId(tid, timeoutMs, expected[0], expected[1], self.nextId)

    def begin(self, tid="tx", partitions=(TP,)):
        r = self.init(tid)
        assert r.errorCode == E.none, r
        assert self.sync.addPartitions(tid, r.producerId, r.producerEpoch, list(partitions)) == E.none
        return r.producerId, r.producerEpoch

    def meta(self, tid="tx"):
        return self.service.machine.metadata(tid)

    def markers(self, tp=TP):
        """
        C{(producerId, epoch, controlType)} of the markers in C{tp}.
        """
        log = self.logManager.getLog(*tp)
        data = log.read(0, 1 << 30).records
        out = []
        for position, header in iterBatchHeaders(data):
            if header.attributes & 0x20:
                marker = readMarker(data[position : position + header.size])
                out.append((header.producerId, header.producerEpoch, marker.controlType))
        return out


# -- formats ---------------------------------------------------------------------------


def test_record_formats():
    value = TxnLogValue(7, 3, 60000, S.ONGOING, frozenset({("b", 1), ("a", 0), ("a", 2)}), 5, 4)
    data = encodeValue(value)
    # v0: version, pid, epoch, timeout, state, 2 topics...
    assert data[:2] == b"\x00\x00" and data[16] == 1
    assert decodeValue(data) == value
    empty = TxnLogValue(7, 3, 60000, S.EMPTY, frozenset(), 5, -1)
    assert encodeValue(empty)[17:21] == b"\xff\xff\xff\xff"  # null partitions
    assert decodeValue(encodeValue(empty)) == empty
    with pytest.raises(ValueError):
        encodeValue(TxnLogValue(7, 3, 60000, S.EMPTY, frozenset({TP}), 5, -1))
    assert decodeKey(encodeKey("tx")) == (0, "tx")
    assert decodeKey(b"\x00\x01junk") == (1, None)
    for bad in (b"\x00\x05", encodeValue(value)[:-3], b"\x00\x00" + b"\x00" * 14 + b"\x09"):
        with pytest.raises(CorruptTxnRecord):
            decodeValue(bad)


def test_value_version1():
    """
    The flexible version Kafka 4 writes with transaction.version 1+: read.
    """
    body = bytearray(b"\x00\x01")
    body += (7).to_bytes(8, "big") + (3).to_bytes(2, "big") + (60000).to_bytes(4, "big") + b"\x01"
    body += b"\x02" + b"\x02a" + b"\x02" + (4).to_bytes(4, "big") + b"\x00"  # one topic "a", [4]
    body += (5).to_bytes(8, "big") + (4).to_bytes(8, "big")
    body += b"\x01" + b"\x00" + b"\x08" + (6).to_bytes(8, "big")  # tag 0: previous producer id 6
    value = decodeValue(bytes(body))
    assert (value.producerId, value.state, value.partitions, value.previousProducerId) == (
        7, S.ONGOING, frozenset({("a", 4)}), 6,
    )


# -- InitProducerId ---------------------------------------------------------------------


def test_init_bumps_the_epoch():
    txn = Txn()
    first = txn.init()
    assert (first.errorCode, first.producerEpoch) == (E.none, 0)
    second = txn.init()
    assert (second.producerId, second.producerEpoch) == (first.producerId, 1)
    assert txn.meta().state is S.EMPTY


def test_init_validates_the_timeout():
    txn = Txn(maxTimeoutMs=1000)
    assert txn.init(timeoutMs=1001).errorCode == E.invalid_transaction_timeout
    assert txn.init(timeoutMs=0).errorCode == E.invalid_transaction_timeout
    assert txn.init(timeoutMs=1000).errorCode == E.none


def test_init_with_expected_producer():
    txn = Txn()
    first = txn.init()
    again = txn.init(expected=(first.producerId, first.producerEpoch))
    assert again.producerEpoch == 1
    # The same request again (its answer lost): the same epoch.
    retry = txn.init(expected=(first.producerId, first.producerEpoch))
    assert retry.producerEpoch == 1
    assert txn.init(expected=(first.producerId + 5, 0)).errorCode == E.producer_fenced
    assert txn.init(expected=(first.producerId, 7)).errorCode == E.producer_fenced


def test_exhausted_epoch_gets_a_new_producer_id():
    txn = Txn()
    first = txn.init()
    meta = txn.meta()
    meta.current = type(meta.current)(**{**meta.current.__dict__, "producerEpoch": 32766})
    fresh = txn.init()
    assert fresh.producerId != first.producerId and fresh.producerEpoch == 0


def test_init_aborts_the_open_transaction_and_fences():
    txn = Txn()
    pid, epoch = txn.begin()
    log = txn.logManager.getLog(*TP)
    from tests.log.helpers import txn as txnBatch

    log.append(txnBatch(0, pid=pid, epoch=epoch), T0, verificationGuard=log.verificationGuard(pid))
    assert log.lastStableOffset == 0
    # A new instance with the same id: the old one's transaction is
    # aborted with a bumped epoch, and the new one told to retry.
    assert txn.init().errorCode == E.concurrent_transactions
    assert txn.markers() == [(pid, epoch + 1, 0)]
    assert log.lastStableOffset == log.logEndOffset
    assert txn.meta().state is S.COMPLETE_ABORT
    again = txn.init()
    assert (again.errorCode, again.producerEpoch) == (E.none, epoch + 2)
    # The zombie is fenced everywhere.
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.producer_fenced
    assert txn.sync.addPartitions("tx", pid, epoch, [TP]) == E.producer_fenced


# -- AddPartitions, verification, EndTxn ------------------------------------------------------


def test_add_partitions_checks():
    txn = Txn()
    assert txn.sync.addPartitions("nobody", 1, 0, [TP]) == E.invalid_producer_id_mapping
    r = txn.init()
    assert txn.sync.addPartitions("tx", r.producerId + 1, 0, [TP]) == E.invalid_producer_id_mapping
    assert txn.sync.addPartitions("tx", r.producerId, 1, [TP]) == E.producer_fenced
    assert txn.sync.addPartitions("tx", r.producerId, 0, [TP]) == E.none
    meta = txn.meta()
    assert meta.state is S.ONGOING and meta.current.txnStartTimestampMs == T0
    assert txn.sync.addPartitions("tx", r.producerId, 0, [TP1]) == E.none
    assert txn.meta().current.partitions == {TP, TP1}


def test_verification():
    txn = Txn()
    pid, epoch = txn.begin()
    assert txn.sync.verifyPartitions("tx", pid, epoch, [TP, TP1]) == {
        TP: E.none, TP1: E.transaction_abortable,
    }
    assert txn.sync.verifyPartitions("tx", pid, epoch + 1, [TP]) == E.producer_fenced
    assert txn.sync.verifyPartitions("other", pid, epoch, [TP]) == E.invalid_producer_id_mapping


def test_end_txn_commit_writes_markers():
    txn = Txn()
    pid, epoch = txn.begin(partitions=[TP, TP1])
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.none
    assert txn.markers(TP) == [(pid, epoch, 1)] and txn.markers(TP1) == [(pid, epoch, 1)]
    meta = txn.meta()
    assert meta.state is S.COMPLETE_COMMIT and meta.current.partitions == frozenset()
    # A retry of the same EndTxn is fine; the other outcome is not.
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.none
    assert txn.sync.endTxn("tx", pid, epoch, False) == E.invalid_txn_state
    # Sequential transactions with the same epoch (transaction protocol v1).
    assert txn.sync.addPartitions("tx", pid, epoch, [TP]) == E.none
    assert txn.sync.endTxn("tx", pid, epoch, False) == E.none
    assert txn.markers(TP) == [(pid, epoch, 1), (pid, epoch, 0)]


def test_end_txn_without_transaction():
    txn = Txn()
    r = txn.init()
    assert txn.sync.endTxn("tx", r.producerId, r.producerEpoch, True) == E.invalid_txn_state


def test_markers_retried_until_written():
    txn = Txn()
    pid, epoch = txn.begin()
    writes = []
    real = txn.writer.write

    def flaky(*args):
        writes.append(args[-2])
        if len(writes) < 3:
            args[-1]({tp: E.kafka_storage_error for tp in args[-2]})
        else:
            real(*args)

    txn.writer.write = flaky
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.none
    assert txn.meta().state is S.PREPARE_COMMIT
    # Meanwhile the id is busy.
    assert txn.init().errorCode == E.concurrent_transactions
    txn.advance(100)
    txn.advance(100)
    assert len(writes) == 3
    assert txn.meta().state is S.COMPLETE_COMMIT


def test_deleted_topic_does_not_hold_the_transaction():
    txn = Txn()
    pid, epoch = txn.begin(partitions=[TP])
    txn.logManager.deleteTopic("t")
    assert txn.sync.endTxn("tx", pid, epoch, False) == E.none
    assert txn.meta().state is S.COMPLETE_ABORT


def test_failed_append_leaves_state_alone():
    txn = Txn()
    pid, epoch = txn.begin()
    real = txn.stateLog.append

    def full(*args, **kw):
        from kafkatwist.errors import KafkaError

        raise KafkaError(E.kafka_storage_error)

    txn.stateLog.append = full
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.not_coordinator
    assert txn.meta().state is S.ONGOING and txn.meta().pending is None
    txn.stateLog.append = real
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.none


# -- timeouts and expiry -------------------------------------------------------------------


def test_timed_out_transaction_is_aborted():
    txn = Txn(abortIntervalMs=1000)
    pid, epoch = txn.begin()
    txn.sync.addPartitions("tx", pid, epoch, [TP1])
    txn.advance(30000)
    assert txn.meta().state is S.ONGOING
    txn.advance(31000)
    meta = txn.meta()
    assert meta.state is S.COMPLETE_ABORT and meta.current.producerEpoch == epoch + 1
    assert txn.markers(TP) == [(pid, epoch + 1, 0)]
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.producer_fenced


def test_idle_ids_expire():
    txn = Txn(expirationMs=10_000, expiryIntervalMs=1000)
    txn.init("idle")
    pid, epoch = txn.begin("busy")
    txn.advance(12_000)
    assert txn.meta("idle") is None
    assert txn.meta("busy").state is S.ONGOING
    restarted = txn.restart()
    assert restarted.meta("idle") is None and restarted.meta("busy") is not None


# -- loading -----------------------------------------------------------------------------------


def test_restart_keeps_every_state():
    txn = Txn()
    pid, epoch = txn.begin("open")
    txn.begin("committed")
    meta = txn.meta("committed").current
    txn.sync.endTxn("committed", meta.producerId, meta.producerEpoch, True)
    txn.init("empty")
    restarted = txn.restart()
    assert restarted.meta("open").state is S.ONGOING
    assert restarted.meta("open").current.partitions == {TP}
    assert restarted.meta("committed").state is S.COMPLETE_COMMIT
    assert restarted.meta("empty").state is S.EMPTY
    assert restarted.sync.endTxn("open", pid, epoch, False) == E.none


def test_prepared_transaction_is_completed_after_restart():
    txn = Txn()
    pid, epoch = txn.begin()
    txn.writer.write = lambda *args: None  # the markers never get written
    assert txn.sync.endTxn("tx", pid, epoch, True) == E.none
    assert txn.markers() == []
    restarted = txn.restart()
    assert restarted.markers() == [(pid, epoch, 1)]
    assert restarted.meta().state is S.COMPLETE_COMMIT


def test_damaged_records_are_skipped(capturedLog=None):
    txn = Txn()
    txn.init("good")
    log = txn.stateLog
    log.append(0, [(encodeKey("bad"), b"\x00\x07garbage")])
    log.append(0, [(b"\x00", None)])
    log.append(0, [(b"\x00\x09future-key", b"")])
    restarted = txn.restart()
    assert restarted.meta("good") is not None and restarted.meta("bad") is None
    assert [tid for tid, _, _ in loadTransactions(restarted.stateLog)] == ["good"]


# -- administration --------------------------------------------------------------------------


def test_describe_and_list():
    txn = Txn()
    pid, epoch = txn.begin("a", partitions=[TP, TP1])
    txn.init("b")
    (a, missing) = txn.sync.describe(["a", "zz"])
    assert (a.state, a.producerId, a.producerEpoch, a.partitions) == (
        "Ongoing", pid, epoch, frozenset({TP, TP1}),
    )
    assert a.startTimestampMs == T0 and a.timeoutMs == 60000
    assert missing.errorCode == E.transactional_id_not_found
    error, unknown, listed = txn.sync.listTransactions([], [])
    assert error == E.none and {(t.transactionalId, t.state) for t in listed} == {
        ("a", "Ongoing"), ("b", "Empty"),
    }
    error, unknown, listed = txn.sync.listTransactions(["Ongoing", "Bogus"], [])
    assert unknown == ("Bogus",) and [t.transactionalId for t in listed] == ["a"]
    assert txn.sync.listTransactions([], [pid + 100])[2] == ()
    txn.advance(5000)
    listed = txn.sync.listTransactions([], [], 10_000)[2]
    # Kafka's rule: an id without a transaction (start -1) passes.
    assert [t.transactionalId for t in listed] == ["b"]
    listed = txn.sync.listTransactions(["Ongoing"], [], 1000)[2]
    assert [t.transactionalId for t in listed] == ["a"]


# -- the machine alone ------------------------------------------------------------------------


def test_machine_effects():
    """
    The sans-io machine emits records and markers, and applies a change
    only once its append succeeded.
    """
    machine = TransactionCoordinator(numPartitions=1)
    fx = machine.load(T0, [])
    assert {type(e) for e in fx} == {type(fx[0])} and fx[0].key == ABORT_SWEEP
    answers = []
    fx = machine.initProducerId(T0, answers.append, "tx", 1000, -1, -1, 77)
    (append,) = [e for e in fx if isinstance(e, Append)]
    assert append.partition == 0 and append.records[0][0] == encodeKey("tx")
    assert machine.metadata("tx").pending is not None and not answers
    for e in machine.appendCompleted(T0, append.token, E.none):
        e.replyTo(e.result)
    assert answers[0].producerEpoch == 0
    fx = machine.addPartitions(T0, answers.append, "tx", 77, 0, [TP])
    for e in machine.appendCompleted(T0, fx[0].token, E.none):
        e.replyTo(e.result)
    fx = machine.endTxn(T0, answers.append, "tx", 77, 0, True)
    fx = machine.appendCompleted(T0, fx[0].token, E.none)
    (markers,) = [e for e in fx if isinstance(e, WriteMarkers)]
    assert (markers.producerId, markers.commit, markers.partitions) == (77, True, {TP})
    fx = machine.markersWritten(T0, markers.token, {TP: E.none})
    (complete,) = fx
    assert decodeValue(complete.records[0][1]).state is S.COMPLETE_COMMIT
    assert TRANSACTION_STATE_TOPIC == "__transaction_state"


def test_topic_created_on_first_write():
    txn = Txn()
    assert TRANSACTION_STATE_TOPIC not in txn.logManager.topics()
    txn.init()
    assert txn.logManager.topics()[TRANSACTION_STATE_TOPIC].numPartitions == 3
    assert txn.logManager.topics()[TRANSACTION_STATE_TOPIC].configs["cleanup.policy"] == "compact"
