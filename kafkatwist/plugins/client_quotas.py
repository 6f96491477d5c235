"""
Client quotas: DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1,
over L{kafkatwist.quota.store}; and Fetch's consumer_byte_rate, enforced by
a handler wrapping the built-in Fetch.

Entities are a user, a client id, or both, each named or the default (a
null name), with the keys C{producer_byte_rate}, C{consumer_byte_rate} and
C{request_percentage}; or an ip alone with C{connection_creation_rate}
(enforced by the Acceptors, L{kafkatwist.network.connectionquotas}).  Describing needs DESCRIBE_CONFIGS on the cluster,
altering ALTER_CONFIGS (CLUSTER_AUTHORIZATION_FAILED otherwise), as in
Kafka.

A Fetch answer that puts its client over C{consumer_byte_rate} is replaced
by an empty one carrying the throttle (and the fetch session it was
answered in), and its bytes are not counted, as Kafka's
C{KafkaApis.handleFetchRequest} does: the client fetches the same offsets
again once the throttle has passed.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred

from kafkatwist.errors import ErrorCode, KafkaError
from kafkatwist.plugins.handler import Handler, HandlerPlugin, frameAnswerer
from kafkatwist.protocol.apis import (
    ALTER_CLIENT_QUOTAS,
    DESCRIBE_CLIENT_QUOTAS,
    FETCH,
    responseType,
)
from kafkatwist.protocol.codec import EncodedResponse, closeRegions
from kafkatwist.protocol.entities import NO_THROTTLE, make, nested
from kafkatwist.protocol.fetch import encodeFetchResponse
from kafkatwist.quota.manager import addThrottle
from kafkatwist.quota.store import CLIENT_ID, CONSUMER_BYTE_RATE, IP, USER, checkEntity, checkQuota
from kafkatwist.security.acl import CLUSTER_NAME, AclOperation, ResourceType

__all__ = ["describeQuotas"]

#: DescribeClientQuotas' match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2

#: the first Fetch version whose records are record batches (v4)
_BATCH_FETCH_FROM = 4
#: the first Fetch version with fetch sessions (KIP-227)
_SESSIONS_FROM = 7


def describeQuotas(quotas, components, strict: bool):
    """
    Kafka's filter: every component must match the entity (EXACT: that
    name, DEFAULT: the default, SPECIFIED: any name but the default); with
    C{strict}, the entity has no other types.

    @param components: C{(entity type, match type, match)}.
    @return: C{[(entity, {key: value})]}, sorted.
    @raise KafkaError: INVALID_REQUEST.
    """
    seen = set()
    for entityType, matchType, match in components:
        if entityType in seen:
            raise KafkaError(ErrorCode.invalid_request, f"Duplicate filter component entity type: {entityType}")
        seen.add(entityType)
        if entityType not in (USER, CLIENT_ID, IP):
            raise KafkaError(ErrorCode.invalid_request, f"Custom entity type '{entityType}' not supported")
        if matchType not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            raise KafkaError(ErrorCode.invalid_request, f"Unknown match type {matchType}")
        if matchType == MATCH_EXACT and match is None:
            raise KafkaError(ErrorCode.invalid_request, f"Exact match of {entityType} needs a name")

    def matches(entity) -> bool:
        names = dict(entity)
        if strict and set(names) != seen:
            return False
        for entityType, matchType, match in components:
            if entityType not in names:
                return False
            name = names[entityType]
            if matchType == MATCH_EXACT and name != match:
                return False
            if matchType == MATCH_DEFAULT and name is not None:
                return False
            if matchType == MATCH_SPECIFIED and name is None:
                return False
        return True

    return sorted(
        ((entity, dict(values)) for entity, values in quotas.items() if matches(entity)),
        key=lambda item: repr(item[0]),
    )


def _checkCluster(handler: Handler, context, operation: AclOperation) -> None:
    if not handler.allowed(context, operation, ResourceType.CLUSTER, CLUSTER_NAME):
        raise KafkaError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")


class DescribeClientQuotasHandler(Handler):
    apiKey = DESCRIBE_CLIENT_QUOTAS
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(DESCRIBE_CLIENT_QUOTAS, context.apiVersion)
        Entry = nested(cls, "EntryData")
        Entity = nested(cls, "EntityData")
        Value = nested(cls, "ValueData")
        try:
            _checkCluster(self, context, AclOperation.DESCRIBE_CONFIGS)
            found = describeQuotas(
                self.broker.clientQuotas.store.quotas(),
                [(c.entity_type, c.match_type, c.match) for c in request.components],
                bool(request.strict),
            )
        except KafkaError as e:
            return make(cls, throttle_time=NO_THROTTLE, error_code=e.code,
                        error_message=e.message or e.code.name, entries=None)
        entries = tuple(
            Entry(
                entity=tuple(Entity(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(Value(key=k, value=v) for k, v in sorted(values.items())),
            )
            for entity, values in found
        )
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                    entries=entries)


class AlterClientQuotasHandler(Handler):
    """
    Each entry is checked on its own and answered with its own error; the
    valid ones are stored together, durably, before the answer.
    """

    apiKey = ALTER_CLIENT_QUOTAS
    minVersion = 0
    maxVersion = 1

    def handle(self, context, request):
        cls = responseType(ALTER_CLIENT_QUOTAS, context.apiVersion)
        Entry = nested(cls, "EntryData")
        Entity = nested(cls, "EntityData")
        try:
            _checkCluster(self, context, AclOperation.ALTER_CONFIGS)
            refused = None
        except KafkaError as e:
            refused = e
        outcomes = []
        changes = []
        for entry in request.entries:
            error = refused
            if error is None:
                try:
                    changes.append(self._change(entry))
                except KafkaError as e:
                    error = e
            outcomes.append((entry, error))
        if changes and not request.validate_only:
            try:
                self.broker.clientQuotas.store.alter(changes)
            except KafkaError as e:
                outcomes = [(entry, error or e) for entry, error in outcomes]
        return make(
            cls,
            throttle_time=NO_THROTTLE,
            entries=tuple(
                Entry(
                    error_code=ErrorCode.none if error is None else error.code,
                    error_message=None if error is None else (error.message or error.code.name),
                    entity=tuple(Entity(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity),
                )
                for entry, error in outcomes
            ),
        )

    @staticmethod
    def _change(entry):
        entity = checkEntity([(e.entity_type, e.entity_name) for e in entry.entity])
        ops = []
        keys = set()
        for op in entry.ops:
            if op.key in keys:
                raise KafkaError(ErrorCode.invalid_request, f"Duplicate quota key {op.key}")
            keys.add(op.key)
            if op.remove:
                checkQuota(entity, op.key, 1.0)
                ops.append((op.key, None))
            else:
                checkQuota(entity, op.key, float(op.value))
                ops.append((op.key, float(op.value)))
        return entity, ops


class FetchQuotaHandler(Handler):
    """
    Wraps the built-in Fetch: counts each answer against the client's
    consumer_byte_rate and, over it, answers empty with the throttle.
    """

    apiKey = FETCH
    minVersion = property(lambda self: self.wrapped.minVersion)
    maxVersion = property(lambda self: self.wrapped.maxVersion)

    def __init__(self, broker, wrapped=None) -> None:
        super().__init__(broker, wrapped)
        #: the wrapped Fetch's answerFrame, if the pool could call it
        self._answerWrapped = frameAnswerer(wrapped) if wrapped is not None else None

    def __getattr__(self, name):
        # What else the wrapped Fetch offers (its own request decoder, say).
        wrapped = self.__dict__.get("wrapped")
        if wrapped is None:
            raise AttributeError(name)
        return getattr(wrapped, name)

    def answerFrame(self, context, frame, offset):
        """
        The wrapped Fetch's C{answerFrame}, while L{handle} would hand its
        answer on unchanged: no consumer_byte_rate quota active and no
        throttle on the request.  (Defined here, beside L{handle}: the pool
        never takes an C{answerFrame} through C{__getattr__}.)
        """
        answer = self._answerWrapped
        if answer is None or getattr(context, "throttleMs", 0) > 0:
            return NotImplemented
        quotas = self.broker.clientQuotas
        if quotas is not None and quotas.active(CONSUMER_BYTE_RATE):
            return NotImplemented
        return answer(context, frame, offset)

    def handle(self, context, request):
        result = self.wrapped.handle(context, request)
        quotas = self.broker.clientQuotas
        if quotas is None:
            return result
        bytesQuota = quotas.active(CONSUMER_BYTE_RATE)
        if not bytesQuota and getattr(context, "throttleMs", 0) <= 0:
            return result
        if isinstance(result, Deferred):
            # A long poll: counted when it is answered (on the Processor).
            return result.addCallback(self._counted, quotas, context, bytesQuota)
        return self._counted(result, quotas, context, bytesQuota)

    @staticmethod
    def _counted(result, quotas, context, bytesQuota: bool):
        if not isinstance(result, EncodedResponse):
            return result
        throttleMs = quotas.fetched(context, result.size) if bytesQuota else 0
        # Over either quota (bytes, or request_percentage found before the
        # handler ran): Kafka answers empty and takes the bytes back.
        throttleMs = addThrottle(context, throttleMs)
        if throttleMs <= 0:
            return result
        errorCode, sessionId = _sessionOf(context.apiVersion, result)
        if errorCode:
            # A session error answer carries no data: sent as it is (the
            # connection is still muted for the throttle).
            return result
        if bytesQuota:
            quotas.unfetched(context, result.size)
        closeRegions(result.chunks)
        return throttledFetchResponse(context.apiVersion, throttleMs, sessionId)


def _sessionOf(version: int, result: EncodedResponse) -> tuple[int, int]:
    """
    The top-level error code and fetch session id a Fetch v7+ answer
    carries (after throttle_time_ms), so that a throttled answer keeps the
    client's session as Kafka's does.
    """
    head = result.chunks[0] if result.chunks else b""
    if version < _SESSIONS_FROM or not isinstance(head, (bytes, bytearray, memoryview)) or len(head) < 10:
        return 0, 0
    head = bytes(head[4:10])
    return int.from_bytes(head[:2], "big", signed=True), int.from_bytes(head[2:], "big", signed=True)


def throttledFetchResponse(version: int, throttleMs: int, sessionId: int = 0) -> EncodedResponse:
    """
    Kafka's answer to a throttled fetch: no partitions, the throttle time
    (from v1), the fetch session kept (from v7).
    """
    if version >= _BATCH_FETCH_FROM:
        return encodeFetchResponse(version, [], sessionId=sessionId, throttleMs=throttleMs)
    body = (throttleMs.to_bytes(4, "big") if version >= 1 else b"") + (0).to_bytes(4, "big")
    return EncodedResponse([body], len(body), {0: 1})  # (the top level's NONE)


describeClientQuotas = HandlerPlugin(
    "builtin.describe_client_quotas", DESCRIBE_CLIENT_QUOTAS, DescribeClientQuotasHandler, priority=0
)
alterClientQuotas = HandlerPlugin(
    "builtin.alter_client_quotas", ALTER_CLIENT_QUOTAS, AlterClientQuotasHandler, priority=0
)
fetchQuota = HandlerPlugin("builtin.fetch_quota", FETCH, FetchQuotaHandler, priority=1)
