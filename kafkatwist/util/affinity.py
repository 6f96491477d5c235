"""
Which CPUs the request path's threads run on
(C{request.threads.cpu.affinity}).

The Processors and the handler threads hand every request to each other,
and the GIL lets one of them run Python at a time.  Spread over CPUs, each
hand-off wakes a thread on another CPU (an inter-processor interrupt; in a
virtual machine, a trip through the hypervisor) that then often waits for
the GIL its waker still holds.  On one CPU the same hand-off is a switch on
one run queue, taken when the waker blocks.  What is given up is running
kernel work (the copies in C{recv}, C{pwrite}, C{sendfile}) of two of these
threads at once; the figures that chose the default are in
bench/RESULTS.md.
"""

from __future__ import annotations

import os

from twisted.logger import Logger

log = Logger()

AUTO = "auto"
NONE = "none"


def availableCpus() -> frozenset[int] | None:
    """
    The CPUs this process may run on, or C{None} where the platform cannot
    tell (no C{sched_getaffinity}).
    """
    getAffinity = getattr(os, "sched_getaffinity", None)
    if getAffinity is None:
        return None
    return frozenset(getAffinity(0))


def requestThreadCpus(setting, available: frozenset[int] | None, place: int = 0) -> frozenset[int] | None:
    """
    The CPUs to restrict the Processors and handler threads to, or C{None}
    to leave them where the OS puts them.

    @param setting: C{"auto"}, C{"none"} or a set of CPU numbers (as the
        config parsed it).
    @param available: L{availableCpus}.
    @param place: for C{auto}, how many CPUs down from the highest to
        start (modulo their number): L{brokerPlace}.
    @return: for C{auto}, one CPU when the process may use several: the
        highest-numbered, as CPU 0 tends to take the most interrupts, or the
        one C{place} below it.
    """
    if setting == NONE:
        return None
    if setting == AUTO:
        if available is None or len(available) < 2:
            return None
        cpus = sorted(available)
        return frozenset({cpus[-1 - place % len(cpus)]})
    return frozenset(setting)


def brokerPlace(config) -> int:
    """
    Where C{auto} starts counting for this broker: 0 for a broker on its
    own; C{node.id - 1} in a cluster, so the brokers of a cluster on one
    machine (C{make cluster}, tests, benchmarks: ids 1, 2, 3) pin their
    request threads to different CPUs instead of all sharing the highest
    one, which held two brokers to one core's worth of work
    (bench/RESULTS.md, "Two brokers against one").
    """
    if not config["zookeeper.connect"]:
        return 0
    return max(config["node.id"] - 1, 0)


def requestThreadCpusFor(config, available: frozenset[int] | None) -> frozenset[int] | None:
    """
    L{requestThreadCpus} for a broker's configuration.
    """
    return requestThreadCpus(config["request.threads.cpu.affinity"], available, brokerPlace(config))


def pinCurrentThread(cpus: frozenset[int] | None) -> None:
    """
    Restrict the calling thread to C{cpus}; C{None} leaves it alone.
    """
    if not cpus:
        return
    try:
        os.sched_setaffinity(0, cpus)
    except OSError as e:
        log.warn("Could not restrict a request thread to CPU {cpus}: {e}", cpus=showCpus(cpus), e=e)


def showCpus(cpus) -> str:
    return ",".join(map(str, sorted(cpus)))
