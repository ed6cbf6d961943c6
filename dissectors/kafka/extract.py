"""Pull only what the tables need from a request or response body: topics, partitions, errors, offsets.

``extract(buf, off, end, api_key, api_version, is_response)`` walks the same generated schemas as
:mod:`dissectors.kafka.decoder`, but builds nothing it does not return.

How: ``python -m tools.generate`` writes, from the schemas and the rules below
(:mod:`dissectors.kafka.extract_rules`), one Cython function per struct and scope
(``_generated/extract_plans.pxi``, compiled into :mod:`dissectors.kafka._extract`). A function reads the fields
that matter and skips the rest: a run of fixed-size fields is one bounds check; strings, bytes and record
payloads are skipped by their length; arrays of fixed-size elements by count times size; structs that hold
nothing of interest by a generated skipper; tag buffers by their sizes. So the per-frame cost follows the
fields the tables use, not the size of the body. Versions and APIs that share a struct share its function; a
table indexed by API key, direction and version picks a body kind's top function. That is for the APIs of
``HOT_APIS``; the others (admin, ACLs, configs, quotas, Raft...: rare in captures, most of the schemas) are read
the same way by one compiled interpreter (:mod:`dissectors.kafka._interpret`) of programs the generator writes
as data, an operation per step a generated function takes (``_generated/extract_programs.py``). The same
bytes give the same result either way. :func:`plan_source` shows the generated code, or the programs, of a
body kind.

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

import re
from pathlib import Path

from dissectors.kafka._extract import extract
from dissectors.kafka._generated import extract_programs
from dissectors.kafka._generated.response_prefix import RESPONSE_PREFIX
from dissectors.kafka.decoder import schema
from dissectors.kafka.extract_rules import (
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    MAX_TOPICS,
    NO_TARGET,
    PARTITION_APIS,
    PARTITION_FIELDS,
    PARTITION_LISTS,
    PRODUCE,
    PROGRAM_HEADER,
    PROGRAM_OPERANDS,
    PROGRAM_OPS,
    PROGRAM_TYPES,
    ROW_FIELDS,
    ROW_PARTITION_LISTS,
    STRING_OPERANDS,
    TAG_FIXED,
    TAG_STRING,
    TOP_FIELDS,
    ZERO_UUID,
    ErrorEntry,
    Extracted,
    PartitionEntry,
    Topic,
)

__all__ = [
    "MAX_ERROR_ROWS", "MAX_PARTITION_ROWS", "MAX_TOPICS", "PARTITION_APIS", "PARTITION_FIELDS", "PARTITION_LISTS",
    "PRODUCE", "ROW_FIELDS", "ROW_PARTITION_LISTS", "TOP_FIELDS", "ZERO_UUID", "ErrorEntry", "Extracted",
    "PartitionEntry", "Topic", "extract", "plan_source", "error_placement", "ERRORS_NONE", "ERRORS_AT_TOP",
    "ERRORS_NESTED", "ERRORS_UNDEFINED",
]

PLANS_SOURCE = Path(__file__).resolve().parent / "_generated" / "extract_plans.pxi"
NOTHING = "nothing: no field of this body kind is needed\n"


def plan_source(api_key: int, api_version: int, is_response: bool) -> str:
    """The generated Cython of a body kind: its top function, then every function it calls; for the APIs outside
    HOT_APIS its programs, listed (for reading)."""
    text = PLANS_SOURCE.read_text(encoding="utf-8")
    top = re.search(rf"^    PLANS\[{int(is_response)}\]\[{api_key}\]\[{api_version}\] = (\w+)$", text, re.M)
    if top is None:
        return program_listing(api_key, api_version, is_response)
    if top[1] == "nothing":
        return NOTHING
    functions: dict[str, str] = {}
    for match in re.finditer(r"^cdef Py_ssize_t (\w+)\(", text, re.M):
        stop = text.find("\n\n\n", match.start())
        functions[match[1]] = text[match.start():stop if stop >= 0 else len(text)]
    order: list[str] = []
    pending = [top[1]]
    while pending:
        name = pending.pop(0)
        if name in order or name not in functions:
            continue
        order.append(name)
        pending += re.findall(r"\b((?:x|skip)_\w+)\(acc", functions[name])
    return "\n\n\n".join(functions[name] for name in order) + "\n"


def program_listing(api_key: int, api_version: int, is_response: bool) -> str:
    """The programs the interpreter runs for a body kind of an API outside HOT_APIS: the first, then every
    program it calls, an operation per line."""
    for direction, key, min_version, programs in extract_programs.ENTRY_POINTS:
        if (direction, key) == (int(is_response), api_key) and 0 <= api_version - min_version < len(programs):
            first = programs[api_version - min_version]
            break
    else:
        raise KeyError(f"no extraction for API key {api_key} version {api_version}")
    if first < 0:
        return NOTHING
    order: list[int] = []
    pending = [first]
    listings: list[str] = []
    while pending:
        number = pending.pop(0)
        if number in order:
            continue
        order.append(number)
        lines, calls = _disassemble(number)
        listings.append("\n".join(lines))
        pending += calls
    return "\n\n".join(listings) + "\n"


def _disassemble(number: int) -> tuple[list[str], list[int]]:
    """A program's operations, one a line, and the programs it calls."""
    words = extract_programs.PROGRAMS[number]
    slots, total, rows, _reports = words[:PROGRAM_HEADER]
    lines = [f"program {number}: {slots} slots ({total} with the programs it calls)"
             f"{', partition rows' if rows else ''}"]
    calls: list[int] = []
    i = PROGRAM_HEADER
    while i < len(words):
        name, operands = PROGRAM_OPS[words[i]]
        values = list(words[i + 1:i + 1 + operands])
        shown = [repr(extract_programs.STRINGS[v]) if STRING_OPERANDS.get(name) == k else
                 f"program {v}" if PROGRAM_OPERANDS.get(name) == k and v != NO_TARGET else
                 "-" if v == NO_TARGET else str(v) for k, v in enumerate(values)]
        i += 1 + operands
        calls += [v for k, v in enumerate(values) if PROGRAM_OPERANDS.get(name) == k and v != NO_TARGET]
        if name == "row":  # then the unboxed values' PartitionEntry indexes
            shown += [PartitionEntry._fields[1 + index] for index in words[i:i + values[0]]]
            i += values[0]
        elif name == "tags":  # then the handlers: tag, length, kind, what the kind needs
            for _ in range(values[1]):
                tag, length, kind = words[i:i + 3]
                rest = list(words[i + 3:i + length])
                if kind == TAG_FIXED:
                    shown.append(f"[tag {tag}: {PROGRAM_TYPES[rest[0]]} to {rest[1]}]")
                elif kind == TAG_STRING:
                    shown.append(f"[tag {tag}: string to slot {rest[2]}]")
                else:
                    shown.append(f"[tag {tag}: struct {extract_programs.STRINGS[rest[1]]!r}, fields {rest[3:]}]")
                i += length
        if name == "read":
            shown[0] = PROGRAM_TYPES[values[0]]
        lines.append(f"  {name} {', '.join(shown)}".rstrip() + (" (the reports follow)" if name == "done" else ""))
    return lines, calls


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
