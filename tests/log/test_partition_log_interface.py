"""
L{IPartitionLog.read} names every parameter its callers pass (the Fetch
handler passes six, positionally), and both logs -- in memory and on disk
-- provide the interface.
"""

from __future__ import annotations

import inspect

from zope.interface.verify import verifyObject

from kafkatwist.interfaces import IPartitionLog

from .batches import makeBatch


def test_the_interface_read_takes_what_the_logs_take(harness):
    manager = harness.make()
    manager.createTopic("t", 1, {})
    log = manager.getLog("t", 0)
    log.append(makeBatch(3), 0)
    assert verifyObject(IPartitionLog, log)
    described = IPartitionLog["read"].getSignatureInfo()
    implemented = inspect.signature(log.read).parameters
    assert described["positional"] == tuple(implemented)
    assert described["optional"] == {
        name: p.default for name, p in implemented.items() if p.default is not inspect.Parameter.empty
    }
    # as plugins/fetch.py calls it: offset, maxBytes, minOneBatch,
    # readCommitted, toLogEnd, inline
    records = log.read(0, 1 << 20, True, False, True, 0).records
    if isinstance(records, (bytes, bytearray, memoryview)):
        assert len(records) == len(makeBatch(3))
    else:
        assert records.length == len(makeBatch(3))
        records.close()
