"""
A cluster broker's dynamic config changes are applied in the order
ZooKeeper had them, though the hand-off is a thread pool that runs what it
is given in any order: a layer this broker wrote is never applied after a
newer change read from ZooKeeper.  And an alter's answer that raises does
not keep the later alters waiting.
"""

from __future__ import annotations

import threading

from kafkatwist.config import BrokerConfig
from kafkatwist.config.dynamic import DynamicBrokerConfig


def clustered():
    """
    A cluster broker's dynamic config whose ZooKeeper writes wait in
    C{writes} and whose hand-offs wait in C{pool} until a test runs them.
    """
    dynamic = DynamicBrokerConfig(BrokerConfig({"node.id": "1"}), None)
    writes, pool = [], []
    dynamic.remote = lambda perBroker, layer, onDone: writes.append((perBroker, layer, onDone))
    dynamic.loadLayers({}, {}, where="ZooKeeper")
    dynamic.handOff = pool.append
    return dynamic, writes, pool


def onAnotherThread(f):
    thread = threading.Thread(target=f)
    thread.start()
    thread.join(30)
    assert not thread.is_alive()


def test_a_written_layer_is_not_applied_after_a_newer_change_from_zookeeper():
    dynamic, writes, pool = clustered()
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "4000"})
    [(_, _, onDone)] = writes
    # ZooKeeper answers the write (on the cluster owner's thread), then
    # another broker's newer change of the same layer is read.
    onAnotherThread(lambda: onDone(None))
    dynamic.storedChanged({"message.max.bytes": "6000"}, {})
    # The pool runs the latest hand-off first.
    while pool:
        pool.pop()()
    assert dynamic.clusterDefault == {"message.max.bytes": "6000"}
    assert dynamic.current["message.max.bytes"] == 6000


def test_hand_offs_run_what_was_handed_in_order():
    dynamic, writes, pool = clustered()
    dynamic.storedChanged({"message.max.bytes": "5000"}, {})
    dynamic.storedChanged({"message.max.bytes": "7000"}, {})
    assert len(pool) == 2
    pool.pop()()
    assert dynamic.current["message.max.bytes"] == 7000
    pool.pop()()  # (nothing left for it)
    assert dynamic.current["message.max.bytes"] == 7000 and not pool
    dynamic.storedChanged({}, {"message.max.bytes": "8000"})
    pool.pop()()
    assert dynamic.current["message.max.bytes"] == 8000 and not pool


def test_an_answer_that_raises_does_not_keep_the_next_alters_waiting():
    dynamic = DynamicBrokerConfig(BrokerConfig({"node.id": "1"}), None)
    writes = []
    dynamic.remote = lambda perBroker, layer, onDone: writes.append((perBroker, layer, onDone))
    dynamic.loadLayers({}, {}, where="ZooKeeper")

    def raising(error):
        raise RuntimeError("the answer's callback failed")

    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "4000"})
    # Queued behind the first: one that fails validation, answered by a
    # callback that raises; then a good one.
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "not a number"},
                  onStored=raising)
    dynamic.alter(False, lambda layer: {**layer, "message.max.bytes": "6000"})
    [(_, _, onDone)] = writes
    try:
        onDone(None)
    except RuntimeError:
        pass
    assert [layer for _, layer, _ in writes][1:] == [{"message.max.bytes": "6000"}]
    writes[1][2](None)
    assert dynamic.current["message.max.bytes"] == 6000
