# cython: language_level=3
"""Pull only what the tables need from a request or response body: topics, partitions, errors, offsets.

``extract(buf, off, end, api_key, api_version, is_response)`` walks the same generated schemas as
:mod:`dissectors.kafka.decoder`, but builds nothing it does not return. Compiled callers (the exchange matcher,
the partition columns) cimport from ``extract.pxd`` its C entry point ``extract_from`` and the ``Entry`` it makes
of a partition (the integer fields unboxed); Python sees PartitionEntry tuples.

How: ``python -m tools.generate`` writes, from the schemas and the rules of
:mod:`dissectors.kafka.extract_rules`, one Cython function per struct and scope (``_generated/extract_plans.pxi``,
included in this module, which holds the runtime they share). A function reads the fields that matter and skips
the rest: a run of fixed-size fields is one bounds check; strings, bytes and record payloads are skipped by their
length; arrays of fixed-size elements by count times size; structs that hold nothing of interest by a generated
skipper; tag buffers by their sizes. So the per-frame cost follows the fields the tables use, not the size of the
body. Versions and APIs that share a struct share its function; a table indexed by API key, direction and version
picks a body kind's top function. That is for the APIs of ``HOT_APIS``; the others (admin, ACLs, configs, quotas,
Raft...: rare in captures, most of the schemas) are read the same way by one compiled interpreter
(:mod:`dissectors.kafka._interpret`, built apart with the runtime from ``extract.pxd``) of programs the generator
writes as data, an operation per step a generated function takes (``_generated/extract_programs.py``); at import
it puts each body kind's program in this module's table. The same bytes give the same result either way.
``tools.extract_listing.plan_source`` shows the generated code, or the programs, of a body kind (for reading).

What counts as what (read from the schemas, so every API and version follows the same rules):
- a topic is a string field Kafka marks ``entityType: topicName`` (or an array of them), or a uuid field
  named ``topic_id``; a struct with both is named by its name when that is non-empty, else by its id
  (the all-zero id means "none");
- a partition is an array element whose struct has an int32 ``partition_index``, ``partition``, ``index``
  or ``partition_id`` and sits inside a topic (its own, or an enclosing struct's), or an element of an
  int32 array named ``partitions`` or ``partition_indexes`` inside a topic;
- an error is an int16 field named ``error_code`` or ``*_error_code`` anywhere in a response; its message
  is the field with the same prefix and ``error_message`` in the same struct;
- a partition row takes the integer fields ``ROW_FIELDS`` names, and of an array of structs ``ROW_ARRAYS``
  names (Fetch responses' ``aborted_transactions``) its count and the smallest of one field of its elements.

Malformed bodies raise :class:`~dissectors.kafka.decoder.DecodeError`, as in the decoder, and bodies that
run past ``end`` its subclass ``DecodeTruncated``; with ``partial=True`` the latter instead yields what was
read before the bytes ran out (a capture often keeps only the head of a large Produce or Fetch frame).
Fields that nothing needs are bounds-checked but not validated further. Inside, a generated function returns 0,
or -1 after recording in the accumulator why it stopped: TRUNCATED (the bytes ended first: with ``partial`` the
result keeps what was read) or MALFORMED (a negative length, a null where none is allowed, a varint too long).
Python errors (memory) propagate as exceptions.

:func:`error_placement` tells, from the schemas, where a response version holds its error codes (what reading
only its top-level prefix can know).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM
from cpython.object cimport PyTypeObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp

from dissectors.kafka.wire cimport (
    MALFORMED,
    TRUNCATED,
    Cursor,
    rd_f64,
    rd_i16,
    rd_i32,
    rd_i64,
    rd_u8,
    rd_uvarint_wide,
)

from dissectors.kafka._generated.response_prefix import RESPONSE_PREFIX
from dissectors.kafka.decoder import DecodeError, DecodeTruncated, schema
from dissectors.kafka.extract_rules import (
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    MAX_TOPICS,
    PARTITION_APIS,
    PARTITION_FIELDS,
    PARTITION_LISTS,
    PRODUCE,
    ROW_ARRAYS,
    ROW_FIELDS,
    ROW_PARTITION_LISTS,
    TOP_FIELDS,
    ErrorEntry,
    Extracted,
    PartitionEntry,
    Topic,
)

__all__ = [
    "MAX_ERROR_ROWS", "MAX_PARTITION_ROWS", "MAX_TOPICS", "PARTITION_APIS", "PARTITION_FIELDS", "PARTITION_LISTS",
    "PRODUCE", "ROW_ARRAYS", "ROW_FIELDS", "ROW_PARTITION_LISTS", "TOP_FIELDS", "ErrorEntry", "Extracted",
    "PartitionEntry", "Topic", "extract", "error_placement", "ERRORS_NONE", "ERRORS_AT_TOP", "ERRORS_NESTED",
    "ERRORS_UNDEFINED",
]

cdef bytes ZERO_UUID = bytes(16)
cdef Py_ssize_t max_topics = MAX_TOPICS
cdef Py_ssize_t SEEN_FROM = 16  # topics in a body past which they are also kept as a set


@cython.freelist(8)  # one per body read: reused instead of allocated and freed each time
cdef class Acc:
    """What the generated functions of one body write into, and why they stopped if they did."""

    def __cinit__(self):
        self.topics = []
        self.errors = []
        self.partitions = []

    cdef void leave_out(self, int kind) except *:
        """Count a partition row (0), error row (1) or topic mention (2) a limit keeps out."""
        if self.left_out is None:
            self.left_out = [0, 0, 0]
        self.left_out[kind] += 1

    cdef bint knows(self, topic) except -1:
        """Whether the body named this topic already: its few topics looked through, a set once they are many
        (most bodies name one or two, and a set each would cost more than it saves)."""
        if self.seen is not None:
            return topic in self.seen
        return topic in self.topics

    cdef void add_topic(self, topic) except *:
        """A topic not seen yet in this body: listed, up to MAX_TOPICS."""
        if len(self.topics) < max_topics:
            self.topics.append(topic)
            if self.seen is not None:
                self.seen.add(topic)
            elif len(self.topics) >= SEEN_FROM:
                self.seen = set(self.topics)
        else:
            self.leave_out(2)

    cdef void set_field(self, name, value) except *:
        """A top-level field of BODY_FIELDS, read."""
        if self.fields is None:
            self.fields = {}
        self.fields[name] = value

    cdef void name_topic_id(self, topic_id, name) except *:
        if self.topic_ids is None:
            self.topic_ids = {}
        self.topic_ids[topic_id] = name


cdef inline void _put(object entry, Py_ssize_t i, object item) noexcept:
    Py_INCREF(item)
    PyTuple_SET_ITEM(entry, i, item)


if (len(PartitionEntry._fields) != ENTRY_VALUES + 1
        or PartitionEntry._fields[:3] != ("topic", "partition", "error_code")
        or PartitionEntry._fields[E_OFFSETS + 1] != "base_offset"
        or PartitionEntry._fields[E_RECORDS_OFFSET + 1:] != ("records_offset", "record_bytes")):
    raise ImportError("PartitionEntry's fields moved: update the E_ indexes in extract.pxd")
cdef dict ENTRY_INDEX = {name: i - 1 for i, name in enumerate(PartitionEntry._fields) if i}


@cython.no_gc  # holds a topic (str, bytes or None) and integers: never part of a cycle
@cython.freelist(64)  # one or two per body read
cdef class Entry:
    """A PartitionEntry as the compiled extraction makes it and the exchange matcher and the partition columns
    read it: the integer fields unboxed, a bit each saying whether it was read. Python sees its fields by name
    and ``as_tuple()`` (the public ``extract`` hands out PartitionEntry tuples)."""

    cdef object field(self, Py_ssize_t i):
        """Value i, or None when it was not read."""
        return self.values[i] if self.present >> i & 1 else None

    @property
    def partition(self):
        return self.field(E_PARTITION)

    @property
    def records_offset(self):
        return self.field(E_RECORDS_OFFSET)

    @property
    def record_bytes(self):
        return self.field(E_RECORD_BYTES)

    def __getattr__(self, name):
        i = ENTRY_INDEX.get(name)
        if i is None:
            raise AttributeError(f"'Entry' object has no attribute {name!r}")
        return self.field(i)

    def as_tuple(self):
        """The PartitionEntry of the same fields."""
        return PartitionEntry(self.topic, *[self.field(i) for i in range(ENTRY_VALUES)])

    def __repr__(self):
        return f"Entry{tuple(self.as_tuple())!r}"


cdef Entry new_partition_entry(object topic, int64_t partition):
    """An entry of this topic-partition, its other fields not read (the caller sets those it read)."""
    cdef Entry entry = Entry.__new__(Entry)
    entry.topic = topic
    entry.values[E_PARTITION] = partition
    entry.present = 1 << E_PARTITION
    return entry


cdef enum:
    TEXT_SLOTS = 256  # strings remembered decoded (a power of two)
    TEXT_MAX = 64  # the longest string remembered


# Strings decoded lately, by a hash of their bytes: a slot holds (raw bytes, text) or None. Bodies repeat the
# same few topic names, group and member ids, so most strings are found here instead of decoded afresh.
cdef list TEXTS = [None] * TEXT_SLOTS


cdef object decoded(const uint8_t* p, Py_ssize_t n):
    """The text of n bytes at p (UTF-8, replacement characters for bad bytes), from TEXTS when there."""
    cdef uint32_t h = 2166136261u
    cdef Py_ssize_t i
    cdef object slot, raw, text
    if n > TEXT_MAX:
        return PyUnicode_DecodeUTF8(<const char*>p, n, "replace")
    for i in range(n):
        h = (h ^ p[i]) * 16777619u
    i = (h ^ (h >> 16) ^ <uint32_t>n) & (TEXT_SLOTS - 1)
    slot = <object>PyList_GET_ITEM(TEXTS, i)
    if slot is not None:
        raw = <object>PyTuple_GET_ITEM(slot, 0)
        if PyBytes_GET_SIZE(raw) == n and memcmp(PyBytes_AS_STRING(raw), p, n) == 0:
            return <object>PyTuple_GET_ITEM(slot, 1)
    text = PyUnicode_DecodeUTF8(<const char*>p, n, "replace")
    TEXTS[i] = (PyBytes_FromStringAndSize(<const char*>p, n), text)
    return text


cdef object read_str(Acc acc, Cursor* c, bint compact, bint nullable, where):
    """A string field (replacement characters for bad UTF-8, as Kafka's Java client decodes); None for a null
    where allowed. On failure acc.err is set (the caller checks it)."""
    cdef Py_ssize_t n
    if compact:
        if c.pos < c.end and c.buf[c.pos] < 0x80:  # a one-byte length, nearly always
            n = <Py_ssize_t>c.buf[c.pos] - 1
            c.pos += 1
        else:
            n = <Py_ssize_t>rd_uvarint_wide(c) - 1
            if c.err:
                fail(acc, c.err, where)
                return None
    else:
        if c.pos + 2 > c.end:
            fail(acc, TRUNCATED, where)
            return None
        n = rd_i16(c)
    if 0 <= n <= c.end - c.pos:
        c.pos += n
        return decoded(c.buf + c.pos - n, n)
    if n == -1 and nullable:
        return None
    fail(acc, MALFORMED if n < 0 else TRUNCATED, where)
    return None


cdef Py_ssize_t skip_sized(Acc acc, Cursor* c, bint compact, int width, bint nullable) except -2:
    """Skip a string (``width`` 2), bytes or records field by its length: 0, or -1 with acc.err set."""
    cdef Py_ssize_t n
    if compact:
        if c.pos < c.end and c.buf[c.pos] < 0x80:
            n = <Py_ssize_t>c.buf[c.pos] - 1
            c.pos += 1
        else:
            n = <Py_ssize_t>rd_uvarint_wide(c) - 1
            if c.err:
                fail(acc, c.err, "length")
                return -1
    else:
        if c.pos + width > c.end:
            fail(acc, TRUNCATED, "length")
            return -1
        n = rd_i16(c) if width == 2 else rd_i32(c)
    if 0 <= n <= c.end - c.pos:
        c.pos += n
        return 0
    if n == -1 and nullable:
        return 0
    fail(acc, MALFORMED if n < 0 else TRUNCATED, "length")
    return -1


cdef Py_ssize_t skip_tag_buffer(Acc acc, Cursor* c) except -2:
    """Step over a tag buffer: a count, then (tag, size, bytes) for each field."""
    cdef uint64_t count, i, size
    if c.pos < c.end and c.buf[c.pos] == 0:
        c.pos += 1
        return 0
    count = rd_uvarint_wide(c)
    if c.err:
        fail(acc, c.err, "_tagged_fields")
        return -1
    if count > <uint64_t>((c.end - c.pos) >> 1):
        fail(acc, TRUNCATED, "_tagged_fields")
        return -1
    for i in range(count):
        rd_uvarint_wide(c)
        size = rd_uvarint_wide(c)
        if c.err:
            fail(acc, c.err, "_tagged_fields")
            return -1
        if size > <uint64_t>(c.end - c.pos):
            fail(acc, TRUNCATED, "_tagged_fields")
            return -1
        c.pos += size
    return 0


cdef Py_ssize_t read_topic_list(Acc acc, Cursor* c, bint compact, bint compact_names, bint nullable_names,
                                where) except -2:
    """An array of topic names into the accumulator (a null array is none)."""
    cdef Py_ssize_t count, j
    if compact:
        if c.pos < c.end and c.buf[c.pos] < 0x80:
            count = <Py_ssize_t>c.buf[c.pos] - 1
            c.pos += 1
        else:
            count = <Py_ssize_t>rd_uvarint_wide(c) - 1
            if c.err:
                fail(acc, c.err, where)
                return -1
    else:
        if c.pos + 4 > c.end:
            fail(acc, TRUNCATED, where)
            return -1
        count = rd_i32(c)
    if count < 0:
        if count < -1:
            fail(acc, MALFORMED, where)
            return -1
        return 0
    if count > c.end - c.pos:
        fail(acc, TRUNCATED, where)
        return -1
    for j in range(count):
        name = read_str(acc, c, compact_names, nullable_names, where)
        if acc.err:
            return -1
        if name and not acc.knows(name):
            acc.add_topic(name)
    return 0


cdef void partition_rows(Acc acc, Cursor* c, Py_ssize_t count, topic) except *:
    """Rows for an int32 array of partition indexes (OffsetFetch requests); the caller checked the bytes and
    moves past them."""
    cdef Py_ssize_t room = MAX_PARTITION_ROWS - len(acc.partitions)
    cdef Py_ssize_t i
    cdef Cursor rows = c[0]
    if count > room:
        room = max(room, 0)
        if acc.left_out is None:
            acc.left_out = [0, 0, 0]
        acc.left_out[0] += count - room
        count = room
    for i in range(count):
        acc.partitions.append(new_partition_entry(topic, rd_i32(&rows)))


cdef Py_ssize_t nothing(Acc acc, Cursor* c, object topic, object partition) except -2:
    """A body kind of which nothing is needed."""
    return 0


include "_generated/extract_plans.pxi"

# The APIs outside HOT_APIS: their body kinds' programs (number + 1; 0: none) and the interpreter that runs them
cdef Py_ssize_t PROGRAM_OF[2][N_KEYS][N_VERSIONS]
cdef interpret_fn INTERPRET = NULL


cdef bint set_plan(int is_response, int api_key, int api_version, plan_fn plan) noexcept:
    """The function of one body kind (``nothing``, from the interpreter's module): False if out of the table."""
    if not (0 <= is_response <= 1 and 0 <= api_key < N_KEYS and 0 <= api_version < N_VERSIONS):
        return False
    PLANS[is_response][api_key][api_version] = plan
    return True


cdef bint set_program(int is_response, int api_key, int api_version, Py_ssize_t program, interpret_fn run) noexcept:
    """The program of one body kind of the APIs outside HOT_APIS, and what runs it: False if out of the table."""
    global INTERPRET
    if not (0 <= is_response <= 1 and 0 <= api_key < N_KEYS and 0 <= api_version < N_VERSIONS) or program < 0:
        return False
    PROGRAM_OF[is_response][api_key][api_version] = program + 1
    INTERPRET = run
    return True


fill_plans()
from dissectors.kafka import _interpret  # noqa: E402, F401 - puts the other APIs' programs in PROGRAM_OF


def extract(buf, Py_ssize_t off, Py_ssize_t end, int api_key, int api_version, bint is_response, *,
            bint partial=False):
    """Topics, partitions, errors and the top-level fields of one body at ``buf[off:end]``.

    With ``partial``, a body that runs past ``end`` (a frame of which only the head was kept) yields what
    was read before it did, with ``complete`` False: for a Produce request cut inside its records, still its
    acks, first topic and partition, and where those records start and how long they are. Without it, or
    when the bytes are malformed rather than short, DecodeError.
    """
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        found = extract_from(<const uint8_t*>view.buf, view.len, off, end, api_key, api_version, is_response,
                             partial)
    finally:
        PyBuffer_Release(&view)
    if found.partitions:
        found = found._replace(partitions=[(<Entry>e).as_tuple() for e in found.partitions])
    return found


cdef object extract_from(const uint8_t* buf, Py_ssize_t n, Py_ssize_t off, Py_ssize_t end, int api_key,
                         int api_version, bint is_response, bint partial):
    """``extract`` for compiled callers (the exchange matcher), over the ``n`` bytes at ``buf``, of a buffer the
    caller holds for the call (the matcher has its frame's at hand: a second buffer request per body cost more
    than some bodies' reading)."""
    cdef plan_fn plan = NULL
    cdef Py_ssize_t program = 0
    cdef Cursor c
    cdef Acc acc
    cdef Py_ssize_t status
    if 0 <= api_key < N_KEYS and 0 <= api_version < N_VERSIONS:
        plan = PLANS[is_response][api_key][api_version]
        if plan == NULL:
            program = PROGRAM_OF[is_response][api_key][api_version]
    if plan == NULL and program == 0:
        raise DecodeError(f"unknown API key {api_key} version {api_version}")
    if end > n:
        end = n
    if off < 0 or off > end:
        raise DecodeError(f"body offset {off} outside the buffer")
    acc = Acc.__new__(Acc)
    if plan == nothing:  # fresh empty lists, as callers may keep them
        return new_entry(Extracted, ([], 0, [], None, None, [], None, None, True, None, None, None))
    c.buf = buf
    c.pos = off
    c.end = end
    c.err = 0
    status = plan(acc, &c, None, None) if plan != NULL else INTERPRET(acc, &c, program - 1)
    if status < 0:
        if acc.err != TRUNCATED:
            raise DecodeError("malformed", acc.where)
        if not partial:
            raise DecodeTruncated("truncated", acc.where)
    return extracted_entry(acc, status >= 0)


cdef type EXTRACTED = Extracted
if Extracted._fields != ("topics", "partition_count", "errors", "top_error", "throttle_time_ms", "partitions", "acks",
                         "transactional_id", "complete", "topic_ids", "left_out", "fields"):
    raise ImportError("Extracted's fields moved: update extracted_entry in extract.pyx")


cdef inline object extracted_entry(Acc acc, bint complete):
    """The body's Extracted, made in place from the accumulator (no argument tuple: one is made per body)."""
    cdef object entry = PyType_GenericAlloc(<PyTypeObject*>EXTRACTED, 12)
    _put(entry, 0, acc.topics)
    _put(entry, 1, acc.partition_count)
    _put(entry, 2, acc.errors)
    _put(entry, 3, acc.error_code)
    _put(entry, 4, acc.throttle_time_ms)
    _put(entry, 5, acc.partitions)
    _put(entry, 6, acc.acks)
    _put(entry, 7, acc.transactional_id)
    _put(entry, 8, complete)
    _put(entry, 9, acc.topic_ids)
    _put(entry, 10, acc.left_out)
    _put(entry, 11, acc.fields)
    return entry


# ---------------------------------------------------------------------------------------------------------
# Where a response's error codes sit (what reading only its top-level prefix can know)

ERRORS_NONE, ERRORS_AT_TOP, ERRORS_NESTED, ERRORS_UNDEFINED = range(4)
"""How a response version holds its error codes: none at all; only the top-level error_code, at a fixed offset
(``headers.response_top_level`` reads it); others too (per topic, partition, member...) or a top-level one
after a variable-length field; or an API/version no known release defines."""

cdef dict _ERROR_PLACEMENT = {}  # (api_key, api_version): placement


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
    """The offset of the top-level error code in a response's fixed prefix, or None when it has none there."""
    entry = RESPONSE_PREFIX.get(api_key)
    if entry is None:
        return None
    min_version, offsets = entry
    index = api_version - min_version
    return offsets[index][0] if 0 <= index < len(offsets) else None
