"""Write the body extraction as Cython, from the generated schemas and the rules of
:mod:`dissectors.kafka.extract_rules` (part of ``python -m tools.generate``, see :mod:`tools.generate.tables`).

Each struct, in each scope where something in it is needed, becomes one ``cdef`` function reading the bytes
through a :mod:`dissectors.kafka.wire` cursor: runs of fixed-size fields as one bounds check and the reads of
the fields kept, strings, bytes and records skipped by their length, arrays of fixed-size elements by count
times size, structs that hold nothing needed by a generated skipper, tag buffers by their sizes. Structs
shared between versions and APIs share their function (per struct and scope). A table of function pointers
indexed by API key, direction and version dispatches to a body kind's top function.

The checks are those of the reference rules: a length or count the bytes cannot hold is a truncation (so a
frame cut short yields what was read, with ``partial``), a negative one or a null where none is allowed is
malformed; a string, bytes or fixed-size array nothing needs is stepped over leniently (its length read, the
position moved, the end checked by the next read). A function that fails records the failure in the
accumulator and, when the bytes ran out, still reports the partition row and errors read so far.

The output is ``_generated/extract_plans.pxi``, included by ``dissectors/kafka/extract.pyx`` (the runtime:
accumulator, string reader, skippers of strings and tag buffers, and the Python entry point): the generated
part is only what follows from the schemas. That is for the APIs of ``extract_rules.HOT_APIS``. The others
(admin, inter-broker and rare ones: most of the schemas, little of the traffic) are not compiled code: the
same decisions, made by the same rules, are written as programs (``ProgramWriter``: an operation per step the
function would take, e.g. ``check 6 'topics.partition_index'``, ``read int32 -> partition``, ``struct_array``
of another program), which ``_generated/extract_programs.py`` holds as integers and the one interpreter of
``dissectors/kafka/_interpret.pyx`` runs. Identical programs are kept once; the interpreter checks them all
when it loads them (``extract_rules.check_programs``, which the generator runs on what it writes too).
"""

from __future__ import annotations

import json
import re
from typing import Any

from dissectors.kafka.decoder import FIXED_TYPES
from dissectors.kafka.extract_rules import (
    HOT_APIS,
    MAX_ERROR_ROWS,
    MAX_PARTITION_ROWS,
    NO_TARGET,
    PARTITION_APIS,
    PARTITION_LISTS,
    PROGRAM_HEADER,
    PROGRAM_OPERANDS,
    PROGRAM_OPS,
    PROGRAM_TYPES,
    ROW_ARRAY_FIELDS,
    ROW_ARRAYS,
    ROW_FIELDS,
    ROW_PARTITION_LISTS,
    STRING_OPERANDS,
    TAG_FIXED,
    TAG_STRING,
    TAG_STRUCT,
    TARGET_PARTITION,
    TARGET_VALUE,
    TOP_FIELD_NAMES,
    PartitionEntry,
    Scope,
    StructRules,
    check_programs,
    child_path,
)

ENTRY_FIELDS = PartitionEntry._fields
SIGNATURE = "(Acc acc, Cursor* c, object topic, object partition) except -2"
SKIP_SIGNATURE = "(Acc acc, Cursor* c) except -2"

# type -> Cython expression reading it from cursor ``c`` (bounds already checked)
READ_FIXED = {
    "bool": "rd_u8(c) != 0", "int8": "<int8_t>rd_u8(c)", "int16": "rd_i16(c)", "uint16": "<uint16_t>rd_i16(c)",
    "int32": "rd_i32(c)", "uint32": "<uint32_t>rd_i32(c)", "int64": "rd_i64(c)", "float64": "rd_f64(c)",
    "uuid": "rd_uuid(c)",
}


class GenerateError(Exception):
    """A schema holds something the extraction rules have not met so far."""


def _base(type_name: str) -> str:
    return type_name.removeprefix("compact_").removeprefix("nullable_")


def _lit(text: str) -> str:
    return repr(text)


class _Code:
    """Lines of one function, with the indentation and the failure jumps of the ``while True`` body."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 2  # inside "def" and "while True"
        self.loops = 0  # for-loops open inside the while: a failure breaks out of each

    def emit(self, line: str, extra: int = 0) -> None:
        self.lines.append("    " * (self.depth + extra) + line)

    def fail(self, err: str, where: str, extra: int = 0) -> None:
        """Record a failure and leave the body (each enclosing loop checks acc.err after it)."""
        self.emit(f"fail(acc, {err}, {_lit(where)})", extra)
        self.emit("break", extra)

    def failed(self, extra: int = 0) -> None:
        """After a call that may have failed (it returned -1 with acc.err set)."""
        self.emit("break", extra)

    def open_loop(self, header: str) -> None:
        self.emit(header)
        self.depth += 1
        self.loops += 1

    def close_loop(self) -> None:
        self.depth -= 1
        self.loops -= 1
        self.emit("if acc.err:")
        self.emit("break", 1)


def read_uvarint(code: _Code, target: str, where: str) -> None:
    code.emit(f"{target} = rd_uvarint_wide(c)")
    code.emit("if c.err:")
    code.fail("c.err", where, 1)


def read_length(code: _Code, target: str, compact: bool, width: int, where: str) -> None:
    """A length or count as the reference's readers take it: compact (varint N+1, one byte nearly always),
    else an int16 (string lengths) or int32 in place; truncated when the bytes end first."""
    if compact:
        code.emit("if c.pos < c.end and c.buf[c.pos] < 0x80:")
        code.emit(f"{target} = <Py_ssize_t>c.buf[c.pos] - 1", 1)
        code.emit("c.pos += 1", 1)
        code.emit("else:")
        code.emit(f"{target} = <Py_ssize_t>rd_uvarint_wide(c) - 1", 1)
        code.emit("if c.err:", 1)
        code.fail("c.err", where, 2)
    else:
        code.emit(f"if c.pos + {width} > c.end:")
        code.fail("TRUNCATED", where, 1)
        code.emit(f"{target} = {'rd_i16' if width == 2 else 'rd_i32'}(c)")


class ExtractWriter:
    """The whole generated module: skippers per struct, plans per struct and scope, and the dispatch table."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names  # id(struct) -> its name in schemas.py
        self.functions: list[str] = []
        self.plans: dict[tuple[int, Scope], str | None] = {}
        self.skippers: dict[int, tuple[str | None, int | None]] = {}
        self.counts: dict[str, int] = {}

    def fresh(self, prefix: str, struct_schema: tuple) -> str:
        base = f"{prefix}_{self.names.get(id(struct_schema), 'struct')}"
        n = self.counts[base] = self.counts.get(base, 0) + 1
        return base if n == 1 else f"{base}_{n}"

    # -- skipping what nothing needs, as the reference's general skippers do

    def struct_skipper(self, struct_schema: tuple) -> tuple[str | None, int | None]:
        """(function, None) for a struct of variable size, (None, size) for one every instance of which has
        the same size (no tag buffer, fixed-size fields only)."""
        key = id(struct_schema)
        if key in self.skippers:
            return self.skippers[key]
        fields, tagged = struct_schema
        if tagged is None and all(e[1] in FIXED_TYPES for e in fields):
            found = self.skippers[key] = (None, sum(FIXED_TYPES[e[1]][1] for e in fields))
            return found
        name = self.fresh("skip", struct_schema)
        self.skippers[key] = (name, None)
        code = _Code()
        code.depth = 2
        fixed = 0
        for entry in fields:
            type_name, element = entry[1], entry[2] if len(entry) > 2 else None
            if type_name in FIXED_TYPES:
                fixed += FIXED_TYPES[type_name][1]
                continue
            if fixed:
                code.emit(f"c.pos += {fixed}")
                fixed = 0
            self.skip_field(code, type_name, element)
        if fixed:
            code.emit(f"c.pos += {fixed}")
        code.emit("if c.pos > c.end:")
        code.fail("TRUNCATED", "struct", 1)
        if tagged is not None:
            code.emit("if skip_tag_buffer(acc, c) < 0:")
            code.failed(1)
        code.emit("return 0")
        self.functions.append("\n".join([
            f"cdef Py_ssize_t {name}{SKIP_SIGNATURE}:",
            "    cdef Py_ssize_t count, j",
            "    while True:",
            *code.lines,
            "    return -1",
        ]))
        return self.skippers[key]

    def skip_field(self, code: _Code, type_name: str, element: Any) -> None:
        """Skip one field as the reference's field_skipper does (strict lengths and counts)."""
        if type_name in FIXED_TYPES:
            code.emit(f"c.pos += {FIXED_TYPES[type_name][1]}")
            return
        compact = type_name.startswith("compact_")
        nullable = "nullable" in type_name
        base = _base(type_name)
        if base in ("string", "bytes", "records"):
            code.emit(f"if skip_sized(acc, c, {compact}, {2 if base == 'string' else 4}, {nullable}) < 0:")
            code.failed(1)
        elif base == "struct":
            skip, size = self.struct_skipper(element)
            if nullable:
                skip = skip or self.sized_skipper(element, size)
                code.emit("if c.pos >= c.end:")
                code.fail("TRUNCATED", "truncated struct marker", 1)
                code.emit("if c.buf[c.pos] >= 0x80:")
                code.emit("c.pos += 1", 1)
                code.emit("else:")
                code.emit("c.pos += 1", 1)
                code.emit(f"if {skip}(acc, c) < 0:", 1)
                code.failed(2)
            elif skip is None:
                code.emit(f"c.pos += {size}")
            else:
                code.emit(f"if {skip}(acc, c) < 0:")
                code.failed(1)
        elif base == "array":
            self.skip_array(code, compact, nullable, element)
        else:
            raise GenerateError(f"unknown schema type {type_name!r}")

    def sized_skipper(self, struct_schema: tuple, size: int) -> str:
        """A skipper function for a fixed-size struct behind a nullable marker (no definition has one today)."""
        name = self.fresh("skip_sized", struct_schema)
        self.functions.append("\n".join([
            f"cdef Py_ssize_t {name}{SKIP_SIGNATURE}:",
            f"    c.pos += {size}",
            "    if c.pos > c.end:",
            "        fail(acc, TRUNCATED, 'struct')",
            "        return -1",
            "    return 0",
        ]))
        return name

    def skip_array(self, code: _Code, compact: bool, nullable: bool, element: Any) -> None:
        """The reference's array skipper: null only where allowed, the count bounded by the bytes left, then
        count times the element size, or element by element."""
        if isinstance(element, tuple):
            skip, size = self.struct_skipper(element)
        elif element in FIXED_TYPES:
            skip, size = None, FIXED_TYPES[element][1]
        elif _base(element) in ("string", "bytes", "records"):
            skip, size = "", None
        else:
            raise GenerateError(f"an array of {element!r}")
        read_length(code, "count", compact, 4, "array")
        code.emit("if count <= 0:")
        code.emit(f"if count != 0{' and count != -1' if nullable else ''}:", 1)
        code.fail("MALFORMED", "array", 2)
        code.emit("elif count > c.end - c.pos:")
        code.fail("TRUNCATED", "array", 1)
        if size is not None:
            code.emit("else:")
            code.emit(f"c.pos += count * {size}", 1)
            code.emit("if c.pos > c.end:", 1)
            code.fail("TRUNCATED", "array", 2)
            return
        code.emit("else:")
        code.depth += 1
        code.open_loop("for j in range(count):")
        if skip:
            code.emit(f"if {skip}(acc, c) < 0:")
        else:
            el_compact = element.startswith("compact_")
            width = 2 if _base(element) == "string" else 4
            code.emit(f"if skip_sized(acc, c, {el_compact}, {width}, {'nullable' in element}) < 0:")
        code.failed(1)
        code.close_loop()
        code.depth -= 1

    # -- plans

    def plan(self, struct_schema: tuple, scope: Scope) -> str | None:
        """The function of a struct in a scope, or None when nothing in it is needed."""
        key = (id(struct_schema), scope)
        if key not in self.plans:
            self.plans[key] = _PlanWriter(self, struct_schema, scope).write()
        return self.plans[key]

    def used(self, roots: set[str]) -> list[str]:
        """The functions the table reaches (a plan found to need nothing leaves skippers nothing calls)."""
        by_name = {re.match(r"cdef Py_ssize_t (\w+)\(", f)[1]: f for f in self.functions}
        seen: set[str] = set()
        pending = [name for name in roots if name in by_name]
        while pending:
            name = pending.pop()
            if name not in seen:
                seen.add(name)
                pending += [n for n in re.findall(r"\b((?:x|skip)_\w+)\(acc", by_name[name]) if n in by_name]
        return [f for name, f in by_name.items() if name in seen]

    def render(self, tables: dict[bool, dict[int, tuple[int, list]]], header: str) -> str:
        """The module of the APIs of HOT_APIS: every function they reach, then the dispatch table's filling and
        its size (which covers every API: the others' programs go in beside, ``ProgramWriter``). The others'
        functions are written too, unused, so that a hot function keeps its name when an API moves."""
        entries: list[tuple[int, int, int, str]] = []  # (api_key, is_response, version, function)
        for is_response in (False, True):
            for api_key, (min_version, structs) in sorted(tables[is_response].items()):
                for index, top in enumerate(structs):
                    scope = Scope(api_key, is_response, "", True, False, False)
                    function = self.plan(top, scope)
                    entries.append((api_key, is_response, min_version + index, function or "nothing"))
        hot = [e for e in entries if e[0] in HOT_APIS]
        max_key = max(e[0] for e in entries)
        max_version = max(e[2] for e in entries)
        out = [header, ""]
        out.append(f"cdef enum:\n    N_KEYS = {max_key + 1}\n    N_VERSIONS = {max_version + 1}\n")
        out.append("cdef plan_fn PLANS[2][N_KEYS][N_VERSIONS]  # [is_response][api_key][api_version], NULL: unknown\n")
        out.extend(f + "\n\n" for f in self.used({e[3] for e in hot}))
        out.append("cdef void fill_plans() noexcept:")
        for api_key, is_response, version, function in hot:
            out.append(f"    PLANS[{int(is_response)}][{api_key}][{version}] = {function}")
        out.append("")
        return "\n".join(out)


def element_layout(element: tuple, item: str, path: str) -> tuple[int, int, str]:
    """(bytes before ``item``, bytes after it, its type) in the elements of an array ROW_ARRAYS counts: fixed-size
    fields only (and a tag buffer), ``item`` an integer."""
    before = after = 0
    item_type = None
    for entry in element[0]:
        if entry[1] not in FIXED_TYPES:
            raise GenerateError(f"{path}: a {entry[1]} field in the elements of a counted array")
        if entry[0] == item:
            item_type = entry[1]
        elif item_type is None:
            before += FIXED_TYPES[entry[1]][1]
        else:
            after += FIXED_TYPES[entry[1]][1]
    if item_type is None or item_type in ("float64", "uuid"):
        raise GenerateError(f"{path}: no integer {item} in its elements")
    return before, after, item_type


def typed_index(rules: StructRules, name: str) -> int | None:
    """The Entry value index of a field kept unboxed (a ``cdef int64_t`` local, or a program's typed target; its
    bit in ``has`` set once read): the integer fields a partition row takes; None for one kept as an object."""
    if not rules.rows or name == rules.partition or name in rules.top_fields or name in rules.body_fields:
        return None
    if name in ("records_offset", "record_bytes") or name in ROW_ARRAY_FIELDS:
        return ENTRY_FIELDS.index(name) - 1
    if name in ROW_FIELDS:
        return ENTRY_FIELDS.index(ROW_FIELDS[name]) - 1
    return None


class _StructDecisions(StructRules):
    """What one struct's function and its program decide alike, in one scope: which fields wait in a run of
    fixed-size reads, which tagged fields are read, what a field's type says. The two writers below turn the
    same decisions into Cython (``_PlanWriter``) or operations (``_ProgramPlan``)."""

    def __init__(self, writer: ExtractWriter | ProgramWriter, struct_schema: tuple, scope: Scope) -> None:
        super().__init__(struct_schema, scope, writer.names.get(id(struct_schema), "struct"))
        self.writer = writer
        self.struct_schema = struct_schema
        self.pending: list[tuple[str, str]] = []
        self.kept: set[str] = set()
        self.records: str | None = None
        self.needed = False

    def flush_fixed(self) -> None:
        raise NotImplementedError

    def child(self, name: str, type_name: str, element: tuple) -> object | None:
        raise NotImplementedError

    def begin_field(self, entry: tuple) -> tuple | None:
        """A fixed-size field joins the pending run (None); any other ends the run and is described:
        name, type, element, path, compact, nullable, and whether the struct was needed before it."""
        name, type_name = entry[0], entry[1]
        element = entry[2] if len(entry) > 2 else None
        if type_name in FIXED_TYPES:
            self.pending.append((name, type_name))
            return None
        self.flush_fixed()
        needed_before, self.needed = self.needed, True
        path = child_path(self.scope.path, name)
        return (name, type_name, element, path, type_name.startswith("compact_"), "nullable" in type_name,
                needed_before)

    def tag_handlers(self) -> list[tuple[int, str, str]]:
        """The tagged fields read (tag, name, type, or "struct" for a tagged struct's leading fixed fields);
        a tagged struct that holds anything else needed stops the generator."""
        handlers = []
        for tag, *entry in self.tagged:
            name, type_name = entry[0], entry[1]
            element = entry[2] if len(entry) > 2 else None
            if name in self.tag_kept:
                handlers.append((tag, name, type_name))
                self.kept.add(name)
            elif name in self.tag_struct_fields:
                handlers.append((tag, name, "struct"))
                self.kept.update(f"{name}__{sub}" for sub, _, keep in self.tag_struct_fields[name] if keep)
            elif isinstance(element, tuple) and self.child(name, type_name, element) is not None:
                raise GenerateError(f"{self.struct_name}: the tagged struct {name} holds something needed")
        self.needed = self.needed or bool(handlers)
        return handlers


class _PlanWriter(_StructDecisions):
    """One struct's function in one scope. Locals: the cursor ``c``; ``topic`` and ``partition``
    (inherited, then the struct's own once read); ``own`` (0: topic inherited, 1: named by id, 2: by name);
    ``v_<field>`` for each field kept."""

    def __init__(self, writer: ExtractWriter, struct_schema: tuple, scope: Scope) -> None:
        super().__init__(writer, struct_schema, scope)
        self.code = _Code()

    def var(self, name: str) -> str:
        return "partition" if name == self.partition else f"v_{name}"

    def typed(self, name: str) -> int | None:
        return typed_index(self, name)

    def emit_read(self, name: str, expression: str, extra: int = 0) -> None:
        """``v_<name>`` (or ``partition``) read, its bit set when it is kept unboxed."""
        self.emit(f"{self.var(name)} = {expression}", extra)
        index = self.typed(name)
        if index is not None:
            self.emit(f"has |= {1 << index}", extra)

    def emit(self, line: str, extra: int = 0) -> None:
        self.code.emit(line, extra)

    def flush_fixed(self) -> None:
        run, self.pending = self.pending, []
        if not run:
            return
        size = sum(FIXED_TYPES[t][1] for _, t in run)
        kept = [(name, t) for name, t in run if name == self.partition or self.wanted(name, t)]
        if not kept:
            self.emit(f"c.pos += {size}")  # unchecked: the next read or the struct's end sees it
            return
        self.needed = True
        self.emit(f"if c.pos + {size} > c.end:")
        self.code.fail("TRUNCATED", child_path(self.scope.path, run[0][0]), 1)
        skip = 0
        for name, t in run:
            if (name, t) in kept:
                if skip:
                    self.emit(f"c.pos += {skip}")
                    skip = 0
                self.emit_read(name, READ_FIXED[t])
            else:
                skip += FIXED_TYPES[t][1]
        if skip:
            self.emit(f"c.pos += {skip}")
        self.kept.update(name for name, _ in kept if name != self.partition)
        if any(name == self.topic_id for name, _ in kept):
            tid = f"v_{self.topic_id}"
            if self.topic_name in self.kept:
                self.emit(f"if v_{self.topic_name} and {tid} != ZERO_UUID:")
                self.emit(f"acc.name_topic_id({tid}, v_{self.topic_name})", 1)
            self.emit(f"if own != 2 and {tid} != ZERO_UUID:")
            self.emit(f"topic = {tid}", 1)
            self.emit("own = 1", 1)
            if self.topic_ready == self.topic_id:
                self.report_topic()

    def report_topic(self) -> None:
        self.emit("if own and not acc.knows(topic):")
        self.emit("acc.add_topic(topic)", 1)

    def read_string(self, target: str, type_name: str, where: str) -> None:
        compact = type_name.startswith("compact_")
        self.emit(f"{target} = read_str(acc, c, {compact}, {'nullable' in type_name}, {_lit(where)})")
        self.emit("if acc.err:")
        self.code.failed(1)

    def field(self, entry: tuple) -> None:
        described = self.begin_field(entry)
        if described is None:
            return
        name, type_name, element, path, compact, nullable, needed_before = described
        child = None
        if name == self.topic_name:
            self.read_string(f"v_{name}", type_name, path)
            self.emit(f"if v_{name}:")
            self.emit(f"topic = v_{name}", 1)
            self.emit("own = 2", 1)
            if self.topic_id in self.kept:
                self.emit(f"if v_{self.topic_id} != ZERO_UUID:", 1)
                self.emit(f"acc.name_topic_id(v_{self.topic_id}, v_{name})", 2)
            self.kept.add(name)
            if self.topic_ready == name:
                self.report_topic()
        elif type_name.endswith("array") and isinstance(element, str) and entry[3:] == ("topicName",):
            if _base(element) != "string":
                raise GenerateError(f"{path}: topic names of type {element}")
            self.emit(f"if read_topic_list(acc, c, {compact}, {element.startswith('compact_')}, "
                      f"{'nullable' in element}, {_lit(path)}) < 0:")
            self.code.failed(1)
        elif type_name.endswith("array") and element == "int32" and name in PARTITION_LISTS and self.in_topic:
            self.partition_list(name, compact, nullable, path)
        elif name in self.row_arrays:
            self.row_array(name, element, compact, nullable, path)
        elif isinstance(element, tuple) and (child := self.child(name, type_name, element)) is not None:
            if type_name.endswith("array"):
                self.struct_array(child, compact, nullable, path)
            elif nullable:
                self.emit("if c.pos >= c.end:")
                self.code.fail("TRUNCATED", path, 1)
                self.emit("if c.buf[c.pos] >= 0x80:")
                self.emit("c.pos += 1", 1)
                self.emit("else:")
                self.emit("c.pos += 1", 1)
                self.emit(f"if {child}(acc, c, topic, partition) < 0:", 1)
                self.code.failed(2)
            else:
                self.emit(f"if {child}(acc, c, topic, partition) < 0:")
                self.code.failed(1)
        elif self.rows and type_name.endswith("records"):
            read_length(self.code, "n", compact, 4, path)
            self.emit("if n < 0:")
            self.emit("if n != -1:", 1)
            self.code.fail("MALFORMED", path, 2)
            records = (1 << self.typed("records_offset")) | (1 << self.typed("record_bytes"))
            self.emit(f"has &= ~{records}", 1)
            self.emit("else:")
            self.emit("v_records_offset = c.pos", 1)
            self.emit("v_record_bytes = n", 1)
            self.emit(f"has |= {records}", 1)
            self.emit("c.pos += n", 1)
            self.emit("if c.pos > c.end:", 1)
            self.code.fail("TRUNCATED", path, 2)
            self.records = name
        elif self.wanted(name, type_name):
            if _base(type_name) != "string":
                raise GenerateError(f"{path}: a {type_name} field is needed")
            self.read_string(f"v_{name}", type_name, path)
            self.kept.add(name)
        else:
            self.skip(type_name, element, path)
            self.needed = needed_before

    def skip(self, type_name: str, element: Any, path: str) -> None:
        """A field nothing needs: strings, bytes, records and arrays of fixed-size elements leniently by their
        length (as the reference's inline step: a negative count is none, the end is the next read's check);
        anything else as the general skippers."""
        compact = type_name.startswith("compact_")
        base = _base(type_name)
        if isinstance(element, str) and element in FIXED_TYPES and type_name.endswith("array"):
            size = FIXED_TYPES[element][1]
        elif base in ("string", "bytes", "records"):
            size = 1
        elif base == "struct" and "nullable" not in type_name and self.writer.struct_skipper(element)[0] is None:
            raise GenerateError(f"{path}: a fixed-size struct skipped")
        else:
            self.writer.skip_field(self.code, type_name, element)
            return
        if compact:
            self.emit("if c.pos < c.end and c.buf[c.pos] < 0x80:")
            self.emit(f"c.pos += (<Py_ssize_t>c.buf[c.pos] - 1) * {size} + 1 if c.buf[c.pos] else 1", 1)
            self.emit("else:")
            self.code.depth += 1
            self.writer.skip_field(self.code, type_name, element)
            self.code.depth -= 1
            return
        width = 2 if type_name.endswith("string") else 4
        self.emit(f"if c.pos + {width} > c.end:")
        self.code.fail("TRUNCATED", path, 1)
        self.emit(f"n = {'rd_i16' if width == 2 else 'rd_i32'}(c)")
        self.emit("if n > 0:")
        self.emit(f"c.pos += n * {size}" if size != 1 else "c.pos += n", 1)

    def child(self, name: str, type_name: str, element: tuple) -> str | None:
        scope = self.scope._replace(path=child_path(self.scope.path, name), top=False,
                                    element=type_name.endswith("array"), in_topic=self.in_topic)
        return self.writer.plan(element, scope)

    def _element_loop(self, compact: bool, path: str) -> None:
        """An array's count, and the loop over its elements when it has some (at least a byte each): the caller
        emits the element, then closes the loop and the depth."""
        read_length(self.code, "count", compact, 4, path)
        self.emit("if count > 0:")
        self.emit("if count > c.end - c.pos:", 1)
        self.code.fail("TRUNCATED", path, 2)
        self.code.depth += 1
        self.code.open_loop("for j in range(count):")

    def struct_array(self, child: str, compact: bool, nullable: bool, path: str) -> None:
        self._element_loop(compact, path)
        self.emit(f"if {child}(acc, c, topic, partition) < 0:")
        self.code.failed(1)
        self.code.close_loop()
        self.code.depth -= 1
        self.emit(f"elif count < {-1 if nullable else 0}:")
        self.code.fail("MALFORMED", path, 1)

    def row_array(self, name: str, element: tuple, compact: bool, nullable: bool, path: str) -> None:
        """An array of structs a partition row counts (ROW_ARRAYS): its count, and the smallest of one integer
        field of its elements, each element's other fields stepped over (checked as the array's skipper checks
        them: a count the bytes cannot hold, an element cut short or its tag buffer). Both are set once the whole
        array is read: a row cut short inside it has neither."""
        count_field, item, least_field = ROW_ARRAYS[name]
        before, after, item_type = element_layout(element, item, path)
        size = before + FIXED_TYPES[item_type][1] + after
        count_bit, least_bit = 1 << self.typed(count_field), 1 << self.typed(least_field)
        self._element_loop(compact, path)
        self.emit(f"if c.pos + {size} > c.end:")
        self.code.fail("TRUNCATED", path, 1)
        if before:
            self.emit(f"c.pos += {before}")
        self.emit(f"item = {READ_FIXED[item_type]}")
        if after:
            self.emit(f"c.pos += {after}")
        self.emit(f"if j == 0 or item < v_{least_field}:")
        self.emit(f"v_{least_field} = item", 1)
        if element[1] is not None:  # the element's tag buffer: empty, nearly always
            self.emit("if c.pos < c.end and c.buf[c.pos] == 0:")
            self.emit("c.pos += 1", 1)
            self.emit("elif skip_tag_buffer(acc, c) < 0:")
            self.code.failed(1)
        self.code.close_loop()
        self.emit(f"v_{count_field} = count")
        self.emit(f"has |= {count_bit | least_bit}")
        self.code.depth -= 1
        self.emit("elif count == 0:")
        self.emit(f"v_{count_field} = 0", 1)
        self.emit(f"has |= {count_bit}", 1)
        self.emit(f"elif count < {-1 if nullable else 0}:")
        self.code.fail("MALFORMED", path, 1)
        self.kept.update((count_field, least_field))

    def partition_list(self, name: str, compact: bool, nullable: bool, path: str) -> None:
        read_length(self.code, "count", compact, 4, path)
        self.emit("if count > 0:")
        self.emit("if count > (c.end - c.pos) >> 2:", 1)
        self.code.fail("TRUNCATED", path, 2)
        self.emit("acc.partition_count += count", 1)
        if self.scope.api_key in PARTITION_APIS and name in ROW_PARTITION_LISTS:
            self.emit("partition_rows(acc, c, count, topic)", 1)
        self.emit("c.pos += 4 * count", 1)
        self.emit(f"elif count < {-1 if nullable else 0}:")
        self.code.fail("MALFORMED", path, 1)

    def tags(self) -> None:
        if self.tagged is None:
            return
        handlers = self.tag_handlers()
        if not handlers:
            self.emit("if skip_tag_buffer(acc, c) < 0:")
            self.code.failed(1)
            return
        where = child_path(self.scope.path, "_tagged_fields")
        self.emit("if c.pos < c.end and c.buf[c.pos] == 0:")
        self.emit("c.pos += 1", 1)
        self.emit("else:")
        self.code.depth += 1
        read_uvarint(self.code, "count", where)
        self.emit("if count > (c.end - c.pos) >> 1:")
        self.code.fail("TRUNCATED", where, 1)
        self.code.open_loop("for j in range(count):")
        read_uvarint(self.code, "tag", where)
        read_uvarint(self.code, "n", where)
        self.emit("if n > c.end - c.pos:")
        self.code.fail("TRUNCATED", where, 1)
        self.emit("stop = c.pos + n")
        for i, (tag, name, type_name) in enumerate(handlers):
            self.emit(f"{'if' if i == 0 else 'elif'} tag == {tag}:")
            if type_name in FIXED_TYPES:
                self.emit(f"if c.pos + {FIXED_TYPES[type_name][1]} > stop:", 1)
                self.code.fail("TRUNCATED", where, 2)
                self.emit_read(name, READ_FIXED[type_name], 1)
            elif type_name == "struct":  # leading fixed-size fields of a tagged struct (tag_struct_fields)
                fields = self.tag_struct_fields[name]
                self.emit(f"if c.pos + {sum(FIXED_TYPES[t][1] for _, t, _ in fields)} > stop:", 1)
                self.code.fail("TRUNCATED", child_path(where, name), 2)
                for sub, sub_type, keep in fields:
                    if keep:
                        self.emit_read(f"{name}__{sub}", READ_FIXED[sub_type], 1)
                    else:
                        self.emit(f"c.pos += {FIXED_TYPES[sub_type][1]}", 1)
            elif _base(type_name) == "string":
                self.emit("sub.buf, sub.pos, sub.end, sub.err = c.buf, c.pos, stop, 0", 1)
                self.emit(f"v_{name} = read_str(acc, &sub, {type_name.startswith('compact_')}, "
                          f"{'nullable' in type_name}, {_lit(where)})", 1)
                self.emit("if acc.err:", 1)
                self.code.failed(2)
            else:
                raise GenerateError(f"{self.struct_name}: a tagged {type_name} field is needed")
        self.emit("c.pos = stop")
        self.code.close_loop()
        self.code.depth -= 1

    def report(self, cut_short: bool) -> list[str]:
        """The reports after the fields, or, when the bytes ended inside the struct (``cut_short``), of what
        was read before they did."""
        out: list[str] = []
        if self.partition is not None:
            if cut_short:
                out.append("if partition is None:")
                out.append("    return -1")
            out.append("acc.partition_count += 1")
        if self.rows:
            out.append(f"if len(acc.partitions) < {MAX_PARTITION_ROWS}:")
            out.append("    entry = new_partition_entry(topic, partition)")
            typed = self.typed_kept()
            if typed:
                out.append("    entry.present |= has")
            out += [f"    entry.values[{index}] = v_{name}" for name, index in typed]
            out.append("    acc.partitions.append(entry)")
            out.append("else:")
            out.append("    acc.leave_out(0)")
        for name in self.errors:
            message = name.removesuffix("error_code") + "error_message"
            message = f"v_{message}" if message in self.kept else "None"
            path = child_path(self.scope.path, name)
            out.append(f"if v_{name}:")
            out.append(f"    if len(acc.errors) < {MAX_ERROR_ROWS}:")
            out.append(f"        acc.errors.append(new_entry(ErrorEntry, ({_lit(path)}, topic, partition, "
                       f"v_{name}, {message})))")
            out.append("    else:")
            out.append("        acc.leave_out(1)")
        for name in self.top_fields:
            out.append(f"acc.{name} = v_{name}")
        for name in self.body_fields:
            out.append(f"acc.set_field({_lit(name)}, v_{name})")
        for name, fields in self.tag_struct_fields.items():
            for sub, _, keep in fields:
                if keep:  # None when the tag was absent
                    out.append(f"if v_{name}__{sub} is not None:")
                    out.append(f"    acc.set_field({_lit(f'{name}.{sub}')}, v_{name}__{sub})")
        return out

    def kept_locals(self) -> list[str]:
        """The ``v_<name>`` locals the function keeps: the fields kept, and a records field's place and length."""
        return sorted(self.kept) + (["records_offset", "record_bytes"] if self.records else [])

    def typed_kept(self) -> list[tuple[str, int]]:
        """(name, Entry value index) of the locals kept unboxed, one per index."""
        typed = [(name, index) for name in self.kept_locals() if (index := self.typed(name)) is not None]
        if len({index for _, index in typed}) != len(typed):
            raise GenerateError(f"{self.struct_name}: two fields fill one partition entry field")
        return typed

    def write(self) -> str | None:
        for entry in self.fields:
            self.field(entry)
        self.flush_fixed()
        self.tags()
        self.emit("if c.pos > c.end:")
        self.code.fail("TRUNCATED", self.scope.path or "body", 1)
        self.emit("break")
        if not (self.needed or self.reports()):
            return None
        name = self.writer.fresh("x", self.struct_schema)
        kept = self.kept_locals()
        body = [f"cdef Py_ssize_t {name}{SIGNATURE}:",
                "    cdef Py_ssize_t n, count, j, stop",
                "    cdef uint64_t tag",
                "    cdef Cursor sub",
                "    cdef int own = 0"]
        body += [f"    cdef int64_t v_{k} = 0" if self.typed(k) is not None else f"    v_{k} = None" for k in kept]
        if self.rows:
            body += ["    cdef uint32_t has = 0", "    cdef Entry entry"]
        if self.row_arrays:
            body.append("    cdef int64_t item")
        body += ["    while True:", *self.code.lines]
        cut = self.report(cut_short=True)
        body.append("    if acc.err:")
        if cut:
            body.append("        if acc.err == TRUNCATED:")
            body += ["            " + line for line in cut]
        body.append("        return -1")
        body += ["    " + line for line in self.report(cut_short=False)]
        body.append("    return 0")
        self.writer.functions.append("\n".join(body))
        return name


# ---------------------------------------------------------------------------------------------------------
# The APIs outside HOT_APIS: programs for the compiled interpreter (dissectors/kafka/_interpret.pyx)

OPS = {name: (code, operands) for code, (name, operands) in enumerate(PROGRAM_OPS)}
TYPE_CODES = {name: code for code, name in enumerate(PROGRAM_TYPES)}
HEADER_WORDS = 4
if HEADER_WORDS != PROGRAM_HEADER:
    raise GenerateError("PROGRAM_HEADER changed: update ProgramWriter.encode")

Op = tuple  # (operation name, operands...): ints, bools, strings (where and names) and program numbers


class ProgramWriter:
    """The same reading as the generated functions, as data: per struct and scope a program of operations
    (``extract_rules.PROGRAM_OPS``) that ``_interpret.pyx`` runs. The decisions are ``_PlanWriter``'s, made by
    the same rules (``StructRules``); identical programs (a struct read alike in several APIs) are kept once."""

    def __init__(self, names: dict[int, str]) -> None:
        self.names = names
        self.programs: list[tuple[str, tuple]] = []  # (title, (rows, slots, total, ops, reports))
        self.index: dict[tuple, int] = {}
        self.plans: dict[tuple[int, Scope], int | None] = {}
        self.skippers: dict[int, tuple[int | None, int | None]] = {}

    def add(self, title: str, rows: bool, slots: int, total: int, ops: list[Op], reports: list[Op]) -> int:
        key = (rows, slots, total, tuple(ops), tuple(reports))
        found = self.index.get(key)
        if found is None:
            found = self.index[key] = len(self.programs)
            self.programs.append((title, key))
        return found

    def total(self, program: int) -> int:
        """The object slots a program and the programs it calls use at most at once."""
        return self.programs[program][1][2]

    # -- skipping what nothing needs (ExtractWriter's skippers)

    def struct_skipper(self, struct_schema: tuple) -> tuple[int | None, int | None]:
        key = id(struct_schema)
        if key in self.skippers:
            return self.skippers[key]
        fields, tagged = struct_schema
        if tagged is None and all(e[1] in FIXED_TYPES for e in fields):
            found = self.skippers[key] = (None, sum(FIXED_TYPES[e[1]][1] for e in fields))
            return found
        ops: list[Op] = []
        fixed = 0
        for entry in fields:
            type_name, element = entry[1], entry[2] if len(entry) > 2 else None
            if type_name in FIXED_TYPES:
                fixed += FIXED_TYPES[type_name][1]
                continue
            if fixed:
                ops.append(("skip", fixed))
                fixed = 0
            self.skip_field(ops, type_name, element)
        if fixed:
            ops.append(("skip", fixed))
        ops.append(("check_end", "struct"))
        if tagged is not None:
            ops.append(("skip_tags",))
        ops.append(("done",))
        title = f"skip {self.names.get(key, 'struct')}"
        found = self.skippers[key] = (self.add(title, False, 0, 0, ops, [("return",)]), None)
        return found

    def skip_field(self, ops: list[Op], type_name: str, element: Any) -> None:
        if type_name in FIXED_TYPES:
            ops.append(("skip", FIXED_TYPES[type_name][1]))
            return
        compact = type_name.startswith("compact_")
        nullable = "nullable" in type_name
        base = _base(type_name)
        if base in ("string", "bytes", "records"):
            ops.append(("skip_sized", compact, 2 if base == "string" else 4, nullable))
        elif base == "struct":
            skip, size = self.struct_skipper(element)
            if nullable:
                ops.append(("skip_nullable_struct", NO_TARGET if skip is None else skip, size or 0))
            elif skip is None:
                ops.append(("skip", size))
            else:
                ops.append(("skip_struct", skip))
        elif base == "array":
            self.skip_array(ops, compact, nullable, element)
        else:
            raise GenerateError(f"unknown schema type {type_name!r}")

    def skip_array(self, ops: list[Op], compact: bool, nullable: bool, element: Any) -> None:
        sized = (False, 0, False)  # a string element's compact, width, nullable
        if isinstance(element, tuple):
            skip, size = self.struct_skipper(element)
        elif element in FIXED_TYPES:
            skip, size = None, FIXED_TYPES[element][1]
        elif _base(element) in ("string", "bytes", "records"):
            skip, size = None, None
            sized = (element.startswith("compact_"), 2 if _base(element) == "string" else 4, "nullable" in element)
        else:
            raise GenerateError(f"an array of {element!r}")
        ops.append(("skip_array", compact, nullable, NO_TARGET if size is None else size,
                    NO_TARGET if skip is None else skip, *sized))

    # -- plans

    def plan(self, struct_schema: tuple, scope: Scope) -> int | None:
        key = (id(struct_schema), scope)
        if key not in self.plans:
            self.plans[key] = _ProgramPlan(self, struct_schema, scope).write()
        return self.plans[key]

    def calls(self, program: int) -> list[int]:
        _title, (_rows, _slots, _total, ops, _reports) = self.programs[program]
        return [op[1 + PROGRAM_OPERANDS[op[0]]] for op in ops
                if op[0] in PROGRAM_OPERANDS and op[1 + PROGRAM_OPERANDS[op[0]]] != NO_TARGET]

    def render(self, tables: dict[bool, dict[int, tuple[int, list]]], header: str) -> str:
        """The programs of the APIs outside HOT_APIS, as a Python module of constants."""
        tops: list[tuple[bool, int, int, list[int | None]]] = []
        for is_response in (False, True):
            for api_key, (min_version, structs) in sorted(tables[is_response].items()):
                if api_key not in HOT_APIS:
                    scope = Scope(api_key, is_response, "", True, False, False)
                    tops.append((is_response, api_key, min_version, [self.plan(top, scope) for top in structs]))
        number: dict[int, int] = {}  # program -> its place in the module: those the entry points reach, in order
        pending = [p for *_, programs in tops for p in programs if p is not None][::-1]
        while pending:
            program = pending.pop()
            if program not in number:
                number[program] = len(number)
                pending += reversed(self.calls(program))
        strings: dict[str, int] = {}
        out = [header, PROGRAMS_GUIDE]
        encoded = [self.encode(program, number, strings) for program in number]
        entry_points = tuple((int(is_response), api_key, min_version, tuple(-1 if p is None else number[p]
                                                                            for p in programs))
                             for is_response, api_key, min_version, programs in tops)
        try:  # what the interpreter checks at import
            check_programs(tuple(map(tuple, encoded)), tuple(strings), entry_points)
        except ValueError as exc:
            raise GenerateError(str(exc)) from None
        out.append("STRINGS = (")
        out += wrapped_items([json.dumps(text) for text in strings])
        out.append(")")
        out.append("")
        out.append("PROGRAMS = (")
        for program, words in zip(number, encoded, strict=True):
            title = f"    # {number[program]}: {self.programs[program][0]}"
            if len(title) > 116 and ", " in title:  # the struct's path on a line of its own
                head, path = title.rsplit(", ", 1)
                title = f"{head}, in\n    #   {path}"
            out.append(title)
            out += wrapped_items([str(word) for word in words], "    ", "(", "),")
        out.append(")")
        out.append("")
        out.append("# (is_response, api_key, min_version, (the program of each version from min_version, -1 for a body")
        out.append("# nothing of which is needed))")
        out.append("ENTRY_POINTS = (")
        for is_response, api_key, min_version, programs in entry_points:
            first = f"({is_response}, {api_key}, {min_version}, ("
            out += wrapped_items([str(p) for p in programs], "    ", first, ")),")
        out.append(")")
        return "\n".join(out) + "\n"

    def encode(self, program: int, number: dict[int, int], strings: dict[str, int]) -> list[int]:
        """Header and operations as words: strings by their index in STRINGS, programs by their number."""
        _title, (rows, slots, total, ops, reports) = self.programs[program]
        words: list[int] = []
        for op in (*ops, *reports):
            code, operands = OPS[op[0]]
            if len(op) - 1 != operands and op[0] not in ("tags", "row"):
                raise GenerateError(f"{op[0]} takes {operands} operands: {op}")
            words.append(code)
            for i, value in enumerate(op[1:]):
                if isinstance(value, str):
                    if STRING_OPERANDS.get(op[0]) != i and op[0] != "tags":  # a tags handler's where too
                        raise GenerateError(f"{op[0]}: a string as operand {i}")
                    value = strings.setdefault(value, len(strings))
                elif PROGRAM_OPERANDS.get(op[0]) == i and value != NO_TARGET:
                    value = number[value]
                words.append(int(value))
            if op[0] == "done":
                report_at = HEADER_WORDS + len(words)
        return [slots, total, int(rows), report_at, *words]


PROGRAMS_GUIDE = """
# How to read this module: a program reads one struct in one scope as the generated functions of
# extract_plans.pxi read those of the APIs in HOT_APIS. Its words: a header (object slots, slots with those
# of the programs it calls, whether it makes partition rows, where its reports start), then operations, each
# a code and its operands (dissectors/kafka/extract_rules.py, PROGRAM_OPS). Strings are indexes into
# STRINGS; programs are numbers in PROGRAMS. `tools.extract_listing.plan_source` lists a body kind's programs.
"""


def wrapped_items(items: list[str], indent: str = "    ", first: str = "", last: str = ",",
                  width: int = 116) -> list[str]:
    """Comma-separated items in lines within ``width``: ``first`` before the first, ``last`` after the last (a
    tuple of one item keeps its comma)."""
    pieces = [item + "," for item in items]
    pieces[-1] = items[-1] + ("," if len(items) == 1 and last != "," else "") + last
    lines: list[str] = []
    current, empty = indent + first, True
    for piece in pieces:
        if not empty and len(current) + 1 + len(piece) > width:
            lines.append(current)
            current, empty = indent, True
        current += piece if empty else " " + piece
        empty = False
    lines.append(current)
    return lines


class _ProgramPlan(_StructDecisions):
    """One struct's program in one scope: ``_PlanWriter``'s decisions, written as operations."""

    def __init__(self, writer: ProgramWriter, struct_schema: tuple, scope: Scope) -> None:
        super().__init__(writer, struct_schema, scope)
        self.ops: list[Op] = []
        self.slots: dict[str, int] = {}
        self.called: list[int] = []

    def typed(self, name: str) -> int | None:
        return typed_index(self, name)

    def target(self, name: str) -> int:
        """Where a field read goes: the partition, a PartitionEntry value read unboxed, or an object slot."""
        if name == self.partition:
            return TARGET_PARTITION
        index = self.typed(name)
        if index is not None:
            return TARGET_VALUE - index
        return self.slots.setdefault(name, len(self.slots))

    def slot(self, name: str) -> int:
        found = self.target(name)
        if found < 0:
            raise GenerateError(f"{self.struct_name}: {name} is kept as an object and as something else")
        return found

    def typed_target(self, name: str, type_name: str) -> int:
        found = self.target(name)
        if found <= TARGET_VALUE and type_name in ("float64", "uuid"):
            raise GenerateError(f"{self.struct_name}: a {type_name} field {name} in a partition row")
        return found

    def flush_fixed(self) -> None:
        run, self.pending = self.pending, []
        if not run:
            return
        size = sum(FIXED_TYPES[t][1] for _, t in run)
        kept = [(name, t) for name, t in run if name == self.partition or self.wanted(name, t)]
        if not kept:
            self.ops.append(("skip", size))
            return
        self.needed = True
        self.ops.append(("check", size, child_path(self.scope.path, run[0][0])))
        skip = 0
        for name, t in run:
            if (name, t) in kept:
                if skip:
                    self.ops.append(("skip", skip))
                    skip = 0
                self.ops.append(("read", TYPE_CODES[t], self.typed_target(name, t)))
            else:
                skip += FIXED_TYPES[t][1]
        if skip:
            self.ops.append(("skip", skip))
        self.kept.update(name for name, _ in kept if name != self.partition)
        if any(name == self.topic_id for name, _ in kept):
            named = self.slot(self.topic_name) if self.topic_name in self.kept else NO_TARGET
            self.ops.append(("topic_id", self.slot(self.topic_id), named, self.topic_ready == self.topic_id))

    def field(self, entry: tuple) -> None:
        described = self.begin_field(entry)
        if described is None:
            return
        name, type_name, element, path, compact, nullable, needed_before = described
        child = None
        if name == self.topic_name:
            topic_id = self.slot(self.topic_id) if self.topic_id in self.kept else NO_TARGET
            self.ops.append(("topic_name", compact, nullable, path, self.slot(name), topic_id,
                             self.topic_ready == name))
            self.kept.add(name)
        elif type_name.endswith("array") and isinstance(element, str) and entry[3:] == ("topicName",):
            if _base(element) != "string":
                raise GenerateError(f"{path}: topic names of type {element}")
            self.ops.append(("topic_list", compact, element.startswith("compact_"), "nullable" in element, path))
        elif name in self.row_arrays:
            raise GenerateError(f"{path}: an array ROW_ARRAYS counts, in an API outside HOT_APIS (the interpreter "
                                "has no operation for it)")
        elif type_name.endswith("array") and element == "int32" and name in PARTITION_LISTS and self.in_topic:
            rows = self.scope.api_key in PARTITION_APIS and name in ROW_PARTITION_LISTS
            self.ops.append(("partition_list", compact, nullable, path, rows))
        elif isinstance(element, tuple) and (child := self.child(name, type_name, element)) is not None:
            self.called.append(child)
            if type_name.endswith("array"):
                self.ops.append(("struct_array", compact, nullable, path, child))
            elif nullable:
                self.ops.append(("nullable_struct", path, child))
            else:
                self.ops.append(("struct", child))
        elif self.rows and type_name.endswith("records"):
            self.ops.append(("records", compact, path))
            self.records = name
        elif self.wanted(name, type_name):
            if _base(type_name) != "string":
                raise GenerateError(f"{path}: a {type_name} field is needed")
            self.ops.append(("read_str", compact, nullable, path, self.slot(name)))
            self.kept.add(name)
        else:
            self.skip(type_name, element, path)
            self.needed = needed_before

    def skip(self, type_name: str, element: Any, path: str) -> None:
        """``_PlanWriter.skip``: leniently by the length where it is, else as the general skippers."""
        compact = type_name.startswith("compact_")
        base = _base(type_name)
        array = isinstance(element, str) and element in FIXED_TYPES and type_name.endswith("array")
        if array:
            size = FIXED_TYPES[element][1]
        elif base in ("string", "bytes", "records"):
            size = 1
        elif base == "struct" and "nullable" not in type_name and self.writer.struct_skipper(element)[0] is None:
            raise GenerateError(f"{path}: a fixed-size struct skipped")
        else:
            self.writer.skip_field(self.ops, type_name, element)
            return
        if compact:  # else as skip_field: skip_array of that element size, or skip_sized
            self.ops.append(("lenient_compact", size, array, 2 if base == "string" else 4, "nullable" in type_name))
            return
        self.ops.append(("lenient", 2 if type_name.endswith("string") else 4, size, path))

    def child(self, name: str, type_name: str, element: tuple) -> int | None:
        scope = self.scope._replace(path=child_path(self.scope.path, name), top=False,
                                    element=type_name.endswith("array"), in_topic=self.in_topic)
        return self.writer.plan(element, scope)

    def tags(self) -> None:
        if self.tagged is None:
            return
        handlers = self.tag_handlers()
        if not handlers:
            self.ops.append(("skip_tags",))
            return
        where = child_path(self.scope.path, "_tagged_fields")
        words: list[int | str] = []
        for tag, name, type_name in handlers:
            if type_name in FIXED_TYPES:
                if name == self.partition:
                    raise GenerateError(f"{self.struct_name}: a tagged partition field")
                payload: list[int | str] = [TAG_FIXED, TYPE_CODES[type_name], self.typed_target(name, type_name)]
            elif type_name == "struct":
                fields = self.tag_struct_fields[name]
                payload = [TAG_STRUCT, sum(FIXED_TYPES[t][1] for _, t, _ in fields), child_path(where, name),
                           len(fields)]
                for sub, sub_type, keep in fields:
                    payload += [TYPE_CODES[sub_type], self.slot(f"{name}__{sub}") if keep else NO_TARGET]
            elif _base(type_name) == "string":
                payload = [TAG_STRING, type_name.startswith("compact_"), "nullable" in type_name, self.slot(name)]
            else:
                raise GenerateError(f"{self.struct_name}: a tagged {type_name} field is needed")
            words += [tag, len(payload) + 2, *payload]
        self.ops.append(("tags", where, len(handlers), *words))

    def report(self) -> list[Op]:
        """``_PlanWriter.report``: the interpreter leaves out the partition's when the bytes ended before it."""
        out: list[Op] = []
        if self.partition is not None:
            out.append(("partition",))
        if self.rows:
            kept = sorted(self.kept) + (["records_offset", "record_bytes"] if self.records else [])
            typed = [index for name in kept if (index := self.typed(name)) is not None]
            if len(set(typed)) != len(typed):
                raise GenerateError(f"{self.struct_name}: two fields fill one partition entry field")
            out.append(("row", len(typed), *typed))
        for name in self.errors:
            message = name.removesuffix("error_code") + "error_message"
            out.append(("error", child_path(self.scope.path, name), self.target(name),
                        self.slot(message) if message in self.kept else NO_TARGET))
        for name in self.top_fields:
            out.append(("top", TOP_FIELD_NAMES.index(name), self.slot(name)))
        for name in self.body_fields:
            out.append(("body", name, self.slot(name)))
        for name, fields in self.tag_struct_fields.items():
            for sub, _, keep in fields:
                if keep:
                    out.append(("tag_field", f"{name}.{sub}", self.slot(f"{name}__{sub}")))
        return out

    def write(self) -> int | None:
        for entry in self.fields:
            self.field(entry)
        self.flush_fixed()
        self.tags()
        self.ops.append(("check_end", self.scope.path or "body"))
        self.ops.append(("done",))
        if not (self.needed or self.reports()):
            return None
        reports = [*self.report(), ("return",)]
        total = len(self.slots) + max((self.writer.total(p) for p in self.called), default=0)
        scope = self.scope
        title = (f"{self.struct_name} (API {scope.api_key} {'response' if scope.is_response else 'request'}"
                 f"{', ' + scope.path if scope.path else ''})")
        return self.writer.add(title, self.rows, len(self.slots), total, self.ops, reports)


def render_extract(requests: dict[int, tuple[int, tuple]], responses: dict[int, tuple[int, tuple]],
                   names: dict[int, str], header: str, programs_header: str) -> tuple[str, str]:
    """The generated extraction: the hot APIs' Cython, and the others' programs (a Python module of constants).
    ``requests`` and ``responses`` as ``schemas.py``'s REQUESTS and RESPONSES, ``names`` the name each struct has
    there (by ``id``)."""
    tables = {False: requests, True: responses}
    return ExtractWriter(names).render(tables, header), ProgramWriter(names).render(tables, programs_header)
