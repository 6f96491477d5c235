"""
Which schema serves which ApiKey and version, and which versions are
flexible (KIP-482: compact types, tagged fields, request header v2).
"""

from functools import cache

from kio.index import load_payload_module
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from kafkatwist.protocol.legacy import PRODUCE_REQUESTS, PRODUCE_RESPONSES

API_NAMES: dict[int, str] = dict(api_key_map)

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
API_VERSIONS = 18


class UnknownSchema(LookupError):
    """
    No schema for this ApiKey and version.
    """


def apiName(apiKey: int) -> str:
    return API_NAMES.get(apiKey, f"api_{apiKey}")


def knownVersions(apiKey: int) -> range:
    """
    @return: every version this codec can read and write for C{apiKey}.
    """
    name = API_NAMES.get(apiKey)
    if name is None:
        return range(0)
    versions = set(schema_name_map.get(name, {}))
    if apiKey == PRODUCE:
        versions |= set(PRODUCE_REQUESTS)
    if not versions:
        return range(0)
    return range(min(versions), max(versions) + 1)


@cache
def requestType(apiKey: int, version: int) -> type:
    """
    @raise UnknownSchema: if kafkatwist cannot parse this request.
    """
    if apiKey == PRODUCE and version in PRODUCE_REQUESTS:
        return PRODUCE_REQUESTS[version]
    try:
        module = load_payload_module(apiKey, version, EntityType.request)
    except Exception as e:
        raise UnknownSchema(f"{apiName(apiKey)} v{version}") from e
    return _payload(module, EntityType.request)


@cache
def responseType(apiKey: int, version: int) -> type:
    """
    @raise UnknownSchema: if kafkatwist cannot write this response.
    """
    if apiKey == PRODUCE and version in PRODUCE_RESPONSES:
        return PRODUCE_RESPONSES[version]
    try:
        module = load_payload_module(apiKey, version, EntityType.response)
    except Exception as e:
        raise UnknownSchema(f"{apiName(apiKey)} v{version}") from e
    return _payload(module, EntityType.response)


def _payload(module, entityType) -> type:
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "__type__", None) == entityType:
            return value
    raise UnknownSchema(module.__name__)


@cache
def isFlexible(apiKey: int, version: int) -> bool:
    """
    @return: whether this request/response uses the flexible encoding, and so
        request header v2 and (except ApiVersions) response header v1.
    """
    try:
        return bool(requestType(apiKey, version).__flexible__)
    except UnknownSchema:
        # Unknown versions of known APIs are newer than what we know: Kafka
        # only ever moves APIs towards flexible.
        known = knownVersions(apiKey)
        if known and version > known[-1]:
            return isFlexible(apiKey, known[-1])
        return False
