"""
Which schema serves which ApiKey and version, and which versions are
flexible (KIP-482: compact types, tagged fields, request header v2).
"""

from functools import cache

from kio.index import load_payload_module
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType

from kafkatwist.protocol.legacy_apis import LEGACY_SCHEMAS

API_NAMES: dict[int, str] = dict(api_key_map)

# The ApiKeys the project speaks: the one place they are spelled out
# (checked against kio's table by the tests).
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
OFFSET_FOR_LEADER_EPOCH = 23
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
DESCRIBE_LOG_DIRS = 35
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
ELECT_LEADERS = 43
INCREMENTAL_ALTER_CONFIGS = 44
ALTER_PARTITION_REASSIGNMENTS = 45
LIST_PARTITION_REASSIGNMENTS = 46
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
ALTER_CLIENT_QUOTAS = 49
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


#: schemas of APIs Kafka does not define, registered by plugins
_CUSTOM: dict[int, dict[int, tuple[type, type]]] = {}
_CUSTOM_NAMES: dict[int, str] = {}


class UnknownSchema(LookupError):
    """
    No schema for this ApiKey and version.
    """


def apiName(apiKey: int) -> str:
    return API_NAMES.get(apiKey) or _CUSTOM_NAMES.get(apiKey, f"api_{apiKey}")


def registerSchema(apiKey: int, name: str, version: int, request: type, response: type) -> None:
    """
    Teach the codec a request/response pair for an ApiKey Kafka does not
    define (a plugin's own API).  The classes follow kio's dataclass
    conventions (C{__flexible__}, field metadata), so kio reads and writes
    them.

    @raise ValueError: if C{apiKey} is one of Kafka's.
    """
    if apiKey in API_NAMES:
        raise ValueError(f"ApiKey {apiKey} is Kafka's {API_NAMES[apiKey]}; pick another")
    existing = _CUSTOM.get(apiKey, {}).get(version)
    if existing is not None and existing != (request, response):
        raise ValueError(f"ApiKey {apiKey} v{version} already has a schema")
    _CUSTOM.setdefault(apiKey, {})[version] = (request, response)
    _CUSTOM_NAMES[apiKey] = name
    requestType.cache_clear()
    responseType.cache_clear()
    isFlexible.cache_clear()


def knownVersions(apiKey: int) -> range:
    """
    @return: every version this codec can read and write for C{apiKey}.
    """
    if apiKey in _CUSTOM:
        return range(min(_CUSTOM[apiKey]), max(_CUSTOM[apiKey]) + 1)
    name = API_NAMES.get(apiKey)
    if name is None:
        return range(0)
    versions = set(schema_name_map.get(name, {})) | set(LEGACY_SCHEMAS.get(apiKey, ()))
    if not versions:
        return range(0)
    return range(min(versions), max(versions) + 1)


@cache
def requestType(apiKey: int, version: int) -> type:
    """
    @raise UnknownSchema: if kafkatwist cannot parse this request.
    """
    return _schema(apiKey, version, EntityType.request)


@cache
def responseType(apiKey: int, version: int) -> type:
    """
    @raise UnknownSchema: if kafkatwist cannot write this response.
    """
    return _schema(apiKey, version, EntityType.response)


def _schema(apiKey: int, version: int, entityType) -> type:
    """
    Where a schema comes from, first found: the versions Kafka 4 dropped
    (L{LEGACY_SCHEMAS}), a plugin's own API, C{kio}'s generated ones.
    """
    side = 0 if entityType == EntityType.request else 1
    legacy = LEGACY_SCHEMAS.get(apiKey, {}).get(version)
    if legacy is not None:
        return legacy[side]
    if apiKey in _CUSTOM:
        try:
            return _CUSTOM[apiKey][version][side]
        except KeyError:
            raise UnknownSchema(f"{apiName(apiKey)} v{version}") from None
    try:
        module = load_payload_module(apiKey, version, entityType)
    except Exception as e:
        raise UnknownSchema(f"{apiName(apiKey)} v{version}") from e
    return _payload(module, entityType)


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
        return bool(requestType(apiKey, version).__flexible__)  # type: ignore[attr-defined]
    except UnknownSchema:
        # Unknown versions of known APIs are newer than what we know: Kafka
        # only ever moves APIs towards flexible.
        known = knownVersions(apiKey)
        if known and version > known[-1]:
            return isFlexible(apiKey, known[-1])
        return False
