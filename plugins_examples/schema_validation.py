"""
Example drop-in: validate produced record values against a per-topic JSON
Schema, wrapping the built-in Produce handler.

What it shows:

  - wrapping a built-in: a priority above 0 puts this handler in front of
    C{builtin.produce}, which it receives as C{wrapped} and delegates to;
  - keeping the fast path fast: topics without a schema are never decoded,
    and a request that touches none of them is handed on as the very same
    object, so its record bytes reach the log (and later C{sendfile}) without
    a copy;
  - answering part of a request itself: failing partitions are taken out of
    the request before it is delegated, and their INVALID_RECORD answers are
    merged into the wrapped handler's response.

Configuration
=============

One JSON Schema per topic, in C{<schema dir>/<topic>.json}.  The schema
directory is the C{KAFKATWIST_SCHEMA_DIR} environment variable, or else the
C{schemas/} directory next to this file.  An environment variable rather
than a broker config key because the broker warns about keys it does not
know (as Kafka does), and a plugin should not make a correct configuration
look wrong.  The directory is listed again at most every
L{RESCAN_SECONDS}, so a schema can be added, changed or removed without a
restart.

A schema that cannot be used (not JSON, not a valid schema, or, without the
C{jsonschema} package, using a keyword the built-in subset does not know)
makes produces to its topic fail with INVALID_RECORD and the reason: the
topic's owner asked for validation, so records are not let through
unvalidated.

Validation
==========

With the C{jsonschema} package installed, schemas are full JSON Schema (the
draft named by C{$schema}, 2020-12 by default).  Without it, a small
built-in validator handles this subset, and refuses schemas using anything
else::

    type (incl. lists of types), enum, const,
    properties, required, additionalProperties (boolean or schema),
    items (one schema), minItems, maxItems,
    minLength, maxLength, pattern,
    minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers)
    and the annotations $schema, $id, $comment, title, description,
    default, examples

Each record value must be UTF-8 JSON that the schema accepts.  A null value
(a tombstone, which deletes a key in a compacted topic) has nothing to
validate and passes.  Like Kafka, a partition's record set is accepted or
rejected as a whole: one bad record rejects the partition's batch, the
answer lists the bad records (Produce v8+ C{record_errors}: the record's
index in the request's record set and why) and a summary
(C{error_message}).  Other partitions, and other topics, of the same request
are appended as usual.  With acks=0 nothing is answered, as for any error.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from kafkatwist.errors import ErrorCode
from kafkatwist.handler import Handler, HandlerPlugin
from kafkatwist.protocol.apis import PRODUCE
from kafkatwist.protocol.entities import has, make, nested
from kafkatwist.protocol.records import CorruptRecordError, decodeBatches

try:
    import jsonschema
except ImportError:  # the built-in subset serves instead
    jsonschema = None

log = Logger(namespace="kafkatwist.examples.schema_validation")

#: where schemas are looked for when the environment does not say
DEFAULT_SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
SCHEMA_DIR_VARIABLE = "KAFKATWIST_SCHEMA_DIR"
#: how stale the view of the schema directory may get
RESCAN_SECONDS = 5.0
#: record errors listed per partition; the summary still counts them all
MAX_RECORD_ERRORS = 10
#: Produce v13 names topics by id; this example keys everything by name
MAX_PRODUCE_VERSION = 12


class SchemaError(ValueError):
    """
    A schema file that cannot be used to validate.
    """


# ---------------------------------------------------------------------------
# Compiling schemas into "value -> list of problems" functions


def compileSchema(schema):
    """
    Make a validator for C{schema}.

    @param schema: the parsed JSON Schema document.
    @return: a function taking a parsed JSON value and returning a C{list}
        of problems, as C{str}, empty if the value is valid.
    @raise SchemaError: if C{schema} is not a usable schema.
    """
    if jsonschema is not None:
        return _compileWithJsonschema(schema)
    return compileSubset(schema)


def _compileWithJsonschema(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise SchemaError(e.message) from e
    validator = cls(schema)

    def validate(value):
        return [
            f"{_path(error.absolute_path)}: {error.message}"
            for error in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
        ]

    return validate


_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    # JSON has no separate booleans-as-numbers: True is not an integer here.
    "integer": lambda v: (
        isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer()
    ),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$comment", "title", "description", "default", "examples"}
)
_KEYWORDS = (
    frozenset(
        {
            "type",
            "enum",
            "const",
            "properties",
            "required",
            "additionalProperties",
            "items",
            "minItems",
            "maxItems",
            "minLength",
            "maxLength",
            "pattern",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
        }
    )
    | _ANNOTATIONS
)


def compileSubset(schema, where="#"):
    """
    The built-in validator for the subset of JSON Schema listed in this
    module's docstring.  Keywords outside it are refused rather than
    ignored: ignoring one would accept records the schema's author meant to
    reject.

    @param schema: a schema (a C{dict}, or C{True}/C{False}).
    @param where: the schema location, for error messages.
    @return: see L{compileSchema}.
    @raise SchemaError: for keywords outside the subset or malformed ones.
    """
    if schema is True or schema == {}:
        return lambda value, path=(): []
    if schema is False:
        return lambda value, path=(): [f"{_path(path)}: no value is allowed here"]
    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a schema is an object or a boolean, not {schema!r}")
    unknown = set(schema) - _KEYWORDS
    if unknown:
        raise SchemaError(
            f"{where}: keyword(s) {', '.join(sorted(unknown))} not supported by the built-in "
            f"validator; install jsonschema for full JSON Schema"
        )

    # Each keyword becomes one check(value, path) -> list of problems; the
    # schema is walked once here, not once per record.
    checks = []

    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not all(n in _TYPES for n in names):
            raise SchemaError(f"{where}/type: unknown type in {schema['type']!r}")
        tests = [_TYPES[n] for n in names]
        expected = " or ".join(names)
        checks.append(
            lambda v, p: (
                [] if any(t(v) for t in tests) else [f"{_path(p)}: {v!r} is not of type {expected}"]
            )
        )
    if "enum" in schema:
        allowed = schema["enum"]
        checks.append(
            lambda v, p: (
                [] if _member(v, allowed) else [f"{_path(p)}: {v!r} is not one of {allowed!r}"]
            )
        )
    if "const" in schema:
        const = schema["const"]
        checks.append(
            lambda v, p: [] if _member(v, [const]) else [f"{_path(p)}: {const!r} was expected"]
        )

    properties = {
        name: compileSubset(sub, f"{where}/properties/{name}")
        for name, sub in schema.get("properties", {}).items()
    }
    required = list(schema.get("required", ()))
    extra = schema.get("additionalProperties", True)
    extraCheck = compileSubset(extra, f"{where}/additionalProperties")
    if properties or required or extra is not True:

        def checkObject(v, p):
            if not isinstance(v, dict):
                return []  # only "type" restricts the kind of value
            problems = [
                f"{_path(p)}: {name!r} is a required property" for name in required if name not in v
            ]
            for name, item in v.items():
                check = properties.get(name)
                if check is not None:
                    problems += check(item, p + (name,))
                elif extra is False:
                    problems.append(f"{_path(p)}: additional property {name!r} is not allowed")
                else:
                    problems += extraCheck(item, p + (name,))
            return problems

        checks.append(checkObject)

    if "items" in schema:
        itemCheck = compileSubset(schema["items"], f"{where}/items")
        checks.append(
            lambda v, p: (
                [m for i, item in enumerate(v) for m in itemCheck(item, p + (i,))]
                if isinstance(v, list)
                else []
            )
        )

    def bound(keyword, applies, measure, ok, text):
        if keyword in schema:
            limit = schema[keyword]
            checks.append(
                lambda v, p: (
                    [f"{_path(p)}: {v!r} {text} {limit}"]
                    if applies(v) and not ok(measure(v), limit)
                    else []
                )
            )

    isNumber = _TYPES["number"]
    isString = _TYPES["string"]
    isArray = _TYPES["array"]
    same = lambda v: v
    bound("minimum", isNumber, same, lambda x, n: x >= n, "is less than the minimum of")
    bound("maximum", isNumber, same, lambda x, n: x <= n, "is more than the maximum of")
    bound("exclusiveMinimum", isNumber, same, lambda x, n: x > n, "is not more than")
    bound("exclusiveMaximum", isNumber, same, lambda x, n: x < n, "is not less than")
    bound("minLength", isString, len, lambda x, n: x >= n, "is shorter than")
    bound("maxLength", isString, len, lambda x, n: x <= n, "is longer than")
    bound("minItems", isArray, len, lambda x, n: x >= n, "has fewer items than")
    bound("maxItems", isArray, len, lambda x, n: x <= n, "has more items than")
    if "pattern" in schema:
        try:
            pattern = re.compile(schema["pattern"])
        except re.error as e:
            raise SchemaError(f"{where}/pattern: {e}") from e
        checks.append(
            lambda v, p: (
                [f"{_path(p)}: {v!r} does not match {pattern.pattern!r}"]
                if isinstance(v, str) and not pattern.search(v)
                else []
            )
        )

    def validate(value, path=()):
        return [problem for check in checks for problem in check(value, path)]

    return validate


def _member(value, allowed) -> bool:
    # JSON equality: 1 and True are different values, 1 and 1.0 are not.
    return any(value == a and isinstance(value, bool) == isinstance(a, bool) for a in allowed)


def _path(parts) -> str:
    """
    A JSON path like C{$.items[2].sku}: where in the record the problem is.
    """
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


# ---------------------------------------------------------------------------
# The schema directory


class SchemaStore:
    """
    The schemas of a directory, by topic, re-read when a file changes.

    Handler threads call L{forTopic} concurrently; a lock keeps the
    occasional rescan to one thread.  Between rescans a lookup is a
    dictionary read: no file system access on the produce path.

    @ivar directory: the directory holding C{<topic>.json} files.
    """

    def __init__(self, directory: str, rescanSeconds: float = RESCAN_SECONDS, now=time.monotonic):
        self.directory = directory
        self.rescanSeconds = rescanSeconds
        self._now = now
        self._lock = threading.Lock()
        #: topic -> (mtime, validator or SchemaError)
        self._schemas: dict[str, tuple[float, object]] = {}
        self._scannedAt: float | None = None

    def forTopic(self, topic: str):
        """
        @return: C{None} if C{topic} has no schema, else its validator (see
            L{compileSchema}) or the L{SchemaError} that makes it unusable.
        """
        now = self._now()
        if self._scannedAt is None or now - self._scannedAt >= self.rescanSeconds:
            with self._lock:
                if self._scannedAt is None or now - self._scannedAt >= self.rescanSeconds:
                    self._rescan()
                    self._scannedAt = now
        entry = self._schemas.get(topic)
        return None if entry is None else entry[1]

    def _rescan(self) -> None:
        try:
            names = [n for n in os.listdir(self.directory) if n.endswith(".json")]
        except FileNotFoundError:
            names = []
        schemas = {}
        for name in names:
            topic = name[: -len(".json")]
            path = os.path.join(self.directory, name)
            try:
                mtime = os.stat(path).st_mtime
            except FileNotFoundError:
                continue  # removed while we looked
            old = self._schemas.get(topic)
            if old is not None and old[0] == mtime:
                schemas[topic] = old
                continue
            schemas[topic] = (mtime, self._load(topic, path))
        # Replacing the dict in one assignment lets readers in other threads
        # see either the old view or the new one, never a half-built one.
        self._schemas = schemas

    @staticmethod
    def _load(topic: str, path: str):
        try:
            with open(path, encoding="utf-8") as f:
                validator = compileSchema(json.load(f))
        except (OSError, ValueError) as e:  # JSONDecodeError and SchemaError are ValueErrors
            error = e if isinstance(e, SchemaError) else SchemaError(f"{type(e).__name__}: {e}")
            log.error(
                "Schema for topic {topic} in {path} is unusable, "
                "produces to it are refused: {error}",
                topic=topic,
                path=path,
                error=str(error),
            )
            return error
        log.info("Validating topic {topic} with {path}", topic=topic, path=path)
        return validator


def schemaDirectory(environ=os.environ) -> str:
    return environ.get(SCHEMA_DIR_VARIABLE) or DEFAULT_SCHEMA_DIR


# ---------------------------------------------------------------------------
# Checking one partition's records


@dataclasses.dataclass
class Rejection:
    """
    Why one partition's record set is refused.

    @ivar code: the error code for the partition.
    @ivar message: the summary (Produce C{error_message}).
    @ivar recordErrors: (index of the record in the record set, problem)
        pairs (Produce C{record_errors}).
    """

    code: ErrorCode
    message: str
    recordErrors: list[tuple[int, str]] = dataclasses.field(default_factory=list)


def checkRecords(topic: str, records, validator) -> Rejection | None:
    """
    Decode a partition's record set and validate every value.

    @param validator: what L{SchemaStore.forTopic} returned (not C{None}).
    @return: C{None} if every record passes, else the L{Rejection}.
    """
    if isinstance(validator, SchemaError):
        return Rejection(
            ErrorCode.invalid_record, f"the schema of topic {topic} is unusable: {validator}"
        )
    problems: list[tuple[int, str]] = []
    count = 0
    try:
        # checkCrc=False: the log checks every batch's CRC when it appends,
        # and a corrupt batch we pass on is refused there with
        # CORRUPT_MESSAGE.
        for batch in decodeBatches(records or b"", checkCrc=False):
            for record in batch.records:
                index, count = count, count + 1
                if record.value is None:
                    continue  # a tombstone
                try:
                    value = json.loads(record.value)
                except ValueError as e:  # UnicodeDecodeError is one too
                    problems.append((index, f"record {index}: value is not JSON: {e}"))
                    continue
                problems.extend((index, f"record {index}: {p}") for p in validator(value))
    except CorruptRecordError as e:
        return Rejection(ErrorCode.corrupt_message, f"cannot decode the record set: {e}")
    if not problems:
        return None
    bad = len({index for index, _ in problems})
    return Rejection(
        ErrorCode.invalid_record,
        f"{bad} of {count} records fail the schema of topic {topic}; first: {problems[0][1]}",
        problems[:MAX_RECORD_ERRORS],
    )


# ---------------------------------------------------------------------------
# The handler


class SchemaValidatingProduceHandler(Handler):
    """
    Produce, with record values of topics that have a schema validated
    before the wrapped handler appends them.

    @ivar schemas: the L{SchemaStore}.
    """

    apiKey = PRODUCE

    def __init__(self, broker, wrapped, schemas: SchemaStore | None = None) -> None:
        if wrapped is None:
            raise ValueError("schema validation wraps a Produce handler, and there is none")
        super().__init__(broker, wrapped)
        # A wrapper advertises (through ApiVersions) what it can pass on:
        # the wrapped handler's range, up to the last version this code
        # understands.
        self.minVersion = wrapped.minVersion
        self.maxVersion = min(wrapped.maxVersion, MAX_PRODUCE_VERSION)
        if schemas is None:
            schemas = SchemaStore(schemaDirectory())
            log.info(
                "Schema validation for Produce reads schemas from {directory}",
                directory=schemas.directory,
            )
        self.schemas = schemas

    def handle(self, context, request):
        rejected: dict[tuple[str, int], Rejection] = {}
        for topic in request.topic_data:
            validator = self.schemas.forTopic(topic.name)
            if validator is None:
                continue  # no schema: the records are not even looked at
            for data in topic.partition_data:
                rejection = checkRecords(topic.name, data.records, validator)
                if rejection is not None:
                    rejected[(topic.name, data.index)] = rejection
        if not rejected:
            # The common case: the request object as it came, so the record
            # bytes the log appends are the very ones read off the socket.
            return self.wrapped.handle(context, request)

        result = self.wrapped.handle(context, _without(request, rejected))
        if isinstance(result, Deferred):
            # Another wrapper below may answer later; merge when it does
            # (on the connection's Processor thread: merging is CPU work only).
            return result.addCallback(self._merge, request, rejected)
        return self._merge(result, request, rejected)

    def _merge(self, response, request, rejected):
        """
        Put the rejected partitions' answers into the wrapped handler's
        response, in the order the request named the partitions.
        """
        if response is None:
            return None  # acks=0: nobody is told, as with any produce error
        cls = type(response)
        Topic = nested(cls, "TopicProduceResponse")
        Partition = nested(cls, "PartitionProduceResponse")
        answered = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
        for key, rejection in rejected.items():
            answered[key] = self._partitionError(Partition, key, rejection)
        topics = []
        for topic in request.topic_data:
            partitions = tuple(
                answered[(topic.name, data.index)]
                for data in topic.partition_data
                if (topic.name, data.index) in answered
            )
            topics.append(make(Topic, name=topic.name, partition_responses=partitions))
        return dataclasses.replace(response, responses=tuple(topics))

    def _partitionError(self, Partition, key, rejection: Rejection):
        topic, index = key
        partitionLog = (
            self.broker.logManager.getLog(topic, index) if self.broker is not None else None
        )
        recordErrors = ()
        if has(Partition, "record_errors"):  # Produce v8+
            RecordError = nested(Partition, "BatchIndexAndErrorMessage")
            recordErrors = tuple(
                RecordError(batch_index=i, batch_index_error_message=message)
                for i, message in rejection.recordErrors
            )
        return make(
            Partition,
            index=index,
            error_code=rejection.code,
            base_offset=-1,
            log_append_time=None,
            log_start_offset=partitionLog.logStartOffset if partitionLog is not None else -1,
            record_errors=recordErrors,
            error_message=rejection.message,
        )


def _without(request, rejected):
    """
    A copy of the Produce request without the rejected partitions (and
    without topics left empty).  The kept partitions' entities, and so their
    record bytes, are shared with the original, not copied.
    """
    topics = []
    for topic in request.topic_data:
        kept = tuple(d for d in topic.partition_data if (topic.name, d.index) not in rejected)
        if kept:
            topics.append(dataclasses.replace(topic, partition_data=kept))
    return dataclasses.replace(request, topic_data=tuple(topics))


#: Priority 100 (the drop-in default, spelled out because the audit example
#: wraps Produce too, at 200, and equal priorities refuse to start).
schemaValidation = HandlerPlugin(
    "example.schema_validation", PRODUCE, SchemaValidatingProduceHandler, priority=100
)
