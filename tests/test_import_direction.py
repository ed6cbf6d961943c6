"""Imports go one way: each module imports only from its own stage of the data flow or earlier ones.

The stages, in the order data flows through them: capture, tcp, tls, dissectors, tables, session, derived,
pipeline, then the edges (report, cli, spark_jobs). Every ``import``, ``from ... import`` and ``cimport`` of
every ``.py``, ``.pyx`` and ``.pxd`` counts, late and type-only imports included. ``dissectors._sink`` is the
declared interface a byte stream is handed on through, which the earlier stages may name.

KNOWN_BACKWARD lists the imports that still go the wrong way: the test fails on a new one, and on a listed one
that is gone (take it off the list), so the list only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STAGES = ("capture", "tcp", "tls", "dissectors", "tables", "session", "derived", "pipeline", "edge")
EDGES = ("report", "cli")  # analyzer packages that are edges, like spark_jobs
DECLARED_INTERFACES = ("dissectors._sink",)
IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+c?import\b|c?import\s+([\w.]+))", re.M)

# The flow table builds connections and outputs itself, and judges ports with the Kafka framer's knowledge
# (issue 38, item 1: a connection factory and a probe from the pipeline).
KNOWN_BACKWARD: set[tuple[str, str]] = set()


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
           "from analyzer.tables._columns cimport ExchangeColumns\n"
    found = {match[1] or match[2] for match in IMPORT.finditer(text)}
    assert found == {"analyzer.pipeline.run", "analyzer.session.matching", "analyzer.tables._columns"}
    assert stage(["analyzer", "tcp", "_flows.pyx"]) == "tcp" and stage("analyzer.cli.summary".split(".")) == "edge"
