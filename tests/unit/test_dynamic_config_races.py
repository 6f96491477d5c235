"""
A cluster broker's dynamic config changes racing each other: a layer this
broker wrote to ZooKeeper is applied over the layers current when the
write is answered (a change of the other layer read meanwhile stays), and
a write that fails in any way still lets the next change run.
"""

from __future__ import annotations

from kazoo.exceptions import ConnectionLoss

from kafkatwist.cluster.adminwrites import AdminWrites
from kafkatwist.config import BrokerConfig
from kafkatwist.config.dynamic import DynamicBrokerConfig
from kafkatwist.errors import ErrorCode


def clustered():
    """
    A cluster broker's dynamic config whose ZooKeeper writes wait in
    C{writes} (perBroker, layer, onDone) until a test answers them.
    """
    dynamic = DynamicBrokerConfig(BrokerConfig({"node.id": "1"}), None)
    writes = []
    dynamic.remote = lambda perBroker, layer, onDone: writes.append((perBroker, layer, onDone))
    dynamic.loadLayers({}, {}, where="ZooKeeper")
    return dynamic, writes


def test_a_written_layer_keeps_the_other_layer_changed_meanwhile():
    dynamic, writes = clustered()
    dynamic.alter(True, lambda layer: {**layer, "unclean.leader.election.enable": "true"})
    [(perBroker, layer, onDone)] = writes
    # Before ZooKeeper answers, another broker's change of the cluster
    # default is read and applied here.
    dynamic.storedChanged({"message.max.bytes": "5000"}, {})
    assert dynamic.current["message.max.bytes"] == 5000
    onDone(None)
    assert dynamic.perBroker == {"unclean.leader.election.enable": "true"}
    assert dynamic.clusterDefault == {"message.max.bytes": "5000"}
    assert dynamic.current["message.max.bytes"] == 5000
    assert dynamic.current["unclean.leader.election.enable"] is True


def test_a_remote_store_that_raises_lets_the_next_change_run():
    dynamic, writes = clustered()
    calls = []

    def remote(perBroker, layer, onDone):
        calls.append(layer)
        if len(calls) == 1:
            raise RuntimeError("the owner is gone")
        onDone(None)

    dynamic.remote = remote
    answers = []
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "4000"}, onStored=answers.append)
    assert answers[0].code == ErrorCode.unknown_server_error
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "6000"}, onStored=answers.append)
    assert answers[1] is None and dynamic.current["message.max.bytes"] == 6000


class _Owner:
    def submit(self, f, *args):
        try:
            f(*args)
        except Exception:
            pass  # the owner thread logs it (its onError)


class _Writes(AdminWrites):
    def __init__(self, error):
        self.brokerId = 1
        self.owner = _Owner()
        self.error = error

    def _writeEntityConfig(self, path, entityType, name, configs):
        raise self.error


def test_a_broker_config_write_failing_otherwise_than_zookeeper_is_answered():
    answers = []
    _Writes(ValueError("bad data")).setBrokerConfigs(True, {}, lambda r, e: answers.append(e))
    assert [e.code for e in answers] == [ErrorCode.unknown_server_error]
    _Writes(ConnectionLoss()).setBrokerConfigs(True, {}, lambda r, e: answers.append(e))
    assert answers[1].code == ErrorCode.request_timed_out


def test_the_next_change_runs_after_a_write_that_failed_otherwise():
    dynamic, _ = clustered()
    writes = _Writes(ValueError("bad data"))
    dynamic.remote = lambda perBroker, layer, onDone: writes.setBrokerConfigs(
        perBroker, layer, lambda result, error: onDone(error))
    answers = []
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "4000"}, onStored=answers.append)
    writes.error = None
    writes._writeEntityConfig = lambda *args: None
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "6000"}, onStored=answers.append)
    assert answers[0].code == ErrorCode.unknown_server_error
    assert answers[1] is None and dynamic.current["message.max.bytes"] == 6000
