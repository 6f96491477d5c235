"""
The hand-written Fetch response encoder agrees with kio's generated one.
"""

import uuid

import pytest
from kio.serial import entity_reader

from kafkatwist.protocol.apis import responseType
from kafkatwist.protocol.fetch import PartitionData, encodeFetchResponse


@pytest.mark.parametrize("version", range(4, 17))
def test_matches_kio_reader(version):
    topic = uuid.UUID(int=7) if version >= 13 else "events"
    body = encodeFetchResponse(
        version,
        [
            (
                topic,
                [
                    PartitionData(0, 0, 10, 10, 2, b"RECORDS"),
                    PartitionData(1, 1, 5, 5, 0, b""),
                ],
            )
        ],
    )
    data = b"".join(body.chunks)
    assert len(data) == body.size
    response, size = entity_reader(responseType(1, version))(data, 0)
    assert size == len(data)
    [t] = response.responses
    assert (t.topic_id if version >= 13 else t.topic) == topic
    first, second = t.partitions
    assert (first.partition_index, first.high_watermark, first.records) == (0, 10, b"RECORDS")
    assert second.error_code == 1
    if version >= 5:
        assert first.log_start_offset == 2


def test_file_regions_pass_through():
    class Region:
        length = 5

    region = Region()
    body = encodeFetchResponse(12, [("t", [PartitionData(0, 0, 1, 1, 0, region)])])
    assert region in body.chunks
    assert body.size == sum(len(c) if isinstance(c, bytes) else 5 for c in body.chunks)


@pytest.mark.parametrize("version", [13, 16])
def test_zero_topic_id_answered_under_the_zero_id(version):
    # Found by the fuzzer: a Fetch naming topic id 0 (kio reads it as None)
    # made the encoder raise AttributeError; it is UNKNOWN_TOPIC_ID (100).
    body = encodeFetchResponse(version, [(None, [PartitionData(0, 100)])])
    response, _ = entity_reader(responseType(1, version))(b"".join(body.chunks), 0)
    [t] = response.responses
    assert t.topic_id is None and t.partitions[0].error_code == 100
