"""Pull only what the tables need from a request or response body: topics, partitions, errors, offsets.

``extract(buf, off, end, api_key, api_version, is_response)`` walks the same generated schemas as
:mod:`dissectors.kafka.decoder`, but builds nothing it does not return.

How: on first use of a body kind, each of its structs gets a specialised extraction function, written as
Python source from the schema and compiled (the way :mod:`dataclasses` writes ``__init__``). The function
reads the fields that matter into locals and skips the rest: a run of fixed-size fields is one
``struct.unpack_from`` whose format pads over the unwanted ones; strings, bytes and record payloads are
skipped by their length; arrays of fixed-size elements by count times size; structs that hold nothing of
interest by a compiled skipper; tag buffers by their sizes. So the per-frame cost follows the fields the
tables use, not the size of the body. Functions are cached per struct object and scope, so versions and
APIs that share a struct share its function. :func:`plan_source` shows the source of a body kind's plan.

What counts as what (read from the schemas, so every API and version follows the same rules):
- a topic is a string field Kafka marks ``entityType: topicName`` (or an array of them), or a uuid field
  named ``topic_id``; a struct with both is named by its name when that is non-empty, else by its id
  (the all-zero id means "none");
- a partition is an array element whose struct has an int32 ``partition_index``, ``partition``, ``index``
  or ``partition_id`` and sits inside a topic (its own, or an enclosing struct's), or an element of an
  int32 array named ``partitions`` or ``partition_indexes`` inside a topic;
- an error is an int16 field named ``error_code`` or ``*_error_code`` anywhere in a response; its message
  is the field with the same prefix and ``error_message`` in the same struct.

Malformed bodies raise :class:`~dissectors.kafka.decoder.DecodeError`, as in the decoder, and bodies that
run past ``end`` its subclass ``DecodeTruncated``; with ``partial=True`` the latter instead yields what was
read before the bytes ran out (a capture often keeps only the head of a large Produce or Fetch frame).
Fields that nothing needs are bounds-checked but not validated further.
"""

from __future__ import annotations

import linecache
import struct
from collections.abc import Callable
from itertools import count as _counter
from typing import Any, NamedTuple

from dissectors.kafka import _extract as _compiled
from dissectors.kafka._generated import schemas as _schemas
from dissectors.kafka._generated.response_prefix import RESPONSE_PREFIX
from dissectors.kafka.decoder import (
    FIXED_TYPES,
    LENGTH_READERS,
    DecodeError,
    DecodeTruncated,
    field_reader,
    read_uvarint,
    schema,
)

Topic = str | bytes
"""A topic name, or a topic id (its 16 bytes) where the version names topics by id."""

ZERO_UUID = bytes(16)
PARTITION_APIS = frozenset({0, 1, 2, 8, 9, 21, 23})
"""APIs with per-partition detail: Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords,
OffsetForLeaderEpoch."""
PRODUCE = 0
# What one body may add to the tables, whatever its array counts claim (a 16 MB OffsetFetch response names 4 M
# partitions, a Metadata request 8 M empty topics): past these the rest is counted, not kept. No real body
# comes near them (a broker's whole partition count is rarely above a few hundred thousand).
MAX_PARTITION_ROWS = 100_000  # PartitionEntry rows per body
MAX_ERROR_ROWS = 100_000  # ErrorEntry rows per body
MAX_TOPICS = 10_000  # distinct topics per body
PARTITION_FIELDS = frozenset({"partition_index", "partition", "index", "partition_id"})
PARTITION_LISTS = frozenset({"partitions", "partition_indexes"})
ROW_PARTITION_LISTS = frozenset({"partition_indexes"})  # OffsetFetch requests list partitions as int32s


class ErrorEntry(NamedTuple):
    """One non-zero error code field of a response."""

    field_path: str  # dotted field names without indices: "responses.partitions.error_code"
    topic: Topic | None  # the enclosing topic, if any
    partition: int | None  # the enclosing partition, if any
    error_code: int
    error_message: str | None  # the message field next to the code, when the version has one


class PartitionEntry(NamedTuple):
    """One topic-partition of Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch, DeleteRecords or
    OffsetForLeaderEpoch. A field is None when that API and version does not carry it."""

    topic: Topic | None
    partition: int
    error_code: int | None  # responses
    base_offset: int | None  # Produce response: offset of the first appended record
    log_append_time_ms: int | None  # Produce response (-1 unless the topic uses log-append time)
    log_start_offset: int | None  # Produce response v5+, Fetch request and response
    high_watermark: int | None  # Fetch response
    last_stable_offset: int | None  # Fetch response v4+
    fetch_offset: int | None  # Fetch request
    committed_offset: int | None  # OffsetCommit request, OffsetFetch response
    offset: int | None  # ListOffsets response v1+, DeleteRecords request (delete before it)
    low_watermark: int | None  # DeleteRecords response
    end_offset: int | None  # OffsetForLeaderEpoch response
    timestamp: int | None  # ListOffsets request (the query) and response v1+
    leader_epoch: int | None  # leader_epoch, or committed_leader_epoch (OffsetCommit, OffsetFetch)
    current_leader_epoch: int | None  # Fetch, ListOffsets and OffsetForLeaderEpoch requests
    records_offset: int | None  # where the records field's bytes start in ``buf`` (None if null or absent)
    record_bytes: int | None  # the records field's length


ROW_FIELDS = {name: name for name in PartitionEntry._fields[2:-2]}
"""Schema field name -> PartitionEntry field it fills."""
ROW_FIELDS["committed_leader_epoch"] = "leader_epoch"


class Extracted(NamedTuple):
    """What one request or response body contributes to the tables."""

    topics: list[Topic]  # every topic mentioned, in order of first appearance, without repeats
    partition_count: int  # topic-partition entries (array elements; repeats counted)
    errors: list[ErrorEntry]  # every non-zero error code of a response, innermost structs first
    top_error: int | None  # the response's top-level error_code, if the version has one
    throttle_time_ms: int | None  # the response's top-level throttle_time_ms, wherever it sits
    partitions: list[PartitionEntry]  # per topic-partition detail, for the APIs PARTITION_APIS names
    acks: int | None  # Produce requests
    transactional_id: str | None  # Produce requests v3+
    complete: bool  # False when ``partial`` extraction stopped at ``end`` (a frame cut short)
    topic_ids: dict[bytes, str] | None = None  # topic id -> name, from structs that carry both (Metadata v10+)
    # None, or what the limits left out: [partition rows, error rows, topic mentions] (MAX_PARTITION_ROWS...)
    left_out: list[int] | None = None


class _Accumulator:
    """What the extraction functions of one body write into."""

    __slots__ = ("topics", "seen", "partition_count", "errors", "partitions", "error_code",
                 "throttle_time_ms", "acks", "transactional_id", "topic_ids", "left_out")

    def __init__(self) -> None:
        self.topics: list[Topic] = []
        self.seen: set[Topic] = set()
        self.partition_count = 0
        self.errors: list[ErrorEntry] = []
        self.partitions: list[PartitionEntry] = []
        self.error_code = self.throttle_time_ms = self.acks = self.transactional_id = None
        self.topic_ids: dict[bytes, str] | None = None
        self.left_out: list[int] | None = None

    def leave_out(self, kind: int) -> None:
        """Count a partition row (0), error row (1) or topic mention (2) a limit keeps out."""
        if self.left_out is None:
            self.left_out = [0, 0, 0]
        self.left_out[kind] += 1

    def add_topic(self, topic: Topic) -> None:
        """A topic not seen yet in this body: listed, up to MAX_TOPICS."""
        if len(self.topics) < MAX_TOPICS:
            self.seen.add(topic)
            self.topics.append(topic)
        else:
            self.leave_out(2)

    def name_topic_id(self, topic_id: bytes, name: str) -> None:
        if self.topic_ids is None:
            self.topic_ids = {}
        self.topic_ids[topic_id] = name


TOP_FIELDS = {False: ("acks", "transactional_id"), True: ("error_code", "throttle_time_ms")}
"""is_response -> top-level fields kept (acks and transactional_id for Produce requests only)."""

Skipper = Callable[[Any, int, int], int]
"""skipper(buf, pos, end) -> position after the field."""
Runner = Callable[[Any, int, int, _Accumulator, Any, Any], int]
"""runner(buf, pos, end, acc, topic, partition) -> position after the struct."""

_new_tuple = tuple.__new__


# ---------------------------------------------------------------------------------------------------------
# Skipping what is not needed


def skip_tags(buf, pos: int, end: int) -> int:
    if pos < end and buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos, end)
    if count > (end - pos) >> 1:
        raise DecodeTruncated(f"{count} tagged fields cannot fit in {end - pos} bytes", "_tagged_fields")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        pos += size
        if pos > end:
            raise DecodeTruncated("tagged field runs past the end", "_tagged_fields")
    return pos


def _length_skipper(length_of, nullable: bool) -> Skipper:
    def skip_sized(buf, pos: int, end: int) -> int:
        length, pos = length_of(buf, pos, end)
        stop = pos + length
        if length < 0 or stop > end:
            if length == -1 and nullable:
                return pos
            raise _bad_count(length, end - pos, "")
        return stop

    return skip_sized


def _array_skipper(length_of, nullable: bool, size: int | None, element: Skipper | None) -> Skipper:
    """Skip an array: count times ``size`` for fixed-size elements, else element by element."""

    def skip_array(buf, pos: int, end: int) -> int:
        count, pos = length_of(buf, pos, end)
        if count <= 0:
            if count == 0 or (count == -1 and nullable):
                return pos
            raise _bad_count(count, end - pos, "")
        if count > end - pos:
            raise _bad_count(count, end - pos, "")
        if size is not None:
            pos += count * size
            if pos > end:
                raise DecodeTruncated(f"{count} elements of {size} bytes run past the end")
            return pos
        for _ in range(count):
            pos = element(buf, pos, end)
        return pos

    return skip_array


def _nullable_struct_skipper(element: Skipper) -> Skipper:
    def skip_nullable_struct(buf, pos: int, end: int) -> int:
        if pos >= end:
            raise DecodeTruncated("truncated struct marker")
        if buf[pos] >= 0x80:
            return pos + 1
        return element(buf, pos + 1, end)

    return skip_nullable_struct


_STRUCT_SKIPPERS: dict[int, tuple[Skipper, int | None]] = {}


def field_skipper(type_name: str, element: Any = None) -> tuple[Skipper | None, int | None]:
    """(skipper, None) for a variable-size field, (None, size) for a fixed-size one."""
    if type_name in FIXED_TYPES:
        return None, FIXED_TYPES[type_name][1]
    compact = type_name.startswith("compact_")
    base = type_name.removeprefix("compact_")
    nullable = base.startswith("nullable_")
    base = base.removeprefix("nullable_")
    string_length, other_length = LENGTH_READERS[compact]
    if base == "string":
        return _length_skipper(string_length, nullable), None
    if base in ("bytes", "records"):
        return _length_skipper(other_length, nullable), None
    if base == "struct":
        skip, size = struct_skipper(element)
        if nullable:
            return _nullable_struct_skipper(skip), None
        return (skip, None) if size is None else (None, size)
    if base == "array":
        skip, size = struct_skipper(element) if isinstance(element, tuple) else field_skipper(element)
        return _array_skipper(other_length, nullable, size, skip), None
    raise ValueError(f"unknown schema type {type_name!r}")


def struct_skipper(struct_schema: tuple) -> tuple[Skipper, int | None]:
    """A skipper for a struct, and its size when every instance has the same size."""
    cached = _STRUCT_SKIPPERS.get(id(struct_schema))
    if cached is not None:
        return cached
    fields, tagged = struct_schema
    steps: list[int | Skipper] = []
    for entry in fields:
        skip, size = field_skipper(entry[1], entry[2] if len(entry) > 2 else None)
        if skip is None:
            if steps and isinstance(steps[-1], int):
                steps[-1] += size
            else:
                steps.append(size)
        else:
            steps.append(skip)
    fixed = None if tagged is not None or any(not isinstance(s, int) for s in steps) else sum(steps)
    flexible = tagged is not None

    def skip_struct(buf, pos: int, end: int) -> int:
        for step in steps:
            if step.__class__ is int:
                pos += step
            else:
                pos = step(buf, pos, end)
        if pos > end:
            raise DecodeTruncated("truncated struct")
        return skip_tags(buf, pos, end) if flexible else pos

    if flexible and all(isinstance(s, int) for s in steps):
        skip_struct = _sized_tagged_skipper(sum(steps))
    _STRUCT_SKIPPERS[id(struct_schema)] = result = (skip_struct, fixed)
    return result


def _sized_tagged_skipper(size: int) -> Skipper:
    """A skipper for a flexible struct of fixed-size fields (ApiVersions entries, Metadata brokers' ids...):
    the general one's steps in one addition, and an empty tag buffer in place."""

    def skip_sized_tagged(buf, pos: int, end: int) -> int:
        pos += size
        if pos >= end:
            if pos > end:
                raise DecodeTruncated("truncated struct")
            return skip_tags(buf, pos, end)
        return pos + 1 if buf[pos] == 0 else skip_tags(buf, pos, end)

    return skip_sized_tagged


# ---------------------------------------------------------------------------------------------------------
# Helpers the generated functions call


def _truncated(path: str) -> DecodeTruncated:
    return DecodeTruncated("truncated", path)


def _bad_count(count: int, left: int, path: str) -> DecodeError:
    """A length or count the bytes cannot hold (perhaps cut short), or a negative one (malformed)."""
    if count >= 0:
        return DecodeTruncated(f"length {count} with {left} bytes left", path)
    return DecodeError(f"bad length {count}", path)


def _records_span(length_of) -> Callable:
    """A reader of a records field's (offset, length, position after); (None, None, pos) for null.

    The position after may lie past ``end``: the caller checks, once it has kept the span (a frame cut
    short in its records still tells where they start and how long they are)."""

    def read_records_span(buf, pos: int, end: int) -> tuple[int | None, int | None, int]:
        length, pos = length_of(buf, pos, end)
        if length < 0:
            if length == -1:
                return None, None, pos
            raise DecodeError(f"bad records length {length}")
        return pos, length, pos + length

    return read_records_span


def _topic_list(length_of, read_name) -> Callable:
    """Read an array of topic names into the accumulator."""

    def read_topic_list(buf, pos: int, end: int, acc: _Accumulator) -> int:
        count, pos = length_of(buf, pos, end)
        if count < 0:
            if count < -1:
                raise _bad_count(count, end - pos, "")
            return pos
        if count > end - pos:
            raise _bad_count(count, end - pos, "")
        for _ in range(count):
            name, pos = read_name(buf, pos, end)
            if name and name not in acc.seen:
                acc.add_topic(name)
        return pos

    return read_topic_list


def _array_runner(length_of, nullable: bool, element: Runner) -> Runner:
    """Run an element runner over an array (for tagged arrays; inline arrays are written out in place)."""

    def run_array(buf, pos: int, end: int, acc: _Accumulator, topic, partition) -> int:
        count, pos = length_of(buf, pos, end)
        if count <= 0:
            if count == 0 or (count == -1 and nullable):
                return pos
            raise _bad_count(count, end - pos, "")
        if count > end - pos:
            raise _bad_count(count, end - pos, "")
        for _ in range(count):
            pos = element(buf, pos, end, acc, topic, partition)
        return pos

    return run_array


def _nullable_struct_runner(element: Runner) -> Runner:
    def run_nullable_struct(buf, pos: int, end: int, acc: _Accumulator, topic, partition) -> int:
        if pos >= end:
            raise DecodeTruncated("truncated struct marker")
        if buf[pos] >= 0x80:
            return pos + 1
        return element(buf, pos + 1, end, acc, topic, partition)

    return run_nullable_struct


def _partition_rows(buf, pos: int, stop: int, topic: Topic | None, acc: _Accumulator) -> None:
    """Rows for an int32 array of partition indexes (OffsetFetch requests)."""
    blank = [None] * len(PartitionEntry._fields)
    room = MAX_PARTITION_ROWS - len(acc.partitions)
    count = (stop - pos) // 4
    if count > room:
        room = max(room, 0)
        stop = pos + 4 * room
        if acc.left_out is None:
            acc.left_out = [0, 0, 0]
        acc.left_out[0] += count - room
    for (partition,) in struct.iter_unpack(">i", buf[pos:stop]):
        blank[0], blank[1] = topic, partition
        acc.partitions.append(_new_tuple(PartitionEntry, blank))


_HELPERS = {
    "_int16": struct.Struct(">h").unpack_from, "_int32": struct.Struct(">i").unpack_from,
    "DecodeError": DecodeError, "DecodeTruncated": DecodeTruncated, "ZERO_UUID": ZERO_UUID,
    "ErrorEntry": ErrorEntry, "PartitionEntry": PartitionEntry, "_new_tuple": _new_tuple,
    "_truncated": _truncated, "_bad_count": _bad_count, "_skip_tags": skip_tags,
    "_partition_rows": _partition_rows, "read_uvarint": read_uvarint,
}


# ---------------------------------------------------------------------------------------------------------
# Writing the extraction function of a struct


class _Scope(NamedTuple):
    """Where a struct sits, which decides what its fields mean there."""

    api_key: int
    is_response: bool
    path: str  # dotted field names down to this struct ("" at the top level)
    top: bool
    element: bool  # an element of an array
    in_topic: bool  # an enclosing struct names a topic


_STRUCT_NAMES = {id(value): name for name, value in vars(_schemas).items() if isinstance(value, tuple)}
_PLANS: dict[tuple[int, _Scope], Runner | None] = {}
_SOURCES: dict[int, str] = {}  # id(runner) -> its source
_serial = _counter()


def plan(struct_schema: tuple, scope: _Scope) -> Runner | None:
    """The extraction function of a struct in a scope, or None when nothing in it is needed."""
    key = (id(struct_schema), scope)
    if key not in _PLANS:
        _PLANS[key] = _PlanWriter(struct_schema, scope).compile()
    return _PLANS[key]


def _child_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


class _PlanWriter:
    """Writes the source of one struct's extraction function.

    The function's locals: ``pos``; ``topic`` and ``partition`` (inherited, then the struct's own once
    read); ``own`` (0: topic inherited, 1: named by id, 2: by name); ``v_<field>`` for each field kept.
    """

    def __init__(self, struct_schema: tuple, scope: _Scope) -> None:
        self.fields, self.tagged = struct_schema
        self.struct_name = _STRUCT_NAMES.get(id(struct_schema), "struct")
        self.scope = scope
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {}
        self.pending: list[tuple[str, str]] = []  # fixed-size fields not yet written: (name, type)
        tagged_entries = [t[1:] for t in self.tagged or ()]
        everything = [*self.fields, *tagged_entries]
        self.topic_name = next((e[0] for e in self.fields if len(e) > 3 and e[3] == "topicName"
                                and e[1].endswith("string")), None)
        self.topic_id = next((e[0] for e in self.fields if e[0] == "topic_id" and e[1] == "uuid"), None)
        self.has_topic = self.topic_name is not None or self.topic_id is not None
        # the topic is reported as soon as the last field that names it is read
        names_topic = (self.topic_name, self.topic_id)
        self.topic_ready = next((e[0] for e in reversed(self.fields) if e[0] in names_topic), None)
        self.in_topic = scope.in_topic or self.has_topic
        self.partition = None
        if scope.element and self.in_topic:
            self.partition = next((e[0] for e in self.fields if e[0] in PARTITION_FIELDS and e[1] == "int32"),
                                  None)
        self.rows = self.partition is not None and scope.api_key in PARTITION_APIS
        self.errors = [e[0] for e in everything if scope.is_response and e[1] == "int16"
                       and (e[0] == "error_code" or e[0].endswith("_error_code"))]
        self.top_fields = []
        if scope.top and (scope.is_response or scope.api_key == PRODUCE):
            self.top_fields = [e[0] for e in everything if e[0] in TOP_FIELDS[scope.is_response]]
        self.kept: set[str] = set()  # fields read into v_<name>
        self.tag_kept = [e[0] for e in tagged_entries if self.wanted(e[0], e[1])]
        self.records: str | None = None  # the records field kept for the partition row
        self.needed = False  # whether anything but skipping was written
        if any(e[3:] == ("topicName",) or e[0] == "topic_id" for e in tagged_entries):
            raise ValueError(f"{self.struct_name}: a tagged topic field, which no definition has had so far")

    # -- what is needed

    def wanted(self, name: str, type_name: str) -> bool:
        """Whether a scalar field's value is used once the struct is read."""
        if name in (self.topic_name, self.topic_id) or name in self.errors or name in self.top_fields:
            return True
        if self.rows and (name in ROW_FIELDS or type_name.endswith("records")):
            return True
        code = name.removesuffix("error_message") + "error_code"
        return name.endswith("error_message") and code in self.errors

    def constant(self, value: Any, hint: str) -> str:
        name = f"_{hint}{len(self.constants)}"
        self.constants[name] = value
        return name

    def emit(self, line: str, indent: int = 1) -> None:
        self.lines.append("    " * indent + line)

    def var(self, name: str) -> str:
        return "partition" if name == self.partition else f"v_{name}"

    # -- fields

    def flush_fixed(self) -> None:
        """Write the pending run of fixed-size fields as one bounds check and (at most) one unpack."""
        run, self.pending = self.pending, []
        if not run:
            return
        size = sum(FIXED_TYPES[t][1] for _, t in run)
        kept = [(name, t) for name, t in run if name == self.partition or self.wanted(name, t)]
        if not kept:
            self.emit(f"pos += {size}")
            return
        layout = "".join(FIXED_TYPES[t][0] if (name, t) in kept else f"{FIXED_TYPES[t][1]}x"  # x: skip a byte
                         for name, t in run)
        unpack = self.constant(struct.Struct(">" + layout).unpack_from, "unpack")
        targets = ", ".join(self.var(name) for name, _ in kept)
        self.needed = True
        self.emit(f"if pos + {size} > end:")
        self.emit(f"raise _truncated({_child_path(self.scope.path, run[0][0])!r})", 2)
        self.emit(f"{targets}, = {unpack}(buf, pos)")
        self.emit(f"pos += {size}")
        self.kept.update(name for name, _ in kept if name != self.partition)
        if any(name == self.topic_id for name, _ in kept):
            if self.topic_name in self.kept:  # name read already: remember the pair, so ids elsewhere get names
                self.emit(f"if v_{self.topic_name} and v_{self.topic_id} != ZERO_UUID:")
                self.emit(f"acc.name_topic_id(v_{self.topic_id}, v_{self.topic_name})", 2)
            self.emit(f"if own != 2 and v_{self.topic_id} != ZERO_UUID:")
            self.emit(f"topic = v_{self.topic_id}", 2)
            self.emit("own = 1", 2)
            if self.topic_ready == self.topic_id:
                self.report_topic()

    def report_topic(self) -> None:
        self.emit("if own and topic not in acc.seen:")
        self.emit("acc.add_topic(topic)", 2)

    def field(self, entry: tuple) -> None:
        name, type_name = entry[0], entry[1]
        element = entry[2] if len(entry) > 2 else None
        if type_name in FIXED_TYPES:
            self.pending.append((name, type_name))
            return
        self.flush_fixed()
        needed_before, self.needed = self.needed, True  # unless the field turns out to be skipped, below
        path = _child_path(self.scope.path, name)
        compact = type_name.startswith("compact_")
        length_of = LENGTH_READERS[compact][1]
        nullable = "nullable" in type_name
        if name == self.topic_name:
            reader = self.constant(field_reader(type_name), "read")
            if compact:  # a name shorter than 127 bytes, in bounds, is read in place; else by the reader
                self.emit("if pos < end and 0 < (n := buf[pos]) < 0x80 and pos + n <= end:")
                self.emit(f"v_{name} = str(buf[pos + 1:pos + n], 'utf-8', 'replace')", 2)
                self.emit("pos += n", 2)
                self.emit("else:")
                self.emit(f"v_{name}, pos = {reader}(buf, pos, end)", 2)
            else:  # likewise an int16 length N > 0, in bounds
                self.emit("if pos + 2 <= end and (n := _int16(buf, pos)[0]) > 0 and pos + 2 + n <= end:")
                self.emit(f"v_{name} = str(buf[pos + 2:pos + 2 + n], 'utf-8', 'replace')", 2)
                self.emit("pos += 2 + n", 2)
                self.emit("else:")
                self.emit(f"v_{name}, pos = {reader}(buf, pos, end)", 2)
            self.emit(f"if v_{name}:")
            self.emit(f"topic = v_{name}", 2)
            self.emit("own = 2", 2)
            if self.topic_id in self.kept:  # the id came first: remember the pair now
                self.emit(f"if v_{self.topic_id} != ZERO_UUID:", 2)
                self.emit(f"acc.name_topic_id(v_{self.topic_id}, v_{name})", 3)
            self.kept.add(name)
            if self.topic_ready == name:
                self.report_topic()
        elif type_name.endswith("array") and isinstance(element, str) and entry[3:] == ("topicName",):
            reader = self.constant(_topic_list(length_of, field_reader(element)), "topics")
            self.emit(f"pos = {reader}(buf, pos, end, acc)")
        elif type_name.endswith("array") and element == "int32" and name in PARTITION_LISTS and self.in_topic:
            self.partition_list(name, length_of, nullable, path)
        elif isinstance(element, tuple) and (runner := self.child(name, type_name, element)) is not None:
            if type_name.endswith("array"):
                self.struct_array(runner, length_of, nullable, path)
            elif nullable:
                self.emit("if pos >= end:")
                self.emit(f"raise _truncated({path!r})", 2)
                self.emit("if buf[pos] >= 0x80:")
                self.emit("pos += 1", 2)
                self.emit("else:")
                self.emit(f"pos = {runner}(buf, pos + 1, end, acc, topic, partition)", 2)
            else:
                self.emit(f"pos = {runner}(buf, pos, end, acc, topic, partition)")
        elif self.rows and type_name.endswith("records"):
            reader = self.constant(_records_span(length_of), "records")
            if not compact:  # an int32 length N >= 0 in place
                self.emit("if pos + 4 <= end and (n := _int32(buf, pos)[0]) >= 0:")
                self.emit("v_records_offset, v_record_bytes, pos = pos + 4, n, pos + 4 + n", 2)
                self.emit("else:")
            self.emit(f"v_records_offset, v_record_bytes, pos = {reader}(buf, pos, end)", 1 if compact else 2)
            self.emit("if pos > end:")
            self.emit(f"raise _truncated({path!r})", 2)
            self.records = name
        elif self.wanted(name, type_name):
            reader = self.constant(field_reader(type_name, element), "read")
            if type_name.endswith("nullable_string"):  # a null (an error message, mostly) in place
                self.emit("if pos < end and buf[pos] == 0:" if compact else
                          "if pos + 2 <= end and buf[pos] == buf[pos + 1] == 0xFF:")
                self.emit(f"v_{name} = None", 2)
                self.emit(f"pos += {1 if compact else 2}", 2)
                self.emit("else:")
                self.emit(f"v_{name}, pos = {reader}(buf, pos, end)", 2)
            else:
                self.emit(f"v_{name}, pos = {reader}(buf, pos, end)")
            self.kept.add(name)
        else:
            self.skip(type_name, element, path)
            self.needed = needed_before

    def skip(self, type_name: str, element: Any, path: str) -> None:
        """Skip a field nothing needs. Strings, bytes and arrays of fixed-size elements are written out in
        place (a length and a jump); anything else calls a compiled skipper."""
        skip = self.constant(field_skipper(type_name, element)[0], "skip")
        if element in FIXED_TYPES and type_name.endswith("array"):
            size = FIXED_TYPES[element][1]
        elif type_name.removeprefix("compact_").removeprefix("nullable_") in ("string", "bytes", "records"):
            size = 1
        elif type_name.endswith("array") and isinstance(element, tuple):
            self.skip_struct_array(skip, type_name, struct_skipper(element)[1])
            return
        else:
            self.emit(f"pos = {skip}(buf, pos, end)")
            return
        if type_name.startswith("compact_"):  # a one-byte length N+1 (0: null), else the skipper
            self.emit("if pos < end and buf[pos] < 0x80:")
            self.emit(f"pos += (buf[pos] - 1) * {size} + 1 if buf[pos] else 1", 2)
            self.emit("else:")
            self.emit(f"pos = {skip}(buf, pos, end)", 2)
            return
        width = 2 if type_name.endswith("string") else 4
        length = self.constant(struct.Struct(">h" if width == 2 else ">i").unpack_from, "length")
        self.emit(f"if pos + {width} > end:")
        self.emit(f"raise _truncated({path!r})", 2)
        self.emit(f"count, = {length}(buf, pos)")
        self.emit(f"pos += {width} + count * {size} if count > 0 else {width}")

    def skip_struct_array(self, skip: str, type_name: str, size: int | None) -> None:
        """An array of structs nothing needs: an empty or null one (compact), or one whose structs all have
        the same size (classic), is stepped over in place; anything else, malformed too, by the skipper."""
        if type_name.startswith("compact_"):
            self.emit(f"if pos < end and buf[pos] {'<=' if 'nullable' in type_name else '=='} 1:")
            self.emit("pos += 1", 2)
        elif size:
            self.emit(f"if pos + 4 <= end and (n := _int32(buf, pos)[0]) >= 0 and pos + 4 + n * {size} <= end:")
            self.emit(f"pos += 4 + n * {size}", 2)
        else:
            self.emit("if pos + 4 <= end and _int32(buf, pos)[0] == 0:")
            self.emit("pos += 4", 2)
        self.emit("else:")
        self.emit(f"pos = {skip}(buf, pos, end)", 2)

    def child(self, name: str, type_name: str, element: tuple) -> str | None:
        scope = self.scope._replace(path=_child_path(self.scope.path, name), top=False,
                                    element=type_name.endswith("array"), in_topic=self.in_topic)
        runner = plan(element, scope)
        return None if runner is None else self.constant(runner, "struct")

    def read_count(self, length_of) -> None:
        """An array count into ``count``: a one-byte compact count or an int32 in place, else by a call."""
        length = self.constant(length_of, "length")
        if length_of is LENGTH_READERS[True][1]:
            self.emit("if pos < end and (n := buf[pos]) < 0x80:")
            self.emit("count = n - 1", 2)
            self.emit("pos += 1", 2)
            self.emit("else:")
            self.emit(f"count, pos = {length}(buf, pos, end)", 2)
        else:  # an int32 count in place
            self.emit("if pos + 4 <= end:")
            self.emit("count, = _int32(buf, pos)", 2)
            self.emit("pos += 4", 2)
            self.emit("else:")
            self.emit(f"count, pos = {length}(buf, pos, end)", 2)

    def struct_array(self, runner: str, length_of, nullable: bool, path: str) -> None:
        self.read_count(length_of)
        self.emit("if count > 0:")
        self.emit("if count > end - pos:", 2)
        self.emit(f"raise _bad_count(count, end - pos, {path!r})", 3)
        self.emit("for _ in range(count):", 2)
        self.emit(f"pos = {runner}(buf, pos, end, acc, topic, partition)", 3)
        self.emit(f"elif count < {-1 if nullable else 0}:")
        self.emit(f"raise _bad_count(count, end - pos, {path!r})", 2)

    def partition_list(self, name: str, length_of, nullable: bool, path: str) -> None:
        self.read_count(length_of)
        self.emit("if count > 0:")
        self.emit("stop = pos + 4 * count", 2)
        self.emit("if stop > end:", 2)
        self.emit(f"raise _bad_count(count, end - pos, {path!r})", 3)
        self.emit("acc.partition_count += count", 2)
        if self.scope.api_key in PARTITION_APIS and name in ROW_PARTITION_LISTS:
            self.emit("_partition_rows(buf, pos, stop, topic, acc)", 2)
        self.emit("pos = stop", 2)
        self.emit(f"elif count < {-1 if nullable else 0}:")
        self.emit(f"raise _bad_count(count, end - pos, {path!r})", 2)

    def tags(self) -> None:
        if self.tagged is None:
            return
        handlers = []
        for tag, *entry in self.tagged:
            name, type_name = entry[0], entry[1]
            element = entry[2] if len(entry) > 2 else None
            if name in self.tag_kept:
                reader = self.constant(field_reader(type_name, element), "read")
                handlers.append((tag, f"v_{name} = {reader}(buf, pos, stop)[0]"))
                self.kept.add(name)
            elif isinstance(element, tuple) and (runner := self.child(name, type_name, element)) is not None:
                if type_name.endswith("array"):
                    length_of = LENGTH_READERS[True][1]
                    runner = self.constant(_array_runner(length_of, "nullable" in type_name,
                                                         self.constants[runner]), "array")
                elif type_name == "nullable_struct":
                    runner = self.constant(_nullable_struct_runner(self.constants[runner]), "struct")
                handlers.append((tag, f"{runner}(buf, pos, stop, acc, topic, partition)"))
        self.needed = self.needed or bool(handlers)
        self.emit("if pos < end and buf[pos] == 0:")
        self.emit("pos += 1", 2)
        self.emit("else:")
        if not handlers:
            self.emit("pos = _skip_tags(buf, pos, end)", 2)
            return
        self.emit("count, pos = read_uvarint(buf, pos, end)", 2)
        self.emit("if count > (end - pos) >> 1:", 2)
        tags_path = _child_path(self.scope.path, "_tagged_fields")
        self.emit(f"raise _bad_count(count, end - pos, {tags_path!r})", 3)
        self.emit("for _ in range(count):", 2)
        self.emit("tag, pos = read_uvarint(buf, pos, end)", 3)
        self.emit("size, pos = read_uvarint(buf, pos, end)", 3)
        self.emit("stop = pos + size", 3)
        self.emit("if stop > end:", 3)
        self.emit(f"raise _truncated({tags_path!r})", 4)
        for i, (tag, action) in enumerate(handlers):
            self.emit(f"{'if' if i == 0 else 'elif'} tag == {tag}:", 3)
            self.emit(action, 4)
        self.emit("pos = stop", 3)

    # -- the whole function

    def report(self, cut_short: bool) -> None:
        """Report the partition, errors and top-level values: after the fields, or, when the bytes ended
        inside the struct (``cut_short``), whatever was read before they did."""
        if self.partition is not None:
            if cut_short:
                self.emit("if partition is None:")  # the bytes ended before the partition index
                self.emit("raise", 2)
            self.emit("acc.partition_count += 1")
        if self.rows:
            values = {"topic": "topic", "partition": "partition"}
            for name in self.kept:
                if name in ROW_FIELDS:
                    values[ROW_FIELDS[name]] = f"v_{name}"
            if self.records is not None:
                values["records_offset"], values["record_bytes"] = "v_records_offset", "v_record_bytes"
            row = ", ".join(values.get(f, "None") for f in PartitionEntry._fields)
            self.emit(f"if len(acc.partitions) < {MAX_PARTITION_ROWS}:")
            self.emit(f"acc.partitions.append(_new_tuple(PartitionEntry, ({row})))", 2)
            self.emit("else:")
            self.emit("acc.leave_out(0)", 2)
        for name in self.errors:
            message = name.removesuffix("error_code") + "error_message"
            message = f"v_{message}" if message in self.kept else "None"
            path = _child_path(self.scope.path, name)
            self.emit(f"if v_{name}:")
            self.emit(f"if len(acc.errors) < {MAX_ERROR_ROWS}:", 2)
            self.emit(f"acc.errors.append(_new_tuple(ErrorEntry, ({path!r}, topic, partition, v_{name}, "
                      f"{message})))", 3)
            self.emit("else:", 2)
            self.emit("acc.leave_out(1)", 3)
        for name in self.top_fields:
            self.emit(f"acc.{name} = v_{name}")

    def compile(self) -> Runner | None:
        for entry in self.fields:
            self.field(entry)
        self.flush_fixed()
        self.tags()
        self.emit("if pos > end:")
        self.emit(f"raise _truncated({self.scope.path or 'body'!r})", 2)
        body = self.lines
        reports = self.has_topic or self.partition is not None or self.errors or self.top_fields
        if not (self.needed or reports):
            return None  # nothing but skips: the parent skips this struct whole
        self.lines = []
        self.report(cut_short=True)
        cut_short = self.lines
        self.lines = []
        self.report(cut_short=False)
        function = f"extract_{self.struct_name}_{next(_serial)}"
        head = [f"def {function}(buf, pos, end, acc, topic, partition):"]
        if self.has_topic:
            head.append("    own = 0")
        # every value a report uses must exist even if the bytes end before it (or a tag never comes)
        kept = sorted(self.kept) + (["records_offset", "record_bytes"] if self.records else [])
        initial = kept if cut_short else self.tag_kept
        if initial:
            head.append("    " + " = ".join(f"v_{name}" for name in initial) + " = None")
        if cut_short:
            indented = ["    " + line for line in body]
            handler = ["    except DecodeTruncated:", *("    " + line for line in cut_short), "        raise"]
            source_lines = [*head, "    try:", *indented, *handler, *self.lines, "    return pos"]
        else:
            source_lines = [*head, *body, "    return pos"]
        source = "\n".join(source_lines) + "\n"
        filename = f"<kafka extraction {function}>"
        namespace = {**_HELPERS, **self.constants}
        exec(compile(source, filename, "exec"), namespace)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # for tracebacks
        runner = namespace[function]
        _SOURCES[id(runner)] = source
        return runner


# ---------------------------------------------------------------------------------------------------------
# The compiled plans: the same analysis, written as operations for the interpreter in _extract.pyx

_FIXED_CODES = {"int8": 1, "int16": 2, "uint16": 3, "int32": 4, "uint32": 5, "int64": 6, "float64": 7, "bool": 8,
                "uuid": 9}
(OP_SKIP, OP_FIXED, OP_TOPIC_ID, OP_TOPIC_NAME, OP_TOPIC_LIST, OP_PARTITION_LIST, OP_STRUCT, OP_NULLABLE_STRUCT,
 OP_STRUCT_ARRAY, OP_RECORDS, OP_STRING, OP_SKIP_SIZED, OP_SKIP_LENGTH, OP_SKIP_ARRAY, OP_SKIP_NULLABLE_STRUCT,
 _, OP_TAGS, OP_END, OP_PCOUNT, OP_ROW, OP_ERROR, OP_TOP, OP_SKIP_PLAN) = range(1, 24)
SLOT_PARTITION, SLOT_TOPIC = 0, 1
UNSUPPORTED = object()
"""A body kind the interpreter does not take on (tagged fields that must be read): the Python plan runs."""


class _Unsupported(Exception):
    pass


assert len(PartitionEntry._fields) == 18  # _extract.pyx fills listed partitions' other 16 fields with None


class _Program:
    """Operations, constants and sub-plans of one plan being written."""

    def __init__(self) -> None:
        self.ops: list[int] = []
        self.constants: list[Any] = []
        self.plans: list[Any] = []
        self.slots = 2

    def op(self, code: int, a: int = 0, b: int = 0, c: int = 0, d: int = 0, e: int = 0) -> None:
        self.ops += (code, int(a), int(b), int(c), int(d), int(e))

    def constant(self, value: Any) -> int:
        self.constants.append(value)
        return len(self.constants) - 1

    def sub(self, plan: Any) -> int:
        self.plans.append(plan)
        return len(self.plans) - 1

    def build(self):
        return _compiled.Plan(self.ops, self.constants, self.plans, self.slots)


_SKIP_PROGRAMS: dict[int, Any] = {}


def _skip_field(prog: _Program, type_name: str, element: Any) -> None:
    """Operations skipping one field as the general skippers (field_skipper) do."""
    if type_name in FIXED_TYPES:
        prog.op(OP_SKIP, FIXED_TYPES[type_name][1])
        return
    compact = type_name.startswith("compact_")
    base = type_name.removeprefix("compact_")
    nullable = base.startswith("nullable_")
    base = base.removeprefix("nullable_")
    if base in ("string", "bytes", "records"):
        prog.op(OP_SKIP_LENGTH, compact, 2 if base == "string" else 4, nullable)
    elif base == "struct":
        skip, size = struct_skipper(element)
        if nullable:
            prog.op(OP_SKIP_NULLABLE_STRUCT, prog.sub(_skip_program(element)))
        elif size is not None:
            prog.op(OP_SKIP, size)
        else:
            prog.op(OP_SKIP_PLAN, prog.sub(_skip_program(element)))
    elif base == "array":
        _skip_array(prog, compact, nullable, element)
    else:
        raise _Unsupported(type_name)


def _skip_array(prog: _Program, compact: bool, nullable: bool, element: Any) -> None:
    if isinstance(element, tuple):
        size = struct_skipper(element)[1]
        plan = -1 if size else prog.sub(_skip_program(element))
    elif element in FIXED_TYPES:
        size, plan = FIXED_TYPES[element][1], -1
    else:
        inner = _Program()
        _skip_field(inner, element, None)
        size, plan = 0, prog.sub(inner.build())
    prog.op(OP_SKIP_ARRAY, compact, nullable, size or 0, plan)


def _skip_program(struct_schema: tuple):
    """The operations of struct_skipper: every field skipped, then the tag buffer of a flexible struct."""
    cached = _SKIP_PROGRAMS.get(id(struct_schema))
    if cached is None:
        fields, tagged = struct_schema
        prog = _Program()
        for entry in fields:
            _skip_field(prog, entry[1], entry[2] if len(entry) > 2 else None)
        prog.op(OP_END)
        if tagged is not None:
            prog.op(OP_TAGS)
        cached = _SKIP_PROGRAMS[id(struct_schema)] = prog.build()
    return cached


class _OpWriter(_PlanWriter):
    """_PlanWriter's analysis of a struct in a scope, written as interpreter operations instead of source."""

    def __init__(self, struct_schema: tuple, scope: _Scope) -> None:
        super().__init__(struct_schema, scope)
        self.prog = _Program()
        self.slot_of: dict[str, int] = {}

    def slot(self, name: str) -> int:
        if name == self.partition:
            return SLOT_PARTITION
        if name not in self.slot_of:
            self.slot_of[name] = self.prog.slots
            self.prog.slots += 1
        return self.slot_of[name]

    def flush_fixed(self) -> None:
        run, self.pending = self.pending, []
        if not run:
            return
        kept = [(name, t) for name, t in run if name == self.partition or self.wanted(name, t)]
        if not kept:
            self.prog.op(OP_SKIP, sum(FIXED_TYPES[t][1] for _, t in run))
            return
        self.needed = True
        for name, t in run:
            if (name, t) in kept:
                self.prog.op(OP_FIXED, _FIXED_CODES[t], self.slot(name))
            else:
                self.prog.op(OP_SKIP, FIXED_TYPES[t][1])
        self.kept.update(name for name, _ in kept if name != self.partition)
        if any(name == self.topic_id for name, _ in kept):
            name_slot = self.slot(self.topic_name) if self.topic_name in self.kept else -1
            self.prog.op(OP_TOPIC_ID, self.slot(self.topic_id), name_slot, self.topic_ready == self.topic_id)

    def field(self, entry: tuple) -> None:
        name, type_name = entry[0], entry[1]
        element = entry[2] if len(entry) > 2 else None
        if type_name in FIXED_TYPES:
            self.pending.append((name, type_name))
            return
        self.flush_fixed()
        needed_before, self.needed = self.needed, True
        compact = type_name.startswith("compact_")
        nullable = "nullable" in type_name
        prog = self.prog
        if name == self.topic_name:
            id_slot = self.slot(self.topic_id) if self.topic_id in self.kept else -1
            prog.op(OP_TOPIC_NAME, compact, self.slot(name), self.topic_ready == name, id_slot, nullable)
            self.kept.add(name)
        elif type_name.endswith("array") and isinstance(element, str) and entry[3:] == ("topicName",):
            if "nullable" in element or not element.endswith("string"):
                raise _Unsupported(element)
            prog.op(OP_TOPIC_LIST, compact, element.startswith("compact_"))
        elif type_name.endswith("array") and element == "int32" and name in PARTITION_LISTS and self.in_topic:
            rows = self.scope.api_key in PARTITION_APIS and name in ROW_PARTITION_LISTS
            prog.op(OP_PARTITION_LIST, compact, nullable, rows, prog.constant(PartitionEntry))
        elif isinstance(element, tuple) and (child := self.child_plan(name, type_name, element)) is not None:
            if type_name.endswith("array"):
                prog.op(OP_STRUCT_ARRAY, prog.sub(child), compact, nullable)
            elif nullable:
                prog.op(OP_NULLABLE_STRUCT, prog.sub(child))
            else:
                prog.op(OP_STRUCT, prog.sub(child))
        elif self.rows and type_name.endswith("records"):
            prog.op(OP_RECORDS, compact, self.slot("records_offset"), self.slot("record_bytes"))
            self.records = name
        elif self.wanted(name, type_name):
            if type_name.removeprefix("compact_").removeprefix("nullable_") != "string":
                raise _Unsupported(f"{name}: {type_name}")
            prog.op(OP_STRING, compact, nullable, self.slot(name))
            self.kept.add(name)
        else:
            self.skip_field(type_name, element)
            self.needed = needed_before

    def skip_field(self, type_name: str, element: Any) -> None:
        """As _PlanWriter.skip: strings, bytes, records and arrays of fixed-size elements by the lenient inline
        step, anything else as the general skippers."""
        compact = type_name.startswith("compact_")
        nullable = "nullable" in type_name
        base = type_name.removeprefix("compact_").removeprefix("nullable_")
        if element in FIXED_TYPES and type_name.endswith("array"):
            self.prog.op(OP_SKIP_SIZED, compact, 4, FIXED_TYPES[element][1], nullable)
        elif base in ("string", "bytes", "records"):
            self.prog.op(OP_SKIP_SIZED, compact, 2 if type_name.endswith("string") else 4, 1, nullable)
        elif field_skipper(type_name, element)[0] is None and not type_name.endswith("array"):
            raise _Unsupported(f"fixed-size {type_name}")  # the reference would call no skipper at all
        else:
            _skip_field(self.prog, type_name, element)

    def child_plan(self, name: str, type_name: str, element: tuple):
        scope = self.scope._replace(path=_child_path(self.scope.path, name), top=False,
                                    element=type_name.endswith("array"), in_topic=self.in_topic)
        return op_plan(element, scope)

    def tags(self) -> None:
        if self.tagged is None:
            return
        for _tag, *entry in self.tagged:
            name, type_name = entry[0], entry[1]
            element = entry[2] if len(entry) > 2 else None
            if name in self.tag_kept or (isinstance(element, tuple)
                                         and self.child_plan(name, type_name, element) is not None):
                raise _Unsupported(f"tagged field {name} is read")
        self.prog.op(OP_TAGS)

    def report_ops(self) -> None:
        prog = self.prog
        if self.partition is not None:
            prog.op(OP_PCOUNT)
        if self.rows:
            values = {"topic": SLOT_TOPIC, "partition": SLOT_PARTITION}
            for name in self.kept:
                if name in ROW_FIELDS:
                    values[ROW_FIELDS[name]] = self.slot(name)
            if self.records is not None:
                values["records_offset"] = self.slot("records_offset")
                values["record_bytes"] = self.slot("record_bytes")
            fields = [values.get(f, -1) for f in PartitionEntry._fields]
            prog.op(OP_ROW, prog.constant(fields), prog.constant(PartitionEntry))
        for name in self.errors:
            message = name.removesuffix("error_code") + "error_message"
            prog.op(OP_ERROR, self.slot(name), self.slot(message) if message in self.kept else -1,
                    prog.constant(_child_path(self.scope.path, name)), prog.constant(ErrorEntry))
        for name in self.top_fields:
            prog.op(OP_TOP, prog.constant(name), self.slot(name))

    def build(self):
        for entry in self.fields:
            self.field(entry)
        self.flush_fixed()
        self.tags()
        self.prog.op(OP_END)
        reports = self.has_topic or self.partition is not None or self.errors or self.top_fields
        if not (self.needed or reports):
            return None
        self.report_ops()
        return self.prog.build()


_OP_PLANS: dict[tuple[int, _Scope], Any] = {}


def op_plan(struct_schema: tuple, scope: _Scope):
    """The interpreter's plan of a struct in a scope (None: nothing needed); _Unsupported if it cannot take it."""
    key = (id(struct_schema), scope)
    if key not in _OP_PLANS:
        try:
            _OP_PLANS[key] = _OpWriter(struct_schema, scope).build()
        except _Unsupported:
            _OP_PLANS[key] = UNSUPPORTED
    found = _OP_PLANS[key]
    if found is UNSUPPORTED:
        raise _Unsupported("")
    return found


_BODY_OP_PLANS: dict[tuple[int, int, bool], Any] = {}


def body_op_plan(api_key: int, api_version: int, is_response: bool):
    """The interpreter's plan of a body kind, None (nothing to extract) or UNSUPPORTED."""
    key = (api_key, api_version, is_response)
    found = _BODY_OP_PLANS.get(key, _UNKNOWN)
    if found is _UNKNOWN:
        top = schema(api_key, api_version, is_response)
        try:
            found = None if top is None else op_plan(top, _Scope(api_key, is_response, "", True, False, False))
        except _Unsupported:
            found = UNSUPPORTED
        _BODY_OP_PLANS[key] = found
    return found


# ---------------------------------------------------------------------------------------------------------
# Entry points


_BODY_PLANS: dict[tuple[int, int, bool], Runner | None] = {}
_UNKNOWN = object()  # not yet planned (None is a plan: nothing to extract)


def body_plan(api_key: int, api_version: int, is_response: bool) -> Runner | None:
    """The extraction function of a body kind (None when nothing in it is needed); DecodeError if unknown."""
    key = (api_key, api_version, is_response)
    if key in _BODY_PLANS:
        return _BODY_PLANS[key]
    top = schema(api_key, api_version, is_response)
    if top is None:
        raise DecodeError(f"unknown API key {api_key} version {api_version}")
    runner = _BODY_PLANS[key] = plan(top, _Scope(api_key, is_response, "", True, False, False))
    return runner


def plan_source(api_key: int, api_version: int, is_response: bool) -> str:
    """The source of every extraction function a body kind uses, top-level struct first (for reading)."""
    runner = body_plan(api_key, api_version, is_response)
    seen: list[int] = []

    def walk(function) -> None:
        if id(function) in _SOURCES and id(function) not in seen:
            seen.append(id(function))
            for value in function.__globals__.values():
                walk(value)

    if runner is not None:
        walk(runner)
    return "\n".join(_SOURCES[i] for i in seen)


def extract(buf, off: int, end: int, api_key: int, api_version: int, is_response: bool, *,
            partial: bool = False, compiled: bool = True) -> Extracted:
    """Topics, partitions, errors and the top-level fields of one body at ``buf[off:end]``.

    With ``partial``, a body that runs past ``end`` (a frame of which only the head was kept) yields what
    was read before it did, with ``complete`` False: for a Produce request cut inside its records, still its
    acks, first topic and partition, and where those records start and how long they are. Without it, or
    when the bytes are malformed rather than short, DecodeError.

    The compiled interpreter (_extract.pyx) reads the body when its plan takes the kind and the bytes follow
    the rules; otherwise, and always with ``compiled=False`` (the differential tests), the Python plan does.
    """
    runner = _BODY_PLANS.get((api_key, api_version, is_response), _UNKNOWN)
    if runner is _UNKNOWN:
        runner = body_plan(api_key, api_version, is_response)
    if end > len(buf):
        end = len(buf)
    if off < 0 or off > end:
        raise DecodeError(f"body offset {off} outside the buffer")
    if runner is None:  # nothing to extract (Heartbeat requests...): fresh empty lists, as callers may keep them
        return _new_tuple(Extracted, ([], 0, [], None, None, [], None, None, True, None, None))
    if compiled:
        ops = _BODY_OP_PLANS.get((api_key, api_version, is_response), _UNKNOWN)
        if ops is _UNKNOWN:
            ops = body_op_plan(api_key, api_version, is_response)
        if ops is not UNSUPPORTED:
            acc = _compiled.Acc(MAX_TOPICS, MAX_PARTITION_ROWS, MAX_ERROR_ROWS)
            if _compiled.run_body(ops, buf, off, end, acc):
                return _new_tuple(Extracted, (acc.topics, acc.partition_count, acc.errors, acc.error_code,
                                              acc.throttle_time_ms, acc.partitions, acc.acks, acc.transactional_id,
                                              True, acc.topic_ids, acc.left_out))
    acc = _Accumulator()
    try:
        runner(buf, off, end, acc, None, None)
    except DecodeTruncated:
        if not partial:
            raise
        complete = False
    except DecodeError:
        raise
    except (IndexError, struct.error, ValueError, OverflowError, MemoryError) as exc:  # a missed check
        raise DecodeError(f"malformed body ({type(exc).__name__}: {exc})") from None
    else:
        complete = True
    return _new_tuple(Extracted, (acc.topics, acc.partition_count, acc.errors, acc.error_code,
                                  acc.throttle_time_ms, acc.partitions, acc.acks, acc.transactional_id,
                                  complete, acc.topic_ids, acc.left_out))


# ---------------------------------------------------------------------------------------------------------
# Where a response's error codes sit (what reading only its top-level prefix can know)

ERRORS_NONE, ERRORS_AT_TOP, ERRORS_NESTED, ERRORS_UNDEFINED = range(4)
"""How a response version holds its error codes: none at all; only the top-level error_code, at a fixed offset
(``headers.response_top_level`` reads it); others too (per topic, partition, member...) or a top-level one
after a variable-length field; or an API/version no known release defines."""

_ERROR_PLACEMENT: dict[tuple[int, int], int] = {}


def _error_field_depths(struct_schema: tuple, depth: int):
    """The depth of every error code field (as extraction counts them) in a struct and the structs it holds."""
    fields, tagged = struct_schema
    for entry in (*fields, *(t[1:] for t in tagged or ())):
        name, type_name = entry[0], entry[1]
        if type_name == "int16" and (name == "error_code" or name.endswith("_error_code")):
            yield name, depth
        element = entry[2] if len(entry) > 2 else None
        if isinstance(element, tuple):
            yield from _error_field_depths(element, depth + 1)


def error_placement(api_key: int, api_version: int) -> int:
    """ERRORS_NONE, ERRORS_AT_TOP, ERRORS_NESTED or ERRORS_UNDEFINED for a response of this API and version,
    read from the schemas once per kind: headers-only analysis uses it to say whether the top-level error code
    it reads is all there is to know."""
    placement = _ERROR_PLACEMENT.get((api_key, api_version))
    if placement is not None:
        return placement
    top = schema(api_key, api_version, True)
    if top is None:
        placement = ERRORS_UNDEFINED
    else:
        found = list(_error_field_depths(top, 0))
        if not found:
            placement = ERRORS_NONE
        elif found == [("error_code", 0)] and _prefix_error_offset(api_key, api_version) is not None:
            placement = ERRORS_AT_TOP
        else:
            placement = ERRORS_NESTED
    if len(_ERROR_PLACEMENT) < 1 << 16:  # api_key and api_version are int16s: bounded anyway
        _ERROR_PLACEMENT[api_key, api_version] = placement
    return placement


def _prefix_error_offset(api_key: int, api_version: int) -> int | None:
    entry = RESPONSE_PREFIX.get(api_key)
    if entry is None:
        return None
    min_version, offsets = entry
    index = api_version - min_version
    return offsets[index][0] if 0 <= index < len(offsets) else None
