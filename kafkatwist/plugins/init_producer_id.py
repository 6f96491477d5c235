"""
InitProducerId.

Without a transactional id (idempotent producers), like Kafka's transaction
coordinator, a request always gets a new producer id with epoch 0, even
when (v3+) it carries its current producer id and epoch.  KIP-360's epoch
bump of an idempotent producer is made by the client itself: it carries on
with epoch + 1 from sequence 0, which the partition logs accept (see
L{kafkatwist.log.producerstate}).

With a transactional id the transaction coordinator answers
(L{kafkatwist.coordinator.transaction.coordinator}): the epoch is bumped,
fencing the previous producer with that id, and its open transaction
aborted.  PRODUCER_FENCED is INVALID_PRODUCER_EPOCH before v4, as Kafka
answers.

Producer ids come from a block reserved in C{producer-id-block} in the
first data directory, so a restart never hands out an id again; in a
cluster, from a block reserved in ZooKeeper's C{/latest_producer_id_block}
(Kafka's ZooKeeper-mode C{ProducerIdManager}), so no two brokers hand out
the same id.
"""

from __future__ import annotations

from twisted.python.failure import Failure

from kafkatwist.coordinator.reply import Reply
from kafkatwist.coordinator.transaction.coordinator import InitProducerIdResult
from kafkatwist.coordinator.transaction.producerids import ProducerIdManager
from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.handler import Handler, HandlerPlugin
from kafkatwist.protocol.entities import NO_THROTTLE, durationMs, make
from kafkatwist.protocol.apis import (
    INIT_PRODUCER_ID,
    responseType,
)
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType


class InitProducerIdHandler(Handler):
    apiKey = INIT_PRODUCER_ID
    minVersion = 0
    maxVersion = 5

    def __init__(self, broker, wrapped=None) -> None:
        super().__init__(broker, wrapped)
        self.ids = ProducerIdManager(broker.config.logDirs[0])

    def handle(self, context, request):
        cls = responseType(INIT_PRODUCER_ID, context.apiVersion)
        if request.transactional_id == "":
            # Kafka: an empty transactional id is an invalid request.
            return make(
                cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                producer_id=-1, producer_epoch=-1,
            )
        refusal = self._refusal(context, request.transactional_id)
        if refusal is not None:
            return make(cls, throttle_time=NO_THROTTLE, error_code=refusal, producer_id=-1, producer_epoch=-1)
        expectedId = getattr(request, "producer_id", -1)
        expectedEpoch = getattr(request, "producer_epoch", -1)
        if (expectedId == -1) != (expectedEpoch == -1):
            # Kafka: both or neither.
            return make(
                cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                producer_id=-1, producer_epoch=-1,
            )
        if request.transactional_id is not None:
            return self._transactional(context, cls, request, expectedId, expectedEpoch)
        # A new block of ids is ZooKeeper's in a cluster: answered when it
        # is reserved, no handler thread waiting for it.
        reply = Reply(
            context,
            lambda producerId: make(
                cls,
                throttle_time=NO_THROTTLE,
                error_code=ErrorCode.none,
                producer_id=producerId,
                producer_epoch=0,
            ),
        )
        self._producerIds().nextIdLater(reply)
        return reply.response()

    def _producerIds(self) -> ProducerIdManager:
        cluster = self.broker.cluster
        return cluster.producerIds if cluster is not None else self.ids

    def _transactional(self, context, cls, request, expectedId, expectedEpoch):
        version = context.apiVersion

        def response(result):
            error = result.errorCode
            if error == ErrorCode.producer_fenced and version < 4:
                error = ErrorCode.invalid_producer_epoch
            return make(
                cls, throttle_time=NO_THROTTLE, error_code=error,
                producer_id=result.producerId, producer_epoch=result.producerEpoch,
            )

        transactionalId = request.transactional_id
        coordinator = self.broker.transactionCoordinator
        if coordinator is None:
            return response(InitProducerIdResult(ErrorCode.coordinator_not_available))
        reply = Reply(context, response)

        def withId(producerId) -> None:
            if isinstance(producerId, Failure):
                reply(producerId)
                return
            coordinator.initProducerId(
                reply, transactionalId, durationMs(request.transaction_timeout), expectedId,
                expectedEpoch, producerId,
            )

        self._producerIds().nextIdLater(withId)
        return reply.response()

    def _refusal(self, context, transactionalId) -> ErrorCode | None:
        """
        Kafka's checks: WRITE on the transactional id; without one,
        IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
        """
        authorizer = self.authorizer
        if authorizer is None:
            return None
        if transactionalId is not None:
            if not self.allowed(context, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactionalId):
                return ErrorCode.transactional_id_authorization_failed
            return None
        if self.allowed(context, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, logIfDenied=False):
            return None
        if authorizer.authorizeByResourceType(context, AclOperation.WRITE, ResourceType.TOPIC):
            return None
        return ErrorCode.cluster_authorization_failed


initProducerId = HandlerPlugin(
    "builtin.init_producer_id", INIT_PRODUCER_ID, InitProducerIdHandler, priority=0
)
