"""
A Fetch of a partition's small records answers them as bytes read with
their headers (no descriptor of their own; a frame-answered one in one
chunk: one socket write); larger ones stay a file region for sendfile.  Both byte for byte as the
general path answers (tests/unit/test_small_fetch.py).
"""

from __future__ import annotations

import pytest

from kafkatwist.interfaces import IFileRegion
from kafkatwist.plugins.fetch import INLINE_RECORDS
from kafkatwist.protocol.apis import FETCH
from kafkatwist.protocol.codec import encodeRequestFrame
from kafkatwist.protocol.records import Record, buildBatch
from tests.unit.test_small_fetch import anonymous, brokerWith, fetchRequest, handled, key, materialised


@pytest.mark.parametrize("disk", (True, False))
def test_small_records_answer_as_bytes_large_ones_as_a_region(tmp_path, disk):
    fast, general = brokerWith(tmp_path, disk=disk), brokerWith(tmp_path, wrap=True, disk=disk)
    for broker in (fast, general):
        broker.logManager.getLog("orders", 2).append(
            buildBatch([Record(timestamp=2000, value=b"x" * (INLINE_RECORDS + 100))]), 2000
        )
    version = 16
    for correlation, offset, maxBytes in ((1, 0, 2000), (2, 6, 1 << 20), (3, 0, 1 << 20)):
        answers = []
        for broker in (fast, general):
            entity = fetchRequest(version, [(key(broker, version), [(2, 0, offset, maxBytes)])])
            frame = encodeRequestFrame(FETCH, version, correlation, "c", entity)
            chunks = handled(broker, frame).chunks
            if maxBytes == 2000:
                # the three small batches (0-5), not the large one: no
                # region on either path
                assert not any(IFileRegion.providedBy(c) for c in chunks)
                if broker is fast:
                    assert len(chunks) == 1 and chunks[0].__class__ is bytes
            elif disk:
                assert any(IFileRegion.providedBy(c) for c in chunks)
            answers.append(anonymous(broker, version, materialised(chunks)))
        assert answers[0] == answers[1]
    assert general.handlerFor(FETCH).seen == 3
