"""
OffsetForLeaderEpoch (23) v0-4 through the codec and the bounds pass, and
KIP-320 fencing.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.log import MemoryLogManager
from kafkatwist.plugins.offset_for_leader_epoch import OffsetForLeaderEpochHandler
from kafkatwist.protocol.apis import OFFSET_FOR_LEADER_EPOCH, requestType
from kafkatwist.protocol.bounds import checkBody
from kafkatwist.protocol.codec import (
    decodeRequest,
    decodeResponseFrame,
    encodeRequestFrame,
    encodeResponseFrame,
)
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.header import parseRequestHeader
from tests.log.batches import makeBatch

NOW = 1_700_000_000_000


@pytest.fixture
def handler():
    logManager = MemoryLogManager()
    logManager.createTopic("t", 1, {})
    log = logManager.getLog("t", 0)
    for epoch in (0, 0, 2, 5):
        log.leaderEpoch = epoch
        log.append(makeBatch(2), NOW)
    broker = SimpleNamespace(logManager=logManager, authorizer=None)
    return OffsetForLeaderEpochHandler(broker), log


def ask(handler, version, partitions, topic="t"):
    cls = requestType(OFFSET_FOR_LEADER_EPOCH, version)
    Topic = nested(cls, "OffsetForLeaderTopic")
    Partition = nested(cls, "OffsetForLeaderPartition")
    entity = make(
        cls,
        replica_id=-1,
        topics=(
            make(Topic, topic=topic, partitions=tuple(
                make(Partition, partition=p, current_leader_epoch=current, leader_epoch=epoch)
                for p, current, epoch in partitions
            )),
        ),
    )
    frame = encodeRequestFrame(OFFSET_FOR_LEADER_EPOCH, version, 7, "test", entity)[4:]
    header = parseRequestHeader(frame)
    checkBody(cls, frame, header.bodyOffset)
    request = decodeRequest(OFFSET_FOR_LEADER_EPOCH, version, frame, header.bodyOffset)
    context = SimpleNamespace(apiVersion=version)
    response = handler.handle(context, request)
    data = b"".join(
        bytes(c) for c in encodeResponseFrame(OFFSET_FOR_LEADER_EPOCH, version, 7, response)
    )[4:]
    body = decodeResponseFrame(OFFSET_FOR_LEADER_EPOCH, version, data)[1]
    return [
        (p.error_code, getattr(p, "leader_epoch", None), p.end_offset)
        for t in body.topics
        for p in t.partitions
    ]


@pytest.mark.parametrize("version", range(5))
def test_every_version(handler, version):
    handler, log = handler
    answers = ask(handler, version, [(0, -1, 5), (0, -1, 2), (0, -1, 1), (0, -1, 9), (3, -1, 0)])
    epoch = (lambda e: e) if version >= 1 else (lambda e: None)
    assert answers == [
        (ErrorCode.none, epoch(5), 8),  # the latest: the log end
        (ErrorCode.none, epoch(2), 6),
        (ErrorCode.none, epoch(0), 4),  # unknown epoch: the one below
        (ErrorCode.none, epoch(-1), -1),  # newer than any
        (ErrorCode.unknown_topic_or_partition, epoch(-1), -1),
    ]


def test_fencing(handler):
    handler, log = handler
    log.leaderEpoch = 5
    assert ask(handler, 4, [(0, 4, 5)]) == [(ErrorCode.fenced_leader_epoch, -1, -1)]
    assert ask(handler, 4, [(0, 6, 5)]) == [(ErrorCode.unknown_leader_epoch, -1, -1)]
    assert ask(handler, 4, [(0, 5, 5)]) == [(ErrorCode.none, 5, 8)]
    log.isLeader = False
    assert ask(handler, 4, [(0, 5, 5)]) == [(ErrorCode.not_leader_or_follower, -1, -1)]
    assert ask(handler, 0, [(0, -1, 5)]) == [(ErrorCode.not_leader_or_follower, None, -1)]
