"""Decode any Kafka request or response body, every API and version, into plain Python values.

``decode(buf, off, end, api_key, api_version, is_response)`` reads the body that starts at ``off`` (just after
the header, see :mod:`dissectors.kafka.headers`) and returns a dict per struct: field names as the protocol
guide spells them, ints, floats, bools, str, bytes (uuids as their 16 bytes), lists for arrays, None for
null. Records fields are not decoded here: they become :class:`RecordsRef` (offset and length within
``buf``) so that a later stage can read the batches without copying them. Tagged fields that are present
appear under their names; tags the schema does not know are kept as ``{"_unknown_tags": {tag: size}}``.
Bytes left after the body are reported as ``"_trailing_bytes"`` (some old clients pad requests).

How: one small interpreter over the generated schemas (``_generated/schemas.py``). Each struct of a schema
is compiled once, on first use, into a list of steps: runs of fixed-size fields become one precompiled
``struct.Struct`` unpack, every other field one reader function. Equal structs are shared objects in the
schema module, so each is compiled once for all versions and APIs that use it. Lengths are checked before
any slice or unpack; record payloads are skipped by their length, never walked.

Hostile input: any malformed body raises :class:`DecodeError` (never IndexError, struct.error or
UnicodeError) naming the field path, e.g. ``responses[0].partitions[3].records: length 90000 runs past
the end``; :class:`DecodeTruncated`, a subclass, when the body merely runs past ``end`` (a capture may
have kept only a frame's head). Counts are checked against the bytes left before anything is allocated
for them.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from dissectors.kafka._generated.schemas import REQUESTS, RESPONSES
from dissectors.kafka.headers import HeaderError, HeaderTruncated
from dissectors.kafka.varints import varint_readers

Reader = Callable[[Any, int, int], tuple[Any, int]]
"""reader(buf, pos, end) -> (value, position after it)."""


class DecodeError(HeaderError):
    """A body that does not match its schema. ``path`` locates the field (empty at the top level)."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self._parts: list[str | int] = [path] if path else []

    def within(self, part: str | int) -> DecodeError:
        """Prefix the path with an enclosing field name or array index, on the way up."""
        self._parts.append(part)
        return self

    @property
    def path(self) -> str:
        text = ""
        for part in reversed(self._parts):
            if isinstance(part, int):
                text += f"[{part}]"
            else:
                text += f".{part}" if text else part
        return text

    def __str__(self) -> str:
        path = self.path
        return f"{path}: {self.reason}" if path else self.reason


class DecodeTruncated(DecodeError, HeaderTruncated):
    """The body runs past ``end``: fine, perhaps, if ``end`` is where a capture cut the frame short."""


class RecordsRef(NamedTuple):
    """Where a records field's bytes lie in the buffer (a record batch or legacy message set)."""

    offset: int
    length: int


_new_tuple = tuple.__new__

# type -> (struct format, size) for the fixed-size types
FIXED_TYPES: dict[str, tuple[str, int]] = {
    "bool": ("?", 1), "int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2), "int32": ("i", 4),
    "uint32": ("I", 4), "int64": ("q", 8), "float64": ("d", 8), "uuid": ("16s", 16),
}
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_unpack_int16 = _INT16.unpack_from
_unpack_int32 = _INT32.unpack_from


# ---------------------------------------------------------------------------------------------------------
# Lengths and varints


read_uvarint, read_varint, read_varlong = varint_readers(DecodeError, DecodeTruncated)
"""Unsigned varints (5 bytes at most), zigzag varints (5) and varlongs (10), read by
:mod:`dissectors.kafka.varints`: DecodeError when longer, DecodeTruncated when they run past ``end``."""


def _int16_length(buf, pos: int, end: int) -> tuple[int, int]:
    if pos + 2 > end:
        raise DecodeTruncated("truncated length")
    return _unpack_int16(buf, pos)[0], pos + 2


def _int32_length(buf, pos: int, end: int) -> tuple[int, int]:
    if pos + 4 > end:
        raise DecodeTruncated("truncated length")
    return _unpack_int32(buf, pos)[0], pos + 4


def _compact_length(buf, pos: int, end: int) -> tuple[int, int]:
    """A compact length (unsigned varint N+1, 0 for null) as N, with -1 for null."""
    if pos < end:
        byte = buf[pos]
        if byte < 0x80:
            return byte - 1, pos + 1
    value, pos = read_uvarint(buf, pos, end)
    return value - 1, pos


VARIABLE_INTS = {"varint": read_varint, "varlong": read_varlong}
"""Zigzag varints: no message field uses them today (record fields do), but the decoder reads them."""

LENGTH_READERS = {False: (_int16_length, _int32_length), True: (_compact_length, _compact_length)}
"""compact -> (reader of string lengths, reader of bytes, records and array lengths)."""


# ---------------------------------------------------------------------------------------------------------
# Variable-length fields


def _bad_length(length: int, pos: int, end: int, nullable: bool) -> DecodeError | None:
    """None for an allowed null (-1 in a nullable field), else the error for this length."""
    if length == -1:
        return None if nullable else DecodeError("null in a non-nullable field")
    if length < 0:
        return DecodeError(f"negative length {length}")
    return DecodeTruncated(f"length {length} runs past the end ({end - pos} bytes left)")


def _text(buf, pos: int, stop: int) -> str:
    return str(buf[pos:stop], "utf-8", "replace")  # as Kafka's Java client decodes


def _bytes(buf, pos: int, stop: int) -> bytes:
    return bytes(buf[pos:stop])


def _records(buf, pos: int, stop: int) -> RecordsRef:
    return _new_tuple(RecordsRef, (pos, stop - pos))


def _sized_reader(compact: bool, width: int, nullable: bool, convert: Callable) -> Reader:
    """Strings, bytes and records: a length (unsigned varint N+1, or an int16/int32 N), then N bytes."""
    if compact:
        def read_compact(buf, pos: int, end: int) -> tuple[Any, int]:
            if pos < end and buf[pos] < 0x80:  # a one-byte length, nearly always
                length = buf[pos] - 1
                pos += 1
            else:
                length, pos = _compact_length(buf, pos, end)
            stop = pos + length
            if length >= 0 and stop <= end:
                return convert(buf, pos, stop), stop
            error = _bad_length(length, pos, end, nullable)
            if error is None:
                return None, pos
            raise error

        return read_compact

    unpack_length = _unpack_int16 if width == 2 else _unpack_int32

    def read_classic(buf, pos: int, end: int) -> tuple[Any, int]:
        if pos + width > end:
            raise DecodeTruncated("truncated length")
        length = unpack_length(buf, pos)[0]
        pos += width
        stop = pos + length
        if length >= 0 and stop <= end:
            return convert(buf, pos, stop), stop
        error = _bad_length(length, pos, end, nullable)
        if error is None:
            return None, pos
        raise error

    return read_classic


def _fixed_reader(type_name: str) -> Reader:
    code, size = FIXED_TYPES[type_name]
    unpack = struct.Struct(">" + code).unpack_from

    def read_fixed(buf, pos: int, end: int) -> tuple[Any, int]:
        stop = pos + size
        if stop > end:
            raise DecodeTruncated("truncated")
        return unpack(buf, pos)[0], stop

    return read_fixed


_SMALL_COUNTS = 16
_ELEMENT_CAP = [0]  # elements decoded of one array (0: all); see element_cap


class Cut(list):
    """An array decoded in part (``element_cap``): its first elements, and how many more the frame holds."""

    __slots__ = ("more",)

    def __init__(self, items: list, more: int) -> None:
        super().__init__(items)
        self.more = more


@contextlib.contextmanager
def element_cap(cap: int) -> Iterator[None]:
    """Within the block, ``decode`` keeps at most ``cap`` elements of any array (0: no cap) and walks past the
    rest without keeping them, so a body of millions of entries costs the memory of a few (``show``)."""
    before = _ELEMENT_CAP[0]
    _ELEMENT_CAP[0] = cap
    try:
        yield
    finally:
        _ELEMENT_CAP[0] = before


def _element_unpackers(code: str) -> tuple[Callable, ...]:
    """unpack_from of ``count`` elements of one fixed-size type, for counts up to ``_SMALL_COUNTS``."""
    return tuple(struct.Struct(">" + code * count).unpack_from for count in range(_SMALL_COUNTS + 1))


_UNPACKERS = {code: _element_unpackers(code) for code, _size in FIXED_TYPES.values()}


def _fixed_array_reader(length_of, nullable: bool, item: str) -> Reader:
    """An array of fixed-size primitives: one unpack for all elements."""
    code, size = FIXED_TYPES[item]
    unpackers = _UNPACKERS[code]
    compact = length_of is _compact_length

    def read_fixed_array(buf, pos: int, end: int) -> tuple[list | None, int]:
        if compact and pos < end and buf[pos] < 0x80:
            count = buf[pos] - 1
            pos += 1
        else:
            count, pos = length_of(buf, pos, end)
        if count <= 0:
            if count == 0:
                return [], pos
            error = _bad_length(count, pos, end, nullable)
            if error is None:
                return None, pos
            raise error
        stop = pos + count * size
        if stop > end:
            raise DecodeTruncated(f"{count} elements of {size} bytes with {end - pos} bytes left")
        if count <= _SMALL_COUNTS:
            return list(unpackers[count](buf, pos)), stop
        cap = _ELEMENT_CAP[0]
        if cap and count > cap:
            return Cut(list(struct.unpack_from(">" + code * cap, buf, pos)), count - cap), stop
        return list(struct.unpack_from(">" + code * count, buf, pos)), stop

    return read_fixed_array


def _array_reader(length_of, nullable: bool, element: Reader, min_size: int) -> Reader:
    """An array of structs or variable-length primitives; every element takes at least ``min_size`` bytes."""
    per_element = max(min_size, 1)  # Kafka rejects a count above the bytes left, whatever the element

    def read_array(buf, pos: int, end: int) -> tuple[list | None, int]:
        count, pos = length_of(buf, pos, end)
        if count <= 0:
            if count == 0:
                return [], pos
            error = _bad_length(count, pos, end, nullable)
            if error is None:
                return None, pos
            raise error
        if count * per_element > end - pos:
            raise DecodeTruncated(f"{count} elements cannot fit in {end - pos} bytes")
        items = []
        append = items.append
        cap = _ELEMENT_CAP[0]
        kept = count if not cap or count <= cap else cap
        try:
            for _ in range(kept):
                value, pos = element(buf, pos, end)
                append(value)
        except DecodeError as exc:
            raise exc.within(len(items)) from None
        if kept < count:  # walked past, not kept
            index = kept
            try:
                while index < count:
                    _, pos = element(buf, pos, end)
                    index += 1
            except DecodeError as exc:
                raise exc.within(index) from None
            return Cut(items, count - kept), pos
        return items, pos

    return read_array


def _nullable_struct_reader(element: Reader) -> Reader:
    """A nullable struct: an int8 marker (-1 null, else present) before the struct."""

    def read_nullable_struct(buf, pos: int, end: int) -> tuple[dict | None, int]:
        if pos >= end:
            raise DecodeTruncated("truncated struct marker")
        if buf[pos] >= 0x80:  # a negative int8
            return None, pos + 1
        return element(buf, pos + 1, end)

    return read_nullable_struct


# ---------------------------------------------------------------------------------------------------------
# Compiling schemas


_STRUCT_READERS: dict[int, tuple[Reader, int]] = {}  # id(struct schema) -> (reader, minimum size)


def min_size(type_name: str, element: Any = None) -> int:
    """The fewest bytes a field of this type takes (compact lengths take at least one)."""
    if type_name in FIXED_TYPES:
        return FIXED_TYPES[type_name][1]
    if type_name.startswith("compact_") or type_name in VARIABLE_INTS:
        return 1
    if type_name in ("struct", "nullable_struct"):
        return 1 if type_name == "nullable_struct" else struct_reader(element)[1]
    return 2 if type_name.endswith("string") else 4  # int16 string lengths; int32 bytes/array lengths


def field_reader(type_name: str, element: Any = None) -> Reader:
    """The reader of one field of the given schema type (see ``_generated/schemas.py``)."""
    if type_name in FIXED_TYPES:
        return _fixed_reader(type_name)
    if type_name in VARIABLE_INTS:
        return VARIABLE_INTS[type_name]
    compact = type_name.startswith("compact_")
    base = type_name.removeprefix("compact_")
    nullable = base.startswith("nullable_")
    base = base.removeprefix("nullable_")
    other_length = LENGTH_READERS[compact][1]
    if base == "string":
        return _sized_reader(compact, 2, nullable, _text)
    if base == "bytes":
        return _sized_reader(compact, 4, nullable, _bytes)
    if base == "records":
        return _sized_reader(compact, 4, nullable, _records)
    if base == "struct":
        return _nullable_struct_reader(struct_reader(element)[0]) if nullable else struct_reader(element)[0]
    if base == "array":
        if isinstance(element, str) and element in FIXED_TYPES:
            return _fixed_array_reader(other_length, nullable, element)
        if isinstance(element, str):
            return _array_reader(other_length, nullable, field_reader(element), min_size(element))
        reader, size = struct_reader(element)
        return _array_reader(other_length, nullable, reader, size)
    raise ValueError(f"unknown schema type {type_name!r}")


def _steps(fields: tuple) -> list[tuple]:
    """(names, size, unpack_from) for a run of fixed-size fields, (name, 0, reader) for any other field."""
    steps: list[tuple] = []
    run: list[tuple[str, str]] = []

    def flush() -> None:
        if run:
            layout = struct.Struct(">" + "".join(FIXED_TYPES[t][0] for _, t in run))
            steps.append((tuple(name for name, _ in run), layout.size, layout.unpack_from))
            run.clear()

    for entry in fields:
        name, type_name = entry[0], entry[1]
        if type_name in FIXED_TYPES:
            run.append((name, type_name))
            continue
        flush()
        steps.append((name, 0, field_reader(type_name, entry[2] if len(entry) > 2 else None)))
    flush()
    return steps


def _truncated_run(names: tuple[str, ...], pos: int, end: int, fields: tuple) -> DecodeError:
    """Which field of a fixed-size run the bytes end in (only computed when it happens)."""
    sizes = {entry[0]: FIXED_TYPES[entry[1]][1] for entry in fields if entry[0] in names}
    for name in names:
        pos += sizes[name]
        if pos > end:
            return DecodeTruncated("truncated", name)
    return DecodeTruncated("truncated", names[-1])


def struct_reader(schema: tuple) -> tuple[Reader, int]:
    """Compile (once) the reader of a struct schema ``(fields, tagged)``; also its minimum size."""
    cached = _STRUCT_READERS.get(id(schema))
    if cached is not None:
        return cached
    fields, tagged = schema
    steps = _steps(fields)
    size = sum(min_size(e[1], e[2] if len(e) > 2 else None) for e in fields) + (tagged is not None)
    known = None
    if tagged is not None:
        known = {tag: (name, field_reader(type_name, *element)) for tag, name, type_name, *element in tagged}
    reader = _struct_reader(steps, fields, known)
    _STRUCT_READERS[id(schema)] = (reader, size)
    return reader, size


def _struct_reader(steps: list[tuple], fields: tuple, known: dict[int, tuple[str, Reader]] | None) -> Reader:
    """The reader of one struct: its steps in order, then (in flexible versions, ``known`` not None) its
    tag buffer."""

    def read_struct(buf, pos: int, end: int) -> tuple[dict, int]:
        out: dict[str, Any] = {}
        for name, size, read in steps:
            if size:  # a run of fixed-size fields: one bounds check, one unpack
                stop = pos + size
                if stop > end:
                    raise _truncated_run(name, pos, end, fields)
                if len(name) == 1:
                    out[name[0]] = read(buf, pos)[0]
                else:
                    out.update(zip(name, read(buf, pos), strict=False))  # the format has len(name) items
                pos = stop
            else:
                try:
                    out[name], pos = read(buf, pos, end)
                except DecodeError as exc:
                    raise exc.within(name) from None
        if known is None:
            return out, pos
        if pos < end and buf[pos] == 0:  # the usual empty tag buffer
            return out, pos + 1
        return out, read_tags(buf, pos, end, out, known)

    return read_struct


def read_tags(buf, pos: int, end: int, out: dict, known: dict[int, tuple[str, Reader]]) -> int:
    """Read a tag buffer into ``out``: known tags by name, the sizes of unknown ones under ``_unknown_tags``.

    A known tag's value is read within the size the tag states, and the next tag starts after that size
    whatever the value used (as Kafka's own readers do)."""
    count, pos = read_uvarint(buf, pos, end)
    if count > (end - pos) >> 1:  # every tagged field takes at least a tag byte and a size byte
        raise DecodeTruncated(f"{count} tagged fields cannot fit in {end - pos} bytes", "_tagged_fields")
    unknown = None
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        stop = pos + size
        if stop > end:
            raise DecodeTruncated(f"tagged field {tag} ({size} bytes) runs past the end", "_tagged_fields")
        entry = known.get(tag)
        if entry is None:
            if unknown is None:
                unknown = out["_unknown_tags"] = {}
            unknown[tag] = size
        else:
            name, read = entry
            try:
                out[name] = read(buf, pos, stop)[0]
            except DecodeError as exc:
                raise exc.within(name) from None
        pos = stop
    return pos


# ---------------------------------------------------------------------------------------------------------
# Entry points


def schema(api_key: int, api_version: int, is_response: bool) -> tuple | None:
    """The generated struct schema of a body, or None for an unknown API or version."""
    entry = (RESPONSES if is_response else REQUESTS).get(api_key)
    if entry is None:
        return None
    min_version, structs = entry
    index = api_version - min_version
    return structs[index] if 0 <= index < len(structs) else None


_BODY_READERS: dict[tuple[int, int, bool], Reader] = {}


def body_reader(api_key: int, api_version: int, is_response: bool) -> Reader:
    """The compiled reader of one body kind; DecodeError for an unknown API or version."""
    key = (api_key, api_version, is_response)
    reader = _BODY_READERS.get(key)
    if reader is None:
        top = schema(api_key, api_version, is_response)
        if top is None:
            raise DecodeError(f"unknown API key {api_key} version {api_version}")
        reader = _BODY_READERS[key] = struct_reader(top)[0]
    return reader


def decode(buf, off: int, end: int, api_key: int, api_version: int, is_response: bool) -> dict:
    """Decode a whole request or response body at ``buf[off:end]`` into dicts, lists and values."""
    body, pos = decode_prefix(buf, off, end, api_key, api_version, is_response)
    if end > len(buf):
        end = len(buf)
    if pos < end:
        body["_trailing_bytes"] = end - pos
    return body


def decode_prefix(buf, off: int, end: int, api_key: int, api_version: int, is_response: bool) -> tuple[
        dict, int]:
    """Like :func:`decode`, but return the position where the body ended instead of noting trailing bytes."""
    reader = body_reader(api_key, api_version, is_response)
    if end > len(buf):
        end = len(buf)
    if off < 0 or off > end:
        raise DecodeError(f"body offset {off} outside the buffer")
    try:
        return reader(buf, off, end)
    except DecodeError:
        raise
    except (IndexError, struct.error, ValueError, OverflowError, MemoryError) as exc:  # a missed check
        raise DecodeError(f"malformed body ({type(exc).__name__}: {exc})") from None
