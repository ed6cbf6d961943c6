"""Imports go one way: each module imports only from its own stage of the data flow or earlier ones.

The stages, in the order data flows through them: capture, tcp, tls, dissectors, tables, session, derived,
pipeline, then the edges (report, cli, spark_jobs). Every ``import``, ``from ... import`` and ``cimport`` of
every ``.py``, ``.pyx`` and ``.pxd`` counts, late and type-only imports included. ``dissectors.sink`` is the
declared interface a byte stream is handed on through, which the earlier stages may name.

No private name crosses a package: a module takes from another package only names without a leading underscore,
from modules without one (a package's own private subpackages, such as ``dissectors.kafka._generated``, are its
own). And no two packages import each other, directly or around a cycle.

KNOWN_BACKWARD and KNOWN_PRIVATE list what still breaks these rules: the test fails on a new entry, and on a listed
one that is gone (take it off the list), so the lists only shrink.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STAGES = ("capture", "tcp", "tls", "dissectors", "tables", "session", "derived", "pipeline", "edge")
EDGES = ("report", "cli", "api")  # analyzer packages and modules that are edges, like spark_jobs
DECLARED_INTERFACES = ("dissectors.sink",)
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\b|c?import\s+([\w.]+))", re.M)

KNOWN_BACKWARD: set[tuple[str, str]] = set()
KNOWN_PRIVATE: set[tuple[str, str]] = set()
PACKAGES = ("analyzer", "dissectors", "spark_jobs")
FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+c?import[ \t]+(\([^)]*\)|[^\n]*)", re.M)


def stage(parts: tuple[str, ...] | list[str]) -> str | None:
    """The stage of a module, from its dotted name's parts or its path's (None: outside the stages)."""
    if not parts:
        return None
    if parts[0] == "dissectors":
        return "dissectors"
    if parts[0] == "spark_jobs":
        return "edge"
    if parts[0] == "analyzer" and len(parts) > 1:
        name = parts[1].removesuffix(".py")
        return "edge" if name in EDGES else name if name in STAGES else None
    return None


def backward_imports() -> set[tuple[str, str]]:
    found = set()
    for pattern in ("analyzer/**/*", "dissectors/**/*", "spark_jobs/**/*"):
        for path in REPO.glob(pattern):
            if path.suffix not in (".py", ".pyx", ".pxd") or "_generated" in path.parts:
                continue
            rel = path.relative_to(REPO)
            here = stage(rel.parts)
            if here is None:
                continue
            for match in IMPORT.finditer(path.read_text(encoding="utf-8")):
                module = match[1] or match[2]
                there = stage(module.split("."))
                if there is None or module in DECLARED_INTERFACES:
                    continue
                if STAGES.index(there) > STAGES.index(here):
                    found.add((rel.as_posix(), module))
    return found


def test_imports_go_one_way() -> None:
    found = backward_imports()
    assert not found - KNOWN_BACKWARD, "imports from a later stage"
    assert not KNOWN_BACKWARD - found, "gone: take them off KNOWN_BACKWARD"


def test_the_scan_sees_imports_of_every_kind(tmp_path: Path) -> None:
    text = "import analyzer.pipeline.run\nif True:\n    from analyzer.session.matching import Outputs\n" \
           "from analyzer.tables.columns cimport ExchangeColumns\n"
    found = {match[1] or match[2] for match in IMPORT.finditer(text)}
    assert found == {"analyzer.pipeline.run", "analyzer.session.matching", "analyzer.tables.columns"}
    assert stage(["analyzer", "tcp", "_flows.pyx"]) == "tcp" and stage("analyzer.cli.summary".split(".")) == "edge"


def sources() -> list[Path]:
    return [path for pattern in ("analyzer/**/*", "dissectors/**/*", "spark_jobs/**/*") for path in REPO.glob(pattern)
            if path.suffix in (".py", ".pyx", ".pxd") and "_generated" not in path.parts]


def package_of(module: str) -> str:
    """The package a dotted module name lies in (a package is its own)."""
    return module if (REPO / Path(*module.split("."))).is_dir() else module.rpartition(".")[0]


def imports(path: Path) -> Iterator[tuple[str, list[str]]]:
    """(module, the names taken from it) of every import of one of ours in a source file."""
    text = path.read_text(encoding="utf-8")
    for match in FROM_IMPORT.finditer(text):
        if match[1].split(".")[0] in PACKAGES:
            listed = re.sub(r"#[^\n]*", "", match[2]).strip().strip("()")
            yield match[1], [item.split()[0] for item in listed.replace("\n", " ").split(",") if item.strip()]
    for match in IMPORT.finditer(text):
        if match[2] and match[2].split(".")[0] in PACKAGES:
            yield match[2], []


def private_crossings() -> set[tuple[str, str]]:
    found = set()
    for path in sources():
        rel = path.relative_to(REPO)
        here = ".".join(rel.parts[:-1])
        for module, names in imports(path):
            there = package_of(module)
            if there == here or there.startswith(here + "."):  # its own package, or a subpackage of it
                continue
            private_parts = [part for part in module.split(".")[1:] if part.startswith("_")]
            if private_parts:
                found.add((rel.as_posix(), module))
            found.update((rel.as_posix(), f"{module}.{name}") for name in names
                         if name.startswith("_") and not name.startswith("__"))
    return found


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sources():
        rel = path.relative_to(REPO)
        here = ".".join(rel.parts[:-1])
        for module, _names in imports(path):
            there = package_of(module)
            if there != here and not there.startswith(here + ".") and not here.startswith(there + "."):
                graph.setdefault(here, set()).add(there)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one package (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in list(graph):
        if node not in index:
            visit(node)
    return found


def test_no_private_name_crosses_a_package() -> None:
    found = private_crossings()
    assert not found - KNOWN_PRIVATE, "private names taken from another package"
    assert not KNOWN_PRIVATE - found, "gone: take them off KNOWN_PRIVATE"


def test_no_two_packages_import_each_other() -> None:
    assert cycles(package_graph()) == []


def test_the_checks_see_private_names_and_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    text = "from analyzer.tables.schemas import (\n    _f,\n    EXCHANGES,\n)\n" \
           "from dissectors.kafka._hidden cimport X\n"
    found = [(m[1], m[2]) for m in FROM_IMPORT.finditer(text)]
    assert [module for module, _ in found] == ["analyzer.tables.schemas", "dissectors.kafka._hidden"]
    assert "_f" in found[0][1]
