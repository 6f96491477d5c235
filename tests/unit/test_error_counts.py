"""
Kafka's C{AbstractResponse.errorCounts}, read from the response schemas:
every error code a response carries, counted once per place, NONE too.
"""

from __future__ import annotations

import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from kafkatwist.protocol.apis import requestType, responseType
from kafkatwist.protocol.errorcounts import errorCounts
from kafkatwist.protocol.errorresponse import build, errorResponse
from tests.unit.test_error_response import served

E = ErrorCode


def response(key, version, fields, code=E.unknown_server_error):
    request = build(requestType(key, version), fields, E.none, None)
    if key == 0:
        request = dataclasses.replace(request, acks=1)
    return errorResponse(responseType(key, version), request, code)


def test_produce_counts_each_partition():
    got = response(0, 9, {"acks": 1, "topic_data": [
        {"name": "a", "partition_data": [{"index": 0}, {"index": 2}]},
        {"name": "b", "partition_data": [{"index": 1}]},
    ]}, E.not_leader_or_follower)
    assert errorCounts(got) == {E.not_leader_or_follower.value: 3}


@pytest.mark.parametrize("version", [4, 12])
def test_fetch_counts_the_top_level_and_each_partition(version):
    got = response(1, version, {
        "topics": [{"topic": "t", "topic_id": None, "partitions": [{"partition": 3}, {"partition": 5}]}],
    })
    # v7+ has a top-level error code beside the partitions'
    assert errorCounts(got) == {E.unknown_server_error.value: 3 if version >= 7 else 2}


def test_none_is_counted_too():
    got = response(18, 3, {}, E.none)  # ApiVersions: one top-level code
    assert errorCounts(got) == {E.none.value: 1}


def test_metadata_counts_topics_and_partitions():
    import datetime
    import uuid

    Response = responseType(3, 12)
    Topic = Response.__dataclass_fields__["topics"].type.__args__[0]
    Partition = Topic.__dataclass_fields__["partitions"].type.__args__[0]
    got = Response(throttle_time=datetime.timedelta(0), brokers=(), topics=(
        Topic(error_code=E.none, name="a", topic_id=uuid.uuid4(), partitions=(
            Partition(error_code=E.none, partition_index=0, leader_id=1),
            Partition(error_code=E.leader_not_available, partition_index=1, leader_id=-1),
        )),
        Topic(error_code=E.unknown_topic_or_partition, name="b", topic_id=None, partitions=()),
    ))
    assert errorCounts(got) == {
        E.none.value: 2, E.leader_not_available.value: 1, E.unknown_topic_or_partition.value: 1
    }


@pytest.mark.parametrize("key, version", list(served()))
def test_every_served_response_can_be_counted(key, version):
    request = build(requestType(key, version), None, E.none, None)
    if key == 0:
        request = dataclasses.replace(request, acks=1)
    counts = errorCounts(errorResponse(responseType(key, version), request))
    assert all(isinstance(code, int) and n > 0 for code, n in counts.items())


@pytest.mark.parametrize("version", [0, 4, 6, 7, 12])
def test_a_fetch_answer_counts_its_top_level_error_in_every_version(version):
    # Kafka's FetchResponse.errorCounts counts error() whatever the version
    # (NONE before v7, which has no top-level error on the wire).
    from kafkatwist.plugins.client_quotas import throttledFetchResponse
    from kafkatwist.protocol.fetch import encodeFetchResponse

    assert encodeFetchResponse(version, []).errors == {E.none.value: 1}
    assert throttledFetchResponse(version, 5).errors == {E.none.value: 1}
