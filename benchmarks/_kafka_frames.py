"""Kafka wire format for the synthetic capture generator: layouts, frames and record batches.

Why this shape: the message layouts below are the protocol guide's BNF, copied word for word for the few
API versions the generator speaks, so a test can find every block in the guide; one small interpreter
turns a layout plus a dict of values into bytes. Callers encode a body once per variant and reuse it; per
frame only the size prefix, the header and the correlation id change, which keeps a 1 GB capture cheap.

Conventions of the interpreter: values are dicts keyed by the BNF field names; a missing field encodes as
zero, empty string, null (nullable types) or an empty array; arrays are compact in flexible versions (the
layouts that carry TAG_BUFFER); every TAG_BUFFER is an empty tagged-field section unless the value dict
holds raw bytes under "_tagged_fields" for that struct.
"""

from __future__ import annotations

import gzip
import re
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

API_NAMES: dict[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    8: "OffsetCommit",
    10: "FindCoordinator",
    12: "Heartbeat",
    18: "ApiVersions",
}
PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, FIND_COORDINATOR, HEARTBEAT, API_VERSIONS = (
    0, 1, 2, 3, 8, 10, 12, 18)

# Error codes the generator injects (names as the protocol guide spells them).
ERROR_NAMES: dict[int, str] = {
    0: "NONE",
    3: "UNKNOWN_TOPIC_OR_PARTITION",
    5: "LEADER_NOT_AVAILABLE",
    6: "NOT_LEADER_OR_FOLLOWER",
    15: "COORDINATOR_NOT_AVAILABLE",
    25: "UNKNOWN_MEMBER_ID",
    27: "REBALANCE_IN_PROGRESS",
    70: "FETCH_SESSION_ID_NOT_FOUND",
    71: "INVALID_FETCH_SESSION_EPOCH",
}

# What a Kafka 3.9 broker advertises in ApiVersions: (api_key, min_version, max_version).
BROKER_API_VERSIONS: tuple[tuple[int, int, int], ...] = (
    (0, 0, 11), (1, 0, 17), (2, 0, 9), (3, 0, 12), (8, 0, 9), (9, 0, 9), (10, 0, 6), (11, 0, 9),
    (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 5), (16, 0, 5), (17, 0, 1), (18, 0, 4), (19, 0, 7),
    (20, 0, 6), (21, 0, 2), (22, 0, 5), (23, 0, 4), (24, 0, 5), (25, 0, 4), (26, 0, 4), (27, 0, 1),
    (28, 0, 4), (29, 0, 3), (30, 0, 3), (31, 0, 3), (32, 0, 4), (33, 0, 2), (34, 0, 2), (35, 0, 4),
    (36, 0, 2), (37, 0, 3), (38, 0, 3), (39, 0, 2), (40, 0, 2), (41, 0, 3), (42, 0, 2), (43, 0, 2),
    (44, 0, 1), (45, 0, 0), (46, 0, 0), (47, 0, 0), (48, 0, 1), (49, 0, 1), (50, 0, 0), (51, 0, 0),
    (55, 0, 2), (57, 0, 1), (60, 0, 1), (61, 0, 0), (64, 0, 0), (65, 0, 0), (66, 0, 1), (68, 0, 0),
    (69, 0, 0), (71, 0, 0), (72, 0, 0), (74, 0, 0), (75, 0, 0),
)

# Verbatim from the Kafka protocol guide (kafka.apache.org/protocol, "The Messages"), one block per version.
GRAMMARS = """\
ApiVersions Request (Version: 3) => client_software_name client_software_version TAG_BUFFER
client_software_name => COMPACT_STRING
client_software_version => COMPACT_STRING

ApiVersions Response (Version: 3) => error_code [api_keys] throttle_time_ms TAG_BUFFER
error_code => INT16
api_keys => api_key min_version max_version TAG_BUFFER
api_key => INT16
min_version => INT16
max_version => INT16
throttle_time_ms => INT32

Metadata Request (Version: 8) => [topics] allow_auto_topic_creation include_cluster_authorized_operations include_topic_authorized_operations
topics => name
name => STRING
allow_auto_topic_creation => BOOLEAN
include_cluster_authorized_operations => BOOLEAN
include_topic_authorized_operations => BOOLEAN

Metadata Response (Version: 8) => throttle_time_ms [brokers] cluster_id controller_id [topics] cluster_authorized_operations
throttle_time_ms => INT32
brokers => node_id host port rack
node_id => INT32
host => STRING
port => INT32
rack => NULLABLE_STRING
cluster_id => NULLABLE_STRING
controller_id => INT32
topics => error_code name is_internal [partitions] topic_authorized_operations
error_code => INT16
name => STRING
is_internal => BOOLEAN
partitions => error_code partition_index leader_id leader_epoch [replica_nodes] [isr_nodes] [offline_replicas]
error_code => INT16
partition_index => INT32
leader_id => INT32
leader_epoch => INT32
replica_nodes => INT32
isr_nodes => INT32
offline_replicas => INT32
topic_authorized_operations => INT32
cluster_authorized_operations => INT32

Metadata Request (Version: 12) => [topics] allow_auto_topic_creation include_topic_authorized_operations TAG_BUFFER
topics => topic_id name TAG_BUFFER
topic_id => UUID
name => COMPACT_NULLABLE_STRING
allow_auto_topic_creation => BOOLEAN
include_topic_authorized_operations => BOOLEAN

Metadata Response (Version: 12) => throttle_time_ms [brokers] cluster_id controller_id [topics] TAG_BUFFER
throttle_time_ms => INT32
brokers => node_id host port rack TAG_BUFFER
node_id => INT32
host => COMPACT_STRING
port => INT32
rack => COMPACT_NULLABLE_STRING
cluster_id => COMPACT_NULLABLE_STRING
controller_id => INT32
topics => error_code name topic_id is_internal [partitions] topic_authorized_operations TAG_BUFFER
error_code => INT16
name => COMPACT_NULLABLE_STRING
topic_id => UUID
is_internal => BOOLEAN
partitions => error_code partition_index leader_id leader_epoch [replica_nodes] [isr_nodes] [offline_replicas] TAG_BUFFER
error_code => INT16
partition_index => INT32
leader_id => INT32
leader_epoch => INT32
replica_nodes => INT32
isr_nodes => INT32
offline_replicas => INT32
topic_authorized_operations => INT32

Produce Request (Version: 3) => transactional_id acks timeout_ms [topic_data]
transactional_id => NULLABLE_STRING
acks => INT16
timeout_ms => INT32
topic_data => name [partition_data]
name => STRING
partition_data => index records
index => INT32
records => RECORDS

Produce Response (Version: 3) => [responses] throttle_time_ms
responses => name [partition_responses]
name => STRING
partition_responses => index error_code base_offset log_append_time_ms
index => INT32
error_code => INT16
base_offset => INT64
log_append_time_ms => INT64
throttle_time_ms => INT32

Produce Request (Version: 7) => transactional_id acks timeout_ms [topic_data]
transactional_id => NULLABLE_STRING
acks => INT16
timeout_ms => INT32
topic_data => name [partition_data]
name => STRING
partition_data => index records
index => INT32
records => RECORDS

Produce Response (Version: 7) => [responses] throttle_time_ms
responses => name [partition_responses]
name => STRING
partition_responses => index error_code base_offset log_append_time_ms log_start_offset
index => INT32
error_code => INT16
base_offset => INT64
log_append_time_ms => INT64
log_start_offset => INT64
throttle_time_ms => INT32

Produce Request (Version: 9) => transactional_id acks timeout_ms [topic_data] TAG_BUFFER
transactional_id => COMPACT_NULLABLE_STRING
acks => INT16
timeout_ms => INT32
topic_data => name [partition_data] TAG_BUFFER
name => COMPACT_STRING
partition_data => index records TAG_BUFFER
index => INT32
records => COMPACT_RECORDS

Produce Response (Version: 9) => [responses] throttle_time_ms TAG_BUFFER
responses => name [partition_responses] TAG_BUFFER
name => COMPACT_STRING
partition_responses => index error_code base_offset log_append_time_ms log_start_offset [record_errors] error_message TAG_BUFFER
index => INT32
error_code => INT16
base_offset => INT64
log_append_time_ms => INT64
log_start_offset => INT64
record_errors => batch_index batch_index_error_message TAG_BUFFER
batch_index => INT32
batch_index_error_message => COMPACT_NULLABLE_STRING
error_message => COMPACT_NULLABLE_STRING
throttle_time_ms => INT32

Fetch Request (Version: 11) => replica_id max_wait_ms min_bytes max_bytes isolation_level session_id session_epoch [topics] [forgotten_topics_data] rack_id
replica_id => INT32
max_wait_ms => INT32
min_bytes => INT32
max_bytes => INT32
isolation_level => INT8
session_id => INT32
session_epoch => INT32
topics => topic [partitions]
topic => STRING
partitions => partition current_leader_epoch fetch_offset log_start_offset partition_max_bytes
partition => INT32
current_leader_epoch => INT32
fetch_offset => INT64
log_start_offset => INT64
partition_max_bytes => INT32
forgotten_topics_data => topic [partitions]
topic => STRING
partitions => INT32
rack_id => STRING

Fetch Response (Version: 11) => throttle_time_ms error_code session_id [responses]
throttle_time_ms => INT32
error_code => INT16
session_id => INT32
responses => topic [partitions]
topic => STRING
partitions => partition_index error_code high_watermark last_stable_offset log_start_offset [aborted_transactions] preferred_read_replica records
partition_index => INT32
error_code => INT16
high_watermark => INT64
last_stable_offset => INT64
log_start_offset => INT64
aborted_transactions => producer_id first_offset
producer_id => INT64
first_offset => INT64
preferred_read_replica => INT32
records => RECORDS

Fetch Request (Version: 12) => replica_id max_wait_ms min_bytes max_bytes isolation_level session_id session_epoch [topics] [forgotten_topics_data] rack_id TAG_BUFFER
replica_id => INT32
max_wait_ms => INT32
min_bytes => INT32
max_bytes => INT32
isolation_level => INT8
session_id => INT32
session_epoch => INT32
topics => topic [partitions] TAG_BUFFER
topic => COMPACT_STRING
partitions => partition current_leader_epoch fetch_offset last_fetched_epoch log_start_offset partition_max_bytes TAG_BUFFER
partition => INT32
current_leader_epoch => INT32
fetch_offset => INT64
last_fetched_epoch => INT32
log_start_offset => INT64
partition_max_bytes => INT32
forgotten_topics_data => topic [partitions] TAG_BUFFER
topic => COMPACT_STRING
partitions => INT32
rack_id => COMPACT_STRING

Fetch Response (Version: 12) => throttle_time_ms error_code session_id [responses] TAG_BUFFER
throttle_time_ms => INT32
error_code => INT16
session_id => INT32
responses => topic [partitions] TAG_BUFFER
topic => COMPACT_STRING
partitions => partition_index error_code high_watermark last_stable_offset log_start_offset [aborted_transactions] preferred_read_replica records TAG_BUFFER
partition_index => INT32
error_code => INT16
high_watermark => INT64
last_stable_offset => INT64
log_start_offset => INT64
aborted_transactions => producer_id first_offset TAG_BUFFER
producer_id => INT64
first_offset => INT64
preferred_read_replica => INT32
records => COMPACT_RECORDS

Heartbeat Request (Version: 3) => group_id generation_id member_id group_instance_id
group_id => STRING
generation_id => INT32
member_id => STRING
group_instance_id => NULLABLE_STRING

Heartbeat Response (Version: 3) => throttle_time_ms error_code
throttle_time_ms => INT32
error_code => INT16

Heartbeat Request (Version: 4) => group_id generation_id member_id group_instance_id TAG_BUFFER
group_id => COMPACT_STRING
generation_id => INT32
member_id => COMPACT_STRING
group_instance_id => COMPACT_NULLABLE_STRING

Heartbeat Response (Version: 4) => throttle_time_ms error_code TAG_BUFFER
throttle_time_ms => INT32
error_code => INT16

OffsetCommit Request (Version: 7) => group_id generation_id_or_member_epoch member_id group_instance_id [topics]
group_id => STRING
generation_id_or_member_epoch => INT32
member_id => STRING
group_instance_id => NULLABLE_STRING
topics => name [partitions]
name => STRING
partitions => partition_index committed_offset committed_leader_epoch committed_metadata
partition_index => INT32
committed_offset => INT64
committed_leader_epoch => INT32
committed_metadata => NULLABLE_STRING

OffsetCommit Response (Version: 7) => throttle_time_ms [topics]
throttle_time_ms => INT32
topics => name [partitions]
name => STRING
partitions => partition_index error_code
partition_index => INT32
error_code => INT16

OffsetCommit Request (Version: 8) => group_id generation_id_or_member_epoch member_id group_instance_id [topics] TAG_BUFFER
group_id => COMPACT_STRING
generation_id_or_member_epoch => INT32
member_id => COMPACT_STRING
group_instance_id => COMPACT_NULLABLE_STRING
topics => name [partitions] TAG_BUFFER
name => COMPACT_STRING
partitions => partition_index committed_offset committed_leader_epoch committed_metadata TAG_BUFFER
partition_index => INT32
committed_offset => INT64
committed_leader_epoch => INT32
committed_metadata => COMPACT_NULLABLE_STRING

OffsetCommit Response (Version: 8) => throttle_time_ms [topics] TAG_BUFFER
throttle_time_ms => INT32
topics => name [partitions] TAG_BUFFER
name => COMPACT_STRING
partitions => partition_index error_code TAG_BUFFER
partition_index => INT32
error_code => INT16

ListOffsets Request (Version: 5) => replica_id isolation_level [topics]
replica_id => INT32
isolation_level => INT8
topics => name [partitions]
name => STRING
partitions => partition_index current_leader_epoch timestamp
partition_index => INT32
current_leader_epoch => INT32
timestamp => INT64

ListOffsets Response (Version: 5) => throttle_time_ms [topics]
throttle_time_ms => INT32
topics => name [partitions]
name => STRING
partitions => partition_index error_code timestamp offset leader_epoch
partition_index => INT32
error_code => INT16
timestamp => INT64
offset => INT64
leader_epoch => INT32

ListOffsets Request (Version: 7) => replica_id isolation_level [topics] TAG_BUFFER
replica_id => INT32
isolation_level => INT8
topics => name [partitions] TAG_BUFFER
name => COMPACT_STRING
partitions => partition_index current_leader_epoch timestamp TAG_BUFFER
partition_index => INT32
current_leader_epoch => INT32
timestamp => INT64

ListOffsets Response (Version: 7) => throttle_time_ms [topics] TAG_BUFFER
throttle_time_ms => INT32
topics => name [partitions] TAG_BUFFER
name => COMPACT_STRING
partitions => partition_index error_code timestamp offset leader_epoch TAG_BUFFER
partition_index => INT32
error_code => INT16
timestamp => INT64
offset => INT64
leader_epoch => INT32

FindCoordinator Request (Version: 3) => key key_type TAG_BUFFER
key => COMPACT_STRING
key_type => INT8

FindCoordinator Response (Version: 3) => throttle_time_ms error_code error_message node_id host port TAG_BUFFER
throttle_time_ms => INT32
error_code => INT16
error_message => COMPACT_NULLABLE_STRING
node_id => INT32
host => COMPACT_STRING
port => INT32

FindCoordinator Request (Version: 4) => key_type [coordinator_keys] TAG_BUFFER
key_type => INT8
coordinator_keys => COMPACT_STRING

FindCoordinator Response (Version: 4) => throttle_time_ms [coordinators] TAG_BUFFER
throttle_time_ms => INT32
coordinators => key node_id host port error_code error_message TAG_BUFFER
key => COMPACT_STRING
node_id => INT32
host => COMPACT_STRING
port => INT32
error_code => INT16
error_message => COMPACT_NULLABLE_STRING
"""  # noqa: E501


@dataclass(frozen=True, slots=True)
class Field:
    """One BNF field: a primitive type name, a nested struct (``fields``) or TAG_BUFFER; maybe an array."""

    name: str
    type: str
    is_array: bool = False
    fields: tuple[Field, ...] = ()


@dataclass(frozen=True, slots=True)
class Layout:
    api_key: int
    version: int
    is_request: bool
    flexible: bool
    fields: tuple[Field, ...]


_HEAD = re.compile(r"^(\w+) (Request|Response) \(Version: (\d+)\) =>(.*)$")
_API_KEYS_BY_NAME = {name: key for key, name in API_NAMES.items()}


def parse_layout(block: str) -> Layout:
    """Turn one BNF block into a Layout.

    The guide lists the definitions depth first, in field order, each name once per struct; so reading
    the lines in order while walking the fields resolves names that repeat in different structs
    (``partitions`` of ``topics`` versus ``partitions`` of ``forgotten_topics_data``).
    """
    lines = block.strip().splitlines()
    match = _HEAD.match(lines[0])
    if match is None:
        raise ValueError(f"not a layout head: {lines[0]!r}")
    api_name, kind, version, rhs = match.groups()
    definitions = iter(lines[1:])
    tokens = rhs.split()
    fields = _parse_fields(tokens, definitions)
    rest = list(definitions)
    if rest:
        raise ValueError(f"{lines[0]}: unused definitions {rest}")
    flexible = "TAG_BUFFER" in tokens
    return Layout(_API_KEYS_BY_NAME[api_name], int(version), kind == "Request", flexible, fields)


def _parse_fields(tokens: list[str], definitions: Iterator[str]) -> tuple[Field, ...]:
    fields: list[Field] = []
    seen: dict[str, Field] = {}
    for token in tokens:
        if token == "TAG_BUFFER":
            fields.append(Field("_tagged_fields", "TAG_BUFFER"))
            continue
        is_array = token.startswith("[")
        name = token.strip("[]")
        if name not in seen:
            line = next(definitions)
            lhs, _, definition = line.partition(" => ")
            if lhs != name:
                raise ValueError(f"expected the definition of {name!r}, got {line!r}")
            parts = definition.split()
            if len(parts) == 1 and parts[0].isupper():
                seen[name] = Field(name, parts[0])
            else:
                seen[name] = Field(name, "STRUCT", fields=_parse_fields(parts, definitions))
        known = seen[name]
        fields.append(Field(name, known.type, is_array, known.fields))
    return tuple(fields)


LAYOUTS: dict[tuple[int, int, bool], Layout] = {
    (layout.api_key, layout.version, layout.is_request): layout
    for layout in map(parse_layout, GRAMMARS.strip().split("\n\n"))
}

_FIXED = {
    "INT8": struct.Struct(">b"),
    "INT16": struct.Struct(">h"),
    "INT32": struct.Struct(">i"),
    "INT64": struct.Struct(">q"),
    "UINT16": struct.Struct(">H"),
    "UINT32": struct.Struct(">I"),
    "FLOAT64": struct.Struct(">d"),
    "BOOLEAN": struct.Struct(">?"),
}
_I16 = _FIXED["INT16"]
_I32 = _FIXED["INT32"]
_NULL_UUID = bytes(16)


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, as used by compact lengths and tagged fields."""
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """Zig-zag signed varint (varint and varlong alike), as used inside records."""
    return uvarint((value << 1) ^ (value >> 63))


def encode_body(api_key: int, version: int, is_request: bool, values: Mapping[str, object]) -> bytes:
    layout = LAYOUTS[(api_key, version, is_request)]
    out = bytearray()
    _encode_struct(out, layout.fields, values, layout.flexible)
    return bytes(out)


def _encode_struct(out: bytearray, fields: tuple[Field, ...], values: Mapping, flexible: bool) -> None:
    for field in fields:
        value = values.get(field.name)
        if field.type == "TAG_BUFFER":
            out += value if value is not None else b"\x00"
        elif field.is_array:
            items = value or ()
            out += uvarint(len(items) + 1) if flexible else _I32.pack(len(items))
            for item in items:
                if field.fields:
                    _encode_struct(out, field.fields, item, flexible)
                else:
                    _encode_value(out, field.type, item)
        elif field.fields:
            _encode_struct(out, field.fields, value or {}, flexible)
        else:
            _encode_value(out, field.type, value)


def _encode_value(out: bytearray, type_name: str, value: object) -> None:
    fixed = _FIXED.get(type_name)
    if fixed is not None:
        out += fixed.pack(value or 0)
    elif type_name == "UUID":
        out += value or _NULL_UUID
    elif type_name.endswith("STRING"):
        data = None if value is None else str(value).encode()
        if data is None and "NULLABLE" not in type_name:
            data = b""
        _encode_length_prefixed(out, data, compact=type_name.startswith("COMPACT"), short=True)
    elif type_name.endswith(("BYTES", "RECORDS")):
        nullable = "NULLABLE" in type_name or type_name.endswith("RECORDS")
        data = value if value is not None or nullable else b""
        _encode_length_prefixed(out, data, compact=type_name.startswith("COMPACT"), short=False)
    else:
        raise ValueError(f"unknown type {type_name}")


def _encode_length_prefixed(out: bytearray, data: bytes | None, compact: bool, short: bool) -> None:
    if compact:
        out += uvarint(0 if data is None else len(data) + 1)
    elif short:
        out += _I16.pack(-1 if data is None else len(data))
    else:
        out += _I32.pack(-1 if data is None else len(data))
    if data:
        out += data


def tagged_fields(fields: Iterable[tuple[int, bytes]]) -> bytes:
    """A tagged-field section: count, then (tag, size, data) per field, tags ascending."""
    items = sorted(fields)
    out = bytearray(uvarint(len(items)))
    for tag, data in items:
        out += uvarint(tag) + uvarint(len(data)) + data
    return bytes(out)


def compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def api_versions_features() -> bytes:
    """Tagged fields of an ApiVersions v3+ response as a KRaft 3.9 broker sends them.

    Tag 0 SupportedFeatures and tag 2 FinalizedFeatures are arrays of (name, two int16, tagged fields);
    tag 1 is FinalizedFeaturesEpoch (int64). They exercise a decoder's skipping of tagged fields.
    """
    supported = uvarint(3) + b"".join(
        compact_string(name) + struct.pack(">hh", low, high) + b"\x00"
        for name, low, high in (("kraft.version", 0, 1), ("metadata.version", 1, 21)))
    finalized = uvarint(2) + compact_string("metadata.version") + struct.pack(">hh", 21, 21) + b"\x00"
    return tagged_fields([(0, supported), (1, struct.pack(">q", 1_234_567)), (2, finalized)])


# --- frames -------------------------------------------------------------------------------------------

_REQUEST_HEAD = struct.Struct(">ihhi")
_RESPONSE_HEAD = struct.Struct(">ii")


def is_flexible(api_key: int, version: int) -> bool:
    return LAYOUTS[(api_key, version, True)].flexible


def client_id_tail(client_id: str | None, flexible: bool) -> bytes:
    """The part of a request header after correlation_id: client_id (always a non-compact
    NULLABLE_STRING) and, in header v2, an empty tagged-field section."""
    data = b"\xff\xff" if client_id is None else _I16.pack(len(client_id.encode())) + client_id.encode()
    return data + b"\x00" if flexible else data


def request_frame(api_key: int, version: int, correlation_id: int, tail: bytes, body: bytes) -> bytes:
    """Size prefix + request header v1/v2 (``tail`` from client_id_tail) + body."""
    head = _REQUEST_HEAD.pack(8 + len(tail) + len(body), api_key, version, correlation_id)
    return b"".join((head, tail, body))


def response_header_v1(api_key: int, version: int) -> bool:
    """Flexible responses use header v1, except ApiVersions, always v0 (a client must be able to read
    the answer before it knows which versions the broker speaks)."""
    return api_key != API_VERSIONS and is_flexible(api_key, version)


def response_frame(correlation_id: int, header_v1: bool, body: bytes) -> bytes:
    if header_v1:
        return b"".join((_RESPONSE_HEAD.pack(5 + len(body), correlation_id), b"\x00", body))
    return b"".join((_RESPONSE_HEAD.pack(4 + len(body), correlation_id), body))


# --- record batches (magic 2) ---------------------------------------------------------------------------


def _crc32c_tables() -> tuple[tuple[int, ...], ...]:
    """Slicing-by-8 tables for CRC-32C (reflected polynomial 0x82F63B78)."""
    base = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        base.append(crc)
    tables = [base]
    for _ in range(7):
        previous = tables[-1]
        tables.append([(value >> 8) ^ base[value & 0xFF] for value in previous])
    return tuple(tuple(table) for table in tables)


_CRC32C = _crc32c_tables()
_TWO_WORDS = struct.Struct("<II")


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of a v2 record batch; eight bytes per step, pure Python."""
    t0, t1, t2, t3, t4, t5, t6, t7 = _CRC32C
    crc = 0xFFFFFFFF
    whole = len(data) - len(data) % 8
    for low, high in _TWO_WORDS.iter_unpack(memoryview(data)[:whole]):
        crc ^= low
        crc = (t7[crc & 0xFF] ^ t6[(crc >> 8) & 0xFF] ^ t5[(crc >> 16) & 0xFF] ^ t4[crc >> 24]
               ^ t3[high & 0xFF] ^ t2[(high >> 8) & 0xFF] ^ t1[(high >> 16) & 0xFF] ^ t0[high >> 24])
    for byte in data[whole:]:
        crc = t0[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Iterable[tuple[bytes, bytes | None]] = ()) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(timestamp_delta) + varint(offset_delta)
    for data in (key, value):
        body += varint(-1) if data is None else varint(len(data)) + data
    headers = tuple(headers)
    body += varint(len(headers))
    for header_key, header_value in headers:
        body += varint(len(header_key)) + header_key
        body += varint(-1) if header_value is None else varint(len(header_value)) + header_value
    return varint(len(body)) + bytes(body)


CODEC_NONE, CODEC_GZIP = 0, 1
_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. records count
_BATCH_HEAD = struct.Struct(">qiibI")  # base offset, batch length, leader epoch, magic, crc


def record_batch(records: list[tuple[bytes | None, bytes | None, tuple]], *, base_timestamp_ms: int,
                 timestamp_step_ms: int = 1, codec: int = CODEC_NONE, base_offset: int = 0,
                 producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                 partition_leader_epoch: int = -1) -> bytes:
    """A v2 RecordBatch with a correct batchLength and CRC-32C; codec 1 gzips the records section."""
    encoded = b"".join(encode_record(i, i * timestamp_step_ms, key, value, headers)
                       for i, (key, value, headers) in enumerate(records))
    if codec == CODEC_GZIP:
        encoded = gzip.compress(encoded, compresslevel=1, mtime=0)
    last_delta = len(records) - 1
    after_crc = _BATCH_TAIL.pack(codec, last_delta, base_timestamp_ms,
                                 base_timestamp_ms + last_delta * timestamp_step_ms, producer_id,
                                 producer_epoch, base_sequence, len(records)) + encoded
    head = _BATCH_HEAD.pack(base_offset, 4 + 1 + 4 + len(after_crc), partition_leader_epoch, 2,
                            crc32c(after_crc))
    return head + after_crc


def rebase_batch(batch: bytes, base_offset: int) -> bytes:
    """The same batch at another base offset (the CRC does not cover it), as a fetch returns it."""
    return struct.pack(">q", base_offset) + batch[8:]


def batch_record_count(batch: bytes) -> int:
    return _I32.unpack_from(batch, 57)[0]
