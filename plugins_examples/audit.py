"""
Example drop-in: an audit trail of who produced to and fetched from which
topics, as one structured C{twisted.logger} event per request.

What it shows:

  - wrapping two built-ins (Produce and Fetch) with one small class, at a
    priority (200) above other Produce wrappers so the trail also records
    requests they refuse;
  - observing without interfering: the wrapped handler's answer -- an entity,
    an L{kafkatwist.protocol.codec.EncodedResponse} of file regions, C{None}
    or a Deferred -- is returned as it is, never copied or re-encoded;
  - answers given later: a long-poll Fetch returns the Deferred of a
    pending response (C{context.respondLater()}), completed later by a
    purgatory timer or by the Produce that satisfied it.  The Deferred
    fires on the connection's Processor thread, so the event is emitted by
    a callback there; the callback is short (a log event) and hands the
    result on unchanged.

The events
==========

Namespace C{kafkatwist.audit}, level info, emitted when the answer is ready
(so a long poll is logged when it ends).  Fields, for any observer (e.g. a
C{jsonFileLogObserver} feeding a SIEM)::

    audit        True, to select these events
    api          'produce' or 'fetch' (the broker's API names)
    principal    'User:ANONYMOUS', or 'User:<certificate subject>' on mTLS
    clientId     the request header's client id, or None
    clientHost, clientPort
    listener     the listener name, e.g. 'PLAINTEXT'
    topics       {topic: [partition, ...]}
    recordBytes  Produce: {topic: bytes of record sets}, before validation
    fetchOffsets Fetch: {topic: {partition: offset asked for}}
    errors       Produce: {'topic-partition': error name} of refused
                 partitions; Fetch: not known (the answer is pre-encoded)
    outcome      'answered', 'no answer (acks=0)', or 'failed: <reason>'

and a one-line text form in the broker's log, e.g.::

    audit: produce by User:ANONYMOUS client_id=rdkafka from 127.0.0.1:52144
    via PLAINTEXT topics=orders[0,1] bytes=orders:1804 errors=- answered

(one line in the log; wrapped here).
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from kafkatwist.errors import ErrorCode
from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import FETCH, PRODUCE, apiName

log = Logger(namespace="kafkatwist.audit")

#: above the drop-in default (100) where the schema validation example sits
AUDIT_PRIORITY = 200

_FORMAT = (
    "audit: {api} by {principal} client_id={clientId} from {clientHost}:{clientPort} "
    "via {listener} topics={topicsText} {detailText} {outcome}"
)


class AuditHandler(Handler):
    """
    Passes every request to the wrapped handler and logs who asked for
    what.  Subclasses say which ApiKey, and how to read its request.
    """

    def __init__(self, broker, wrapped) -> None:
        if wrapped is None:
            raise ValueError(f"audit wraps a {apiName(self.apiKey)} handler, and there is none")
        super().__init__(broker, wrapped)
        # Serve exactly what the wrapped handler serves: a wrapper that only
        # observes must not change what ApiVersions advertises.
        self.minVersion = wrapped.minVersion
        self.maxVersion = wrapped.maxVersion

    def handle(self, context, request):
        fields = self.describe(context, request)
        try:
            result = self.wrapped.handle(context, request)
        except Exception as e:
            self.emit(context, fields, None, f"failed: {type(e).__name__}: {e}")
            raise
        if isinstance(result, Deferred):
            # The callbacks run on the connection's Processor thread once
            # the answer is ready; both return what they were given so the
            # response (or failure) goes on to the network layer untouched.
            def answered(response):
                self.emit(context, fields, response, "answered")
                return response

            def failed(failure):
                self.emit(context, fields, None, f"failed: {failure.getErrorMessage()}")
                return failure

            return result.addCallbacks(answered, failed)
        self.emit(
            context, fields, result, "answered" if result is not None else "no answer (acks=0)"
        )
        return result

    def describe(self, context, request) -> dict:
        """
        @return: the event fields read from the request (before the wrapped
            handler runs, so they describe what was asked).
        """
        raise NotImplementedError

    def errors(self, response) -> dict[str, str] | None:
        """
        @return: refused partitions from the response, or C{None} if they
            cannot be read from it.
        """
        return None

    def emit(self, context, fields, response, outcome) -> None:
        host, port = context.clientAddress
        errors = self.errors(response) if response is not None else None
        fields = dict(fields, errors=errors)
        log.info(
            _FORMAT,
            audit=True,
            api=apiName(self.apiKey),
            principal=context.principal,
            clientId=context.clientId,
            clientHost=host,
            clientPort=port,
            listener=context.listenerName,
            topicsText=",".join(
                f"{t}[{','.join(map(str, ps))}]" for t, ps in fields["topics"].items()
            )
            or "-",
            detailText=self.detailText(fields),
            outcome=outcome,
            **fields,
        )

    def detailText(self, fields) -> str:
        return ""


class ProduceAudit(AuditHandler):
    apiKey = PRODUCE

    def describe(self, context, request):
        topics: dict[str, list[int]] = {}
        recordBytes: dict[str, int] = {}
        for topic in request.topic_data:
            topics.setdefault(topic.name, []).extend(d.index for d in topic.partition_data)
            # len() of the record set: its size, without looking inside.
            recordBytes[topic.name] = recordBytes.get(topic.name, 0) + sum(
                len(d.records) if d.records is not None else 0 for d in topic.partition_data
            )
        return {"topics": topics, "recordBytes": recordBytes}

    def errors(self, response):
        return {
            f"{t.name}-{p.index}": ErrorCode(p.error_code).name.upper()
            for t in response.responses
            for p in t.partition_responses
            if p.error_code != ErrorCode.none
        }

    def detailText(self, fields):
        sizes = ",".join(f"{t}:{n}" for t, n in fields["recordBytes"].items()) or "-"
        errors = fields["errors"]
        errorText = ",".join(f"{k}:{v}" for k, v in errors.items()) if errors else "-"
        return f"bytes={sizes} errors={errorText}"


class FetchAudit(AuditHandler):
    apiKey = FETCH

    def describe(self, context, request):
        # Fetch v13+ names topics by id: translate, so the trail names them.
        byId = None
        topics: dict[str, list[int]] = {}
        offsets: dict[str, dict[int, int]] = {}
        for fetchTopic in request.topics:
            name = getattr(fetchTopic, "topic", None)
            if name is None:
                if byId is None:
                    known = self.broker.logManager.topics()
                    byId = {info.topicId: topic for topic, info in known.items()}
                name = byId.get(fetchTopic.topic_id, f"<unknown id {fetchTopic.topic_id}>")
            for p in fetchTopic.partitions:
                topics.setdefault(name, []).append(p.partition)
                offsets.setdefault(name, {})[p.partition] = p.fetch_offset
        return {"topics": topics, "fetchOffsets": offsets}

    def detailText(self, fields):
        offsets = fields["fetchOffsets"]
        return "offsets=" + (
            ",".join(f"{t}-{p}@{o}" for t, ps in offsets.items() for p, o in ps.items()) or "-"
        )


auditProduce = HandlerPlugin(
    "example.audit.produce", PRODUCE, ProduceAudit, priority=AUDIT_PRIORITY
)
auditFetch = HandlerPlugin("example.audit.fetch", FETCH, FetchAudit, priority=AUDIT_PRIORITY)
