"""
What a commit may store, plain or transactional: one rule
(L{kafkatwist.coordinator.offsets.acceptCommits}) for the metadata length
and the commit timestamp.
"""

from __future__ import annotations

from kafkatwist.coordinator import OffsetAndMetadata
from kafkatwist.coordinator.offsets import acceptCommits
from kafkatwist.coordinator.txnoffsets import TxnCommitRequest
from kafkatwist.errors import ErrorCode

from .helpers import Harness

E = ErrorCode


def test_metadata_length_in_utf8_and_commit_time():
    offsets = {
        ("t", 0): OffsetAndMetadata(1, metadata="\u00e9" * 3),  # 6 bytes
        ("t", 1): OffsetAndMetadata(2, metadata="abcde", commitTimestampMs=7, expireTimestampMs=9),
        ("t", 2): OffsetAndMetadata(3, leaderEpoch=4, metadata=None),  # type: ignore[arg-type]
    }
    refused, kept = acceptCommits(offsets, 5, nowMs=100)
    assert refused == {("t", 0): E.offset_metadata_too_large}
    assert kept == {
        ("t", 1): OffsetAndMetadata(2, -1, "abcde", 7, 9),
        ("t", 2): OffsetAndMetadata(3, 4, "", 100, None),
    }


def test_transactional_commit_refuses_long_metadata():
    h = Harness(offsetMetadataMaxBytes=4)
    request = TxnCommitRequest(
        "g", 500, 3, {("t", 0): OffsetAndMetadata(1, metadata="12345"), ("t", 1): OffsetAndMetadata(2)}
    )
    assert h.coord.commitTransactionalOffsets(request) == {
        ("t", 0): E.offset_metadata_too_large,
        ("t", 1): E.none,
    }
