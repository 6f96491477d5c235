"""
The transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn
(26), WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65) and ListTransactions (66).  InitProducerId is in
L{kafkatwist.plugins.init_producer_id}.

Each handler checks what only the broker knows (authorization, whether a
topic exists) and leaves the transaction rules to the transaction
coordinator (C{broker.transactionCoordinator}), which answers through a
L{Reply} once its record is in C{__transaction_state}; TxnOffsetCommit
goes to the group coordinator, once the transaction coordinator confirmed
that the group's partition is in the transaction.

Transaction protocol v1 is served: the versions before KIP-890 part 2
(EndTxn v5, AddPartitionsToTxn's batched v4+ broker requests are not
advertised).  The coordinator speaks in Kafka's current errors; older
versions get what they know: PRODUCER_FENCED is INVALID_PRODUCER_EPOCH
before AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2 (as Kafka's
C{KafkaApis} maps it).
"""

from __future__ import annotations

import datetime
import threading

from kafkatwist.coordinator.formats import OFFSETS_TOPIC, partitionFor
from kafkatwist.coordinator.offsets import OffsetAndMetadata
from kafkatwist.coordinator.reply import Reply
from kafkatwist.coordinator.txnoffsets import TxnCommitRequest
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
    responseType,
)
from kafkatwist.protocol.entities import NO_THROTTLE, make, ms, nested
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from kafkatwist.coordinator.transaction.coordinator import TxnDescription

__all__ = [
    "AddOffsetsToTxnHandler",
    "AddPartitionsToTxnHandler",
    "DescribeProducersHandler",
    "DescribeTransactionsHandler",
    "EndTxnHandler",
    "ListTransactionsHandler",
    "TxnOffsetCommitHandler",
    "WriteTxnMarkersHandler",
    "fencedError",
]

E = ErrorCode
TXN_ID = ResourceType.TRANSACTIONAL_ID


def _epochMs(value: int) -> datetime.datetime:
    """
    A non-nullable C{datetime_i64} field's value, -1 included (kio writes
    C{round(timestamp * 1000)}).
    """
    return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)


def fencedError(error: ErrorCode, version: int, since: int) -> ErrorCode:
    """
    PRODUCER_FENCED for versions that know it (C{since} on), else
    INVALID_PRODUCER_EPOCH.
    """
    if error == E.producer_fenced and version < since:
        return E.invalid_producer_epoch
    return error


class _TxnHandler(Handler):
    """
    Base of the handlers that need the transaction coordinator.
    """

    @property
    def coordinator(self):
        return self.broker.transactionCoordinator

    def partitionExists(self, topic: str, partition: int) -> bool:
        logManager = self.broker.logManager
        return logManager is not None and logManager.getLog(topic, partition) is not None


class AddPartitionsToTxnHandler(_TxnHandler):
    """
    AddPartitionsToTxn v0-3, from producers: a partition whose topic is
    unknown or not writable fails, and then the others are not attempted
    (OPERATION_NOT_ATTEMPTED); otherwise the coordinator's one answer goes
    to every partition.

    v4-5 are the brokers' batched form (KIP-890 part 1), CLUSTER_ACTION
    only: several transactions per request, each either added to or, with
    C{verify_only}, checked (a partition not in the transaction is
    TRANSACTION_ABORTABLE in v5, INVALID_TXN_STATE before).
    """

    apiKey = ADD_PARTITIONS_TO_TXN
    minVersion = 0
    maxVersion = 5

    def handle(self, context, request):
        version = context.apiVersion
        if version >= 4:
            return self._batched(context, request, version)
        cls = responseType(ADD_PARTITIONS_TO_TXN, version)
        TopicResult = nested(cls, "AddPartitionsToTxnTopicResult")
        PartitionResult = nested(cls, "AddPartitionsToTxnPartitionResult")
        transactionalId = request.v3_and_below_transactional_id
        wanted = list(
            dict.fromkeys(
                (t.name, p) for t in request.v3_and_below_topics for p in t.partitions
            )
        )

        def response(errors: dict):
            byTopic: dict[str, list] = {}
            for (topic, partition) in wanted:
                byTopic.setdefault(topic, []).append(
                    PartitionResult(
                        partition_index=partition,
                        partition_error_code=fencedError(errors[(topic, partition)], version, 2),
                    )
                )
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                results_by_topic_v3_and_below=tuple(
                    TopicResult(name=name, results_by_partition=tuple(parts))
                    for name, parts in byTopic.items()
                ),
            )

        def everyone(error):
            return response(dict.fromkeys(wanted, error))

        coordinator = self.coordinator
        if not transactionalId:
            return everyone(E.invalid_request)
        if not self.allowed(context, AclOperation.WRITE, TXN_ID, transactionalId):
            return everyone(E.transactional_id_authorization_failed)
        failed = {}
        for topic, partition in wanted:
            if not self.allowed(context, AclOperation.WRITE, ResourceType.TOPIC, topic):
                failed[(topic, partition)] = E.topic_authorization_failed
            elif not self.partitionExists(topic, partition):
                failed[(topic, partition)] = E.unknown_topic_or_partition
        if failed:
            return response(
                {tp: failed.get(tp, E.operation_not_attempted) for tp in wanted}
            )
        if coordinator is None:
            return everyone(E.coordinator_not_available)
        reply = Reply(context, everyone)
        coordinator.addPartitions(
            reply, transactionalId, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted,
        )
        return reply.response()


    def _batched(self, context, request, version):
        cls = responseType(ADD_PARTITIONS_TO_TXN, version)
        Result = nested(cls, "AddPartitionsToTxnResult")
        TopicResult = nested(cls, "AddPartitionsToTxnTopicResult")
        PartitionResult = nested(cls, "AddPartitionsToTxnPartitionResult")
        transactions = list(request.transactions)
        results: list[dict] = [{} for _ in transactions]

        def response(_=None, error=E.none):
            out = []
            for txn, found in zip(transactions, results):
                byTopic: dict[str, list] = {}
                for t in txn.topics:
                    for p in t.partitions:
                        code = found.get((t.name, p), E.none)
                        if code == E.transaction_abortable and version < 5:
                            code = E.invalid_txn_state
                        byTopic.setdefault(t.name, []).append(
                            PartitionResult(partition_index=p, partition_error_code=code)
                        )
                out.append(
                    Result(
                        transactional_id=txn.transactional_id,
                        topic_results=tuple(
                            TopicResult(name=n, results_by_partition=tuple(ps))
                            for n, ps in byTopic.items()
                        ),
                    )
                )
            return make(
                cls, throttle_time=NO_THROTTLE, error_code=error,
                results_by_transaction=tuple(out) if error == E.none else (),
            )

        if not self.allowed(context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
            return response(error=E.cluster_authorization_failed)
        coordinator = self.coordinator
        if coordinator is None:
            for txn, found in zip(transactions, results):
                found.update(
                    ((t.name, p), E.coordinator_not_available)
                    for t in txn.topics for p in t.partitions
                )
            return response()
        reply = Reply(context, response)
        lock = threading.Lock()
        waiting = [len(transactions) + 1]

        def done() -> None:
            with lock:
                waiting[0] -= 1
                last = waiting[0] == 0
            if last:
                reply(None)

        for txn, found in zip(transactions, results):
            partitions = list(dict.fromkeys((t.name, p) for t in txn.topics for p in t.partitions))

            def answered(result, found=found, partitions=partitions):
                if isinstance(result, dict):
                    found.update(result)
                else:
                    error = result if isinstance(result, ErrorCode) else E.unknown_server_error
                    found.update(dict.fromkeys(partitions, error))
                done()

            unknown = [tp for tp in partitions if not self.partitionExists(*tp)]
            if not txn.verify_only and unknown:
                found.update(
                    (tp, E.unknown_topic_or_partition if tp in unknown else E.operation_not_attempted)
                    for tp in partitions
                )
                done()
            elif txn.verify_only:
                # Another broker's question: answered by this coordinator.
                coordinator.verifyPartitions(
                    answered, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                    partitions, forward=False,
                )
            else:
                coordinator.addPartitions(
                    answered, txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions
                )
        done()
        return reply.response()


class AddOffsetsToTxnHandler(_TxnHandler):
    """
    AddOffsetsToTxn v0-4: adds the group's C{__consumer_offsets} partition
    to the transaction (the TxnOffsetCommit that follows writes there).
    """

    apiKey = ADD_OFFSETS_TO_TXN
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(ADD_OFFSETS_TO_TXN, version)

        def response(error):
            return make(cls, throttle_time=NO_THROTTLE, error_code=fencedError(error, version, 2))

        transactionalId = request.transactional_id
        if not transactionalId:
            return response(E.invalid_request)
        if not self.allowed(context, AclOperation.WRITE, TXN_ID, transactionalId):
            return response(E.transactional_id_authorization_failed)
        if not self.allowed(context, AclOperation.READ, ResourceType.GROUP, request.group_id):
            return response(E.group_authorization_failed)
        coordinator = self.coordinator
        groups = self.broker.groupCoordinator
        if coordinator is None or groups is None:
            return response(E.coordinator_not_available)
        partition = partitionFor(request.group_id, groups.log.numPartitions)
        reply = Reply(context, response)
        coordinator.addPartitions(
            reply, transactionalId, request.producer_id, request.producer_epoch,
            [(OFFSETS_TOPIC, partition)],
        )
        return reply.response()


class EndTxnHandler(_TxnHandler):
    """
    EndTxn v0-4: commit or abort.  Answered once the coordinator has
    written PrepareCommit or PrepareAbort; the markers follow.
    """

    apiKey = END_TXN
    minVersion = 0
    maxVersion = 4

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(END_TXN, version)

        def response(error):
            return make(cls, throttle_time=NO_THROTTLE, error_code=fencedError(error, version, 2))

        transactionalId = request.transactional_id
        if not transactionalId:
            return response(E.invalid_request)
        if not self.allowed(context, AclOperation.WRITE, TXN_ID, transactionalId):
            return response(E.transactional_id_authorization_failed)
        coordinator = self.coordinator
        if coordinator is None:
            return response(E.coordinator_not_available)
        reply = Reply(context, response)
        coordinator.endTxn(
            reply, transactionalId, request.producer_id, request.producer_epoch,
            bool(request.committed),
        )
        return reply.response()


class WriteTxnMarkersHandler(_TxnHandler):
    """
    WriteTxnMarkers v0-1: write markers into partitions this broker leads
    (all of them).  The coordinator writes its own markers in-process
    through the same writer; this is for other coordinators and for an
    operator aborting a hanging transaction (C{kafka-transactions.sh
    abort}).  Needs CLUSTER_ACTION (or ALTER) on the cluster.
    """

    apiKey = WRITE_TXN_MARKERS
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(WRITE_TXN_MARKERS, context.apiVersion)
        MarkerResult = nested(cls, "WritableTxnMarkerResult")
        TopicResult = nested(cls, "WritableTxnMarkerTopicResult")
        PartitionResult = nested(cls, "WritableTxnMarkerPartitionResult")
        markers = list(request.markers)
        allowed = self.allowed(
            context, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
        ) or self.allowed(context, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        coordinator = self.coordinator
        writer = getattr(coordinator, "markerWriter", None)
        results: list[dict] = [{} for _ in markers]

        def response(_=None):
            return make(
                cls,
                markers=tuple(
                    MarkerResult(
                        producer_id=marker.producer_id,
                        topics=tuple(
                            TopicResult(
                                name=topic.name,
                                partitions=tuple(
                                    PartitionResult(
                                        partition_index=p,
                                        error_code=result.get((topic.name, p), E.none),
                                    )
                                    for p in topic.partition_indexes
                                ),
                            )
                            for topic in marker.topics
                        ),
                    )
                    for marker, result in zip(markers, results)
                ),
            )

        if not allowed or writer is None:
            error = E.cluster_authorization_failed if not allowed else E.not_leader_or_follower
            for marker, result in zip(markers, results):
                for topic in marker.topics:
                    for p in topic.partition_indexes:
                        result[(topic.name, p)] = error
            return response()
        reply = Reply(context, response)
        # Markers into __consumer_offsets are answered on the group
        # coordinator's thread.
        lock = threading.Lock()
        waiting = [len(markers) + 1]

        def done(_=None):
            with lock:
                waiting[0] -= 1
                last = waiting[0] == 0
            if last:
                reply(None)

        for marker, result in zip(markers, results):
            partitions = [(t.name, p) for t in marker.topics for p in t.partition_indexes]

            def written(found, result=result):
                result.update(found)
                done()

            writer.write(
                marker.producer_id, marker.producer_epoch, bool(marker.transaction_result),
                marker.coordinator_epoch, partitions, written,
            )
        done()
        return reply.response()


class TxnOffsetCommitHandler(_TxnHandler):
    """
    TxnOffsetCommit v0-4: offsets committed inside the transaction, after
    AddOffsetsToTxn.  The transaction coordinator first confirms that the
    group's C{__consumer_offsets} partition is in the transaction (else
    INVALID_TXN_STATE; a fenced producer gets INVALID_PRODUCER_EPOCH); the
    group coordinator then checks the group (v3+ member and generation)
    and writes them, pending until the transaction ends.  Before v2,
    COORDINATOR_LOAD_IN_PROGRESS is COORDINATOR_NOT_AVAILABLE (Kafka's
    mapping).
    """

    apiKey = TXN_OFFSET_COMMIT
    minVersion = 0
    maxVersion = 4

    #: what a failed verification means for the offsets
    _VERIFY_ERRORS = {
        E.transaction_abortable: E.invalid_txn_state,
        E.producer_fenced: E.invalid_producer_epoch,
        E.concurrent_transactions: E.coordinator_load_in_progress,
        E.not_coordinator: E.coordinator_not_available,
    }

    def handle(self, context, request):
        version = context.apiVersion
        cls = responseType(TXN_OFFSET_COMMIT, version)
        Topic = nested(cls, "TxnOffsetCommitResponseTopic")
        Partition = nested(cls, "TxnOffsetCommitResponsePartition")
        order = list(
            dict.fromkeys((t.name, p.partition_index) for t in request.topics for p in t.partitions)
        )
        errors: dict = {}

        def response(result=None):
            if isinstance(result, dict):
                errors.update(result)
            elif result is not None:
                errors.update(dict.fromkeys(order, result))
            byTopic: dict[str, list] = {}
            for tp in order:
                error = errors.get(tp, E.none)
                if version < 2 and error == E.coordinator_load_in_progress:
                    error = E.coordinator_not_available
                byTopic.setdefault(tp[0], []).append(
                    Partition(partition_index=tp[1], error_code=error)
                )
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                topics=tuple(
                    Topic(name=name, partitions=tuple(parts)) for name, parts in byTopic.items()
                ),
            )

        transactionalId = request.transactional_id
        groupId = request.group_id
        if not self.allowed(context, AclOperation.WRITE, TXN_ID, transactionalId or ""):
            return response(E.transactional_id_authorization_failed)
        if not self.allowed(context, AclOperation.READ, ResourceType.GROUP, groupId):
            return response(E.group_authorization_failed)
        groups = self.broker.groupCoordinator
        coordinator = self.coordinator
        offsets = {}
        for topic in request.topics:
            readable = self.allowed(context, AclOperation.READ, ResourceType.TOPIC, topic.name)
            for p in topic.partitions:
                tp = (topic.name, p.partition_index)
                if not readable:
                    errors[tp] = E.topic_authorization_failed
                elif not self.partitionExists(*tp):
                    errors[tp] = E.unknown_topic_or_partition
                else:
                    offsets[tp] = OffsetAndMetadata(
                        offset=p.committed_offset,
                        leaderEpoch=getattr(p, "committed_leader_epoch", -1),
                        metadata=p.committed_metadata or "",
                    )
        if not offsets:
            return response()
        if groups is None or coordinator is None:
            return response(dict.fromkeys(offsets, E.coordinator_not_available))
        commit = TxnCommitRequest(
            groupId=groupId,
            producerId=request.producer_id,
            producerEpoch=request.producer_epoch,
            offsets=offsets,
            generationId=getattr(request, "generation_id", -1),
            memberId=getattr(request, "member_id", "") or "",
            groupInstanceId=getattr(request, "group_instance_id", None),
        )
        reply = Reply(context, response)
        partition = (OFFSETS_TOPIC, partitionFor(groupId, groups.log.numPartitions))

        def verified(result) -> None:
            error = result.get(partition, E.none) if isinstance(result, dict) else result
            if not isinstance(error, ErrorCode):
                error = E.coordinator_not_available
            if error != E.none:
                reply(dict.fromkeys(offsets, self._VERIFY_ERRORS.get(error, error)))
            else:
                groups.commitTransactionalOffsets(reply, commit)

        coordinator.verifyPartitions(
            verified, transactionalId, request.producer_id, request.producer_epoch, [partition]
        )
        return reply.response()


class DescribeProducersHandler(_TxnHandler):
    """
    DescribeProducers v0 (KIP-664): the producers a partition knows, with
    their open transaction's first offset -- what an operator needs to find
    (and abort, with WriteTxnMarkers) a hanging transaction.  Needs READ
    on the topic.
    """

    apiKey = DESCRIBE_PRODUCERS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(DESCRIBE_PRODUCERS, context.apiVersion)
        TopicResponse = nested(cls, "TopicResponse")
        PartitionResponse = nested(cls, "PartitionResponse")
        ProducerState = nested(cls, "ProducerState")
        logManager = self.broker.logManager
        topics = []
        for topic in request.topics:
            readable = self.allowed(context, AclOperation.READ, ResourceType.TOPIC, topic.name)
            partitions = []
            for index in topic.partition_indexes:
                log = logManager.getLog(topic.name, index) if logManager and readable else None
                if log is None:
                    error = (
                        E.topic_authorization_failed if not readable
                        else E.unknown_topic_or_partition
                    )
                    partitions.append(
                        PartitionResponse(
                            partition_index=index, error_code=error, error_message=None,
                            active_producers=(),
                        )
                    )
                    continue
                partitions.append(
                    PartitionResponse(
                        partition_index=index,
                        error_code=E.none,
                        error_message=None,
                        active_producers=tuple(
                            ProducerState(
                                producer_id=entry.producerId,
                                producer_epoch=entry.epoch,
                                last_sequence=entry.lastSeq,
                                last_timestamp=entry.lastTimestamp,
                                coordinator_epoch=entry.coordinatorEpoch,
                                current_txn_start_offset=entry.currentTxnFirstOffset,
                            )
                            for entry in log.activeProducers()
                        ),
                    )
                )
            topics.append(TopicResponse(name=topic.name, partitions=tuple(partitions)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


class DescribeTransactionsHandler(_TxnHandler):
    """
    DescribeTransactions v0 (KIP-664).  Ids the principal may not DESCRIBE
    answer TRANSACTIONAL_ID_AUTHORIZATION_FAILED; topics it may not
    DESCRIBE are left out.
    """

    apiKey = DESCRIBE_TRANSACTIONS
    minVersion = 0
    maxVersion = 0

    def handle(self, context, request):
        cls = responseType(DESCRIBE_TRANSACTIONS, context.apiVersion)
        State = nested(cls, "TransactionState")
        TopicData = nested(cls, "TopicData")
        ids = list(request.transactional_ids)
        refused = {}
        for transactionalId in ids:
            if not transactionalId:
                refused[transactionalId] = E.invalid_request
            elif not self.allowed(context, AclOperation.DESCRIBE, TXN_ID, transactionalId):
                refused[transactionalId] = E.transactional_id_authorization_failed
        asked = [i for i in dict.fromkeys(ids) if i not in refused]

        def state(transactionalId, error, found=None):
            if found is None or error != E.none:
                # Kafka's message defaults (zeros) beside an error.
                return State(
                    error_code=error, transactional_id=transactionalId, transaction_state="",
                    transaction_timeout=ms(0), transaction_start_time=_epochMs(0),
                    producer_id=0, producer_epoch=0, topics=(),
                )
            byTopic: dict[str, list] = {}
            for topic, partition in sorted(found.partitions):
                if self.allowed(context, AclOperation.DESCRIBE, ResourceType.TOPIC, topic):
                    byTopic.setdefault(topic, []).append(partition)
            return State(
                error_code=E.none,
                transactional_id=transactionalId,
                transaction_state=found.state,
                transaction_timeout=ms(found.timeoutMs),
                transaction_start_time=_epochMs(found.startTimestampMs),
                producer_id=found.producerId,
                producer_epoch=found.producerEpoch,
                topics=tuple(TopicData(topic=t, partitions=tuple(p)) for t, p in byTopic.items()),
            )

        def response(descriptions):
            described = {d.transactionalId: d for d in descriptions}
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                transaction_states=tuple(
                    state(i, refused[i]) if i in refused
                    else state(i, described[i].errorCode, described[i])
                    for i in ids
                ),
            )

        coordinator = self.coordinator
        reply = Reply(context, response)
        if coordinator is None:
            reply([TxnDescription(i, E.coordinator_not_available) for i in asked])
        else:
            coordinator.describe(reply, asked)
        return reply.response()


class ListTransactionsHandler(_TxnHandler):
    """
    ListTransactions v0-1 (KIP-664; v1 adds the duration filter).  Only
    ids the principal may DESCRIBE are listed.
    """

    apiKey = LIST_TRANSACTIONS
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(LIST_TRANSACTIONS, context.apiVersion)
        State = nested(cls, "TransactionState")

        def response(result):
            error, unknown, listed = result
            return make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=error,
                unknown_state_filters=tuple(unknown),
                transaction_states=tuple(
                    State(
                        transactional_id=t.transactionalId,
                        producer_id=t.producerId,
                        transaction_state=t.state,
                    )
                    for t in listed
                    if self.allowed(context, AclOperation.DESCRIBE, TXN_ID, t.transactionalId)
                ),
            )

        coordinator = self.coordinator
        reply = Reply(context, response)
        if coordinator is None:
            reply((E.coordinator_not_available, (), ()))
        else:
            coordinator.listTransactions(
                reply, request.state_filters, request.producer_id_filters,
                int(getattr(request, "duration_filter", -1)),
            )
        return reply.response()


addPartitionsToTxn = HandlerPlugin(
    "builtin.add_partitions_to_txn", ADD_PARTITIONS_TO_TXN, AddPartitionsToTxnHandler, priority=0
)
addOffsetsToTxn = HandlerPlugin(
    "builtin.add_offsets_to_txn", ADD_OFFSETS_TO_TXN, AddOffsetsToTxnHandler, priority=0
)
endTxn = HandlerPlugin("builtin.end_txn", END_TXN, EndTxnHandler, priority=0)
writeTxnMarkers = HandlerPlugin(
    "builtin.write_txn_markers", WRITE_TXN_MARKERS, WriteTxnMarkersHandler, priority=0
)
txnOffsetCommit = HandlerPlugin(
    "builtin.txn_offset_commit", TXN_OFFSET_COMMIT, TxnOffsetCommitHandler, priority=0
)
describeProducers = HandlerPlugin(
    "builtin.describe_producers", DESCRIBE_PRODUCERS, DescribeProducersHandler, priority=0
)
describeTransactions = HandlerPlugin(
    "builtin.describe_transactions", DESCRIBE_TRANSACTIONS, DescribeTransactionsHandler,
    priority=0,
)
listTransactions = HandlerPlugin(
    "builtin.list_transactions", LIST_TRANSACTIONS, ListTransactionsHandler, priority=0
)
