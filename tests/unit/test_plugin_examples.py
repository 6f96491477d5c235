"""
The example drop-ins in C{plugins_examples/}, one piece at a time, without a
broker: the schema validator, the Produce wrapper's split-and-merge, the
audit wrapper's events, and the DescribeLogSizes schemas and handler.
(C{tests/integration/test_plugin_examples.py} runs them in a real broker.)
"""

import datetime
import json
import types
import uuid

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.produce import ProduceHandler
from kafkatwist.protocol.apis import FETCH, PRODUCE, requestType
from kafkatwist.protocol.codec import (
    decodeRequest,
    decodeResponseFrame,
    encodeRequestFrame,
    encodeResponseFrame,
)
from kafkatwist.protocol.entities import nested
from kafkatwist.protocol.records import Record, buildBatch
from tests.fakeservices import FakeServices
from tests.unit.helpers import loadExample


schema_validation = loadExample("schema_validation")
audit = loadExample("audit")
log_sizes = loadExample("log_sizes")

ORDER_SCHEMA = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {
        "id": {"type": "string", "minLength": 1, "pattern": "^o-"},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD"]},
        "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
    },
    "additionalProperties": False,
}


# ---------------------------------------------------------------------------
# Validators


@pytest.fixture(params=["subset", "jsonschema"])
def compileSchema(request):
    """
    Both validators the plugin may use.
    """
    if request.param == "subset":
        return schema_validation.compileSubset
    pytest.importorskip("jsonschema")
    return schema_validation._compileWithJsonschema


@pytest.mark.parametrize(
    "value, where",
    [
        ({"id": "o-1", "amount": 3}, None),
        ({"id": "o-1", "amount": 2.5, "currency": "EUR", "items": [1, 2]}, None),
        ({"id": "o-1"}, "amount"),
        ({"id": "o-1", "amount": -1}, "$.amount"),
        ({"id": "o-1", "amount": True}, "$.amount"),
        ({"id": "x-1", "amount": 1}, "$.id"),
        ({"id": "", "amount": 1}, "$.id"),
        ({"id": "o-1", "amount": 1, "currency": "GBP"}, "$.currency"),
        ({"id": "o-1", "amount": 1, "items": [1, "2"]}, "$.items[1]"),
        ({"id": "o-1", "amount": 1, "items": [1, 2, 3]}, "$.items"),
        ({"id": "o-1", "amount": 1, "extra": 0}, "extra"),
        ([1, 2], "$"),
    ],
)
def test_validators_accept_and_reject_alike(compileSchema, value, where):
    problems = compileSchema(ORDER_SCHEMA)(value)
    if where is None:
        assert problems == []
    else:
        assert problems and any(where in p for p in problems), problems


def test_subset_refuses_keywords_it_does_not_know():
    """
    Ignoring C{oneOf} would let through records its author meant to
    reject: the subset refuses the schema instead.
    """
    with pytest.raises(schema_validation.SchemaError, match="oneOf.*install jsonschema"):
        schema_validation.compileSubset({"properties": {"a": {"oneOf": [{"type": "string"}]}}})


def test_subset_additional_properties_schema():
    validate = schema_validation.compileSubset({"additionalProperties": {"type": "integer"}})
    assert validate({"a": 1, "b": 2.0}) == []
    assert validate({"a": "1"}) == ["$.a: '1' is not of type integer"]


# ---------------------------------------------------------------------------
# The schema directory


def test_schema_store_loads_rescans_and_reports_unusable_schemas(tmp_path):
    now = [0.0]
    store = schema_validation.SchemaStore(str(tmp_path), rescanSeconds=5, now=lambda: now[0])
    (tmp_path / "orders.json").write_text(json.dumps(ORDER_SCHEMA))
    (tmp_path / "broken.json").write_text("{not json")
    assert callable(store.forTopic("orders"))
    assert isinstance(store.forTopic("broken"), schema_validation.SchemaError)
    assert store.forTopic("free") is None

    # New files are seen after the rescan interval, not before: lookups in
    # between touch no file.
    (tmp_path / "free.json").write_text("{}")
    now[0] = 4.0
    assert store.forTopic("free") is None
    now[0] = 5.0
    assert callable(store.forTopic("free"))


def test_schema_store_without_directory(tmp_path):
    store = schema_validation.SchemaStore(str(tmp_path / "absent"))
    assert store.forTopic("orders") is None


def test_shipped_example_schema_is_usable():
    store = schema_validation.SchemaStore(schema_validation.DEFAULT_SCHEMA_DIR)
    validate = store.forTopic("example-orders")
    assert callable(validate)


def test_schema_directory_from_environment():
    assert schema_validation.schemaDirectory({"KAFKATWIST_SCHEMA_DIR": "/s"}) == "/s"
    assert schema_validation.schemaDirectory({}) == schema_validation.DEFAULT_SCHEMA_DIR


# ---------------------------------------------------------------------------
# The Produce wrapper


class StaticSchemas:
    def __init__(self, byTopic):
        self.byTopic = byTopic

    def forTopic(self, topic):
        return self.byTopic.get(topic)


class FakeLog:
    logStartOffset = 7


def fakeLogsBroker(topics=None):
    """
    The shared fake services over logs that all start at offset 7.
    """
    return FakeServices(
        logManager=types.SimpleNamespace(
            getLog=lambda topic, index: FakeLog(), topics=lambda: topics or {}
        )
    )


class RecordingProduce:
    """
    Stands in for the built-in Produce: remembers the request it got and
    answers every partition with success, in the real response classes.
    """

    apiKey, minVersion, maxVersion = PRODUCE, 0, 12

    def __init__(self, later=False):
        self.seen = None
        self.later = later

    def handle(self, context, request):
        self.seen = request
        if request.acks == 0:
            return None
        response = ProduceHandler._response(
            context.apiVersion,
            [
                (t.name, [(d.index, ErrorCode.none, 100, -1, 0, None, ()) for d in t.partition_data])
                for t in request.topic_data
            ],
        )
        return succeed(response) if self.later else response


def produceRequest(version, topics, acks=1):
    """
    @param topics: {topic: {partition: record set bytes}}.
    """
    cls = requestType(PRODUCE, version)
    Topic = nested(cls, "TopicProduceData")
    Partition = nested(cls, "PartitionProduceData")
    return cls(
        **({"transactional_id": None} if version >= 3 else {}),
        acks=acks,
        timeout=datetime.timedelta(seconds=30),
        topic_data=tuple(
            Topic(
                name=name,
                partition_data=tuple(Partition(index=i, records=r) for i, r in parts.items()),
            )
            for name, parts in topics.items()
        ),
    )


def values(*items):
    return buildBatch([Record(value=None if v is None else json.dumps(v).encode()) for v in items])


def validatingHandler(wrapped=None):
    schemas = StaticSchemas({"orders": schema_validation.compileSubset(ORDER_SCHEMA)})
    return schema_validation.SchemaValidatingProduceHandler(
        fakeLogsBroker(), wrapped or RecordingProduce(), schemas
    )


def context(version):
    return types.SimpleNamespace(apiVersion=version)


def partitions(response):
    return {(t.name, p.index): p for t in response.responses for p in t.partition_responses}


def test_requests_without_schema_topics_pass_as_they_are():
    """
    The request object itself goes on, so the record bytes do too: no
    decoding, no copy.
    """
    handler = validatingHandler()
    request = produceRequest(12, {"free": {0: b"not even a batch"}})
    response = handler.handle(context(12), request)
    assert handler.wrapped.seen is request
    assert partitions(response)[("free", 0)].error_code == ErrorCode.none


def test_valid_records_pass_and_versions_follow_the_wrapped_handler():
    handler = validatingHandler()
    request = produceRequest(12, {"orders": {0: values({"id": "o-1", "amount": 1}, None)}})
    handler.handle(context(12), request)
    assert handler.wrapped.seen is request  # a tombstone (None) passes too
    assert (handler.minVersion, handler.maxVersion) == (0, 12)


def test_failing_partition_is_answered_and_the_rest_is_passed_on_uncopied():
    handler = validatingHandler()
    good = values({"id": "o-1", "amount": 1})
    free = b"opaque"
    bad = values({"id": "o-2", "amount": 1}, {"id": "o-3", "amount": -1}, "text")
    request = produceRequest(12, {"orders": {0: good, 1: bad}, "free": {0: free}})

    response = handler.handle(context(12), request)

    seen = handler.wrapped.seen
    passed = {(t.name, d.index): d.records for t in seen.topic_data for d in t.partition_data}
    assert set(passed) == {("orders", 0), ("free", 0)}
    assert passed[("orders", 0)] is good and passed[("free", 0)] is free
    # Answered in the order the request named the partitions.
    assert [(t.name, [p.index for p in t.partition_responses]) for t in response.responses] == [
        ("orders", [0, 1]),
        ("free", [0]),
    ]
    rejected = partitions(response)[("orders", 1)]
    assert rejected.error_code == ErrorCode.invalid_record
    assert rejected.base_offset == -1 and rejected.log_start_offset == 7
    assert rejected.error_message.startswith("2 of 3 records fail the schema of topic orders")
    assert [e.batch_index for e in rejected.record_errors] == [1, 2]
    assert "$.amount" in rejected.record_errors[0].batch_index_error_message
    assert "is not of type object" in rejected.record_errors[1].batch_index_error_message


def test_everything_rejected_still_answers_every_partition():
    handler = validatingHandler()
    request = produceRequest(12, {"orders": {0: values({"id": "nope"})}})
    response = handler.handle(context(12), request)
    assert handler.wrapped.seen.topic_data == ()
    assert partitions(response)[("orders", 0)].error_code == ErrorCode.invalid_record


def test_old_versions_without_record_errors():
    """
    Produce v2's response has no error message or record errors; the
    error code alone still tells the client.
    """
    handler = validatingHandler()
    response = handler.handle(context(2), produceRequest(2, {"orders": {0: values({})}}))
    assert partitions(response)[("orders", 0)].error_code == ErrorCode.invalid_record


def test_non_json_and_corrupt_record_sets():
    handler = validatingHandler()
    notJson = buildBatch([Record(value=b"\xff{")])
    request = produceRequest(12, {"orders": {0: notJson, 1: b"\x00" * 20 + b"\x07" + b"\x00" * 60}})
    answers = partitions(handler.handle(context(12), request))
    assert "value is not JSON" in answers[("orders", 0)].error_message
    assert answers[("orders", 1)].error_code == ErrorCode.corrupt_message


def test_unusable_schema_refuses_the_topic():
    schemas = StaticSchemas({"orders": schema_validation.SchemaError("bad")})
    handler = schema_validation.SchemaValidatingProduceHandler(
        fakeLogsBroker(), RecordingProduce(), schemas
    )
    response = handler.handle(context(12), produceRequest(12, {"orders": {0: values({})}}))
    assert (
        "schema of topic orders is unusable: bad"
        in partitions(response)[("orders", 0)].error_message
    )


def test_acks_zero_answers_nothing():
    handler = validatingHandler()
    assert (
        handler.handle(context(12), produceRequest(12, {"orders": {0: values({})}}, acks=0)) is None
    )


def test_wrapped_answering_later():
    handler = validatingHandler(RecordingProduce(later=True))
    request = produceRequest(12, {"orders": {0: values({}), 1: values({"id": "o-1", "amount": 0})}})
    result = handler.handle(context(12), request)
    assert isinstance(result, Deferred)
    answers = partitions(result.result)
    assert answers[("orders", 0)].error_code == ErrorCode.invalid_record
    assert answers[("orders", 1)].error_code == ErrorCode.none


# ---------------------------------------------------------------------------
# Audit


@pytest.fixture
def events(monkeypatch):
    caught = []
    monkeypatch.setattr(audit, "log", Logger(namespace="kafkatwist.audit", observer=caught.append))
    return caught


def requestContext(version, clientId="app"):
    return types.SimpleNamespace(
        apiVersion=version,
        principal="User:ANONYMOUS",
        clientId=clientId,
        clientAddress=("10.0.0.5", 40000),
        listenerName="PLAINTEXT",
    )


class Answering:
    def __init__(self, apiKey, answer):
        self.apiKey, self.minVersion, self.maxVersion = apiKey, 4, 16
        self.answer = answer

    def handle(self, context, request):
        return self.answer(request) if callable(self.answer) else self.answer


def test_produce_audit_event_and_untouched_response(events):
    wrapped = RecordingProduce()
    handler = audit.ProduceAudit(None, wrapped)
    batch = values({"a": 1})
    request = produceRequest(12, {"orders": {0: batch, 1: batch}, "free": {0: b"xyz"}})
    response = handler.handle(requestContext(12), request)
    assert wrapped.seen is request
    [event] = events
    assert event["audit"] is True and event["api"] == "produce"
    assert event["principal"] == "User:ANONYMOUS" and event["clientId"] == "app"
    assert (event["clientHost"], event["clientPort"]) == ("10.0.0.5", 40000)
    assert event["topics"] == {"orders": [0, 1], "free": [0]}
    assert event["recordBytes"] == {"orders": 2 * len(batch), "free": 3}
    assert event["errors"] == {} and event["outcome"] == "answered"
    assert partitions(response)[("free", 0)].base_offset == 100


def test_produce_audit_records_refusals(events):
    handler = audit.ProduceAudit(None, validatingHandler())
    handler.handle(requestContext(12), produceRequest(12, {"orders": {3: values({})}}))
    assert events[0]["errors"] == {"orders-3": "INVALID_RECORD"}
    from twisted.logger import formatEvent

    assert "errors=orders-3:INVALID_RECORD" in formatEvent(events[0])


def fetchRequest(version, topics):
    cls = requestType(FETCH, version)
    Topic = nested(cls, "FetchTopic")
    Partition = nested(cls, "FetchPartition")
    return cls(
        max_wait=datetime.timedelta(milliseconds=500),
        min_bytes=1,
        topics=tuple(
            Topic(
                **topic,
                partitions=tuple(
                    Partition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                    for p, o in parts.items()
                ),
            )
            for topic, parts in topics
        ),
        forgotten_topics_data=(),
    )


def test_fetch_audit_waits_for_a_deferred_answer(events):
    """
    A long poll answers with a Deferred: the event comes when it fires, and
    the answer goes on unchanged.
    """
    later = Deferred()
    handler = audit.FetchAudit(None, Answering(FETCH, later))
    answer = object()
    result = handler.handle(requestContext(12), fetchRequest(12, [({"topic": "t"}, {0: 5, 2: 9})]))
    assert result is later and events == []
    later.callback(answer)
    assert later.result is answer
    [event] = events
    assert event["api"] == "fetch" and event["topics"] == {"t": [0, 2]}
    assert event["fetchOffsets"] == {"t": {0: 5, 2: 9}} and event["outcome"] == "answered"


def test_fetch_audit_names_topics_given_by_id(events):
    topicId = uuid.uuid4()
    broker = fakeLogsBroker({"named": types.SimpleNamespace(topicId=topicId)})
    handler = audit.FetchAudit(broker, Answering(FETCH, "sent"))
    assert (
        handler.handle(requestContext(16), fetchRequest(16, [({"topic_id": topicId}, {1: 0})]))
        == "sent"
    )
    assert events[0]["topics"] == {"named": [1]}


def test_audit_passes_failures_on(events):
    handler = audit.FetchAudit(None, Answering(FETCH, lambda r: fail(RuntimeError("disk"))))
    result = handler.handle(requestContext(12), fetchRequest(12, []))
    failures = []
    result.addErrback(failures.append)
    assert isinstance(failures[0], Failure) and events[0]["outcome"] == "failed: disk"

    def boom(request):
        raise ValueError("bad")

    with pytest.raises(ValueError):
        audit.FetchAudit(None, Answering(FETCH, boom)).handle(
            requestContext(12), fetchRequest(12, [])
        )
    assert events[1]["outcome"] == "failed: ValueError: bad"


# ---------------------------------------------------------------------------
# DescribeLogSizes


class SizedLog:
    def __init__(self, size, start, end):
        self.size, self.logStartOffset, self.logEndOffset = size, start, end


def sizesBroker():
    logs = {("a", 0): SizedLog(120, 0, 3), ("a", 1): SizedLog(0, 0, 0), ("b", 0): SizedLog(5, 2, 4)}
    topics = {
        "a": types.SimpleNamespace(numPartitions=2),
        "b": types.SimpleNamespace(numPartitions=1),
    }
    return FakeServices(
        logManager=types.SimpleNamespace(
            topics=lambda: topics, getLog=lambda t, p: logs.get((t, p))
        )
    )


def test_log_sizes_schemas_round_trip_through_the_codec():
    m = log_sizes
    request = m.DescribeLogSizesRequest(
        topics=(m.LogSizesRequestTopic(name="a", partitions=(1,)), m.LogSizesRequestTopic(name="b"))
    )
    frame = encodeRequestFrame(m.DESCRIBE_LOG_SIZES, 0, 7, "me", request)
    # size prefix, api key, version, correlation id, client id, tagged fields
    assert decodeRequest(m.DESCRIBE_LOG_SIZES, 0, frame, 4 + 8 + 2 + 2 + 1) == request
    everything = m.DescribeLogSizesRequest(topics=None)
    frame = encodeRequestFrame(m.DESCRIBE_LOG_SIZES, 0, 8, "me", everything)
    assert decodeRequest(m.DESCRIBE_LOG_SIZES, 0, frame, 4 + 8 + 2 + 2 + 1).topics is None

    response = m.DescribeLogSizesHandler(sizesBroker()).handle(None, request)
    chunks = encodeResponseFrame(m.DESCRIBE_LOG_SIZES, 0, 7, response)
    assert decodeResponseFrame(m.DESCRIBE_LOG_SIZES, 0, b"".join(chunks)[4:]) == (7, response)


def test_log_sizes_answers():
    m = log_sizes
    handler = m.DescribeLogSizesHandler(sizesBroker())
    answer = handler.handle(None, m.DescribeLogSizesRequest(topics=None))
    assert [
        (
            t.name,
            [
                (p.partition_index, p.size_bytes, p.log_start_offset, p.log_end_offset)
                for p in t.partitions
            ],
        )
        for t in answer.topics
    ] == [
        ("a", [(0, 120, 0, 3), (1, 0, 0, 0)]),
        ("b", [(0, 5, 2, 4)]),
    ]
    answer = handler.handle(
        None,
        m.DescribeLogSizesRequest(
            topics=(
                m.LogSizesRequestTopic(name="a", partitions=(5,)),
                m.LogSizesRequestTopic(name="zz"),
            )
        ),
    )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.unknown_topic_or_partition
    assert answer.topics[1].error_code == ErrorCode.unknown_topic_or_partition


def test_log_sizes_registration_refuses_kafka_keys_and_is_idempotent():
    from kafkatwist.protocol.apis import apiName, registerSchema

    m = log_sizes
    registerSchema(
        m.DESCRIBE_LOG_SIZES, m.API_NAME, 0, m.DescribeLogSizesRequest, m.DescribeLogSizesResponse
    )
    assert apiName(m.DESCRIBE_LOG_SIZES) == "describe_log_sizes"
    with pytest.raises(ValueError, match="Kafka's"):
        registerSchema(PRODUCE, "mine", 0, m.DescribeLogSizesRequest, m.DescribeLogSizesResponse)
