#!/usr/bin/env python3
"""Export the same captures with two checkouts of kafkacap and compare every table, cell by cell.

    python benchmarks/compare_trees.py --base ../kafkacap-before [--tree .] [CAPTURE ...] [--modes default,records]
        [--common-columns] [--unordered]

The compiled core must write exactly what the pure-Python code wrote: this runs ``python -m analyzer.cli export``
from each checkout (``--base``: e.g. ``git worktree add ../kafkacap-before <commit>``, with its extension
modules built in place if it has any) on every capture given (default: ``sample_pcaps/``, the public captures in
``../shared/pcaps/public`` when present, and a rotated set cut from a sample with ``editcap -c``), once per mode
(bodies, ``--headers-only``, ``--records``, ``--verify-crc``, ``--jobs 2``), and compares the Parquet tables:
same columns, types and rows in the same order. It prints one line per mode and table and exits 1 on any
difference, naming the first differing column and row. ``--unordered`` compares rows as multisets, both tables
sorted first: a change to how a file is split over processes (``--jobs 2``) changes the order in which the
shards' batches interleave, not the rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
PUBLIC = REPO.parent / "shared" / "pcaps" / "public"
MODES = {
    "default": [],
    "headers-only": ["--headers-only"],
    "records": ["--records"],
    "verify-crc": ["--verify-crc"],
    "jobs2": ["--jobs", "2"],
}
ROTATE_SOURCE = "tansu_consumer_group.pcap"


def default_captures(work: Path) -> list[Path]:
    captures = sorted(p for p in (REPO / "sample_pcaps").iterdir() if ".pcap" in p.name)
    if PUBLIC.is_dir():
        captures += sorted(p for p in PUBLIC.iterdir() if ".pcap" in p.name or p.suffix == ".cap")
    if shutil.which("editcap"):
        rotated = work / "rotated"
        rotated.mkdir()
        subprocess.run(["editcap", "-c", "60", str(REPO / "sample_pcaps" / ROTATE_SOURCE),
                        str(rotated / "rot.pcap")], check=True, capture_output=True)
        captures.append(rotated)
    return captures


def export(tree: Path, captures: list[Path], flags: list[str], out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, "-m", "analyzer.cli", "export", *map(str, captures), "-o", str(out),
               "--no-progress", "--detect-ports", *flags]
    return subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)


def in_order(table: pa.Table) -> pa.Table:
    """The rows sorted by every column that can be sorted on (the list columns ride along)."""
    keys = [(f.name, "ascending") for f in table.schema if not pa.types.is_nested(f.type)]
    return table.sort_by(keys) if keys else table


def first_difference(a: pa.Table, b: pa.Table, common: bool = False, unordered: bool = False) -> str:
    if unordered:
        a, b = in_order(a), in_order(b)
    added = ""
    if common:  # columns one tree added (or dropped) are named, the shared ones compared
        shared = [n for n in a.column_names if n in b.column_names]
        extra = [n for n in b.column_names if n not in a.column_names]
        gone = [n for n in a.column_names if n not in b.column_names]
        added = "".join(f" (+{', '.join(extra)})" if extra else "") + (f" (-{', '.join(gone)})" if gone else "")
        a, b = a.select(shared), b.select(shared)
    if a.schema != b.schema:
        return f"schemas differ:\n  base: {a.schema}\n  tree: {b.schema}"
    if a.num_rows != b.num_rows:
        return f"{a.num_rows} rows against {b.num_rows}"
    for name in a.column_names:
        x, y = a.column(name).combine_chunks(), b.column(name).combine_chunks()
        if not x.equals(y):
            for i in range(len(x)):
                if x[i] != y[i]:
                    return f"column {name}, row {i}: {x[i].as_py()!r} against {y[i].as_py()!r}"
            return f"column {name} differs"
    return "equal" + added


def compare(base: Path, tree: Path, captures: list[Path], modes: list[str], work: Path, common: bool = False,
            unordered: bool = False) -> int:
    failures = 0
    for mode in modes:
        outs = []
        for label, checkout in (("base", base), ("tree", tree)):
            out = work / f"{mode}-{label}"
            done = export(checkout, captures, MODES[mode], out)
            if done.returncode not in (0, 2):  # 2: some file could not be read, and the rest was written
                print(f"{mode}: {label} export failed ({done.returncode}): {done.stderr.strip()[-500:]}")
                return 1
            outs.append(out)
        tables = sorted({p.stem for out in outs for p in out.glob("*.parquet")})
        for table in tables:
            paths = [out / f"{table}.parquet" for out in outs]
            if not all(p.exists() for p in paths):
                print(f"{mode:13} {table:12} only in {'base' if paths[0].exists() else 'tree'}")
                failures += 1
                continue
            a, b = (pq.read_table(p) for p in paths)
            verdict = first_difference(a, b, common, unordered)
            print(f"{mode:13} {table:12} {a.num_rows:>8} rows  {verdict}")
            failures += not verdict.startswith("equal")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("captures", nargs="*", type=Path)
    parser.add_argument("--base", type=Path, required=True, help="the reference checkout")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout under test (default: this one)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--common-columns", action="store_true", help="compare the columns both trees write and "
                        "name the ones only one of them has (a release that adds columns)")
    parser.add_argument("--unordered", action="store_true", help="compare rows as multisets (sorted first)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="kafkacap-compare-") as tmp:
        work = Path(tmp)
        captures = [p.resolve() for p in args.captures] or default_captures(work)
        print(f"{len(captures)} inputs; base {args.base}, tree {args.tree}")
        return compare(args.base.resolve(), args.tree.resolve(), captures, modes, work, args.common_columns,
                       args.unordered)


if __name__ == "__main__":
    sys.exit(main())
