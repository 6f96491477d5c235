"""
One encoder and decoder for Kafka message schemas given as data: the
coordinators' records (C{__consumer_offsets}, C{__transaction_state}) are
defined by Kafka as JSON schemas (C{*/src/main/resources/common/message/}),
and L{kafkatwist.coordinator.recordschemas} holds them in that shape, as
Python dicts::

    {"name": "OffsetCommitValue", "validVersions": "0-4", "flexibleVersions": "4+",
     "fields": [{"name": "offset", "type": "int64", "versions": "0+"}, ...],
     "commonStructs": [...]}

A field has a C{name}, a C{type} (C{int8}, C{int16}, C{int32}, C{int64},
C{bool}, C{uuid}, C{string}, C{bytes}, a struct name, or C{[]} and one of
those), the C{versions} it exists in (C{"0+"}, C{"1"}, C{"0-2"}), optionally
C{nullableVersions}, a C{default}, inline C{fields} for a struct, and for a
tagged field C{tag} and C{taggedVersions}.  The encoding is Kafka's: classic
(int16-length strings, int32-length bytes and arrays) below the first
flexible version, compact (unsigned varint length + 1, 0 for null) and
tagged fields from it on; a tagged field is written when it differs from its
default; unknown tags are skipped when reading, as Kafka's readers do.

Why not C{kio}, which encodes requests: its reader refuses unknown tagged
fields, and Kafka adds tagged fields to these records release by release
(C{ConsumerGroupMetadataValue}'s C{MetadataHash} in 4.1), so a record a
newer Kafka wrote would not load.

Decoding is bounded: every length and count is checked against the bytes
present, and anything that does not decode raises the caller's error class
(a L{SchemaError} by default), nothing else.  Values are dicts keyed by the
schema's field names; a field absent from a version reads as its default.

Nulls: by default a length of -1 reads as null wherever it stands (and a
negative array count too), any other negative length is refused.  A schema
made with C{kafkaNulls=True} reads them as Kafka's generated readers do: in a
field the version makes nullable any negative length or count is null, in
any other field (and in an array's elements) it is refused.  Encoding is the
same either way.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from kafkatwist.protocol.header import MalformedHeader, readUnsignedVarint, unsignedVarint

__all__ = ["Schema", "SchemaError", "inVersions"]


class SchemaError(ValueError):
    """
    Bytes that do not decode by their schema, or values it cannot encode.
    """


def inVersions(spec: str | None, version: int) -> bool:
    """
    Whether C{version} is in a Kafka version range (C{"0+"}, C{"3"},
    C{"0-2"}, C{"none"} or C{None}: never).
    """
    if spec is None or spec == "none":
        return False
    if spec.endswith("+"):
        return version >= int(spec[:-1])
    low, _, high = spec.partition("-")
    return int(low) <= version <= int(high or low)


_FIXED = {
    "int8": struct.Struct(">b"),
    "int16": struct.Struct(">h"),
    "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"),
    "uint16": struct.Struct(">H"),
    "uint32": struct.Struct(">I"),
    "float64": struct.Struct(">d"),
    "bool": struct.Struct(">?"),
}
_INT16 = _FIXED["int16"]
_INT32 = _FIXED["int32"]
_ZERO_UUID = uuid.UUID(int=0)
_NO_TAGS = b"\x00"

#: how a negative length or count reads: -1 is null, any other negative is
#: refused (arrays: any negative is null); any negative is null (Kafka's
#: nullable fields); any negative is refused (Kafka's other fields)
_LAX, _NULL, _REFUSED = 0, 1, 2


class _Field:
    """
    One field of a struct, compiled for one version.
    """

    __slots__ = ("default", "element", "kind", "name", "nullable", "nulls", "struct")

    def __init__(self, name, kind, nullable, default, element=None, struct=None, nulls=0) -> None:
        self.name = name
        #: a fixed type's name, "string", "bytes", "uuid", "struct" or "array"
        self.kind = kind
        self.nullable = nullable
        #: how a negative length reads (L{_LAX}, L{_NULL} or L{_REFUSED})
        self.nulls = nulls
        self.default = default
        #: an array's element kind ("struct" or a primitive)
        self.element = element
        #: the compiled struct of a struct or an array of structs
        self.struct = struct


class _Struct:
    """
    A struct compiled for one version: its fields in order, its tagged
    fields by tag, whether the version is flexible.
    """

    __slots__ = ("fields", "flexible", "names", "runs", "tagged", "writers")

    def __init__(self, flexible: bool) -> None:
        self.flexible = flexible
        self.fields: list[_Field] = []
        #: the fields in order, each run of fixed-size fields merged into
        #: one L{_Run} (one C{pack}/C{unpack_from} for them all)
        self.runs: list[_Field | _Run] = []
        #: one C{writer(out, values.get)} per run, in order
        self.writers: list[Callable[[list[bytes], Callable], None]] = []
        self.tagged: dict[int, _Field] = {}
        #: every field name of the schema with its default, for fields
        #: absent from this version
        self.names: dict[str, Any] = {}


class _Run:
    """
    Consecutive fixed-size fields, packed and unpacked at once.
    """

    __slots__ = ("defaults", "names", "struct")

    def __init__(self, fields: list[_Field]) -> None:
        self.names = tuple(f.name for f in fields)
        self.defaults = tuple(f.default for f in fields)
        self.struct = struct.Struct(">" + "".join(_FIXED[f.kind].format[1:] for f in fields))


def _runs(fields: list[_Field]) -> list[_Field | _Run]:
    out: list[_Field | _Run] = []
    pending: list[_Field] = []
    for f in fields + [None]:  # type: ignore[list-item]
        if f is not None and f.kind in _FIXED:
            pending.append(f)
            continue
        if pending:
            out.append(_Run(pending))
            pending = []
        if f is not None:
            out.append(f)
    return out


def _typeDefault(kind: str, element: str | None) -> Any:
    if kind in ("string",):
        return ""
    if kind == "bytes":
        return b""
    if kind == "uuid":
        return _ZERO_UUID
    if kind == "array":
        return []
    if kind == "struct":
        return None
    if kind == "bool":
        return False
    return 0


class Schema:
    """
    One message schema (a dict shaped as Kafka's JSON), compiled per version
    on first use.
    """

    def __init__(self, definition: Mapping[str, Any], kafkaNulls: bool = False) -> None:
        """
        @param kafkaNulls: read nulls as Kafka's generated readers do (see
            the module's documentation).
        """
        self.definition = definition
        self._kafkaNulls = kafkaNulls
        self.name: str = definition["name"]
        self.apiKey: int | None = definition.get("apiKey")
        self.validVersions: str = definition["validVersions"]
        self._flexible: str | None = definition.get("flexibleVersions")
        self._common = {s["name"]: s for s in definition.get("commonStructs", ())}
        self._compiled: dict[int, _Struct] = {}

    def isValid(self, version: int) -> bool:
        return inVersions(self.validVersions, version)

    @property
    def highestVersion(self) -> int:
        """
        The newest version the schema defines (the top of C{validVersions}).
        """
        return int(self.validVersions.rpartition("-")[2])

    # -- compiling ---------------------------------------------------------

    def _compile(self, version: int) -> _Struct:
        compiled = self._compiled.get(version)
        if compiled is None:
            flexible = inVersions(self._flexible, version)
            compiled = self._compiled[version] = self._struct(self.definition["fields"], version, flexible)
        return compiled

    def _struct(self, fields, version: int, flexible: bool) -> _Struct:
        out = _Struct(flexible)
        for f in fields:
            kind, element, sub = self._kind(f, version, flexible)
            default = f.get("default", _typeDefault(kind, element))
            if default == "null":
                default = None
            nullable = inVersions(f.get("nullableVersions"), version)
            nulls = (_NULL if nullable else _REFUSED) if self._kafkaNulls else _LAX
            field = _Field(f["name"], kind, nullable, default, element, sub, nulls)
            out.names[f["name"]] = default
            if "tag" in f:
                if flexible and inVersions(f.get("taggedVersions"), version):
                    out.tagged[int(f["tag"])] = field
            elif inVersions(f.get("versions"), version):
                out.fields.append(field)
        out.runs = _runs(out.fields)
        out.writers = [_writer(run, flexible) for run in out.runs]
        return out

    def _kind(self, f, version: int, flexible: bool) -> tuple[str, str | None, _Struct | None]:
        type_: str = f["type"]
        array = type_.startswith("[]")
        base = type_[2:] if array else type_
        sub = None
        if base in _FIXED or base in ("string", "bytes", "uuid"):
            kind = base
        else:
            fields = f.get("fields")
            if fields is None:
                fields = self._common[base]["fields"]
            sub = self._struct(fields, version, flexible)
            kind = "struct"
        if array:
            return "array", kind, sub
        return kind, None, sub

    # -- encoding ----------------------------------------------------------

    def encode(self, values: Mapping[str, Any], version: int) -> bytes:
        """
        The fields of C{values} as C{version} has them (no version prefix).

        @raise SchemaError: a value the type cannot hold.
        """
        out: list[bytes] = []
        try:
            _writeStruct(out, self._compile(version), values)
        except (struct.error, TypeError, AttributeError, UnicodeEncodeError) as e:
            raise SchemaError(f"{self.name} v{version}: {e}") from None
        return b"".join(out)

    def encodeKey(self, values: Mapping[str, Any]) -> bytes:
        """
        A record key: the int16 record type (C{apiKey}), then the fields.
        """
        assert self.apiKey is not None
        return _INT16.pack(self.apiKey) + self.encode(values, 0)

    def encodeValue(self, values: Mapping[str, Any], version: int) -> bytes:
        """
        A record value: its int16 version, then the fields.
        """
        return _INT16.pack(version) + self.encode(values, version)

    # -- decoding ----------------------------------------------------------

    def decodeKey(self, data, error: type[Exception] = SchemaError) -> dict[str, Any]:
        """
        A record key's fields, after its int16 record type.
        """
        return self.decode(data, 0, 2, error)[0]

    def decodeValue(self, data, error: type[Exception] = SchemaError) -> tuple[int, dict[str, Any]]:
        """
        A record value: its version and fields.

        @raise error: a version the schema does not define, or bytes that
            do not decode.
        """
        if len(data) < 2:
            raise error(f"{self.name}: {len(data)} bytes, no version")
        (version,) = _INT16.unpack_from(data, 0)
        if not self.isValid(version):
            raise error(f"{self.name} v{version} is not supported")
        return version, self.decode(data, version, 2, error)[0]

    def decode(
        self, data, version: int, pos: int = 0, error: type[Exception] = SchemaError
    ) -> tuple[dict[str, Any], int]:
        """
        Read C{version}'s fields at C{pos}.

        @return: the values (every field of the schema) and the position
            after them.
        @raise error: for bytes that do not decode.
        """
        view = memoryview(data)
        try:
            return _readStruct(view, pos, len(view), self._compile(version))
        except _Short as e:
            raise error(f"{self.name} v{version}: {e}") from None
        except UnicodeDecodeError as e:
            raise error(f"{self.name} v{version}: {e}") from None


def _writer(run: _Field | _Run, flexible: bool) -> Callable[[list[bytes], Callable], None]:
    """
    The writer of one run of fields: what L{_writeStruct} calls, with the
    kind's dispatch done once here rather than per value.
    """
    if isinstance(run, _Run):
        pack = run.struct.pack
        if len(run.names) == 1:
            name, default = run.names[0], run.defaults[0]
            return lambda out, get: out.append(pack(get(name, default)))
        pairs = tuple(zip(run.names, run.defaults))
        return lambda out, get: out.append(pack(*[get(n, d) for n, d in pairs]))
    field = run
    name, default = field.name, field.default
    if field.kind == "string" and not flexible:

        def writeString(out: list[bytes], get: Callable) -> None:
            value = get(name, default)
            if value is None:
                out.append(b"\xff\xff")
                return
            data = value.encode("utf-8")
            if len(data) > 0x7FFF:
                raise SchemaError(f"string of {len(data)} bytes is longer than a schema's 32767")
            out.append(_INT16.pack(len(data)))
            out.append(data)

        return writeString
    return lambda out, get: _writeField(out, field, get(name, default), flexible)


def _writeStruct(out: list[bytes], compiled: _Struct, values: Mapping[str, Any]) -> None:
    get = values.get
    for write in compiled.writers:
        write(out, get)
    if compiled.flexible:
        tags = []
        for tag in sorted(compiled.tagged):
            field = compiled.tagged[tag]
            value = values.get(field.name, field.default)
            if value != field.default:
                part: list[bytes] = []
                _writeField(part, field, value, True)
                body = b"".join(part)
                tags.append(unsignedVarint(tag) + unsignedVarint(len(body)) + body)
        if tags:
            out.append(unsignedVarint(len(tags)))
            out.extend(tags)
        else:
            out.append(_NO_TAGS)


def _writeField(out: list[bytes], field: _Field, value: Any, flexible: bool) -> None:
    kind = field.kind
    fixed = _FIXED.get(kind)
    if fixed is not None:
        out.append(fixed.pack(value))
    elif kind == "string":
        _writeString(out, value, flexible)
    elif kind == "bytes":
        _writeBytes(out, value, flexible)
    elif kind == "uuid":
        out.append(value.bytes if isinstance(value, uuid.UUID) else bytes(value))
    elif kind == "struct":
        assert field.struct is not None
        _writeStruct(out, field.struct, value)
    else:  # array
        if value is None:
            out.append(b"\x00" if flexible else _INT32.pack(-1))
            return
        out.append(unsignedVarint(len(value) + 1) if flexible else _INT32.pack(len(value)))
        element = field.element
        if element == "struct":
            assert field.struct is not None
            for item in value:
                _writeStruct(out, field.struct, item)
        elif element == "string":
            for item in value:
                _writeString(out, item, flexible)
        elif element == "bytes":
            for item in value:
                _writeBytes(out, item, flexible)
        elif element == "uuid":
            for item in value:
                out.append(item.bytes)
        else:
            assert element is not None
            fixed = _FIXED[element]
            out.append(struct.pack(f">{len(value)}{fixed.format[1:]}", *value))


def _writeString(out: list[bytes], value: str | None, flexible: bool) -> None:
    if value is None:
        out.append(b"\x00" if flexible else _INT16.pack(-1))
        return
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise SchemaError(f"string of {len(data)} bytes is longer than a schema's 32767")
    out.append(unsignedVarint(len(data) + 1) if flexible else _INT16.pack(len(data)))
    out.append(data)


def _writeBytes(out: list[bytes], value: bytes | None, flexible: bool) -> None:
    if value is None:
        out.append(b"\x00" if flexible else _INT32.pack(-1))
        return
    out.append(unsignedVarint(len(value) + 1) if flexible else _INT32.pack(len(value)))
    out.append(bytes(value))


class _Short(Exception):
    """
    Raised inside the reader; L{Schema.decode} turns it into the caller's
    error.
    """


def _readUvarint(data: memoryview, pos: int, end: int) -> tuple[int, int]:
    try:
        value, pos = readUnsignedVarint(data, pos)
    except MalformedHeader as e:
        raise _Short(f"{e} at {pos}") from None
    if pos > end:
        raise _Short(f"varint runs past the end ({end})")
    return value, pos


def _length(data: memoryview, pos: int, end: int, flexible: bool, classic: struct.Struct) -> tuple[int, int]:
    """
    A string, bytes or array length (-1 for null).
    """
    if flexible:
        n, pos = _readUvarint(data, pos, end)
        return n - 1, pos
    if pos + classic.size > end:
        raise _Short(f"truncated length at {pos}")
    return classic.unpack_from(data, pos)[0], pos + classic.size


def _take(pos: int, n: int, end: int, what: str) -> int:
    stop = pos + n
    if stop > end:
        raise _Short(f"{what} of {n} bytes at {pos} runs past the end ({end})")
    return stop


def _readStruct(data: memoryview, pos: int, end: int, compiled: _Struct) -> tuple[dict[str, Any], int]:
    values = dict(compiled.names)
    flexible = compiled.flexible
    for run in compiled.runs:
        if isinstance(run, _Run):
            stop = _take(pos, run.struct.size, end, run.names[0])
            values.update(zip(run.names, run.struct.unpack_from(data, pos)))
            pos = stop
        else:
            values[run.name], pos = _readField(data, pos, end, run, flexible)
    if flexible:
        count, pos = _readUvarint(data, pos, end)
        for _ in range(count):
            tag, pos = _readUvarint(data, pos, end)
            size, pos = _readUvarint(data, pos, end)
            stop = _take(pos, size, end, f"tagged field {tag}")
            known = compiled.tagged.get(tag)
            if known is not None:  # unknown tags are skipped, as Kafka does
                values[known.name], _ = _readField(data, pos, stop, known, True)
            pos = stop
    return values, pos


def _readField(data: memoryview, pos: int, end: int, field: _Field, flexible: bool) -> tuple[Any, int]:
    kind = field.kind
    fixed = _FIXED.get(kind)
    if fixed is not None:
        stop = _take(pos, fixed.size, end, field.name)
        return fixed.unpack_from(data, pos)[0], stop
    if kind == "string":
        return _readString(data, pos, end, flexible, field.nulls)
    if kind == "bytes":
        return _readBytes(data, pos, end, flexible, field.nulls)
    if kind == "uuid":
        stop = _take(pos, 16, end, field.name)
        return uuid.UUID(bytes=bytes(data[pos:stop])), stop
    if kind == "struct":
        assert field.struct is not None
        return _readStruct(data, pos, end, field.struct)
    # array
    n, pos = _length(data, pos, end, flexible, _INT32)
    if n < 0:
        if field.nulls == _REFUSED:
            raise _Short(f"{field.name}: null where the schema has none")
        return None, pos
    if n > end - pos:
        raise _Short(f"{field.name}: {n} elements cannot fit in {end - pos} bytes")
    element = field.element
    # an element is never nullable: Kafka's readers refuse a null one
    nulls = _LAX if field.nulls == _LAX else _REFUSED
    items: list[Any] = []
    item: Any
    if element == "struct":
        assert field.struct is not None
        for _ in range(n):
            item, pos = _readStruct(data, pos, end, field.struct)
            items.append(item)
    elif element == "string":
        for _ in range(n):
            item, pos = _readString(data, pos, end, flexible, nulls)
            items.append(item)
    elif element == "bytes":
        for _ in range(n):
            item, pos = _readBytes(data, pos, end, flexible, nulls)
            items.append(item)
    elif element == "uuid":
        stop = _take(pos, 16 * n, end, field.name)
        items = [uuid.UUID(bytes=bytes(data[at : at + 16])) for at in range(pos, stop, 16)]
        pos = stop
    else:
        assert element is not None
        fixed = _FIXED[element]
        stop = _take(pos, fixed.size * n, end, field.name)
        items = list(struct.unpack_from(f">{n}{fixed.format[1:]}", data, pos))
        pos = stop
    return items, pos


def _readSized(
    data: memoryview, pos: int, end: int, flexible: bool, classic: struct.Struct, what: str, nulls: int
) -> tuple[memoryview | None, int]:
    """
    A string's or bytes' contents (C{None} for null).
    """
    n, pos = _length(data, pos, end, flexible, classic)
    if n < 0:
        if nulls == _NULL or (n == -1 and nulls == _LAX):
            return None, pos
        if nulls == _REFUSED:
            raise _Short(f"null {what} where the schema has none")
        raise _Short(f"{what} length {n}")
    stop = _take(pos, n, end, what)
    return data[pos:stop], stop


def _readString(data: memoryview, pos: int, end: int, flexible: bool, nulls: int) -> tuple[str | None, int]:
    raw, pos = _readSized(data, pos, end, flexible, _INT16, "string", nulls)
    return (None if raw is None else str(raw, "utf-8")), pos


def _readBytes(data: memoryview, pos: int, end: int, flexible: bool, nulls: int) -> tuple[bytes | None, int]:
    raw, pos = _readSized(data, pos, end, flexible, _INT32, "bytes", nulls)
    return (None if raw is None else bytes(raw)), pos
