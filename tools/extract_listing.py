"""What the generator wrote for one body kind of the compiled extraction, for reading.

:mod:`dissectors.kafka.extract` runs it: for the APIs of ``HOT_APIS`` the Cython of
``dissectors/kafka/_generated/extract_plans.pxi`` (:func:`plan_source` shows a body kind's top function, then
every function it calls); for the others the programs of ``_generated/extract_programs.py`` the interpreter runs
(:func:`program_listing`, an operation per line). Tooling, kept out of the runtime module.

``python -m tools.extract_listing API_KEY API_VERSION {request,response}`` prints one.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from dissectors.kafka._generated import extract_programs
from dissectors.kafka.extract_rules import (
    NO_TARGET,
    PROGRAM_HEADER,
    PROGRAM_OPERANDS,
    PROGRAM_OPS,
    PROGRAM_TYPES,
    STRING_OPERANDS,
    TAG_FIXED,
    TAG_STRING,
    PartitionEntry,
)

__all__ = ["plan_source", "program_listing"]

PLANS_SOURCE = Path(extract_programs.__file__).resolve().parent / "extract_plans.pxi"
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("api_key", type=int)
    parser.add_argument("api_version", type=int)
    parser.add_argument("direction", choices=("request", "response"))
    args = parser.parse_args()
    print(plan_source(args.api_key, args.api_version, args.direction == "response"), end="")


if __name__ == "__main__":
    main()
