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


def requestThreadCpus(setting, available: frozenset[int] | None) -> frozenset[int] | None:
    """
    The CPUs to restrict the Processors and handler threads to, or C{None}
    to leave them where the OS puts them.

    @param setting: C{"auto"}, C{"none"} or a set of CPU numbers (as the
        config parsed it).
    @param available: L{availableCpus}.
    @return: for C{auto}, one CPU when the process may use several: the
        highest-numbered, as CPU 0 tends to take the most interrupts.
    """
    if setting == NONE:
        return None
    if setting == AUTO:
        if available is None or len(available) < 2:
            return None
        return frozenset({max(available)})
    return frozenset(setting)


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
