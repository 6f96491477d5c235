"""
A failed handler's answer (Kafka's getErrorResponse): UNKNOWN_SERVER_ERROR
for every topic, partition or resource the request named, built from the
schemas for every API and version the broker serves.
"""

import dataclasses
import datetime

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.codec import decodeResponseFrame, encodeBody, encodeResponseFrame
from kafkatwist.protocol.errorresponse import (
    UNKNOWN_SERVER_ERROR_MESSAGE,
    NoErrorResponse,
    build,
    errorResponse,
)
from kafkatwist.protocol.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
    encodeProduceResponse,
)
from kafkatwist.server.registry import HandlerRegistry, discoverPlugins

UNKNOWN = ErrorCode.unknown_server_error


def served():
    registry = HandlerRegistry(discoverPlugins())
    for key, chain in sorted(registry.chains.items()):
        factory = chain[0][0].factory
        for version in range(factory.minVersion, factory.maxVersion + 1):
            yield key, version


@pytest.mark.parametrize("key, version", list(served()))
def test_every_served_version_has_an_error_response(key, version):
    # A request with nothing in it (and acks=1 for Produce).
    request = build(requestType(key, version), None, ErrorCode.none, None)
    if key == 0:
        request = dataclasses.replace(request, acks=1)
    response = errorResponse(responseType(key, version), request)
    encodeBody(response)


@pytest.mark.parametrize("version", range(0, 13))
def test_produce_as_the_produce_encoder_answers_it(version):
    request = ProduceRequest(None, 1, 1000, [
        TopicProduceData("a", [PartitionProduceData(0, memoryview(b"x")), PartitionProduceData(2, None)]),
        TopicProduceData("b", [PartitionProduceData(1, memoryview(b"y"))]),
    ])
    message = UNKNOWN_SERVER_ERROR_MESSAGE if version >= 8 else None
    expected = encodeProduceResponse(version, [
        ("a", [(0, -1, -1, -1, -1, message, ()), (2, -1, -1, -1, -1, message, ())]),
        ("b", [(1, -1, -1, -1, -1, message, ())]),
    ]).chunks[0]
    assert encodeBody(errorResponse(responseType(0, version), request)) == expected


def test_produce_without_acks_has_none():
    with pytest.raises(NoErrorResponse):
        errorResponse(responseType(0, 9), ProduceRequest(None, 0, 1000, []))


def roundTrip(key, version, entity):
    [frame] = encodeResponseFrame(key, version, 7, entity)
    return decodeResponseFrame(key, version, frame[4:])[1]


@pytest.mark.parametrize("version", [4, 11, 12, 13])
def test_fetch_names_each_partition(version):
    Request = requestType(1, version)
    request = build(Request, {
        "topics": [{"topic": "t", "topic_id": None, "partitions": [{"partition": 3}, {"partition": 5}]}],
        "session_id": 9,
    }, ErrorCode.none, None)
    response = roundTrip(1, version, errorResponse(responseType(1, version), request))
    [topic] = response.responses
    if version < 13:
        assert topic.topic == "t"
    assert [(p.partition_index, p.error_code, p.high_watermark) for p in topic.partitions] == [
        (3, UNKNOWN, -1), (5, UNKNOWN, -1)
    ]
    if version >= 7:
        assert response.error_code == UNKNOWN and response.session_id == 0


def test_describe_configs_names_each_resource():
    request = build(requestType(32, 4), {
        "resources": [{"resource_type": 2, "resource_name": "t1"}, {"resource_type": 4, "resource_name": "1"}],
    }, ErrorCode.none, None)
    response = roundTrip(32, 4, errorResponse(responseType(32, 4), request))
    assert [(r.resource_type, r.resource_name, r.error_code, r.error_message) for r in response.results] == [
        (2, "t1", UNKNOWN, UNKNOWN_SERVER_ERROR_MESSAGE), (4, "1", UNKNOWN, UNKNOWN_SERVER_ERROR_MESSAGE)
    ]
    assert response.throttle_time == datetime.timedelta(0)


def test_delete_topics_answers_bare_names():
    request = dataclasses.replace(build(requestType(20, 3), None, ErrorCode.none, None), topic_names=("x", "y"))
    response = roundTrip(20, 3, errorResponse(responseType(20, 3), request))
    assert [(r.name, r.error_code) for r in response.responses] == [("x", UNKNOWN), ("y", UNKNOWN)]
