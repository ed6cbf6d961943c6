"""Every API key and version, request and response, encoded by someone else and decoded by us.

Three encoders, none of them ours:
- kio (Aiven's typed entities, generated from a later Kafka trunk than ours): every version it has whose
  layout is the one our definitions give. Values come from hypothesis, tagged fields included (kio writes
  a tagged field whenever its value differs from the default).
- kafka-python's hand-written protocol classes (``kafka.protocol.old``): the old versions that Kafka 4
  removed and kio never had (Produce v0-2, Fetch v0-3, ...), and many more besides.
- For what neither has (the ZooKeeper-era inter-broker APIs, early-access Share* v0, versions kio lays out
  differently), a small encoder in this file that reads Kafka's JSON definitions itself (not our generated
  schemas) and also writes unknown tags, which must come back as ``_unknown_tags`` sizes.

Each decoded body must equal the values the encoder was given, field by field, and a coverage test checks
that every (api_key, version, request/response) of our schemas goes through at least one encoder.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import importlib
import inspect
import io
import json
import pkgutil
import re
import struct
import typing
import uuid
import warnings
from functools import cache
from types import NoneType, UnionType

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from dissectors.kafka._generated.schemas import REQUESTS, RESPONSES
from dissectors.kafka.decoder import RecordsRef, decode, schema
from tests.kafka_spec import BEFORE_KIP_896, NEWEST, available, definitions

RELEASES = (NEWEST, BEFORE_KIP_896)  # newest first: a version both define is taken from the newest
DEFINITIONS = available()  # Kafka's JSON definitions, from the release jars (tests/kafka_spec.py)

EXAMPLES = settings(max_examples=3, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck))

ALL_BODIES = sorted((key, min_version + i, is_response)
                    for is_response, table in ((False, REQUESTS), (True, RESPONSES))
                    for key, (min_version, structs) in table.items() for i in range(len(structs)))
def fields_of(struct_schema: tuple) -> list[tuple]:
    return list(struct_schema[0])


def element_of(entry: tuple):
    return entry[2] if len(entry) > 2 else None


# ---------------------------------------------------------------------------------------------------------
# kio

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    try:
        import kio  # noqa: F401
        from kio.index import load_payload_module
        from kio.schema.index import api_key_map, schema_name_map
        from kio.serial import entity_writer
        from kio.serial._implicit_defaults import get_tagged_field_default
        from kio.serial._introspect import get_field_tag
        from kio.static.constants import EntityType
        from kio.static.primitive import Records
    except ImportError:  # pragma: no cover - kio is a test dependency
        kio = None

KIO_TYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint16": "uint16",
             "uint32": "uint32", "float64": "float64", "bool": "bool", "uuid": "uuid", "string": "string",
             "bytes": "bytes", "records": "records", "error_code": "int16", "timedelta_i32": "int32",
             "timedelta_i64": "int64", "datetime_i64": "int64"}

# Bodies kio lays out differently from our definitions. None since they come from Kafka 4.4, whose released
# layouts of the versions kio's later trunk changed before release (ReadShareGroupStateSummary and
# StreamsGroupHeartbeat v0) are kio's.
KIO_DIFFERS: set[tuple[int, int, bool]] = set()


def kio_class(key: int, version: int, is_response: bool):
    if kio is None or key not in api_key_map or version not in schema_name_map[api_key_map[key]]:
        return None
    kind = EntityType.response if is_response else EntityType.request
    module = load_payload_module(key, version, kind)
    return next(c for c in vars(module).values()
                if isinstance(c, type) and getattr(c, "__type__", None) == kind
                and dataclasses.is_dataclass(c))


def kio_fields(cls) -> tuple[list, dict]:
    plain = [f for f in dataclasses.fields(cls) if get_field_tag(f) is None]
    tagged = {get_field_tag(f): f for f in dataclasses.fields(cls) if get_field_tag(f) is not None}
    return plain, tagged


def kio_layout_difference(cls, struct_schema: tuple, path: str = "") -> str | None:
    """Where kio's entity and our schema disagree on the wire layout, or None."""
    plain, tagged = kio_fields(cls)
    ours, our_tags = struct_schema
    if len(plain) != len(ours):
        return f"{path}: kio has {[f.name for f in plain]}, we have {[e[0] for e in ours]}"
    if set(tagged) != {t[0] for t in our_tags or ()}:
        return f"{path}: kio tags {sorted(tagged)}, ours {[t[0] for t in our_tags or ()]}"
    pairs = list(zip(plain, ours, strict=True)) + [(tagged[t[0]], t[1:]) for t in our_tags or ()]
    hints = typing.get_type_hints(cls)
    for field, entry in pairs:
        element = element_of(entry)
        if isinstance(element, tuple):
            nested = kio_entity_type(hints[field.name])
            if nested is None:
                return f"{path}.{entry[0]}: kio has a primitive, we have a struct"
            difference = kio_layout_difference(nested, element, f"{path}.{entry[0]}")
            if difference:
                return difference
            continue
        kafka_type = KIO_TYPES.get(field.metadata.get("kafka_type"))
        ours_type = element if entry[1].endswith("array") else entry[1]
        if kafka_type is None or kafka_type not in ours_type:
            return f"{path}.{entry[0]}: kio {field.metadata.get('kafka_type')}, ours {entry[1]} {element}"
    return None


def kio_entity_type(annotation):
    """The entity class inside ``X``, ``X | None`` or ``tuple[X, ...]``, or None for primitives."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, UnionType):
        annotation = next(a for a in typing.get_args(annotation) if a is not NoneType)
        origin = typing.get_origin(annotation)
    if origin is tuple:
        annotation = typing.get_args(annotation)[0]
    return annotation if dataclasses.is_dataclass(annotation) else None


@cache
def kio_strategy(annotation) -> st.SearchStrategy:
    """Values for a kio field type: short arrays and strings, so that a run stays quick."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, UnionType):
        inner = next(a for a in typing.get_args(annotation) if a is not NoneType)
        return st.none() | kio_strategy(inner)
    if origin is tuple:
        return st.lists(kio_strategy(typing.get_args(annotation)[0]), max_size=2).map(tuple)
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        fields = {f.name: kio_strategy(hints[f.name]) for f in dataclasses.fields(annotation)}
        return st.builds(annotation, **fields)
    if annotation is Records:
        return st.binary(max_size=24).map(Records)
    if isinstance(annotation, type) and issubclass(annotation, str):
        return st.text(max_size=8)
    return st.from_type(annotation)


def kio_plain(value):
    """A kio field value as our decoder reports it."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, uuid.UUID):
        return value.bytes
    return value


def check_kio(buf: bytes, entity, decoded: dict, struct_schema: tuple, path: str) -> None:
    plain, tagged = kio_fields(type(entity))
    ours, our_tags = struct_schema
    pairs = list(zip(plain, ours, strict=True)) + [(tagged[t[0]], t[1:]) for t in our_tags or ()]
    expected_keys = {entry[0] for entry in ours}
    for field, entry in pairs:
        value = getattr(entity, field.name)
        name = entry[0]
        if get_field_tag(field) is not None and name not in decoded:  # kio leaves out tags at their default
            default = get_tagged_field_default(field)
            assert value == default or kio_plain(value) == kio_plain(default), f"{path}.{name} was not sent"
            continue
        expected_keys.add(name)
        check_kio_value(buf, value, decoded[name], entry, f"{path}.{name}")
    assert set(decoded) == expected_keys, f"{path}: keys {sorted(decoded)} != {sorted(expected_keys)}"


def check_kio_value(buf: bytes, value, got, entry: tuple, path: str) -> None:
    type_name, element = entry[1], element_of(entry)
    if value is None:  # kio writes a null uuid as zeros and a null datetime as -1
        want = bytes(16) if "uuid" in (type_name, element) else -1 if type_name == "int64" else None
        assert got == want, f"{path}: {got!r} != {want!r}"
    elif type_name.endswith("array"):
        assert isinstance(got, list) and len(got) == len(value), f"{path}: {got!r} != {value!r}"
        for index, (item, got_item) in enumerate(zip(value, got, strict=True)):
            if isinstance(element, tuple):
                check_kio(buf, item, got_item, element, f"{path}[{index}]")
            else:
                check_kio_value(buf, item, got_item, (entry[0], element), f"{path}[{index}]")
    elif type_name.endswith("struct"):
        check_kio(buf, value, got, element, path)
    elif type_name.endswith("records"):
        assert isinstance(got, RecordsRef) and buf[got.offset:got.offset + got.length] == value, path
    else:
        assert got == kio_plain(value), f"{path}: {got!r} != {kio_plain(value)!r}"


KIO_BODIES = [] if kio is None else [
    body for body in ALL_BODIES if body not in KIO_DIFFERS and kio_class(*body) is not None]


@pytest.mark.skipif(kio is None, reason="kio is not installed")
def test_kio_layouts_agree_with_ours_except_the_known_pre_release_versions():
    differs = {body for body in ALL_BODIES if (cls := kio_class(*body)) is not None
               and kio_layout_difference(cls, schema(*body), cls.__name__) is not None}
    assert differs == KIO_DIFFERS


def by_api(bodies: list[tuple[int, int, bool]]) -> list[tuple[int, bool, tuple[int, ...]]]:
    groups: dict[tuple[int, bool], list[int]] = {}
    for key, version, is_response in bodies:
        groups.setdefault((key, is_response), []).append(version)
    return [(key, is_response, tuple(versions)) for (key, is_response), versions in sorted(groups.items())]


def draw_kio_body(data, key: int, version: int, is_response: bool):
    """A body kio encodes from an entity hypothesis draws: (its class, the entity, the bytes)."""
    cls = kio_class(key, version, is_response)
    entity = data.draw(kio_strategy(cls), label=f"{cls.__name__} v{version}")
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return cls, entity, out.getvalue()


@pytest.mark.skipif(kio is None, reason="kio is not installed")
@pytest.mark.parametrize("key, is_response, versions", by_api(KIO_BODIES))
@EXAMPLES
@given(data=st.data())
def test_kio_encodes_we_decode(key, is_response, versions, data):
    for version in versions:
        cls, entity, buf = draw_kio_body(data, key, version, is_response)
        decoded = decode(buf, 0, len(buf), key, version, is_response)
        check_kio(buf, entity, decoded, schema(key, version, is_response), f"{cls.__name__}v{version}")


# ---------------------------------------------------------------------------------------------------------
# kafka-python's hand-written classes

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # kafka-python reads its resources with a deprecated API
    try:
        import kafka.protocol.old as kafka_old
        from kafka.protocol.old import types as kp
        from kafka.protocol.old.api import Request as KpRequest
        from kafka.protocol.old.api import Response as KpResponse
    except ImportError:  # pragma: no cover - kafka-python is a test dependency
        kafka_old = None


def kafka_python_classes() -> dict[tuple[int, int, bool], type]:
    found = {}
    if kafka_old is None:
        return found
    for info in pkgutil.iter_modules(kafka_old.__path__):
        module = importlib.import_module(f"kafka.protocol.old.{info.name}")
        for cls in vars(module).values():
            if (inspect.isclass(cls) and issubclass(cls, (KpRequest, KpResponse))
                    and cls.__module__ == module.__name__
                    and isinstance(getattr(cls, "API_VERSION", None), int)):
                found[(cls.API_KEY, cls.API_VERSION, issubclass(cls, KpResponse))] = cls
    return found


KP_CLASSES = kafka_python_classes()
KP_INTS = {kp.Int8: 8, kp.Int16: 16, kp.Int32: 32, kp.Int64: 64} if kafka_old else {}


def kp_parts(schema_type) -> list:
    """A kafka-python Schema's field types, without its trailing tag buffer."""
    return [t for t in schema_type.fields if t is not kp.TaggedFields]


def kp_strategy(t) -> st.SearchStrategy:
    if isinstance(t, kp.Schema):
        return st.tuples(*map(kp_strategy, kp_parts(t)))
    if isinstance(t, kp.Array):
        return st.lists(kp_strategy(t.array_of), max_size=2)
    if t in KP_INTS:
        bits = KP_INTS[t]
        return st.integers(-(1 << bits - 1), (1 << bits - 1) - 1)
    if isinstance(t, kp.String):
        return st.text(max_size=8)
    if t in (kp.Bytes, kp.CompactBytes):
        return st.binary(max_size=12)
    if t is kp.Boolean:
        return st.booleans()
    if t is kp.Float64:
        return st.floats(allow_nan=False)
    if t is kp.BitField:
        return st.sets(st.integers(0, 30), max_size=4)
    raise AssertionError(f"no strategy for {t!r}")


def kp_wire_type(t) -> str:
    """A kafka-python field type in our schema's terms (nullability aside)."""
    if isinstance(t, kp.Array):
        return "compact_array" if isinstance(t, kp.CompactArray) else "array"
    if isinstance(t, kp.String):
        return "compact_string" if isinstance(t, kp.CompactString) else "string"
    return {kp.Int8: "int8", kp.Int16: "int16", kp.Int32: "int32", kp.Int64: "int64", kp.Boolean: "bool",
            kp.Float64: "float64", kp.BitField: "int32", kp.Bytes: "bytes", kp.CompactBytes: "compact_bytes",
            kp.UUID: "uuid"}[t]


def kp_layout_matches(t, struct_schema: tuple) -> bool:
    """Same fields, types, compactness and tag buffer (kafka-python lags in a few flexible versions)."""
    parts = kp_parts(t)
    flexible = bool(t.fields) and t.fields[-1] is kp.TaggedFields
    if len(parts) != len(struct_schema[0]) or flexible != (struct_schema[1] is not None):
        return False
    for part, entry in zip(parts, struct_schema[0], strict=True):
        ours = entry[1].replace("nullable_", "").replace("records", "bytes")
        if kp_wire_type(part) != ours:
            return False
        element = element_of(entry)
        if isinstance(part, kp.Array):
            if isinstance(element, tuple):
                if not (isinstance(part.array_of, kp.Schema) and kp_layout_matches(part.array_of, element)):
                    return False
            elif isinstance(part.array_of, kp.Schema) or kp_wire_type(part.array_of) != element:
                return False
    return True


def check_kp(buf: bytes, values: tuple, got: dict, struct_schema: tuple, t, path: str) -> None:
    assert [k for k in got if not k.startswith("_")] == [e[0] for e in struct_schema[0]], path
    for value, entry, part in zip(values, struct_schema[0], kp_parts(t), strict=True):
        element, name = element_of(entry), entry[0]
        if isinstance(part, kp.Array):
            assert len(got[name]) == len(value), f"{path}.{name}"
            for index, (item, got_item) in enumerate(zip(value, got[name], strict=True)):
                if isinstance(element, tuple):
                    check_kp(buf, item, got_item, element, part.array_of, f"{path}.{name}[{index}]")
                else:
                    assert got_item == item, f"{path}.{name}[{index}]: {got_item!r} != {item!r}"
        elif part is kp.BitField:
            assert got[name] == sum(1 << bit for bit in value), f"{path}.{name}"
        elif entry[1].endswith("records"):
            ref = got[name]
            assert buf[ref.offset:ref.offset + ref.length] == value, f"{path}.{name}"
        else:
            assert got[name] == value, f"{path}.{name}: {got[name]!r} != {value!r}"


KP_BODIES = [body for body, cls in sorted(KP_CLASSES.items())
             if schema(*body) is not None and kp_layout_matches(cls.SCHEMA, schema(*body))]


@pytest.mark.skipif(kafka_old is None, reason="kafka-python is not installed")
@pytest.mark.parametrize("key, is_response, versions", by_api(KP_BODIES))
@EXAMPLES
@given(data=st.data())
def test_kafka_python_encodes_we_decode(key, is_response, versions, data):
    for version in versions:
        cls = KP_CLASSES[(key, version, is_response)]
        values = data.draw(kp_strategy(cls.SCHEMA), label=f"{cls.__name__}")
        buf = cls.SCHEMA.encode(list(values))
        decoded = decode(buf, 0, len(buf), key, version, is_response)
        check_kp(buf, values, decoded, schema(key, version, is_response), cls.SCHEMA, cls.__name__)


@pytest.mark.skipif(kafka_old is None, reason="kafka-python is not installed")
def test_kafka_python_covers_the_versions_kafka_4_removed():
    removed = {(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (1, 3), (2, 0), (8, 0), (8, 1), (9, 0)}
    assert {(key, version) for key, version, _ in KP_BODIES} >= removed


# ---------------------------------------------------------------------------------------------------------
# An encoder that reads Kafka's JSON definitions itself


def parse_versions(text: str | None) -> range:
    if text is None or text == "none":
        return range(0)
    low, _, high = text.partition("-")
    if low.endswith("+"):
        return range(int(low[:-1]), 1 << 15)
    return range(int(low), int(high or low) + 1)


def snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@cache
def json_definitions() -> dict[tuple[str, str], dict]:
    """(release, message name) -> the parsed JSON definition."""
    out = {}
    for release in RELEASES:
        for path in (definitions() / "kafka-messages" / release).glob("*Re*.json"):
            lines = path.read_text(encoding="utf-8").splitlines()
            text = "\n".join(line for line in lines if not line.lstrip().startswith("//"))
            out[(release, path.stem)] = json.loads(text)
    return out


@cache
def json_messages_by_api() -> dict[tuple[int, bool], list[dict]]:
    """(api_key, is_response) -> the definitions of each release, newest release first."""
    out: dict[tuple[int, bool], list[dict]] = {}
    for release in RELEASES:
        for (rel, _name), message in json_definitions().items():
            if rel == release and "apiKey" in message:
                out.setdefault((message["apiKey"], message["type"] == "response"), []).append(message)
    return out


def json_message(key: int, version: int, is_response: bool) -> dict | None:
    for message in json_messages_by_api().get((key, is_response), ()):
        if version in parse_versions(message["validVersions"]):
            return message
    return None


FIXED = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "uint32": ">I", "int64": ">q",
         "float64": ">d", "bool": ">?"}
INT_RANGES = {"int8": (-128, 127), "int16": (-(1 << 15), (1 << 15) - 1), "uint16": (0, (1 << 16) - 1),
              "int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1),
              "int64": (-(1 << 63), (1 << 63) - 1)}


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@cache
def _unknown_tags(defined: frozenset[int]) -> st.SearchStrategy:
    """Tags a struct's definition does not know, with a few bytes each (made once per set of known tags)."""
    return st.dictionaries(st.integers(0, 300).filter(lambda t: t not in defined), st.binary(max_size=6), max_size=2)


class JsonEncoder:
    """Draws values for one message version from its JSON definition and writes them the way Kafka does."""

    ELEMENTS = 48  # array elements one message may hold: deep definitions (StreamsGroupDescribe's topology, six
    # levels of arrays) would otherwise grow as 2 ** depth

    def __init__(self, message: dict, version: int, draw) -> None:
        self.version = version
        self.flexible = version in parse_versions(message["flexibleVersions"])
        self.common = {s["name"]: s["fields"] for s in message.get("commonStructs", ())}
        self.draw = draw
        self.elements_left = self.ELEMENTS

    def struct(self, fields: list[dict]) -> tuple[bytes, dict]:
        out, value, tagged, defined = bytearray(), {}, [], set()
        for field in fields:
            if self.version not in parse_versions(field["versions"]):
                continue
            if self.version in parse_versions(field.get("taggedVersions")):
                defined.add(int(field["tag"]))
                if self.draw(st.booleans()):
                    data, value[snake(field["name"])] = self.field(field)
                    tagged.append((int(field["tag"]), data))
                continue
            data, value[snake(field["name"])] = self.field(field)
            out += data
        if self.flexible:
            unknown = self.draw(_unknown_tags(frozenset(defined)))
            if unknown:
                value["_unknown_tags"] = {tag: len(data) for tag, data in unknown.items()}
            tagged += list(unknown.items())
            out += uvarint(len(tagged))
            for tag, data in sorted(tagged):
                out += uvarint(tag) + uvarint(len(data)) + data
        return bytes(out), value

    def length(self, n: int | None, wide: bool) -> bytes:
        if self.flexible:
            return uvarint(0 if n is None else n + 1)
        if wide:
            return struct.pack(">i", -1 if n is None else n)
        return struct.pack(">h", -1 if n is None else n)

    def field(self, field: dict) -> tuple[bytes, object]:
        kind = field["type"]
        nullable = self.version in parse_versions(field.get("nullableVersions"))
        if nullable and self.draw(st.integers(0, 3)) == 0:
            if kind[0].isupper() and not kind.startswith("[]"):
                return b"\xff", None  # a null struct
            if kind not in ("string", "bytes", "records") and not kind.startswith("[]"):
                raise AssertionError(f"nullable {kind}")
            return self.length(None, kind != "string"), None
        if kind.startswith("[]"):
            count = self.draw(st.integers(0, min(2, self.elements_left)))
            self.elements_left -= count
            items = [self.element(kind[2:], field) for _ in range(count)]
            return self.length(count, True) + b"".join(d for d, _ in items), [v for _, v in items]
        if kind[0].isupper():
            data, value = self.struct(field.get("fields") or self.common[kind])
            return (b"\x01" + data if nullable else data), value
        return self.primitive(kind)

    def element(self, kind: str, field: dict) -> tuple[bytes, object]:
        if kind[0].isupper():
            return self.struct(field.get("fields") or self.common[kind])
        return self.primitive(kind)

    def primitive(self, kind: str) -> tuple[bytes, object]:
        if kind in INT_RANGES:
            value = self.draw(st.integers(*INT_RANGES[kind]))
            return struct.pack(FIXED[kind], value), value
        if kind == "bool":
            value = self.draw(st.booleans())
            return struct.pack(">?", value), value
        if kind == "float64":
            value = self.draw(st.floats(allow_nan=False))
            return struct.pack(">d", value), value
        if kind == "uuid":
            value = self.draw(st.binary(min_size=16, max_size=16))
            return value, value
        if kind == "string":
            value = self.draw(st.text(max_size=8))
            data = value.encode()
            return self.length(len(data), False) + data, value
        if kind in ("bytes", "records"):
            data = self.draw(st.binary(max_size=12))
            return self.length(len(data), True) + data, data
        raise AssertionError(kind)


def records_as_bytes(buf: bytes, value):
    """Decoded values with every RecordsRef replaced by the bytes it points at."""
    if isinstance(value, RecordsRef):
        return buf[value.offset:value.offset + value.length]
    if isinstance(value, dict):
        return {k: records_as_bytes(buf, v) for k, v in value.items()}
    if isinstance(value, list):
        return [records_as_bytes(buf, v) for v in value]
    return value


JSON_BODIES = [body for body in ALL_BODIES if json_message(*body) is not None] if DEFINITIONS else []


@pytest.mark.skipif(not DEFINITIONS, reason="Kafka's definitions (release jars) are not available")
@pytest.mark.parametrize("key, is_response, versions", by_api(JSON_BODIES))
@settings(EXAMPLES, max_examples=2)
@given(data=st.data())
def test_json_encoder_encodes_we_decode(key, is_response, versions, data):
    for version in versions:
        message = json_message(key, version, is_response)
        buf, expected = JsonEncoder(message, version, data.draw).struct(message["fields"])
        decoded = decode(buf, 0, len(buf), key, version, is_response)
        assert records_as_bytes(buf, decoded) == expected, f"{message['name']} v{version}"


@pytest.mark.skipif(not DEFINITIONS, reason="Kafka's definitions (release jars) are not available (the JSON "
                    "encoder needs them)")
def test_every_body_goes_through_an_independent_encoder():
    """The three parametrisations above, together, cover every body kind of our schemas."""
    assert set(KIO_BODIES) | set(KP_BODIES) | set(JSON_BODIES) == set(ALL_BODIES)
    # What no library covers: the ZooKeeper-era inter-broker APIs (gone in Kafka 4), early-access v0 of
    # ShareGroupHeartbeat/ShareGroupDescribe/ShareFetch/ShareAcknowledge, the v0 of a few APIs Kafka 4
    # removed, and the versions newer than kio.
    only_json = sorted(set(ALL_BODIES) - set(KIO_BODIES) - set(KP_BODIES))
    assert {(key, version) for key, version, _ in only_json} == ONLY_JSON


ONLY_JSON = {
    *((4, v) for v in range(8)), *((5, v) for v in range(5)), *((6, v) for v in range(9)),
    *((7, v) for v in range(4)),  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
    (27, 0), (34, 0), (35, 0), (38, 0), (39, 0), (40, 0), (41, 0),  # v0s Kafka 4 removed
    (56, 0), (56, 1),  # AlterPartition
    (76, 0), (77, 0), (78, 0), (79, 0),  # Share* early access
    # versions newer than kio's trunk: ApiVersions v5, TxnOffsetCommit v6, DeleteGroups v3, StreamsGroupHeartbeat
    # and StreamsGroupDescribe v1, StreamsGroupTopologyDescriptionUpdate, UnregisterController
    (18, 5), (28, 6), (42, 3), (88, 1), (89, 1), (93, 0), (94, 0),
}
