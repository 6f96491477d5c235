"""
What the console changes, each as the request a client would send, handed
to the broker's own handler (L{kafkatwist.console.local}): so each action is
validated, authorized (the same ACLs) and carried out exactly as
CreateTopics, CreatePartitions, IncrementalAlterConfigs, DeleteTopics,
Produce, ListOffsets + OffsetCommit (what C{kafka-consumer-groups.sh
--reset-offsets} sends) and DeleteGroups from a client are.

Each returns a Deferred fired with a one-line message saying what was done,
or failed with L{ConsoleHTTPError}.
"""

from __future__ import annotations

import random

from twisted.internet.defer import inlineCallbacks

from kafkatwist.console.source import TOPIC_RESOURCE, ConsoleHTTPError, errorFor
from kafkatwist.errors import ErrorCode
from kafkatwist.protocol import apis
from kafkatwist.protocol.entities import make, ms, nested
from kafkatwist.protocol.records import Record, buildBatch

TIMEOUT_MS = 30_000
EARLIEST, LATEST = -2, -1
#: IncrementalAlterConfigs operations
SET, DELETE = 0, 1
#: the states of a group with no active members (offsets may be reset)
INACTIVE = frozenset({"Empty", "Dead"})


def _check(code, message, what: str) -> None:
    if code != ErrorCode.none:
        error = errorFor(code, what)
        if message and error.status == 409:
            error.message = f"{error.message}: {message}"
        raise error


def parsePairs(text: str, what: str) -> list[tuple[str, str]]:
    """
    C{key=value} lines (blank lines ignored).
    """
    pairs = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ConsoleHTTPError(400, f"{what}: {line.strip()!r} is not key=value")
        pairs.append((key.strip(), value))
    return pairs


class ConsoleActions:
    def __init__(self, source) -> None:
        self.source = source

    def call(self, context, apiKey, build):
        return self.source.call(context, apiKey, build)

    # -- topics ------------------------------------------------------------------

    @inlineCallbacks
    def createTopic(self, context, name: str, partitions: int, replicationFactor: int, configs):
        def build(version, cls):
            Topic = nested(cls, "CreatableTopic")
            Config = nested(cls, "CreatableTopicConfig")
            return make(
                cls,
                topics=(make(
                    Topic, name=name, num_partitions=partitions, replication_factor=replicationFactor,
                    assignments=(), configs=tuple(make(Config, name=k, value=v) for k, v in configs),
                ),),
                timeout=ms(TIMEOUT_MS),
                validate_only=False,
            )

        answer = yield self.call(context, apis.CREATE_TOPICS, build)
        result = answer.topics[0]
        _check(result.error_code, result.error_message, f"create topic {name}")
        return f"Topic {name} created with {result.num_partitions} partitions."

    @inlineCallbacks
    def addPartitions(self, context, name: str, count: int):
        def build(version, cls):
            Topic = nested(cls, "CreatePartitionsTopic")
            return make(
                cls,
                topics=(make(Topic, name=name, count=count, assignments=None),),
                timeout=ms(TIMEOUT_MS),
                validate_only=False,
            )

        answer = yield self.call(context, apis.CREATE_PARTITIONS, build)
        result = answer.results[0]
        _check(result.error_code, result.error_message, f"add partitions to {name}")
        return f"Topic {name} now has {count} partitions."

    @inlineCallbacks
    def alterConfig(self, context, name: str, key: str, value: str | None):
        """
        Set C{key} to C{value}, or back to its default when C{value} is None.
        """

        def build(version, cls):
            Resource = nested(cls, "AlterConfigsResource")
            Config = nested(cls, "AlterableConfig")
            op = DELETE if value is None else SET
            return make(
                cls,
                resources=(make(
                    Resource, resource_type=TOPIC_RESOURCE, resource_name=name,
                    configs=(make(Config, name=key, config_operation=op, value=value),),
                ),),
                validate_only=False,
            )

        answer = yield self.call(context, apis.INCREMENTAL_ALTER_CONFIGS, build)
        result = answer.responses[0]
        _check(result.error_code, result.error_message, f"change {key} of {name}")
        if value is None:
            return f"{key} of {name} is back to its default."
        return f"{key} of {name} set to {value}."

    @inlineCallbacks
    def deleteTopic(self, context, name: str):
        def build(version, cls):
            if version >= 6:
                State = nested(cls, "DeleteTopicState")
                return make(cls, topics=(make(State, name=name, topic_id=None),), timeout=ms(TIMEOUT_MS))
            return make(cls, topic_names=(name,), timeout=ms(TIMEOUT_MS))

        answer = yield self.call(context, apis.DELETE_TOPICS, build)
        result = answer.responses[0]
        _check(result.error_code, getattr(result, "error_message", None), f"delete topic {name}")
        return f"Topic {name} deleted."

    @inlineCallbacks
    def produce(self, context, name: str, partition: int | None, key: bytes | None, value: bytes | None,
                headers):
        if partition is None:
            meta = yield self.source.metadata(context, [name])
            topic = meta.topics[0] if meta.topics else None
            if topic is None or topic.error_code != ErrorCode.none:
                raise errorFor(topic.error_code if topic else ErrorCode.unknown_topic_or_partition, f"topic {name}")
            partition = random.randrange(len(topic.partitions)) if topic.partitions else 0
        batch = buildBatch([Record(key=key, value=value, headers=list(headers))])

        def build(version, cls):
            Topic = nested(cls, "TopicProduceData")
            Partition = nested(cls, "PartitionProduceData")
            return make(
                cls,
                transactional_id=None,
                acks=-1,
                timeout=ms(TIMEOUT_MS),
                topic_data=(make(Topic, name=name, partition_data=(Partition(index=partition, records=batch),)),),
            )

        answer = yield self.call(context, apis.PRODUCE, build)
        result = answer.responses[0].partition_responses[0]
        _check(result.error_code, getattr(result, "error_message", None), f"produce to {name}-{partition}")
        return f"Produced to {name} partition {partition} at offset {result.base_offset}."

    # -- groups ------------------------------------------------------------------

    @inlineCallbacks
    def _groupState(self, context, groupId: str):
        listed = yield self.source._listGroups(context)
        for g in listed.groups:
            if g.group_id == groupId:
                if g.group_type == "consumer":
                    described = yield self.source._describeConsumer(context, [groupId])
                else:
                    described = yield self.source._describeClassic(context, [groupId])
                d = described.groups[0]
                _check(d.error_code, None, f"group {groupId}")
                return d.group_state, len(d.members)
        return "Dead", 0

    @inlineCallbacks
    def listOffsets(self, context, targets: dict[tuple[str, int], int]):
        """
        ListOffsets for each (topic, partition) -> timestamp (-2 earliest,
        -1 latest): offset, or -1 when no record is that late.
        """
        byTopic: dict[str, list] = {}
        for (topic, partition), timestamp in targets.items():
            byTopic.setdefault(topic, []).append((partition, timestamp))

        def build(version, cls):
            Topic = nested(cls, "ListOffsetsTopic")
            Partition = nested(cls, "ListOffsetsPartition")
            return make(
                cls, replica_id=-1, isolation_level=0, timeout=ms(TIMEOUT_MS),
                topics=tuple(
                    make(Topic, name=topic, partitions=tuple(
                        make(Partition, partition_index=p, current_leader_epoch=-1, timestamp=ts,
                             max_num_offsets=1)
                        for p, ts in parts
                    ))
                    for topic, parts in byTopic.items()
                ),
            )

        answer = yield self.call(context, apis.LIST_OFFSETS, build)
        out = {}
        for topic in answer.topics:
            for p in topic.partitions:
                _check(p.error_code, None, f"offsets of {topic.name}-{p.partition_index}")
                offset = p.offset if hasattr(p, "offset") else (p.old_style_offsets or [-1])[0]
                out[(topic.name, p.partition_index)] = offset
        return out

    @inlineCallbacks
    def resetOffsets(self, context, groupId: str, strategy: str, topic: str | None, partition: int | None,
                     value: int | None):
        """
        C{kafka-consumer-groups.sh --reset-offsets}: for a group with no
        active members, commit new offsets for the partitions it has
        committed offsets for (of C{topic}, of C{partition}).

        @param strategy: C{earliest}, C{latest}, C{timestamp} (C{value}
            in ms) or C{exact} (C{value} is the offset, kept within the
            log's range).
        """
        if strategy not in ("earliest", "latest", "timestamp", "exact"):
            raise ConsoleHTTPError(400, f"unknown reset strategy {strategy!r}")
        if strategy in ("timestamp", "exact") and value is None:
            raise ConsoleHTTPError(400, f"a {strategy} reset needs a value")
        state, members = yield self._groupState(context, groupId)
        if members or state not in INACTIVE:
            raise ConsoleHTTPError(
                409, f"Group {groupId} has active members ({state}): stop its consumers before resetting offsets"
            )
        committed = yield self.source.committedOffsets(context, groupId)
        scope = sorted(
            tp for tp in committed
            if (topic is None or tp[0] == topic) and (partition is None or tp[1] == partition)
        )
        if topic is not None and partition is not None and (topic, partition) not in committed:
            scope = [(topic, partition)]
        if not scope:
            raise ConsoleHTTPError(400, f"Group {groupId} has no committed offsets to reset there")
        earliest = yield self.listOffsets(context, {tp: EARLIEST for tp in scope})
        latest = yield self.listOffsets(context, {tp: LATEST for tp in scope})
        if strategy == "earliest":
            targets = earliest
        elif strategy == "latest":
            targets = latest
        elif strategy == "timestamp":
            found = yield self.listOffsets(context, {tp: value for tp in scope})
            targets = {tp: (found[tp] if found[tp] >= 0 else latest[tp]) for tp in scope}
        else:
            targets = {tp: min(max(value, earliest[tp]), latest[tp]) for tp in scope}
        yield self.commit(context, groupId, targets)
        shown = ", ".join(f"{t}-{p} → {o}" for (t, p), o in sorted(targets.items()))
        return f"Offsets of {groupId} reset ({strategy}): {shown}."

    @inlineCallbacks
    def commit(self, context, groupId: str, offsets: dict[tuple[str, int], int]):
        byTopic: dict[str, list] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            byTopic.setdefault(topic, []).append((partition, offset))

        def build(version, cls):
            Topic = nested(cls, "OffsetCommitRequestTopic")
            Partition = nested(cls, "OffsetCommitRequestPartition")
            return make(
                cls, group_id=groupId, generation_id_or_member_epoch=-1, generation_id=-1, member_id="",
                group_instance_id=None, retention_time_ms=-1,
                topics=tuple(
                    make(Topic, name=topic, partitions=tuple(
                        make(Partition, partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                             committed_metadata="", commit_timestamp=-1)
                        for p, o in parts
                    ))
                    for topic, parts in byTopic.items()
                ),
            )

        answer = yield self.call(context, apis.OFFSET_COMMIT, build)
        for topic in answer.topics:
            for p in topic.partitions:
                _check(p.error_code, None, f"commit offsets of {groupId} for {topic.name}-{p.partition_index}")

    @inlineCallbacks
    def deleteGroup(self, context, groupId: str):
        answer = yield self.call(
            context, apis.DELETE_GROUPS, lambda version, cls: make(cls, groups_names=(groupId,))
        )
        result = answer.results[0]
        if result.error_code == ErrorCode.non_empty_group:
            raise ConsoleHTTPError(409, f"Group {groupId} has active members: it cannot be deleted")
        _check(result.error_code, None, f"delete group {groupId}")
        return f"Group {groupId} deleted."
