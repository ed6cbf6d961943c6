"""The extraction of the APIs outside HOT_APIS: one compiled interpreter (dissectors/kafka/_interpret.pyx) of the
programs the generator writes as data (dissectors/kafka/_generated/extract_programs.py). What it reads is held
against the full Python decoder by tests/dissectors/test_extract_compiled.py (every API and version); here:
which APIs it reads, that its programs are data it checks before it runs them, and bodies drawn from the schemas
themselves (every optional and tagged field, null and empty arrays) read as the decoder reads them."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path

import pytest

from dissectors.kafka._generated import extract_programs
from dissectors.kafka._generated.schemas import REQUESTS, RESPONSES
from dissectors.kafka.extract_rules import HOT_APIS, PROGRAM_HEADER, PROGRAM_OPS, TARGET_PARTITION, check_programs
from tests.dissectors.test_extract_compiled import check
from tools.extract_listing import plan_source

BODY_KINDS = [(key, min_version + i, is_response) for is_response, table in ((False, REQUESTS), (True, RESPONSES))
              for key, (min_version, structs) in sorted(table.items()) for i in range(len(structs))]
OP = {name: code for code, (name, _) in enumerate(PROGRAM_OPS)}


def test_the_hot_apis_are_generated_functions_and_the_others_programs():
    cold = 0
    for key, version, is_response in BODY_KINDS:
        source = plan_source(key, version, is_response)
        if key in HOT_APIS:
            assert source.startswith(("cdef Py_ssize_t x_", "nothing")), (key, version, is_response)
        else:
            assert source.startswith(("program ", "nothing")), (key, version, is_response)
            cold += 1
    keys = {key for key, _, _ in BODY_KINDS}
    assert len(keys - HOT_APIS) > len(keys) // 2 and cold > len(BODY_KINDS) // 3  # most APIs, many body kinds
    listing = plan_source(32, 4, True)  # DescribeConfigs v4 response: its results' error codes
    assert listing.startswith("program ") and "error 'results.error_code'" in listing


def test_the_programs_are_data():
    text = Path(extract_programs.__file__).read_text(encoding="utf-8")
    assert "Do not edit by hand" in text.split('"""')[1]
    assert not re.search(r"^\s*(def|class|import|from|for|if|while|lambda)\b", text, re.M)
    assert "/work/" not in text and "/home/" not in text and "/root/" not in text
    entry = {(r, k): (m, p) for r, k, m, p in extract_programs.ENTRY_POINTS}
    assert {k for _, k in entry} == {k for k, _, _ in BODY_KINDS if k not in HOT_APIS}
    check_programs(extract_programs.PROGRAMS, extract_programs.STRINGS, extract_programs.ENTRY_POINTS)


def damaged(number: int, change) -> tuple:
    programs = [list(words) for words in extract_programs.PROGRAMS]
    change(programs[number])
    return tuple(tuple(words) for words in programs)


def operations(words: tuple) -> list[tuple[int, str]]:
    """(index, name) of each operation of a program."""
    found = []
    i = PROGRAM_HEADER
    while i < len(words):
        name, operands = PROGRAM_OPS[words[i]]
        found.append((i, name))
        if name == "row":
            i += words[i + 1]
        elif name == "tags":
            h = i + 1 + operands
            for _ in range(words[i + 2]):
                h += words[h + 1]
            i = h - 1 - operands
        i += 1 + operands
    return found


def first(name: str) -> tuple[int, int]:
    """(program, index) of the first operation of that name."""
    for number, words in enumerate(extract_programs.PROGRAMS):
        for i, found in operations(words):
            if found == name:
                return number, i
    raise AssertionError(name)


def slot_out_of_range():
    number, i = first("read_str")
    return damaged(number, lambda w: w.__setitem__(i + 4, w[0]))


def program_out_of_range():
    number, i = first("struct_array")
    return damaged(number, lambda w: w.__setitem__(i + 4, len(extract_programs.PROGRAMS)))


def string_out_of_range():
    number, i = first("check")
    return damaged(number, lambda w: w.__setitem__(i + 2, len(extract_programs.STRINGS)))


def unknown_operation():
    number, i = first("skip")
    return damaged(number, lambda w: w.__setitem__(i, len(PROGRAM_OPS)))


def cut_short():
    return damaged(0, lambda w: w.__delitem__(slice(len(w) - 2, len(w))))


def reports_elsewhere():
    return damaged(0, lambda w: w.__setitem__(3, w[3] - 1))


def too_few_slots():
    """A program whose total leaves no room for the slots of the program it calls."""
    for number, words in enumerate(extract_programs.PROGRAMS):
        if any(name == "struct_array" and extract_programs.PROGRAMS[words[i + 4]][1] for i, name in operations(words)):
            return damaged(number, lambda w: w.__setitem__(1, w[0]))
    raise AssertionError("no program calls one with slots")


def skipper_that_reads():
    """A program a skip calls, made to read a field (the interpreter's skipping loop runs skips only)."""
    number, i = first("skip_struct")
    skipper = extract_programs.PROGRAMS[number][i + 1]

    def change(words):
        words[PROGRAM_HEADER:PROGRAM_HEADER] = [OP["read"], 0, TARGET_PARTITION]
        words[3] += 3
    return damaged(skipper, change)


@pytest.mark.parametrize("damage, message", [
    (slot_out_of_range, "slot"), (program_out_of_range, "program"), (string_out_of_range, "string"),
    (unknown_operation, "operation at"), (cut_short, "no end|cut short|header"),
    (reports_elsewhere, "operation at|the reports"), (too_few_slots, "fewer slots"),
    (skipper_that_reads, "a skipping program that does more")])
def test_damaged_programs_are_refused(damage, message):
    with pytest.raises(ValueError, match=rf"extract_programs\.PROGRAMS\[\d+\]: ({message})"):
        check_programs(damage(), extract_programs.STRINGS, extract_programs.ENTRY_POINTS)


# -- bodies drawn from the schemas: every field, tagged ones at random, nulls, empty and repeated arrays

TOPICS = ["orders", "payments", "", "é-topic", "__consumer_offsets"]


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


class Draw:
    FIXED = {"bool": ">?", "int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "uint32": ">I",
             "int64": ">q", "float64": ">d"}

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd

    def length(self, n: int, compact: bool, width: int) -> bytes:
        return uvarint(n + 1) if compact else struct.pack(">h" if width == 2 else ">i", n)

    def value(self, type_name: str, element, entity) -> bytes:
        rnd = self.rnd
        if type_name in self.FIXED:
            value = rnd.choice([0, 0, 1, 3, 17]) if type_name != "float64" else 1.5
            return struct.pack(self.FIXED[type_name], bool(value) if type_name == "bool" else value)
        if type_name == "uuid":
            return rnd.choice([bytes(16), bytes(15) + b"\x01", bytes(range(16))])
        compact = type_name.startswith("compact_")
        base = type_name.removeprefix("compact_").removeprefix("nullable_")
        if "nullable" in type_name and rnd.random() < 0.2:
            return b"\xff" if base == "struct" else self.length(-1, compact, 2 if base == "string" else 4)
        if base == "string":
            data = (rnd.choice(TOPICS) if entity == "topicName" else rnd.choice(["", "message"])).encode()
            return self.length(len(data), compact, 2) + data
        if base in ("bytes", "records"):
            return self.length(3, compact, 4) + b"abc"
        if base == "struct":
            return (b"\x01" if "nullable" in type_name else b"") + self.struct(element)
        count = rnd.choice([0, 1, 2])
        items = [self.struct(element) if isinstance(element, tuple) else self.value(element, None, entity)
                 for _ in range(count)]
        return self.length(count, compact, 4) + b"".join(items)

    def struct(self, schema: tuple) -> bytes:
        fields, tagged = schema
        out = b"".join(self.value(e[1], e[2] if len(e) > 2 else None, e[3] if len(e) > 3 else None) for e in fields)
        if tagged is not None:
            chosen = [t for t in tagged if self.rnd.random() < 0.5]
            out += uvarint(len(chosen))
            for t in chosen:
                data = self.value(t[2], t[3] if len(t) > 3 else None, t[4] if len(t) > 4 else None)
                out += uvarint(t[0]) + uvarint(len(data)) + data
        return out


COLD = [kind for kind in BODY_KINDS if kind[0] not in HOT_APIS]


@pytest.mark.parametrize("is_response", [False, True])
def test_bodies_drawn_from_the_schemas_read_as_the_decoder_reads_them(is_response):
    rnd = random.Random(11 + is_response)
    read = 0
    for key, version, response in COLD:
        if response != is_response:
            continue
        table = RESPONSES if is_response else REQUESTS
        min_version, structs = table[key]
        for _ in range(2):
            body = Draw(rnd).struct(structs[version - min_version])
            cuts = sorted({0, len(body) // 2, len(body) - 1, rnd.randrange(len(body) + 1)} - {len(body)})
            flips = []
            for _ in range(3 if body else 0):
                flipped = bytearray(body)
                flipped[rnd.randrange(len(body))] ^= 1 << rnd.randrange(8)
                flips.append(bytes(flipped))
            read += check(body, 0, key, version, is_response, [c for c in cuts if c >= 0], flips)
    assert read > 100
