"""
What several log tests share: the fixed clock, a partition log and reading
it back, the cleaner, transactional batches, open file descriptors.
"""

from __future__ import annotations

import os

from kafkatwist.log.cleaner import LogCleaner
from kafkatwist.protocol.batch import TRANSACTIONAL_BIT, iterBatchHeaders

from .batches import makeBatch, records

NOW = 1_700_000_000_000
#: a topic the cleaner compacts at once, in small segments
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}
#: producer ids of the transaction tests
P1, P2 = 100, 200


def headers(data: bytes):
    return [h for _, h in iterBatchHeaders(data)]


def offsets(data: bytes):
    return [(h.baseOffset, h.lastOffset) for h in headers(data)]


def newLog(harness, configs=None, defaults=None, **kw):
    manager = harness.make(defaults, **kw)
    manager.createTopic("t", 1, configs or {})
    return manager, manager.getLog("t", 0)


def readAll(log, offset: int, maxBytes: int = 1 << 30):
    return records(log.read(offset, maxBytes).records)


def openFds() -> int:
    return len(os.listdir("/proc/self/fd"))


def cleaner(manager, **kw):
    kw.setdefault("inProcess", True)
    kw.setdefault("clock", lambda: NOW)
    return LogCleaner(manager, **kw)


def txn(seq, count=2, pid=P1, epoch=0):
    return makeBatch(
        count, producerId=pid, producerEpoch=epoch, baseSequence=seq,
        baseTimestamp=NOW, attributes=TRANSACTIONAL_BIT,
    )
