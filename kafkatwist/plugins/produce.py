"""
Produce: append each partition's record set to its log, opaque (the log
checks headers and CRCs and assigns offsets; records are never decoded
here), then wake long-poll fetches waiting on those partitions.

Clients may not append to the broker's internal topics
(C{__consumer_offsets}, C{__transaction_state}): INVALID_TOPIC_EXCEPTION,
as Kafka answers.

Message formats v0 and v1 (Produce v0-2 from clients before Kafka 0.11)
are converted to one record batch before the append, as Kafka's log
validator converts them (L{kafkatwist.protocol.convert.upConvert}); Produce
v3+ may carry only one record batch per partition (no zstd before v7): a
partition with a v0/v1 set, none, or two batches is answered INVALID_RECORD
whatever the acks, as Kafka checks it while reading the request
(L{refusedRecords}).

With an authorizer, each topic needs WRITE (TOPIC_AUTHORIZATION_FAILED for
its partitions otherwise); without one the check is a single comparison.

Idempotent producers: the log checks producer epochs and sequences and
refuses with INVALID_PRODUCER_EPOCH or OUT_OF_ORDER_SEQUENCE_NUMBER; a
retried batch comes back with ErrorCode.none and its original base offset.

Transactional producers: a request with transactional batches needs a
transactional id the principal may WRITE (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition).  The first
transactional batch of a producer in a partition is verified with the
transaction coordinator first (KIP-890 part 1): the partition takes a
verification guard, the coordinator confirms the partition is in the
producer's open transaction, and the append must still hold that guard
(a marker written meanwhile voids it).  A partition not in the transaction
gets INVALID_TXN_STATE, a fenced producer INVALID_PRODUCER_EPOCH, and a
coordinator that cannot tell now NOT_ENOUGH_REPLICAS (clients retry), as
Kafka answers Produce v10 and below.  Without transactional batches none of
this costs more than one bit test per partition.
"""

from __future__ import annotations

import struct
import time

from twisted.python.failure import Failure

from kafkatwist.coordinator.reply import Reply
from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import CloseConnection, Handler, HandlerPlugin
from kafkatwist.coordinator.internaltopics import INTERNAL_TOPICS
from kafkatwist.protocol.apis import PRODUCE, responseType
from kafkatwist.protocol.batch import (
    ATTRIBUTES_AT,
    BATCH_LENGTH_AT,
    CODEC_MASK,
    COMPRESSION_ZSTD,
    HEADER_SIZE,
    LOG_OVERHEAD,
    transactionalProducer,
)
from kafkatwist.protocol.codec import encodeResponseFrame
from kafkatwist.protocol.convert import legacyMagic, upConvert
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested, timestampMs
from kafkatwist.protocol.produce import (
    ProduceRequest,
    decodeProduceRequest,
    encodeProduceResponse,
    encodeSmallProduceAnswer,
    produceErrorCounts,
    readSmallProduce,
)
from kafkatwist.quota.manager import addThrottle
from kafkatwist.replication.appends import VALID_ACKS
from kafkatwist.quota.store import PRODUCER_BYTE_RATE
from kafkatwist.security.acl import AclOperation, ResourceType
from kafkatwist.security.checks import authorize

E = ErrorCode


WRITE = AclOperation.WRITE
TOPIC = ResourceType.TOPIC


class ProduceHandler(Handler):
    apiKey = PRODUCE
    # v0-2 carry message formats v0/v1 (converted); librdkafka before 2.10
    # also disables compression unless the minimum is 0 (librdkafka#4956).
    minVersion = 0
    maxVersion = 12

    #: the handler pool decodes requests for this handler with this: record
    #: sets stay views of the request frame, no entity is built.  A request
    #: decoded so is answered with the hand-encoded response; a kio entity
    #: (from a wrapping drop-in) with kio's.
    decodeRequest = staticmethod(decodeProduceRequest)

    def answerFrame(self, context, frame, offset):
        """
        The commonest Produce, answered straight from its frame (the handler
        pool calls this before it decodes anything): v9+, no transactional
        id, one topic of one partition whose records are record batches
        (magic 2) of a producer outside a transaction, acks 0, 1, or -1 on a
        partition that is not replicated.  The same checks and the same
        append as L{handle} (WRITE on the topic, internal topics, the
        append seam with its record walk and CRC, the bytes counted, the
        waiting fetches woken, producer_byte_rate), and the same answer,
        encoded in one piece.

        @return: C{NotImplemented} for any other request (nothing was done:
            L{handle} answers it); the response chunks (size prefix
            included); or C{None} for acks=0.
        """
        found = readSmallProduce(context.apiVersion, frame, offset)
        if found is None:
            return NotImplemented
        acks, name, index, start, end = found
        if name in INTERNAL_TOPICS or acks not in VALID_ACKS:
            # (acks outside -1/0/1: INVALID_REQUIRED_ACKS, answered by handle)
            return NotImplemented
        broker = self.broker
        authorizer = broker.authorizer
        if authorizer is not None and not authorize(authorizer, context, WRITE, TOPIC, name):
            answer = (index, ErrorCode.topic_authorization_failed, -1, -1, -1, None, ())
        else:
            logManager = broker.logManager
            log = logManager.getLog(name, index) if logManager is not None else None
            if log is None or (acks == -1 and log.replicated()):
                return NotImplemented
            try:
                info = broker.replicaManager.appendRecords(
                    log, memoryview(frame)[start:end], time.time_ns() // 1_000_000, acks
                )
            except KafkaError as e:
                broker.topicBytes.produceFailed(name, e.code)
                answer = (index, e.code, -1, -1, log.logStartOffset, e.message, e.recordErrors)
            else:
                if not info.duplicate:
                    broker.topicBytes.produced(name, info.validBytes, info.numRecords)
                    purgatory = broker.fetchPurgatory
                    watching = getattr(purgatory, "watching", None)
                    if watching is None or watching():
                        # After the acknowledgement is on its way (as handle).
                        broker.afterResponse(purgatory.checkAndComplete, (name, index))
                answer = None
        quotas = broker.clientQuotas
        if quotas.active(PRODUCER_BYTE_RATE):
            throttleMs = addThrottle(context, quotas.produced(context, getattr(context, "size", 0)))
        else:
            throttleMs = context.throttleMs
        if acks == 0:
            if answer is None:
                return None
            raise _closeForAcks0(self.broker, context, [(name, [answer])])
        if answer is None and acks == -1 and log.replicated():
            # Its leader asked for a follower in the ISR between the check
            # above and the append (the high watermark is pinned first):
            # the answer waits for the ISR, as the general path's does --
            # unless it is alone again by now, and nothing is to wait for.
            waiting = broker.replicaManager.waitingFor(name, index, log, info)
            if waiting is not None:
                return self._awaitAfterAppend(context, frame, offset, name, index, info, waiting)
        if answer is None:
            broker.requestErrors.count(PRODUCE, 0)
            return encodeSmallProduceAnswer(
                context.correlationId, name, index, info.firstOffset, info.logAppendTime,
                info.logStartOffset, throttleMs,
            )
        broker.requestErrors.count(PRODUCE, int(answer[1]))
        return encodeResponseFrame(
            PRODUCE, context.apiVersion, context.correlationId,
            encodeProduceResponse(context.apiVersion, [(name, [answer])], throttleMs),
        )

    def _awaitAfterAppend(self, context, frame, offset, name, index, info, waiting):
        """
        L{answerFrame}'s acks=-1 append found the partition replicated after
        all: wait for its ISR (L{_awaitReplicas}) and answer later.

        @return: the C{deferred} of C{context.respondLater()}.
        """
        version = context.apiVersion
        request = decodeProduceRequest(version, frame, offset)
        results = [(name, [
            (index, ErrorCode.none, info.firstOffset, info.logAppendTime, info.logStartOffset, None, ())
        ])]
        return self._awaitReplicas(context, request, version, results, [waiting], None)

    def handle(self, context, request):
        version = context.apiVersion
        broker = self.broker
        checkAndComplete = broker.fetchPurgatory.checkAndComplete

        def wake(key):
            # After the acknowledgement is on its way: reading and encoding
            # the fetches this append satisfies must not delay it.
            broker.afterResponse(checkAndComplete, key)

        account = broker.topicBytes.produced
        producer = None
        for topic in request.topic_data:
            for data in topic.partition_data:
                found = transactionalProducer(data.records)
                if found is not None:
                    producer = found
                    break
            if producer is not None:
                break
        if producer is not None:
            return self._transactional(context, request, producer, wake, account)
        return self._appendAll(context, request, version, wake, account)

    def _appendAll(self, context, request, version, wake, account, verified=None, pending=None):
        """
        Append every partition and build the answer.

        @param verified: C{(topic, partition)} -> a verification guard, or
            the error that partition gets instead of an append.
        @param pending: the request's L{IPendingResponse} if it was already
            made (the answer is then given to it, and C{None} returned).
        """
        logManager = self.broker.logManager
        replicaManager = self.broker.replicaManager
        authorizer = self.authorizer
        nowMs = int(time.time() * 1000)
        acks = request.acks
        # acks=all: partitions whose replicas must catch up before the answer.
        waits = [] if acks == -1 else None
        results = []
        for topic in request.topic_data:
            name = topic.name
            if authorizer is not None and not authorize(authorizer, context, WRITE, TOPIC, name):
                # Kafka's answer before it looks for the topic, so a refused
                # client does not learn which topics exist.
                partitions = [
                    (data.index, ErrorCode.topic_authorization_failed, -1, -1, -1, None, ())
                    for data in topic.partition_data
                ]
            elif name in INTERNAL_TOPICS and acks in VALID_ACKS:
                # (with other acks, INVALID_REQUIRED_ACKS first, as Kafka)
                # The broker's own state (committed offsets, transactions):
                # only the broker appends there, as in Kafka.  (A partition
                # the metadata does not know, and records Kafka refuses
                # while reading the request, first.)
                partitions = [
                    (data.index, ErrorCode.unknown_topic_or_partition, -1, -1, -1, None, ())
                    if not partitionKnown(self.broker, name, data.index)
                    else (data.index, refused, -1, -1, -1, None, ())
                    if (refused := refusedRecords(version, data.records)) is not None
                    else (data.index, ErrorCode.invalid_topic_exception, -1, -1, -1,
                          f"clients may not write to the internal topic {name}", ())
                    for data in topic.partition_data
                ]
            elif verified is None:
                partitions = [
                    self._append(
                        replicaManager, logManager, name, data, nowMs, acks, wake, account,
                        version, None, waits, self.broker,
                    )
                    for data in topic.partition_data
                ]
            else:
                partitions = []
                for data in topic.partition_data:
                    guard = verified.get((name, data.index))
                    if isinstance(guard, ErrorCode):
                        partitions.append((data.index, guard, -1, -1, -1, None, ()))
                    else:
                        partitions.append(
                            self._append(
                                replicaManager, logManager, name, data, nowMs, acks, wake,
                                account, version, guard, waits, self.broker,
                            )
                        )
            results.append((name, partitions))
        # producer_byte_rate counts the whole request, as Kafka's does (the
        # principal is asked for only when some quota sets it).
        quotas = self.broker.clientQuotas
        if quotas.active(PRODUCER_BYTE_RATE):
            throttleMs = addThrottle(context, quotas.produced(context, getattr(context, "size", 0)))
        else:
            throttleMs = getattr(context, "throttleMs", 0)
        if acks == 0:
            # Nothing is sent back; the connection unmutes at once (or once
            # a quota's throttle has passed).  An error closes it, so the
            # producer notices (Kafka's closeConnection).
            if any(p[1] for _, partitions in results for p in partitions):
                if pending is None:
                    raise _closeForAcks0(self.broker, context, results)
                pending.complete(Failure(_closeForAcks0(self.broker, context, results)))
            elif pending is not None:
                pending.complete(None)
            return None
        if waits:
            return self._awaitReplicas(context, request, version, results, waits, pending)
        answer = self._encode(request, version, results, throttleMs)
        if pending is not None:
            pending.complete(answer)
            return None
        return answer

    def _encode(self, request, version, results, throttleMs=0):
        if type(request) is ProduceRequest:
            return encodeProduceResponse(version, results, throttleMs)
        return self._response(version, results)

    def _awaitReplicas(self, context, request, version, results, waits, pending):
        """
        acks=all on replicated partitions: answer once their high
        watermarks pass the appended data (L{DelayedProduce}).
        """

        def answer(errors):
            return self._encode(
                request,
                version,
                [
                    (name, [
                        (index, errors.get((name, index), error) or error, *rest)
                        for index, error, *rest in partitions
                    ])
                    for name, partitions in results
                ],
                getattr(context, "throttleMs", 0),
            )

        if pending is None:
            pending = context.respondLater()
            deferred = pending.deferred
        else:
            deferred = None
        self.broker.replicaManager.awaitReplicas(
            context.clock, waits, max(request.timeout_ms, 0) / 1000.0, answer, pending
        )
        return deferred

    def _transactional(self, context, request, producer, wake, account):
        """
        Authorize the transactional id, verify the partitions where the
        producer has no transaction open yet, then append.
        """
        version = context.apiVersion
        broker = self.broker
        transactionalId = getattr(request, "transactional_id", None)
        authorizer = self.authorizer
        everything = [
            (topic.name, data.index) for topic in request.topic_data for data in topic.partition_data
        ]
        if transactionalId is None or (
            authorizer is not None
            and not authorize(
                authorizer, context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                transactionalId,
            )
        ):
            refused = dict.fromkeys(everything, E.transactional_id_authorization_failed)
            return self._appendAll(context, request, version, wake, account, refused)
        if request.acks not in VALID_ACKS:
            # INVALID_REQUIRED_ACKS before any verification (Kafka's
            # appendRecords checks the acks first).
            return self._appendAll(context, request, version, wake, account)
        logManager = broker.logManager
        replicaManager = broker.replicaManager
        verified, unverified = replicaManager.transactionGuards(
            logManager,
            producer,
            (
                (topic.name, data.index, transactionalProducer(data.records))
                for topic in request.topic_data
                for data in topic.partition_data
            ),
        )
        if not unverified:
            return self._appendAll(context, request, version, wake, account, verified)
        if request.acks == -1 and any(
            (log := logManager.getLog(*tp)) is not None and log.replicated() for tp in unverified
        ):
            # Replicated partitions may make the answer wait for the ISR
            # after the verification: the pending response is made now.
            pending = context.respondLater()
        else:
            pending = None
        coordinator = broker.transactionCoordinator

        # (In a cluster the coordinator asks the id's coordinator on another
        # broker itself: coordinator/transaction/verifier.py.)  The replica
        # manager records the answer in `verified` before this runs.
        def answered(result):
            return self._appendAll(context, request, version, wake, account, verified, pending)

        if pending is not None:

            def answeredLater(result):
                try:
                    answered(result)
                except Exception:
                    pending.complete(Failure())

            replicaManager.verifyTransaction(
                coordinator, answeredLater, transactionalId, producer, unverified, verified
            )
            return pending.deferred
        # (acks=0 too: nothing is answered, but a failed append closes the
        # connection, and Kafka keeps it muted until then)
        reply = Reply(context, answered)
        replicaManager.verifyTransaction(
            coordinator, reply, transactionalId, producer, unverified, verified
        )
        return reply.response()

    @staticmethod
    def _append(
        replicaManager, logManager, topic, data, nowMs, acks, wake, account, version, guard=None,
        waits=None, broker=None,
    ):
        index = data.index
        log = logManager.getLog(topic, index) if logManager is not None else None
        if log is None:
            # Not hosted here; Kafka checks the records of a partition its
            # metadata cache knows (in a cluster, hosted elsewhere) first,
            # and then answers NOT_LEADER_OR_FOLLOWER for it
            # (ReplicaManager.getPartitionOrError): the client refreshes its
            # metadata and goes to the leader.
            if broker is not None and partitionKnown(broker, topic, index):
                refused = refusedRecords(version, data.records)
                return (index, refused or ErrorCode.not_leader_or_follower, -1, -1, -1, None, ())
            return (index, ErrorCode.unknown_topic_or_partition, -1, -1, -1, None, ())
        records = data.records
        if version >= 3:
            refused = refusedRecords(version, records)
            if refused is not None:
                # Kafka refuses it while it reads the request, before the
                # replica manager looks at the acks or the topic:
                # PartitionResponse(error), offsets -1, no message.
                return (index, refused, -1, -1, -1, None, ())
        if not records:
            return (index, ErrorCode.invalid_record, -1, -1, log.logStartOffset,
                    "the produce request carries no records", ())
        try:
            # The replica manager's append path: min.insync.replicas with
            # acks=all (refused before the append), the verification guard.
            if guard is not None:
                info = replicaManager.appendRecords(log, records, nowMs, acks, verificationGuard=guard)
            elif legacyMagic(records) is not None:
                info = replicaManager.appendRecords(
                    log, records, nowMs, acks,
                    convert=lambda records: _fromLegacy(records, log.config),
                )
            else:
                info = replicaManager.appendRecords(log, records, nowMs, acks)
        except KafkaError as e:
            if e.code == ErrorCode.invalid_required_acks:
                # Kafka's appendRecords refuses before the log is looked at.
                return (index, e.code, -1, -1, -1, None, ())
            if broker is not None:
                broker.topicBytes.produceFailed(topic, e.code)
            return (index, e.code, -1, -1, log.logStartOffset, e.message, e.recordErrors)
        if not info.duplicate:
            # A retried batch (idempotent producer) appended nothing: no fetch
            # has anything new to see.  It is acknowledged with its original
            # offsets, as Kafka does.
            account(topic, info.validBytes, info.numRecords)
            wake((topic, index))
        if waits is not None:
            # A replicated partition: the ISR must have it first.
            waiting = replicaManager.waitingFor(topic, index, log, info)
            if waiting is not None:
                waits.append(waiting)
        return (
            index, ErrorCode.none, info.firstOffset, info.logAppendTime, info.logStartOffset, None, ()
        )

    @staticmethod
    def _response(version, results):
        cls = responseType(PRODUCE, version)
        Topic = nested(cls, "TopicProduceResponse")
        Partition = nested(cls, "PartitionProduceResponse")
        BatchIndexAndErrorMessage = (
            nested(cls, "BatchIndexAndErrorMessage") if version >= 8 else None
        )
        topics = tuple(
            make(
                Topic,
                name=name,
                partition_responses=tuple(
                    make(
                        Partition,
                        index=index,
                        error_code=error,
                        base_offset=base,
                        log_append_time=timestampMs(appendTime),
                        log_start_offset=start,
                        record_errors=tuple(
                            make(BatchIndexAndErrorMessage, batch_index=i, batch_index_error_message=m)
                            for i, m in recordErrors
                        ),
                        error_message=message,
                    )
                    for index, error, base, appendTime, start, message, recordErrors in partitions
                ),
            )
            for name, partitions in results
        )
        return make(cls, responses=topics, throttle_time=NO_THROTTLE)


def _closeForAcks0(broker, context, results) -> CloseConnection:
    """
    What closes the connection of an acks=0 Produce that got errors: the
    reason (on the connection's closing line, at info) names the client
    and each failed partition's error, as Kafka's line does.  Its errors
    are counted in the request metrics first (each partition by its error,
    NONE too), as Kafka's C{requestChannel.closeConnection(request,
    errorCounts)} counts them though nothing is answered.
    """
    broker.requestErrors.record(PRODUCE, produceErrorCounts(results))
    failed = ", ".join(
        f"{name}-{partition[0]}: {ErrorCode(partition[1]).name.upper()}"
        for name, partitions in results
        for partition in partitions
        if partition[1]
    )
    return CloseConnection(
        f"error during produce request with correlation id {context.correlationId} from client id "
        f"{context.clientId} with acks=0; topic and partition to exceptions: {failed}"
    )


def partitionKnown(broker, topic: str, partition: int) -> bool:
    """
    Whether Kafka's C{metadataCache.contains} would find the partition,
    which C{handleProduceRequest} asks before C{validateRecords}: in a
    cluster, the published image (topics being deleted left out, as the
    Metadata answer does), whichever broker hosts it; without one (or
    before the first image), the local logs.
    """
    cluster = broker.cluster
    image = cluster.image if cluster is not None else None
    if image is not None:
        assignment = image.topics.get(topic)
        return assignment is not None and topic not in image.deleting and partition in assignment.partitions
    logManager = broker.logManager
    return logManager is not None and logManager.getLog(topic, partition) is not None


def refusedRecords(version: int, records) -> ErrorCode | None:
    """
    What Kafka's C{ProduceRequest.validateRecords} refuses in one
    partition's records, which C{KafkaApis.handleProduceRequest} runs on
    each partition of a known topic, after the WRITE check and before
    C{ReplicaManager} looks at the acks, at the internal topics, or appends:
    from Produce v3, no record batch, a first batch not of magic 2 (a v0/v1
    message set), a second complete batch (one per partition), and zstd
    before v7 (UNSUPPORTED_COMPRESSION_TYPE).  Produce v0-2 are not checked
    (their v0/v1 sets are converted).

    @return: the partition's error, or C{None}.
    """
    if version < 3:
        return None
    if not records or len(records) < _LOG_OVERHEAD:
        # (no batch at all; a fragment is the log's to refuse)
        return ErrorCode.invalid_record if not records else None
    if legacyMagic(records) is not None:
        return ErrorCode.invalid_record
    size = len(records)
    if size >= _BATCH_HEADER:
        if version < 7 and records[_ATTRIBUTES_LOW] & _CODEC_MASK == _ZSTD:
            return ErrorCode.unsupported_compression_type
        first = _LOG_OVERHEAD + _INT32.unpack_from(records, _LENGTH_AT)[0]
        if size - first >= _LOG_OVERHEAD:
            # Kafka's batch iterator yields a second batch only when it is
            # whole (a shorter tail is not a batch: the log refuses it).
            second = _INT32.unpack_from(records, first + _LENGTH_AT)[0]
            if second >= _BATCH_HEADER - _LOG_OVERHEAD and size - first >= _LOG_OVERHEAD + second:
                return ErrorCode.invalid_record
    return None


_LOG_OVERHEAD = LOG_OVERHEAD  # base offset, batch length
_LENGTH_AT = BATCH_LENGTH_AT
_BATCH_HEADER = HEADER_SIZE
_ATTRIBUTES_LOW = ATTRIBUTES_AT + 1  # the int16's low byte
_CODEC_MASK = CODEC_MASK
_ZSTD = COMPRESSION_ZSTD
_INT32 = struct.Struct(">i")


def _fromLegacy(records, config) -> bytes:
    # (v3+ never gets here: refusedRecords refused it first)
    return upConvert(
        records, maxMessageBytes=config.maxMessageBytes, logAppendTime=config.logAppendTime
    )


produce = HandlerPlugin("builtin.produce", PRODUCE, ProduceHandler, priority=0)
