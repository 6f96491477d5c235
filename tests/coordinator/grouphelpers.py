"""
The group and offset handlers driven in process: fake services with a real group
coordinator on a fake clock, requests and answers through the wire codec, and the join,
sync, commit and offset fetch several test modules send.
"""

from __future__ import annotations

import datetime
from types import SimpleNamespace

from twisted.internet import task
from twisted.internet.defer import Deferred

from kafkatwist.config import Listener
from kafkatwist.coordinator import GroupCoordinatorService, encodeSubscription
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins import group_offsets, groups
from kafkatwist.protocol.apis import requestType
from kafkatwist.protocol.codec import (
    decodeRequest,
    decodeResponseFrame,
    encodeRequestFrame,
    encodeResponseFrame,
)
from kafkatwist.protocol.entities import make, nested
from kafkatwist.protocol.header import parseRequestHeader
from tests.coordinator.helpers import memoryLog
from tests.fakeservices import FakeServices


E = ErrorCode
MS = datetime.timedelta(milliseconds=1)

HANDLERS = {
    10: groups.FindCoordinatorHandler,
    11: groups.JoinGroupHandler,
    12: groups.HeartbeatHandler,
    13: groups.LeaveGroupHandler,
    14: groups.SyncGroupHandler,
    15: groups.DescribeGroupsHandler,
    16: groups.ListGroupsHandler,
    42: groups.DeleteGroupsHandler,
    8: group_offsets.OffsetCommitHandler,
    9: group_offsets.OffsetFetchHandler,
    47: group_offsets.OffsetDeleteHandler,
}


class GroupBroker(FakeServices):
    """
    The shared fake services with a real group coordinator on a fake clock,
    and a request driver (L{call}) for the group handlers.
    """

    def __init__(self, coordinator=True, settings=None, **overrides) -> None:
        fakeClock = task.Clock()
        fakeClock.advance(1_700_000_000)
        super().__init__(
            {"node.id": 7, **(settings or {})},
            fakeClock=fakeClock,
            groupCoordinator=(
                GroupCoordinatorService(fakeClock, memoryLog(), initialRebalanceDelayMs=0)
                if coordinator
                else None
            ),
            # FindCoordinator only asks whether there is one.
            transactionCoordinator=object() if coordinator else None,
            advertisedListeners=[
                Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"),
                Listener("INTERNAL", "10.0.0.1", 9093, "PLAINTEXT"),
            ],
            **overrides,
        )
        self.logManager.createTopic("t1", 3, {})
        self.logManager.createTopic("t2", 1, {})
        self.handlers = {key: cls(self) for key, cls in HANDLERS.items()}

    def call(self, apiKey, version, listener="PLAINTEXT", clientId="cli", **fields):
        """
        Send a request through the codec to the handler.

        @return: the decoded response, or a L{Deferred} firing with it.
        """
        entity = make(requestType(apiKey, version), **fields)
        frame = encodeRequestFrame(apiKey, version, 1, clientId, entity)[4:]
        header = parseRequestHeader(frame)
        request = decodeRequest(apiKey, version, frame, header.bodyOffset)
        context = SimpleNamespace(
            apiKey=apiKey,
            apiVersion=version,
            listenerName=listener,
            clientId=clientId,
            clientAddress=("127.0.0.9", 40000),
            correlationId=1,
            respondLater=PendingResponse,
        )
        handler = self.handlers[apiKey]
        assert handler.minVersion <= version <= handler.maxVersion
        result = handler.handle(context, request)
        if isinstance(result, Deferred):
            return result.addCallback(lambda r: wire(apiKey, version, r))
        return wire(apiKey, version, result)


class PendingResponse:
    """
    L{IPendingResponse} for a test without threads: C{complete} fires the
    Deferred at once.
    """

    def __init__(self) -> None:
        self.deferred = Deferred()
        self.completed = False

    def complete(self, result) -> None:
        assert not self.completed
        self.completed = True
        self.deferred.callback(result)


def wire(apiKey, version, response):
    data = b"".join(bytes(c) for c in encodeResponseFrame(apiKey, version, 1, response))[4:]
    _, decoded = decodeResponseFrame(apiKey, version, data)
    return decoded


def fired(d):
    """
    @return: a list that holds C{d}'s result once it fired (the result is
        passed on down the chain).
    """
    out = []

    def keep(value):
        out.append(value)
        return value

    d.addBoth(keep)
    return out


def result(d):
    if not isinstance(d, Deferred):
        # Answered at once (an error found before the coordinator).
        return d
    out = fired(d)
    assert out, "deferred has not fired"
    return out[0]


def req(cls_key, version, entityName, **fields):
    return make(nested(requestType(cls_key, version), entityName), **fields)


def protocols(key, version, *topics, name="roundrobin"):
    return (req(key, version, "JoinGroupRequestProtocol", name=name, metadata=encodeSubscription(list(topics))),)


def join(broker, version, memberId="", group="g", instance=None, session=10000, topics=("t1",)):
    return broker.call(
        11,
        version,
        group_id=group,
        session_timeout=session * MS,
        rebalance_timeout=30000 * MS,
        member_id=memberId,
        group_instance_id=instance,
        protocol_type="consumer",
        protocols=protocols(11, version, *topics),
        reason=None,
    )


def joinAndSync(broker, joinVersion=9, syncVersion=5, group="g"):
    """
    One member joins (v4+: twice, the second time with its id) and syncs.

    @return: (member id, generation).
    """
    r = result(join(broker, joinVersion, group=group))
    if r.error_code == E.member_id_required:
        r = result(join(broker, joinVersion, memberId=r.member_id, group=group))
    assert r.error_code == E.none
    s = result(sync(broker, syncVersion, r.member_id, r.generation_id, {r.member_id: b"A"}, group=group))
    assert s.error_code == E.none and s.assignment == b"A"
    return r.member_id, r.generation_id


def sync(broker, version, memberId, generation, assignments=None, group="g", ptype="consumer", pname="roundrobin"):
    return broker.call(
        14,
        version,
        group_id=group,
        generation_id=generation,
        member_id=memberId,
        group_instance_id=None,
        protocol_type=ptype,
        protocol_name=pname,
        assignments=tuple(
            req(14, version, "SyncGroupRequestAssignment", member_id=m, assignment=a)
            for m, a in (assignments or {}).items()
        ),
    )


def commit(broker, version, parts, group="g", generation=-1, member="", retention=-1):
    Topic = nested(requestType(8, version), "OffsetCommitRequestTopic")
    Partition = nested(requestType(8, version), "OffsetCommitRequestPartition")
    byTopic = {}
    for topic, partition, offset, metadata in parts:
        byTopic.setdefault(topic, []).append(
            make(
                Partition,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=3,
                committed_metadata=metadata,
                commit_timestamp=-1,
            )
        )
    r = broker.call(
        8,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        group_instance_id=None,
        retention_time=retention * MS,
        topics=tuple(make(Topic, name=t, partitions=tuple(ps)) for t, ps in byTopic.items()),
    )
    return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}


def fetchV7(broker, group="g", topics=None, version=7):
    Topic = nested(requestType(9, version), "OffsetFetchRequestTopic")
    r = broker.call(
        9,
        version,
        group_id=group,
        require_stable=False,
        topics=None
        if topics is None
        else tuple(make(Topic, name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()),
    )
    return r


def offsetsOf(topics):
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in topics
        for p in t.partitions
    }
