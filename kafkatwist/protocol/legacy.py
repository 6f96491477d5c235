"""
Produce v0-v2, which Kafka 3.x serves (with message formats v0/v1, see
L{kafkatwist.protocol.convert}) and Kafka 4 no longer defines, so C{kio}
does not generate them.  Written in C{kio}'s dataclass conventions so its
reader and writer handle them like the generated ones; the other APIs'
old versions are in L{kafkatwist.protocol.legacy_apis}.

Produce v0-v2 differ from v3 only in the missing C{transactional_id};
responses gain C{throttle_time} in v1 and C{log_append_time} in v2.
"""

import datetime
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import Records, TZAware, i16, i32, i32Timedelta, i64

_ZERO_THROTTLE = i32Timedelta.parse(datetime.timedelta(0))


def _request(version: int) -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = RequestHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        records: Records | None = field(metadata={"kafka_type": "records"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceData:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = RequestHeader
        name: str = field(metadata={"kafka_type": "string"})
        partition_data: tuple[PartitionProduceData, ...]

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ProduceRequest:
        __type__: ClassVar = EntityType.request
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = RequestHeader
        acks: i16 = field(metadata={"kafka_type": "int16"})
        timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
        topic_data: tuple[TopicProduceData, ...]

        # The same attribute the v3+ schemas have, so handlers need no branch.
        transactional_id: ClassVar[None] = None

    ProduceRequest.PartitionProduceData = PartitionProduceData  # type: ignore[attr-defined]
    ProduceRequest.TopicProduceData = TopicProduceData  # type: ignore[attr-defined]
    return ProduceRequest


def _response(version: int) -> type:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceResponseV0:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = ResponseHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        base_offset: i64 = field(metadata={"kafka_type": "int64"})

    @dataclass(frozen=True, slots=True, kw_only=True)
    class PartitionProduceResponseV2:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = ResponseHeader
        index: i32 = field(metadata={"kafka_type": "int32"})
        error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
        base_offset: i64 = field(metadata={"kafka_type": "int64"})
        log_append_time: TZAware | None = field(
            metadata={"kafka_type": "datetime_i64"}, default=None
        )

    Partition = PartitionProduceResponseV2 if version >= 2 else PartitionProduceResponseV0

    @dataclass(frozen=True, slots=True, kw_only=True)
    class TopicProduceResponse:
        __type__: ClassVar = EntityType.nested
        __version__: ClassVar[i16] = i16(version)
        __flexible__: ClassVar[bool] = False
        __api_key__: ClassVar[i16] = i16(0)
        __header_schema__: ClassVar[type] = ResponseHeader
        name: str = field(metadata={"kafka_type": "string"})
        partition_responses: tuple[Partition, ...]  # type: ignore[valid-type]

    if version == 0:

        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]

    else:

        @dataclass(frozen=True, slots=True, kw_only=True)
        class ProduceResponse:  # type: ignore[no-redef]
            __type__: ClassVar = EntityType.response
            __version__: ClassVar[i16] = i16(version)
            __flexible__: ClassVar[bool] = False
            __api_key__: ClassVar[i16] = i16(0)
            __header_schema__: ClassVar[type] = ResponseHeader
            responses: tuple[TopicProduceResponse, ...]
            throttle_time: i32Timedelta = field(
                metadata={"kafka_type": "timedelta_i32"}, default=_ZERO_THROTTLE
            )

    ProduceResponse.TopicProduceResponse = TopicProduceResponse  # type: ignore[attr-defined]
    ProduceResponse.PartitionProduceResponse = Partition  # type: ignore[attr-defined]
    return ProduceResponse


PRODUCE_REQUESTS = {v: _request(v) for v in (0, 1, 2)}
PRODUCE_RESPONSES = {v: _response(v) for v in (0, 1, 2)}
