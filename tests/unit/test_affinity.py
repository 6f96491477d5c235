"""
C{request.threads.cpu.affinity}: which CPUs the Processors and handler
threads keep to.
"""

import os
import threading

import pytest

from kafkatwist.config import BrokerConfig
from kafkatwist.util.affinity import availableCpus, pinCurrentThread, requestThreadCpus, requestThreadCpusFor

linuxOnly = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity")


def test_auto_shares_the_highest_cpu_when_there_are_several():
    assert requestThreadCpus("auto", frozenset({0, 1, 2, 3})) == {3}


def test_auto_gives_the_brokers_of_a_local_cluster_different_cpus():
    """
    In a cluster, C{auto} counts down from the highest CPU by C{node.id}, so
    brokers sharing a machine do not share one CPU; a broker on its own
    keeps the highest whatever its id.
    """
    cpus = frozenset({0, 1})
    inCluster = {"zookeeper.connect": "127.0.0.1:2181/x"}
    chosen = [requestThreadCpusFor(BrokerConfig({**inCluster, "node.id": str(i)}), cpus) for i in (1, 2, 3)]
    assert chosen == [{1}, {0}, {1}]
    assert requestThreadCpusFor(BrokerConfig({"node.id": "2"}), cpus) == {1}
    assert requestThreadCpusFor(BrokerConfig({**inCluster, "node.id": "2", "request.threads.cpu.affinity": "1"}), cpus) == {1}


def test_auto_leaves_a_single_cpu_or_an_unknown_platform_alone():
    assert requestThreadCpus("auto", frozenset({5})) is None
    assert requestThreadCpus("auto", None) is None


def test_none_and_explicit_lists():
    assert requestThreadCpus("none", frozenset({0, 1})) is None
    assert requestThreadCpus(frozenset({0, 2}), frozenset({0, 1, 2})) == {0, 2}


@linuxOnly
def test_config_parses_numbers_and_ranges_this_process_may_use():
    allowed = sorted(availableCpus())
    first = allowed[0]
    assert BrokerConfig({})["request.threads.cpu.affinity"] == "auto"
    assert BrokerConfig({"request.threads.cpu.affinity": " None "})["request.threads.cpu.affinity"] == "none"
    assert BrokerConfig({"request.threads.cpu.affinity": f"{first}-{first}"})[
        "request.threads.cpu.affinity"
    ] == {first}


@linuxOnly
def test_pinning_restricts_only_the_calling_thread():
    target = frozenset({max(availableCpus())})
    seen = []

    def run():
        pinCurrentThread(target)
        seen.append(frozenset(os.sched_getaffinity(0)))

    before = availableCpus()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [target]
    assert availableCpus() == before


def test_pinning_to_none_is_a_no_op():
    before = availableCpus()
    pinCurrentThread(None)
    assert availableCpus() == before
