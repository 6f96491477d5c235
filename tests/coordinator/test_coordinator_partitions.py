"""
Coordinators in a cluster own only the partitions of their internal topic
this broker leads: loaded and unloaded one at a time.
"""

from __future__ import annotations

from kafkatwist.coordinator.formats import partitionFor

from .helpers import E, Harness, memoryLog


def test_group_partitions_load_and_unload():
    log = memoryLog(numPartitions=3)
    first = Harness(log=log)
    assert first.commit({("t", 0): 42}, group="g") == {("t", 0): E.none}
    p = partitionFor("g", 3)

    h = Harness(log=log, ownsAllPartitions=False)
    # Not loaded here: another broker is the coordinator.
    assert h.commit({("t", 0): 1}, group="g") == {("t", 0): E.not_coordinator}
    assert h.coord.fetchOffsets("g", None).errorCode == E.not_coordinator
    h.service.machine._loading.add(p)
    assert h.coord.fetchOffsets("g", None).errorCode == E.coordinator_load_in_progress
    h.service.loadPartition(p)
    assert h.coord.fetchOffsets("g", None).offsets[("t", 0)].offset == 42
    # Another partition's groups are still someone else's.
    other = next(g for g in ("a", "b", "c", "d", "e") if partitionFor(g, 3) != p)
    assert h.coord.fetchOffsets(other, None).errorCode == E.not_coordinator
    # A member parked in JoinGroup is told to find the new coordinator.
    parked = h.join(group="g")
    h.service.unloadPartition(p)
    assert h.coord.fetchOffsets("g", None).errorCode == E.not_coordinator
    if parked.fired:
        assert parked.value.errorCode in (E.none, E.not_coordinator, E.member_id_required)
    assert "g" not in h.service.publishedGroups()
    # Loaded again (leadership came back): the offsets are read back again.
    h.service.loadPartition(p)
    assert h.coord.fetchOffsets("g", None).offsets[("t", 0)].offset == 42


def test_transaction_partitions_load_and_unload():
    from twisted.internet import task

    from kafkatwist.coordinator.transaction.formats import partitionOf
    from kafkatwist.coordinator.transaction.logstore import TransactionStateLog
    from kafkatwist.coordinator.transaction.service import TransactionCoordinatorService
    from kafkatwist.log import MemoryLogManager

    class Writer:
        def write(self, *args, **kw):
            raise AssertionError("no markers expected")

    manager = MemoryLogManager()
    txnLog = TransactionStateLog(manager, 3)
    single = TransactionCoordinatorService(task.Clock(), txnLog, Writer())
    single.load()
    answers = []
    single.initProducerId(answers.append, "tx", 60000, -1, -1, 7)
    assert answers[-1].errorCode == E.none

    service = TransactionCoordinatorService(task.Clock(), txnLog, Writer(), ownsAllPartitions=False)
    service.load(partitions=())
    service.initProducerId(answers.append, "tx", 60000, -1, -1, 8)
    assert answers[-1].errorCode == E.not_coordinator
    p = partitionOf("tx", 3)
    service.loadPartition(p, coordinatorEpoch=4)
    assert service.machine._epochs[p] == 4
    service.initProducerId(answers.append, "tx", 60000, -1, -1, 8)
    assert (answers[-1].errorCode, answers[-1].producerId, answers[-1].producerEpoch) == (E.none, 7, 1)
    service.unloadPartition(p)
    service.initProducerId(answers.append, "tx", 60000, -1, -1, 9)
    assert answers[-1].errorCode == E.not_coordinator
