"""
Regression tests for what the fuzzer (tests/fuzz) found, each built from
the input that made the broker log an unhandled traceback.
"""

import uuid

import pytest

from kafkatwist.errors import ErrorCode
from kafkatwist.plugins.metadata import MetadataHandler
from tests.unit.adminhelpers import call, makeBroker, req


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_null_topic_name_before_v12(version):
    # Metadata v10/v11 with a topic {topic_id: X, name: null}: the response
    # name is not nullable in those versions, so kio's writer raised
    # TypeError and the handler pool logged a traceback.  Kafka refuses it.
    broker = makeBroker()
    topicId = uuid.uuid4()
    response = call(
        MetadataHandler, broker, version,
        topics=(req(3, version, "MetadataRequestTopic", topic_id=topicId, name=None),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        include_cluster_authorized_operations=False,
    )
    [topic] = response.topics
    assert topic.error_code == ErrorCode.invalid_request
    assert topic.name == ""
